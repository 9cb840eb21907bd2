//! Waiting for the signals that stop a command (Ctrl-C, SIGTERM, SIGHUP).
//!
//! A service manager or a terminal may send them to every process of the command's tree at
//! once (systemd's `KillMode=control-group`, `timeout`, `kill -TERM -- -PGID`, a hang-up): the
//! watchdogs of `exec` children ignore them and keep their deadlines (src/exec/watchdog.rs), so
//! a group-wide signal takes the same graceful path as a signal to this process alone.

use super::outcome::EXIT_RUNTIME;

/// SIGINT, SIGTERM and SIGHUP, caught from its creation on (not from the first poll, as
/// [`wait_signal`] is): a command that must exit cleanly on a signal at any point of its
/// start-up installs it first.
pub(crate) struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    hangup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Catches SIGINT, SIGTERM and SIGHUP from now on (a signal that cannot be caught keeps its
    /// default action).
    pub(crate) fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Self {
                interrupt: signal(SignalKind::interrupt()).ok(),
                terminate: signal(SignalKind::terminate()).ok(),
                hangup: signal(SignalKind::hangup()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Self {}
        }
    }

    /// Completes on the next SIGINT or SIGTERM, and SIGHUP when `hangup`.
    async fn next(&mut self, hangup: bool) {
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
            let hup = if hangup { self.hangup.as_mut() } else { None };
            tokio::select! {
                () = next(self.interrupt.as_mut()) => {}
                () = next(self.terminate.as_mut()) => {}
                () = next(hup) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = hangup;
            let _ = tokio::signal::ctrl_c().await;
        }
    }

    /// Completes on the next SIGINT, SIGTERM or SIGHUP.
    pub(crate) async fn recv(&mut self) {
        self.next(true).await;
    }

    /// Completes on the next SIGINT, SIGTERM or SIGHUP; a second SIGINT or SIGTERM exits at
    /// once (a SIGHUP after the first signal does not: systemd's `SendSIGHUP=yes` sends one
    /// right after the stop signal).
    pub(crate) async fn shutdown(mut self) {
        self.recv().await;
        tokio::spawn(async move {
            self.next(false).await;
            eprintln!("nats-roles: second signal, exiting without releasing");
            std::process::exit(i32::from(EXIT_RUNTIME));
        });
    }
}

/// Completes on SIGINT, SIGTERM or SIGHUP.
pub(crate) async fn wait_signal() {
    wait_for(true).await;
}

/// Completes on SIGINT or SIGTERM, and SIGHUP when `hangup`.
async fn wait_for(hangup: bool) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = if hangup {
            signal(SignalKind::hangup()).ok()
        } else {
            None
        };
        let hup = async {
            match hup.as_mut() {
                Some(h) => {
                    h.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                    () = hup => {}
                }
            }
            Err(_) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    () = hup => {}
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = hangup;
        let _ = tokio::signal::ctrl_c().await;
    }
}
