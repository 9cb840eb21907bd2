//! The role lock of `exec` children (docs/protocol.md Q12 rule 8): one file per bucket,
//! instance and role, locked (`flock`) by the watchdog before it starts the child and inherited
//! by the child's process group, so that it stays locked while any process of the group lives.
//! A watchdog of a restarted manager (restart adoption promotes it at once) waits for the lock,
//! so its child never starts while a child of the previous process of the same instance still
//! runs — whatever happened to that process.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::history::clock::real_mono_now_ns;

/// The directory of the role locks: `$XDG_RUNTIME_DIR/nats-roles`, else
/// `<temp dir>/nats-roles-<uid>`; created (mode 0700) if missing. `None` when it cannot be
/// created (children then start without the lock; logged by the caller).
pub(crate) fn dir() -> Option<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(runtime) => PathBuf::from(runtime).join("nats-roles"),
        None => {
            // SAFETY: getuid has no failure mode and no memory effects.
            let uid = unsafe { libc::getuid() };
            std::env::temp_dir().join(format!("nats-roles-{uid}"))
        }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .ok()?;
    Some(dir)
}

/// The lock file of `role` of `instance` in `bucket` (all single tokens of
/// `[A-Za-z0-9_-]`, so the name is unambiguous).
pub(crate) fn path(dir: &Path, bucket: &str, instance: &str, role: &str) -> PathBuf {
    dir.join(format!("{bucket}.{instance}.{role}.lock"))
}

/// How often a watchdog tries the lock again while an earlier group holds it.
const RETRY: Duration = Duration::from_millis(5);

/// Takes the lock at `path` (exclusive), trying until the `CLOCK_MONOTONIC` instant
/// `until_ns` (0: no limit). The returned file keeps it; its descriptor is left open across
/// `exec` so that the child's group inherits the lock.
///
/// # Errors
/// A message when the file cannot be opened or the lock is still held at `until_ns`.
pub(crate) fn take(path: &Path, until_ns: u64) -> Result<std::fs::File, String> {
    let file = open(path)?;
    while !try_lock(&file, path)? {
        if until_ns > 0 && real_mono_now_ns() >= until_ns {
            return Err(format!(
                "a command of an earlier process of this instance for this role still runs (its \
                 group holds {}); not starting another one",
                path.display()
            ));
        }
        std::thread::sleep(RETRY);
    }
    let fd = file.as_raw_fd();
    // SAFETY: fcntl F_GETFD/F_SETFD on a valid descriptor has no memory effects.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
        }
    }
    Ok(file)
}

/// Opens (creates) the lock file at `path`.
fn open(path: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot open the role lock {}: {e}", path.display()))
}

/// One try to lock `file` exclusively: whether it is now locked by it (`false`: another
/// holds it).
fn try_lock(file: &std::fs::File, path: &Path) -> Result<bool, String> {
    // SAFETY: flock on a valid descriptor has no memory effects.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EWOULDBLOCK | libc::EINTR) => Ok(false),
        _ => Err(format!("cannot lock {}: {err}", path.display())),
    }
}

/// Whether no process group holds the lock at `path` now (one try; the lock is not kept: the
/// watchdog of a later child takes it).
///
/// # Errors
/// A message when the file cannot be opened or locked for another reason than its being held.
pub(crate) fn is_free(path: &Path) -> Result<bool, String> {
    // The lock goes with the file, closed on return.
    try_lock(&open(path)?, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_waited_for_until_the_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = path(dir.path(), "b", "n1", "r");
        let first = take(&p, 0).expect("the first takes it");
        let until = real_mono_now_ns() + 50_000_000;
        let e = take(&p, until).expect_err("held by the first");
        assert!(e.contains("still runs"), "{e}");
        drop(first);
        take(&p, real_mono_now_ns() + 50_000_000).expect("free again");
    }

    #[test]
    fn asking_whether_a_lock_is_free_does_not_keep_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = path(dir.path(), "b", "n1", "r");
        let held = take(&p, 0).expect("taken");
        assert_eq!(is_free(&p), Ok(false));
        drop(held);
        assert_eq!(is_free(&p), Ok(true));
        // Not kept: another can take it at once.
        take(&p, real_mono_now_ns() + 1).expect("free after the question");
    }
}
