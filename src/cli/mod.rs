//! The `nats-roles` binary (cargo feature `cli`, on by default): `run`, `validate` and the
//! operator commands `status`, `watch`, `evict` (talking to NATS directly, no instance
//! needed) and `history`. The binary's `main` only calls [`main`]; embedding applications do
//! not need this module (`default-features = false` leaves it and its dependencies out).

pub(crate) mod conn;
pub(crate) mod evict;
pub(crate) mod history;
#[cfg(feature = "http")]
pub(crate) mod listen;
mod run;
pub(crate) mod status;
mod table;
pub(crate) mod watch;

use std::process::ExitCode;

/// Runs the `nats-roles` command with the process's arguments and returns its exit code
/// (0 success, 1 runtime failure, 2 usage or configuration error).
#[must_use]
pub fn main() -> ExitCode {
    run::main()
}

/// Exit code for runtime failures.
pub(crate) const EXIT_RUNTIME: u8 = 1;
/// Exit code for usage and configuration errors.
pub(crate) const EXIT_USAGE: u8 = 2;

/// Why a command failed, and so its exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Usage or configuration error: exit 2.
    Usage(String),
    /// Runtime failure (connection, bucket, permission, conflict): exit 1.
    Runtime(String),
}

impl Failure {
    /// Prints the message to stderr and returns the exit code.
    pub(crate) fn report(self) -> ExitCode {
        match self {
            Failure::Usage(msg) => {
                eprintln!("nats-roles: {msg}");
                ExitCode::from(EXIT_USAGE)
            }
            Failure::Runtime(msg) => {
                eprintln!("nats-roles: {msg}");
                ExitCode::from(EXIT_RUNTIME)
            }
        }
    }
}

/// Runs `future` on a fresh runtime; 0 on success.
pub(crate) fn block_on(future: impl Future<Output = Result<(), Failure>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            return Failure::Runtime(format!("cannot start the runtime: {err}")).report();
        }
    };
    match runtime.block_on(future) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}
