//! Waiting for the signals that stop a command (Ctrl-C, SIGTERM, SIGHUP).
//!
//! A service manager or a terminal may send them to every process of the command's tree at
//! once (systemd's `KillMode=control-group`, `timeout`, `kill -TERM -- -PGID`, a hang-up): the
//! watchdogs of `exec` children ignore them and keep their deadlines (src/exec/watchdog.rs), so
//! a group-wide signal takes the same graceful path as a signal to this process alone.

use super::outcome::EXIT_RUNTIME;

/// Completes on SIGINT, SIGTERM or SIGHUP; a second SIGINT or SIGTERM exits at once (a
/// SIGHUP after the first signal does not: systemd's `SendSIGHUP=yes` sends one right after
/// the stop signal).
pub(crate) async fn shutdown_signal() {
    wait_signal().await;
    tokio::spawn(async {
        wait_for(false).await;
        eprintln!("nats-roles: second signal, exiting without releasing");
        std::process::exit(i32::from(EXIT_RUNTIME));
    });
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
