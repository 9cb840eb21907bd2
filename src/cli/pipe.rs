//! A closed standard output ends an output command quietly, as it ends `cat` or `ls`: `nats-roles
//! status | head` exits on SIGPIPE instead of panicking in `println!` (Rust ignores SIGPIPE, so
//! a write to a closed pipe is an error `println!` turns into a panic).

/// Restores SIGPIPE's default action (terminate) for the rest of this process. Only for the
/// commands whose output is their work (`status`, `watch`, `plan`, `history`, `completions`,
/// `man`, …): `run` and `exec` keep it ignored (a peer closing a socket must be an error there,
/// not the end of the process).
pub(super) fn end_quietly_on_a_closed_stdout() {
    #[cfg(unix)]
    // SAFETY: `signal` with `SIG_DFL` only changes this process's disposition of SIGPIPE;
    // called before any thread of ours starts, no handler runs concurrently.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
