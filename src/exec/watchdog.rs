//! The watchdog process (`nats-roles watchdog`, hidden): one per child of an `exec` role or
//! hook. It starts the child in a process group of its own, holds the holder's deadline on
//! the host's monotonic clock and kills the whole group when the deadline passes — on its
//! own, so that a stopped (`SIGSTOP`) or hung manager cannot leave the child running into the
//! next holder's term. It also stops the group when the manager goes away (its standard input
//! ends), reaps every descendant (it is their sub-reaper) and reports back on its standard
//! output. The wire format is in [`super::wire`]; docs/exec.md states the bound.
//!
//! The manager starts it in a session of its own (`setsid`), so no signal to the manager's
//! process group or terminal (Ctrl-Z, `kill -STOP -- -PGID`, a hang-up) reaches it, and it
//! ignores the signals a service manager or a terminal sends to every process
//! (`SIGTERM`, `SIGINT`, `SIGHUP`, `SIGTSTP`, `SIGTTIN`, `SIGTTOU`, `SIGPIPE`): it ends only by
//! `SIGKILL`, by the end of its child, or after its standard input from the manager closed.
//! Its main loop never writes to the manager's pipes (a stopped manager does not read them):
//! the deadline is kept whatever the manager does.
//!
//! Plain threads and blocking calls: the process must keep its deadline with nothing else
//! running, and is small enough not to need a runtime.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::wire::{Report, Request};
use crate::history::clock::real_mono_now_ns;

