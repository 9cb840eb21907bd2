//! Waiting for the signals that stop a command (Ctrl-C, SIGTERM).

use super::outcome::EXIT_RUNTIME;

/// Completes on SIGINT or SIGTERM; a second signal exits at once.
pub(crate) async fn shutdown_signal() {
    wait_signal().await;
    tokio::spawn(async {
        wait_signal().await;
        eprintln!("nats-roles: second signal, exiting without releasing");
        std::process::exit(i32::from(EXIT_RUNTIME));
    });
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
