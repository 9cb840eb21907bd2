//! Signals to processes, reading the tail of their logs, and the monotonic clock they stamp
//! their histories with.

use std::path::Path;

pub use libc::{SIGCONT, SIGHUP, SIGKILL, SIGSTOP, SIGTERM};

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock every process on this host stamps its
/// history records with (`mono_ns`).
pub fn mono_now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes to the valid timespec.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now);
    }
    u64::try_from(now.tv_sec).expect("seconds") * 1_000_000_000
        + u64::try_from(now.tv_nsec).expect("nanoseconds")
}

/// Sends `sig` (e.g. [`SIGTERM`]) to `pid`; panics if the process does not exist.
pub fn signal(pid: u32, sig: i32) {
    let Ok(raw) = i32::try_from(pid) else {
        panic!("pid {pid} does not fit in i32");
    };
    // SAFETY: kill(2) only reads its two integer arguments.
    let rc = unsafe { libc::kill(raw, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}) failed: {}",
        std::io::Error::last_os_error()
    );
}

/// Sends `sig` to every process of the process group `pgid` (`kill -SIG -- -PGID`); panics if
/// the group does not exist.
pub fn signal_group(pgid: u32, sig: i32) {
    let Ok(raw) = i32::try_from(pgid) else {
        panic!("pgid {pgid} does not fit in i32");
    };
    // SAFETY: kill(2) only reads its two integer arguments; a negative pid names the group.
    let rc = unsafe { libc::kill(-raw, sig) };
    assert_eq!(
        rc,
        0,
        "kill(-{pgid}, {sig}) failed: {}",
        std::io::Error::last_os_error()
    );
}

/// Starts `cmd` in a process group of its own (its id is the process's pid), so that a test
/// can signal the group ([`signal_group`]) without hitting the test process. Outside the
/// test's group, a test runner's kill of that group (a hung test) would not reach it: it is
/// killed (`PR_SET_PDEATHSIG`) when the thread that started it ends.
pub fn own_group(cmd: &mut tokio::process::Command) {
    cmd.process_group(0);
    // SAFETY: prctl with integer arguments is async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            Ok(())
        });
    }
}

/// `pid` and all its descendants (children, their children, …) as they are now, from `/proc`.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(p) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(ppid) = parent(p) {
                parents.push((p, ppid));
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let of = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == of).map(|(p, _)| *p));
        i += 1;
    }
    out
}

/// The parent of `pid` (field 4 of `/proc/<pid>/stat`).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(") ")
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Sends `sig` to `pid` and every descendant of it, one after the other with nothing in
/// between, the way systemd's `KillMode=control-group` stops a service; returns the pids
/// signalled. Processes that ended meanwhile are skipped.
pub fn signal_tree(pid: u32, sig: i32) -> Vec<u32> {
    let pids = tree(pid);
    for p in &pids {
        if let Ok(raw) = i32::try_from(*p) {
            // SAFETY: kill(2) only reads its two integer arguments.
            unsafe {
                libc::kill(raw, sig);
            }
        }
    }
    pids
}

/// Stops (SIGSTOP, `stopped`) or continues (SIGCONT) the process `pid` of `name`; panics if it
/// is not running (`pid` is `None`).
pub fn set_stopped(pid: Option<u32>, name: &str, stopped: bool) {
    let (what, sig) = if stopped {
        ("pause", SIGSTOP)
    } else {
        ("resume", SIGCONT)
    };
    let Some(pid) = pid else {
        panic!("{what}: {name} is not running");
    };
    signal(pid, sig);
    // The signal is sent at once but takes effect when the kernel next handles the process's
    // threads: on a loaded machine a thread may still answer a request after `kill` returned.
    // Wait (bounded) until every thread is stopped, or none is.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while all_stopped(pid) != Some(stopped) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Whether every thread of `pid` is stopped (state `T`), `Some(false)` when none is, `None`
/// when some are (or `/proc` cannot say).
fn all_stopped(pid: u32) -> Option<bool> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let states: Vec<bool> = tasks
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.ok()?.path().join("stat")).ok()?;
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state == "T" || state == "t")
        })
        .collect();
    if states.is_empty() {
        return None;
    }
    if states.iter().all(|s| *s) {
        Some(true)
    } else if states.iter().all(|s| !*s) {
        Some(false)
    } else {
        None
    }
}

/// Resident set size of `pid` in KiB (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Number of open file descriptors of `pid` (entries of `/proc/<pid>/fd`).
pub fn fd_count(pid: u32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(Iterator::count)
}

/// The last `lines` lines of the file at `path` (or why it cannot be read).
pub fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}
