//! Gives the heap's free memory back to the operating system now and then. glibc keeps what a
//! burst freed (a mass promotion queues a callback per role, a start reads every role key):
//! without a trim the process's RSS stays at its busiest moment's heap for good.

use std::time::Duration;

/// How often the heap is trimmed: a trim of a heap with little free memory costs well under a
/// millisecond, and a burst's memory is returned within this long.
const INTERVAL: Duration = Duration::from_secs(10);

/// Trims the heap every [`INTERVAL`] until the runtime ends (glibc only; elsewhere nothing).
pub(crate) fn spawn() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    tokio::spawn(async {
        let mut ticks = tokio::time::interval(INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // Off the runtime's workers: the trim holds glibc's arena locks while it runs.
            let _ = tokio::task::spawn_blocking(|| {
                // SAFETY: malloc_trim only returns free memory of the heap to the system; it
                // takes glibc's own locks and touches no memory in use.
                unsafe { libc::malloc_trim(0) }
            })
            .await;
        }
    });
}
