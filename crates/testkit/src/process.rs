//! Signals to processes and reading the tail of their logs.

use std::path::Path;

pub use libc::{SIGCONT, SIGHUP, SIGKILL, SIGSTOP, SIGTERM};

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
