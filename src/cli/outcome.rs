//! How a command ends: its [`Failure`] and exit code, and the runtime commands run on.

use std::process::ExitCode;

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
    /// A command's own outcome with its documented exit code (e.g. `move`: 3 not moved,
    /// 4 timed out).
    Exit(u8, String),
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
            Failure::Exit(code, msg) => {
                eprintln!("nats-roles: {msg}");
                ExitCode::from(code)
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
