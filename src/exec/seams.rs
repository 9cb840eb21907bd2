//! Test-only seams of `exec` roles, read from the environment and compiled only with the cargo
//! feature `negative-controls` (never in a build that runs real roles; without the feature
//! they are constant "off"):
//!
//! * `NATS_ROLES_NEGATIVE_CONTROL=watchdog-no-deadline` — the negative control of Q12: the
//!   manager starts watchdogs without a kill deadline and never moves one, so a stopped
//!   manager's child runs on (the process tests show the checker flags it: S4, S5);
//! * `NATS_ROLES_TEST_WATCHDOG_START_DELAY_MS=N` — a watchdog waits `N` ms before it starts
//!   its child (a slow spawn, to show that a start and a demotion are exclusive).

/// The value of `NATS_ROLES_NEGATIVE_CONTROL` that disables the watchdog's deadline.
#[cfg(feature = "negative-controls")]
const NO_DEADLINE: &str = "watchdog-no-deadline";

/// Whether the watchdog's kill deadline is disabled (negative control).
#[cfg(feature = "negative-controls")]
pub(crate) fn watchdog_deadline_disabled() -> bool {
    std::env::var("NATS_ROLES_NEGATIVE_CONTROL").is_ok_and(|v| v == NO_DEADLINE)
}

/// Whether the watchdog's kill deadline is disabled: never without `negative-controls`.
#[cfg(not(feature = "negative-controls"))]
pub(crate) fn watchdog_deadline_disabled() -> bool {
    false
}

/// How long a watchdog waits before it starts its child (test seam).
#[cfg(feature = "negative-controls")]
pub(crate) fn watchdog_start_delay() -> Option<std::time::Duration> {
    std::env::var("NATS_ROLES_TEST_WATCHDOG_START_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(std::time::Duration::from_millis)
}

/// How long a watchdog waits before it starts its child: never without `negative-controls`.
#[cfg(not(feature = "negative-controls"))]
pub(crate) fn watchdog_start_delay() -> Option<std::time::Duration> {
    None
}
