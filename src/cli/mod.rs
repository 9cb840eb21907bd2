//! The `nats-roles` binary (cargo feature `cli`, on by default): `run`, `validate` and the
//! operator commands `status`, `watch`, `evict` (talking to NATS directly, no instance
//! needed) and `history`. The binary's `main` only calls [`main`]; embedding applications do
//! not need this module (`default-features = false` leaves it and its dependencies out).

pub(crate) mod color;
pub(crate) mod conn;
mod context;
pub(crate) mod drain;
mod earlier;
pub(crate) mod evict;
mod exec;
mod frozen;
mod generate;
mod heap;
pub(crate) mod history;
mod identity;
#[cfg(feature = "http")]
pub(crate) mod listen;
pub(crate) mod moves;
mod outcome;
mod pipe;
pub(crate) mod plan;
mod run;
pub(crate) mod scale;
mod signal;
pub(crate) mod status;
mod status_groups;
mod systemd;
mod table;
pub(crate) mod watch;

use std::process::ExitCode;

/// Runs the `nats-roles` command with the process's arguments and returns its exit code
/// (0 success, 1 runtime failure, 2 usage or configuration error).
#[must_use]
pub fn main() -> ExitCode {
    run::main()
}
