//! Keeps `run`'s heap small (glibc only; elsewhere nothing): one malloc arena, and the
//! heap's free memory given back to the operating system now and then. glibc keeps what a
//! burst freed (a mass promotion queues a callback per role, a start reads every role key):
//! without a trim the process's RSS stays at its busiest moment's heap for good.

use std::time::Duration;

/// How often the heap is trimmed: a trim of a heap with little free memory costs well under a
/// millisecond, and a burst's memory is returned within this long.
const INTERVAL: Duration = Duration::from_secs(10);

/// Malloc arenas `run` uses unless `MALLOC_ARENA_MAX` says otherwise. glibc's default (eight
/// per core) spreads a role's allocations over one arena per runtime worker that touched
/// them, and each keeps its own free memory. Measured with one instance holding 10,000 roles
/// (anonymous memory, 3–4 runs each): default 97–102 MiB, two arenas 87–99 MiB, one arena
/// 84–86 MiB; idle CPU the same (1.3–1.4 % of a core). The runtime has two workers and the
/// manager allocates little per second at rest: one lock is not contended.
const ARENAS: i32 = 1;

/// Limits malloc to [`ARENAS`] arenas; call before the runtime's threads start. An operator's
/// `MALLOC_ARENA_MAX` wins.
pub(crate) fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets one of malloc's parameters (it takes glibc's own lock).
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        }
    }
}

/// Trims the heap every [`INTERVAL`] until the runtime ends.
pub(crate) fn spawn_trim() {
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
