//! [`Watched`]: one child process run under its own watchdog process (manager side): start
//! it, move its deadline, stop or kill it, print its output prefixed with its label, and wait
//! for the report that it and its whole process group are gone.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::wire::{Report, Request};
use crate::history::clock::real_mono_now_ns;

/// How long before the holder's local deadline the watchdog kills the group: `SIGKILL` takes
/// effect within microseconds to a few milliseconds, so the child is gone by the deadline.
pub(crate) const KILL_LEAD: Duration = Duration::from_millis(50);

/// Environment variables of the manager a child does not inherit (secrets of the API).
const NOT_INHERITED: [&str; 2] = ["NATS_ROLES_ADMIN_TOKEN", "NATS_ROLES_LOCAL_TOKEN"];

/// What to run and how.
#[derive(Debug, Clone)]
pub(crate) struct ChildSpec {
    /// The program and its arguments.
    pub(crate) argv: Vec<String>,
    /// Added to the manager's environment, in order (later ones win).
    pub(crate) env: Vec<(String, String)>,
    /// Variables of the manager's environment the child does not inherit, besides the API's
    /// secrets.
    pub(crate) not_inherited: &'static [&'static str],
    /// The graceful stop signal.
    pub(crate) stop_signal: i32,
    /// How long a graceful stop may take before `SIGKILL`.
    pub(crate) stop_timeout: Duration,
    /// The prefix of its output lines (`[role]`).
    pub(crate) label: String,
    /// Where the watchdog records the child's start and stop, if anywhere.
    pub(crate) history: Option<HistoryTarget>,
    /// The role lock the watchdog holds while the child's group lives (`super::lock`).
    pub(crate) lock: Option<PathBuf>,
}

/// An election history the watchdog appends `child_start` / `child_stop` records to.
#[derive(Debug, Clone)]
pub(crate) struct HistoryTarget {
    pub(crate) path: PathBuf,
    pub(crate) node: String,
    pub(crate) role: String,
    pub(crate) epoch: u64,
    pub(crate) term: u64,
    /// The recording process's incarnation (`inc` of the records).
    pub(crate) inc: Option<String>,
}

/// How a child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It ran and ended (it and every process of its group are gone).
    Ended {
        /// Exit code (128 + signal when signalled).
        code: i32,
        /// `exit N` or `signal N`.
        status: String,
        /// Why the watchdog killed it, if it did.
        killed: Option<String>,
    },
    /// It could not be started.
    Failed(String),
}

impl Exit {
    /// The exit code: the child's, 127 when it could not be started.
    pub(crate) fn code(&self) -> i32 {
        match self {
            Self::Ended { code, .. } => *code,
            Self::Failed(_) => 127,
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ended {
                status,
                killed: Some(k),
                ..
            } => write!(f, "{status} (killed: {k})"),
            Self::Ended { status, .. } => f.write_str(status),
            Self::Failed(m) => f.write_str(m),
        }
    }
}

/// A running child and its watchdog.
#[derive(Debug)]
pub(crate) struct Watched {
    stdin: Option<ChildStdin>,
    exited: Option<oneshot::Receiver<Exit>>,
    /// The watchdog's report, once read (`None` inside: it ended without one).
    report: Option<Option<Exit>>,
    watchdog: Child,
    pid: Option<u32>,
    sent_deadline: Option<Instant>,
}

/// The watchdog's deadline for the holder's `deadline`: `KILL_LEAD` before it, on the host's
/// monotonic clock.
fn watchdog_deadline_ns(deadline: Instant) -> u64 {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .saturating_sub(KILL_LEAD);
    real_mono_now_ns()
        .saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX))
        .max(1)
}

impl Watched {
    /// Starts `spec` under a watchdog that kills it at `deadline` (if any); returns once the
    /// watchdog reported the child started (or why it could not).
    ///
    /// # Errors
    /// The watchdog itself cannot be started (the message says why), or the child could not
    /// be ([`Exit::Failed`] is then returned as the error's text).
    pub(crate) async fn start(spec: &ChildSpec, deadline: Option<Instant>) -> Result<Self, Exit> {
        let deadline = deadline.filter(|_| !super::seams::watchdog_deadline_disabled());
        let exe = std::env::current_exe()
            .map_err(|e| Exit::Failed(format!("cannot find the nats-roles executable: {e}")))?;
        let mut cmd = Command::new(exe);
        cmd.arg("watchdog")
            .arg("--stop-signal")
            .arg(spec.stop_signal.to_string())
            .arg("--stop-timeout-ms")
            .arg(spec.stop_timeout.as_millis().to_string());
        if let Some(d) = deadline {
            cmd.arg("--deadline-ns")
                .arg(watchdog_deadline_ns(d).to_string());
        }
        if let Some(lock) = &spec.lock {
            cmd.arg("--lock").arg(lock);
        }
        if let Some(h) = &spec.history {
            cmd.arg("--history")
                .arg(&h.path)
                .args(["--node", &h.node, "--role", &h.role])
                .args([
                    "--epoch",
                    &h.epoch.to_string(),
                    "--term",
                    &h.term.to_string(),
                ]);
            if let Some(inc) = &h.inc {
                cmd.args(["--inc", inc]);
            }
        }
        cmd.arg("--").args(&spec.argv);
        for name in NOT_INHERITED.iter().chain(spec.not_inherited) {
            cmd.env_remove(name);
        }
        cmd.envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(false);
        // A session of its own: no signal to the manager's process group or terminal
        // (`kill -STOP -- -PGID`, Ctrl-Z, a hang-up, `kill -TERM -- -PGID`) reaches the
        // watchdog, which must keep the deadline whatever happens to the manager.
        // SAFETY: setsid is async-signal-safe and the closure allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut watchdog = cmd
            .spawn()
            .map_err(|e| Exit::Failed(format!("cannot start the watchdog process: {e}")))?;
        let stdin = watchdog.stdin.take();
        let Some(stdout) = watchdog.stdout.take() else {
            return Err(Exit::Failed("the watchdog has no output pipe".into()));
        };
        let (started_tx, started_rx) = oneshot::channel();
        let (exited_tx, exited_rx) = oneshot::channel();
        tokio::spawn(read_reports(
            stdout,
            spec.label.clone(),
            started_tx,
            exited_tx,
        ));
        let mut w = Self {
            stdin,
            exited: Some(exited_rx),
            report: None,
            watchdog,
            pid: None,
            sent_deadline: deadline,
        };
        match started_rx.await {
            Ok(pid) => {
                w.pid = Some(pid);
                Ok(w)
            }
            Err(_) => Err(w.wait().await),
        }
    }