/// The watchdog's arguments (set by the manager, never by people).
#[derive(clap::Args, Debug)]
pub(crate) struct WatchdogArgs {
    /// Kill the group at this `CLOCK_MONOTONIC` instant (ns; 0: no deadline).
    #[arg(long, default_value_t = 0)]
    deadline_ns: u64,
    /// The graceful stop signal (number).
    #[arg(long, default_value_t = libc::SIGTERM)]
    stop_signal: i32,
    /// How long a graceful stop may take before the group is killed (ms).
    #[arg(long, default_value_t = 10_000)]
    stop_timeout_ms: u64,
    /// Append `child_start` / `child_stop` records to this election history.
    #[arg(long, requires_all = ["node", "role"])]
    history: Option<PathBuf>,
    /// The instance id (history records).
    #[arg(long)]
    node: Option<String>,
    /// The role (history records).
    #[arg(long)]
    role: Option<String>,
    /// The term's epoch (history records).
    #[arg(long, default_value_t = 0)]
    epoch: u64,
    /// The term (history records).
    #[arg(long, default_value_t = 0)]
    term: u64,
    /// The recording process's incarnation (history records: `inc`).
    #[arg(long)]
    inc: Option<String>,
    /// The role lock to hold while the child's group lives (`exec::lock`): taken before the
    /// child starts, waited for until the kill deadline.
    #[arg(long)]
    lock: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// How long the child's last output lines may take to be relayed after its group is gone.
const RELAY_DRAIN: Duration = Duration::from_secs(1);

/// Longest line relayed in one piece; longer ones are split.
const MAX_LINE: usize = 16 * 1024;

/// How long the leftovers of a group may take to die after `SIGKILL` before the watchdog
/// gives up waiting (they are unkillable only in uninterruptible sleep).
const REAP_LIMIT: Duration = Duration::from_secs(10);

/// What the main loop hears about.
enum Event {
    Request(Request),
    /// The manager's end of standard input closed.
    ManagerGone,
    /// The child (the group leader) ended with this wait status.
    ChildExited(std::process::ExitStatus),
}

/// Runs the watchdog; its exit code is the child's (128 + signal when signalled, 127 when it
/// could not be started).
pub(crate) fn main(args: WatchdogArgs) -> ExitCode {
    ignore_group_signals();
    // Orphaned descendants of the child are re-parented to us, so we can wait for them.
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER and an integer argument has no memory effects.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let Some((program, rest)) = args.command.split_first() else {
        report(&out, &Report::Failed("no command".into()));
        return ExitCode::from(127);
    };
    if let Some(delay) = super::seams::watchdog_start_delay() {
        std::thread::sleep(delay);
    }
    // A child is never started at or after its kill deadline (the term may be over).
    if args.deadline_ns > 0 && real_mono_now_ns() >= args.deadline_ns {
        report(
            &out,
            &Report::Failed("the term's deadline passed before the command could start".into()),
        );
        return ExitCode::from(127);
    }
    // The role lock (Q12 rule 8): a command of an earlier process of this instance for this
    // role (a restarted manager's predecessor) must be gone before this one starts.
    let _lock = match &args.lock {
        Some(path) => match super::lock::take(path, args.deadline_ns) {
            Ok(file) => Some(file),
            Err(e) => {
                report(&out, &Report::Failed(e));
                return ExitCode::from(127);
            }
        },
        None => None,
    };
    let spawned = Command::new(program)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .pre_exec_child_setup()
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            report(
                &out,
                &Report::Failed(format!("cannot start {program:?}: {e}")),
            );
            return ExitCode::from(127);
        }
    };
    let pid = child.id();
    let Ok(pgid) = libc::pid_t::try_from(pid) else {
        return ExitCode::from(127);
    };
    let history = History::open(&args);
    history.start(pid);
    report(&out, &Report::Started(pid));
    let (tx, rx) = mpsc::channel();
    let (relayed_tx, relayed) = mpsc::channel();
    let mut relays = 0;
    if let Some(stdout) = child.stdout.take() {
        relays += relay(stdout, out.clone(), false, relayed_tx.clone());
    }
    if let Some(stderr) = child.stderr.take() {
        relays += relay(stderr, out.clone(), true, relayed_tx);
    }
    read_requests(tx.clone());
    reap(pgid, tx);

    let mut deadline = (args.deadline_ns > 0).then_some(args.deadline_ns);
    let mut escalate_at: Option<u64> = None;
    let mut killed: Option<String> = None;
    let stop_timeout_ns = args.stop_timeout_ms.saturating_mul(1_000_000);
    let status = loop {
        let now = real_mono_now_ns();
        // Due: the deadline first (it is the safety bound), then a graceful stop's limit.
        if killed.is_none() {
            if deadline.is_some_and(|d| now >= d) {
                kill_group(pgid, libc::SIGKILL);
                killed = Some("deadline".into());
            } else if escalate_at.is_some_and(|e| now >= e) {
                kill_group(pgid, libc::SIGKILL);
                killed = Some("stop_timeout".into());
            }
        }
        let next = [deadline, escalate_at]
            .into_iter()
            .flatten()
            .filter(|_| killed.is_none())
            .min();
        let wait = next.map_or(Duration::from_secs(3600), |n| {
            Duration::from_nanos(n.saturating_sub(now))
        });
        match rx.recv_timeout(wait) {
            Ok(Event::ChildExited(status)) => break status,
            Ok(Event::Request(Request::Deadline(d))) => deadline = Some(d),
            Ok(Event::ManagerGone) => {
                // The manager died (it closes this pipe only after the child is gone otherwise):
                // a restarted process of the instance may adopt the term at once (Q6 restart
                // adoption), so nothing of the group may go on acting — kill it now.
                kill_group(pgid, libc::SIGKILL);
                killed.get_or_insert("manager_gone".into());
            }
            Ok(Event::Request(Request::Stop)) => {
                if escalate_at.is_none() && killed.is_none() {
                    kill_group(pgid, args.stop_signal);
                    escalate_at = Some(real_mono_now_ns().saturating_add(stop_timeout_ns));
                }
            }
            Ok(Event::Request(Request::Kill(reason))) => {
                kill_group(pgid, libc::SIGKILL);
                killed.get_or_insert(reason);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                // The reaper is gone: wait for the child directly.
                match child.wait() {
                    Ok(status) => break status,
                    Err(_) => return ExitCode::from(1),
                }
            }
        }
    };
    // The leader is gone: nothing of its group may go on acting.
    kill_group(pgid, libc::SIGKILL);
    wait_group_gone(pgid);
    if killed.is_none() && status.signal() == Some(libc::SIGKILL) {
        // The manager kills the group itself when its term is lost, right after asking us to
        // (`kill <reason>`): the request is on its way, the reason belongs in the record.
        killed = kill_reason(&rx);
    }
    let code = exit_code(status);
    let described = describe(status);
    // Recorded now that the group is gone, not after its output: a stopped manager does not
    // read its pipe, so the relays may wait for it.
    history.stop(pid, &described, killed.as_deref(), deadline);
    // The child's last lines come before the report of its end (bounded: a process that left
    // the group may still hold a pipe open, a stopped manager may not read).
    let until = std::time::Instant::now() + RELAY_DRAIN;
    for _ in 0..relays {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if relayed.recv_timeout(left).is_err() {
            break;
        }
    }
    // The only write to the manager after the start that is not a relayed line; it may wait
    // for a stopped manager to read, after the group is gone and recorded.
    report(
        &out,
        &Report::Exited {
            code,
            status: described,
            killed,
        },
    );
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Signals a terminal, a service manager (systemd's `KillMode=control-group`, `timeout`) or
/// `kill -- -PGID` send to every process: the watchdog keeps running through them and keeps
/// its deadline; the manager handles them and tells the watchdog to stop the child
/// gracefully. Its child gets the default dispositions back (`pre_exec_child_setup`).
const IGNORED: [i32; 7] = [
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGTERM,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGPIPE,
];

/// Ignores [`IGNORED`].
fn ignore_group_signals() {
    for sig in IGNORED {
        // SAFETY: setting the disposition of a signal to SIG_IGN has no memory effects.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
}

/// Set-up of the child between fork and exec.
trait ChildSetup {
    fn pre_exec_child_setup(&mut self) -> &mut Self;
}

impl ChildSetup for Command {
    fn pre_exec_child_setup(&mut self) -> &mut Self {
        // SAFETY: the closure calls only async-signal-safe functions (signal, prctl, getppid)
        // and allocates nothing.
        unsafe {
            self.pre_exec(|| {
                // Default dispositions (ours ignore group-wide signals; exec keeps SIG_IGN).
                for sig in IGNORED {
                    libc::signal(sig, libc::SIG_DFL);
                }
                // Killed if the watchdog dies (e.g. SIGKILL) — the group is then unguarded.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                if libc::getppid() == 1 {
                    // The watchdog died before prctl took effect.
                    return Err(std::io::Error::other("the watchdog is gone"));
                }
                Ok(())
            })
        }
    }
}

/// How long a `SIGKILL` nobody here sent waits for the manager's `kill <reason>` request.
const KILL_REASON_WAIT: Duration = Duration::from_millis(20);

/// The reason of a `kill` request that arrives within [`KILL_REASON_WAIT`] (other requests
/// are moot now).
fn kill_reason(rx: &mpsc::Receiver<Event>) -> Option<String> {
    let until = std::time::Instant::now() + KILL_REASON_WAIT;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(Event::Request(Request::Kill(reason))) => return Some(reason),
            Ok(Event::ManagerGone) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Sends `sig` to every process of the group.
fn kill_group(pgid: libc::pid_t, sig: i32) {
    // SAFETY: kill has no memory effects; a negative pid names the process group.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// Waits (bounded) until no process of the group is left: the watchdog reaps them all. Polls
/// every 100 µs for the first 5 ms (`SIGKILL`ed processes are usually reaped by then: the
/// stop record, which a successor's term is judged against, comes that much sooner), then
/// every 2 ms.
fn wait_group_gone(pgid: libc::pid_t) {
    let start = std::time::Instant::now();
    // SAFETY: kill with signal 0 only checks for existence.
    while unsafe { libc::kill(-pgid, 0) } == 0 && start.elapsed() < REAP_LIMIT {
        kill_group(pgid, libc::SIGKILL);
        let pause = if start.elapsed() < Duration::from_millis(5) {
            Duration::from_micros(100)
        } else {
            Duration::from_millis(2)
        };
        std::thread::sleep(pause);
    }
}

/// Reaps every descendant (we are their sub-reaper); reports the leader's end.
fn reap(leader: libc::pid_t, tx: mpsc::Sender<Event>) {
    let spawned = std::thread::Builder::new()
        .name("reaper".into())
        .spawn(move || {
            loop {
                let mut status: libc::c_int = 0;
                // SAFETY: waitpid writes the status to a valid pointer.
                let pid = unsafe { libc::waitpid(-1, &raw mut status, 0) };
                if pid == leader {
                    let _ = tx.send(Event::ChildExited(std::process::ExitStatus::from_raw(
                        status,
                    )));
                } else if pid < 0 {
                    if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                        continue;
                    }
                    // No child left: ECHILD.
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
    let _ = spawned;
}

/// Reads the manager's requests from standard input.
fn read_requests(tx: mpsc::Sender<Event>) {
    let _ = std::thread::Builder::new()
        .name("requests".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            let mut lines = stdin.lock();
            let mut line = String::new();
            loop {
                line.clear();
                match lines.read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(Event::ManagerGone);
                        return;
                    }
                    Ok(_) => {
                        if let Some(r) = Request::parse(line.trim_end())
                            && tx.send(Event::Request(r)).is_err()
                        {
                            return;
                        }
                    }
                }
            }
        });
}

/// Relays the lines of one of the child's output pipes to the manager; says on `done` when
/// the pipe closed. Returns 1 when the relay runs (0 when no thread could be started).
fn relay(
    pipe: impl Read + Send + 'static,
    out: Arc<Mutex<std::io::Stdout>>,
    stderr: bool,
    done: mpsc::Sender<()>,
) -> usize {
    let spawned = std::thread::Builder::new()
        .name("relay".into())
        .spawn(move || {
            let mut reader = BufReader::new(pipe);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match (&mut reader)
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut buf)
                {
                    Ok(0) | Err(_) => {
                        let _ = done.send(());
                        return;
                    }
                    Ok(_) => {
                        while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                            buf.pop();
                        }
                        let text = String::from_utf8_lossy(&buf).into_owned();
                        let r = if stderr {
                            Report::Err(text)
                        } else {
                            Report::Out(text)
                        };
                        report(&out, &r);
                    }
                }
            }
        });
    usize::from(spawned.is_ok())
}

