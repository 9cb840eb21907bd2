//! Waiting for the signals that stop a command (Ctrl-C, SIGTERM).

use super::outcome::EXIT_RUNTIME;

/// SIGINT and SIGTERM, caught from its creation on (not from the first poll, as
/// [`wait_signal`] is): a command that must exit cleanly on a signal at any point of its
/// start-up installs it first.
pub(crate) struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Catches SIGINT and SIGTERM from now on (a signal that cannot be caught keeps its
    /// default action).
    pub(crate) fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Self {
                interrupt: signal(SignalKind::interrupt()).ok(),
                terminate: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Self {}
        }
    }

    /// Completes on the next SIGINT or SIGTERM.
    pub(crate) async fn recv(&mut self) {
        #[cfg(unix)]
        {
            async fn next(signal: Option<&mut tokio::signal::unix::Signal>) {
                match signal {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                () = next(self.interrupt.as_mut()) => {}
                () = next(self.terminate.as_mut()) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }

    /// Completes on the next SIGINT or SIGTERM; a second one exits at once.
    pub(crate) async fn shutdown(mut self) {
        self.recv().await;
        tokio::spawn(async move {
            self.recv().await;
            eprintln!("nats-roles: second signal, exiting without releasing");
            std::process::exit(i32::from(EXIT_RUNTIME));
        });
    }
}

/// Completes on SIGINT or SIGTERM.
pub(crate) async fn wait_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
