//! The command's name and its version line, shared by the argument parser, the completion
//! scripts and the man pages.

/// The command's name.
pub(crate) const BIN_NAME: &str = "nats-roles";

/// `nats-roles --version`: the crate version and the lease protocol version it speaks
/// (docs/protocol.md), e.g. `nats-roles 0.1.0 (protocol 2)`.
pub(crate) const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (protocol ",
    crate::value::protocol_version!(),
    ")"
);

/// Who runs an operator command, for the records it writes (`by` of `freeze` and `move`):
/// `user@host` (`$USER`, or `$LOGNAME`, else `unknown`; the host's name).
pub(crate) fn operator() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes to the valid buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let host = if rc == 0 {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "unknown-host".to_owned()
    };
    let mut by = format!("{user}@{host}");
    by.truncate(by.char_indices().nth(128).map_or(by.len(), |(i, _)| i));
    by
}