    /// The child's process id (= its process group).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Moves the kill deadline to the holder's new `deadline` (renewals).
    pub(crate) async fn set_deadline(&mut self, deadline: Instant) {
        if self.sent_deadline == Some(deadline) || super::seams::watchdog_deadline_disabled() {
            return;
        }
        self.sent_deadline = Some(deadline);
        self.send(Request::Deadline(watchdog_deadline_ns(deadline)))
            .await;
    }

    /// Stops the child gracefully: the stop signal, `SIGKILL` after the stop timeout (or at
    /// the deadline, whichever comes first).
    pub(crate) async fn stop(&mut self) {
        self.send(Request::Stop).await;
    }

    /// `SIGKILL`s the child's group now: asks the watchdog (which reaps the group and reports
    /// `reason`, one word, as its `killed`), then kills the group from here at once as well —
    /// one pipe hop and two thread wake-ups sooner.
    pub(crate) async fn kill(&mut self, reason: &str) {
        self.send(Request::Kill(reason.to_owned())).await;
        let reported = match self.exited.as_mut() {
            Some(rx) => !rx.is_empty(),
            None => true,
        };
        if !reported && let Some(pgid) = self.pid.and_then(|p| libc::pid_t::try_from(p).ok()) {
            // The watchdog has not reported the group gone, so its id is still reserved (the
            // watchdog reaps every member and reports only once none is left): this reaches
            // only the child's group.
            // SAFETY: kill has no memory effects; a negative pid names the process group.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }

    async fn send(&mut self, request: Request) {
        if let Some(stdin) = &mut self.stdin {
            let line = request.to_line();
            if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                self.stdin = None;
            }
        }
    }

    /// Waits until the child and its group are gone (the watchdog's report), then reaps the
    /// watchdog. Cancel-safe until it returns once; later calls return the same answer.
    pub(crate) async fn wait(&mut self) -> Exit {
        if self.report.is_none() {
            let got = match self.exited.as_mut() {
                Some(rx) => rx.await.ok(),
                None => None,
            };
            self.exited = None;
            self.report = Some(got);
        }
        let status = self.watchdog.wait().await;
        if matches!(self.report, Some(None))
            && let Some(pgid) = self.pid.and_then(|p| libc::pid_t::try_from(p).ok())
        {
            // The watchdog died without its report (killed): its child died with it
            // (PR_SET_PDEATHSIG), what is left of the group is killed here. A group id stays
            // reserved while any member lives, so this reaches no other process.
            // SAFETY: kill has no memory effects; a negative pid names the process group.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        self.report
            .clone()
            .flatten()
            .unwrap_or_else(|| match status {
                Ok(s) => Exit::Failed(format!("the watchdog process ended ({s}) without a report")),
                Err(e) => Exit::Failed(format!("the watchdog process was lost: {e}")),
            })
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        // Closing standard input asks the watchdog to stop the child (as if we were gone).
        self.stdin = None;
    }
}

/// Reads the watchdog's reports: output lines are printed with the label, the rest answered
/// through the channels.
async fn read_reports(
    stdout: tokio::process::ChildStdout,
    label: String,
    started: oneshot::Sender<u32>,
    exited: oneshot::Sender<Exit>,
) {
    let mut lines = BufReader::new(stdout).lines();
    let mut started = Some(started);
    let mut exited = Some(exited);
    while let Ok(Some(line)) = lines.next_line().await {
        match Report::parse(&line) {
            Some(Report::Started(pid)) => {
                if let Some(tx) = started.take() {
                    let _ = tx.send(pid);
                }
            }
            Some(Report::Out(text)) => print_prefixed(&label, &text, false),
            Some(Report::Err(text)) => print_prefixed(&label, &text, true),
            Some(Report::Failed(msg)) => {
                if let Some(tx) = exited.take() {
                    let _ = tx.send(Exit::Failed(msg));
                }
            }
            Some(Report::Exited {
                code,
                status,
                killed,
            }) => {
                if let Some(tx) = exited.take() {
                    let _ = tx.send(Exit::Ended {
                        code,
                        status,
                        killed,
                    });
                }
            }
            None => {}
        }
    }
}

/// One line of a child's output on the manager's stdout or stderr, after its label.
fn print_prefixed(label: &str, text: &str, stderr: bool) {
    use std::io::Write as _;
    let line = if label.is_empty() {
        format!("{text}\n")
    } else {
        format!("{label} {text}\n")
    };
    if stderr {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(line.as_bytes());
    } else {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(line.as_bytes());
        let _ = out.flush();
    }
}
