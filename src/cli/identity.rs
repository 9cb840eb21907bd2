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
