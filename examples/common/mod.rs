//! Shared by the examples: how long to run.

use std::time::Duration;

/// Completes on Ctrl-C, or after `RUN_FOR_SECS` seconds when that is set (the test that runs
/// every example uses it).
pub async fn wait_for_stop() {
    let run_for = std::env::var("RUN_FOR_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    match run_for {
        Some(secs) => tokio::time::sleep(Duration::from_secs(secs)).await,
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
