//! The retry and failure bookkeeping of one state machine (a role's, a session's): how many
//! attempts failed in a row, the backoff that gives, and the failure reported to the
//! application until the server answers normally again. One owner for what the role and the
//! session machines used to keep each in their own fields.

use tokio::time::Instant;

use super::backoff::{RetryPolicy, SplitMix64};
use super::types::FailureKind;

/// Consecutive failures of one machine's operations and the failure it reported.
#[derive(Debug)]
pub(crate) struct Attempts {
    policy: RetryPolicy,
    /// Consecutive failed attempts (for backoff and `max_attempts`).
    failures: u32,
    /// The failure last reported and not yet followed by a recovery.
    reported: Option<FailureKind>,
}

impl Attempts {
    /// No failure yet, retrying as `policy` says.
    pub(crate) fn new(policy: RetryPolicy) -> Self {
        Self {
            policy,
            failures: 0,
            reported: None,
        }
    }

    /// Whether no attempt failed since the last success.
    pub(crate) fn clear(&self) -> bool {
        self.failures == 0
    }

    /// How many attempts failed in a row.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// An attempt succeeded: the next failure backs off from the start again. (A reported
    /// failure stays reported until [`Attempts::recover`]: an answer may succeed without being
    /// the normal answer that ends it.)
    pub(crate) fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// One more attempt failed: the instant the next may be sent (the policy's backoff for
    /// this many failures, with its jitter from `rng`).
    pub(crate) fn back_off(&mut self, now: Instant, rng: &mut SplitMix64) -> Instant {
        self.failures = self.failures.saturating_add(1);
        now + self.policy.delay(self.failures, rng)
    }

    /// One more attempt failed, and the next waits for the slow cadence instead (a persistent
    /// failure): counted, so that news does not cut the wait short.
    pub(crate) fn failed_persistently(&mut self) {
        self.failures = self.failures.saturating_add(1);
    }

    /// Whether the fast retries are used up (`max_attempts`, zero: never): from now on the
    /// machine retries at the slow cadence until an attempt succeeds.
    pub(crate) fn gave_up(&self) -> bool {
        self.policy.max_attempts > 0 && self.failures >= self.policy.max_attempts
    }

    /// The instant of the next retry at the slow cadence (`persistent_interval`, plus up to a
    /// fifth more at random so that many machines do not retry together). Slow, so that a
    /// misconfigured deployment does not hammer the server, yet never a state only a restart
    /// leaves (P3).
    pub(crate) fn slow_retry_at(&self, now: Instant, rng: &mut SplitMix64) -> Instant {
        let interval = self.policy.persistent_interval;
        now + interval + rng.below(interval / 5)
    }

    /// A failure that keeps the machine from campaigning or renewing: whether the machine
    /// reports it now. Only persistent failures and refusals with a server error code (full
    /// storage, lost quorum...) are reported — connection trouble is the connection state's
    /// to show — and each condition once until it changes.
    pub(crate) fn report(&mut self, kind: FailureKind) -> bool {
        if !(kind.is_permanent() || kind.server_code().is_some()) || self.reported == Some(kind) {
            return false;
        }
        self.reported = Some(kind);
        true
    }

    /// The server answered normally: whether a reported failure ended (the machine reports
    /// the recovery).
    pub(crate) fn recover(&mut self) -> bool {
        self.reported.take().is_some()
    }

    /// The failure currently reported.
    pub(crate) fn reported(&self) -> Option<FailureKind> {
        self.reported
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn policy(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            jitter: 0.0,
            max_attempts,
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn backoff_grows_with_failures_and_restarts_after_a_success() {
        let mut a = Attempts::new(policy(0));
        let mut rng = SplitMix64::new(1);
        let now = Instant::now();
        let first = a.back_off(now, &mut rng) - now;
        let second = a.back_off(now, &mut rng) - now;
        assert!(second > first, "{first:?} then {second:?}");
        assert_eq!(a.failures(), 2);
        assert!(!a.clear() && !a.gave_up(), "max_attempts 0 never gives up");
        a.succeeded();
        assert!(a.clear());
        assert_eq!(a.back_off(now, &mut rng) - now, first);
    }

    #[test]
    fn max_attempts_bounds_the_fast_retries() {
        let mut a = Attempts::new(policy(2));
        let mut rng = SplitMix64::new(1);
        let now = Instant::now();
        a.back_off(now, &mut rng);
        assert!(!a.gave_up());
        a.failed_persistently();
        assert!(a.gave_up());
        let at = a.slow_retry_at(now, &mut rng) - now;
        let interval = RetryPolicy::default().persistent_interval;
        assert!(at >= interval && at <= interval + interval / 5, "{at:?}");
        assert!(at > Duration::ZERO);
    }

    #[test]
    fn a_failure_is_reported_once_per_condition_and_ends_with_a_recovery() {
        let mut a = Attempts::new(policy(0));
        // Connection trouble: the connection state shows it, not a report.
        assert!(!a.report(FailureKind::Unavailable));
        assert!(a.report(FailureKind::PermissionDenied));
        assert!(!a.report(FailureKind::PermissionDenied), "reported twice");
        assert_eq!(a.reported(), Some(FailureKind::PermissionDenied));
        assert!(a.recover());
        assert!(!a.recover(), "recovered twice");
        assert!(a.report(FailureKind::PermissionDenied), "a new condition");
    }
}