/// Writes one report line to the manager (errors ignored: a manager that is gone reads
/// nothing).
fn report(out: &Mutex<std::io::Stdout>, r: &Report) {
    let line = r.to_line();
    if let Ok(out) = out.lock() {
        let mut out = out.lock();
        let _ = out.write_all(line.as_bytes());
        let _ = out.flush();
    }
}

/// The child's end as an exit code: its status, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// `exit N` or `signal N`.
fn describe(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown".into(),
    }
}

/// The election history this watchdog appends the child's start and stop to, if any. Each
/// record is one `write` of a whole line to a file opened for appending, so lines of the
/// manager's recorder and of other watchdogs never mix.
struct History {
    file: Option<std::fs::File>,
    node: String,
    role: String,
    epoch: u64,
    term: u64,
    inc: Option<String>,
}

impl History {
    fn open(args: &WatchdogArgs) -> Self {
        let file = args.history.as_ref().and_then(|p| {
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(p)
                .ok()
        });
        Self {
            file,
            node: args.node.clone().unwrap_or_default(),
            role: args.role.clone().unwrap_or_default(),
            epoch: args.epoch,
            term: args.term,
            inc: args.inc.clone(),
        }
    }

    fn start(&self, pid: u32) {
        self.write(crate::history::event::Event::ChildStart {
            epoch: self.epoch,
            term: self.term,
            pid,
        });
    }

    fn stop(&self, pid: u32, status: &str, killed: Option<&str>, kill_deadline: Option<u64>) {
        self.write(crate::history::event::Event::ChildStop {
            epoch: self.epoch,
            term: self.term,
            pid,
            status: status.to_owned(),
            killed: killed.map(str::to_owned),
            kill_deadline_ns: kill_deadline,
        });
    }

    fn write(&self, event: crate::history::event::Event) {
        let Some(mut file) = self.file.as_ref() else {
            return;
        };
        let record = crate::history::event::Record::node(
            crate::history::clock::mono_now_ns(),
            &self.node,
            Some(&self.role),
            event,
        )
        .with_inc(self.inc.clone());
        let mut line = record.to_line();
        line.push('\n');
        let _ = file.write_all(line.as_bytes());
    }
}
