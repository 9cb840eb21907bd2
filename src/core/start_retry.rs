//! [`StartRetry`]: how a start-up retries failures that can heal (a server that does not
//! answer yet, a cluster electing a leader), and for how long.

use std::time::Duration;

use super::backoff::{RetryPolicy, SplitMix64};
use super::setting_error::SettingError;
use super::timing_error::fmt_duration;
use super::types::MAX_DURATION;

/// How [`RoleManagerBuilder::start`](crate::RoleManagerBuilder::start) retries a start-up
/// step that fails for a reason that can heal — time-outs, no responders, a JetStream cluster
/// or stream without a leader (10008, 10118, any code that is not a configuration error; see
/// [`Error::is_transient`](crate::Error::is_transient)): jittered exponential backoff from
/// `initial_backoff` doubling to `max_backoff` (±20 %), until the step succeeds, a failure
/// that retrying cannot change occurs (returned at once), or `deadline` has passed since the
/// start began ([`Error::StartTimeout`](crate::Error::StartTimeout)).
///
/// Every retry is logged (a WARN line with the attempt, the error and the next delay) and
/// published through [`RoleManagerBuilder::start_progress`](crate::RoleManagerBuilder::start_progress).
///
/// The default retries for up to 60 s, long enough for a JetStream cluster to elect a new
/// stream or meta leader after a server was lost; `nats-roles run` uses
/// [`StartRetry::until_started`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StartRetry {
    /// Delay before the first retry; greater than zero. Default: `100ms`.
    pub initial_backoff: Duration,
    /// Longest delay between two attempts; at least `initial_backoff`. Default: `5s`.
    pub max_backoff: Duration,
    /// How long after the start began no further attempt is made (`None`: no limit; a zero
    /// deadline makes the first failure final). Default: `Some(60s)`.
    pub deadline: Option<Duration>,
}

impl Default for StartRetry {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            deadline: Some(Duration::from_secs(60)),
        }
    }
}

impl StartRetry {
    /// The default backoff without a deadline: retries until the start succeeds or fails for
    /// a reason that retrying cannot change (what `nats-roles run` does).
    #[must_use]
    pub fn until_started() -> Self {
        Self {
            deadline: None,
            ..Self::default()
        }
    }

    /// Sets [`deadline`](Self::deadline) (builder style).
    #[must_use]
    pub fn with_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Sets [`initial_backoff`](Self::initial_backoff) and [`max_backoff`](Self::max_backoff)
    /// (builder style).
    #[must_use]
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self
    }

    /// Every rule these settings break (empty when valid); fields are named
    /// `start_retry.<field>`.
    #[must_use]
    pub fn problems(&self) -> Vec<SettingError> {
        let mut found = Vec::new();
        if self.initial_backoff.is_zero() {
            found.push(SettingError::new(
                "start_retry.initial_backoff",
                "must be greater than 0s",
            ));
        }
        found.extend(
            [
                ("start_retry.initial_backoff", self.initial_backoff),
                ("start_retry.max_backoff", self.max_backoff),
            ]
            .into_iter()
            .filter_map(|(field, value)| SettingError::at_most(field, value, MAX_DURATION)),
        );
        if self.max_backoff < self.initial_backoff {
            found.push(SettingError::related(
                "start_retry.max_backoff",
                format!(
                    "{} must be at least initial_backoff {}",
                    fmt_duration(self.max_backoff),
                    fmt_duration(self.initial_backoff)
                ),
                "start_retry.initial_backoff",
            ));
        }
        found
    }

    /// Checks every rule.
    ///
    /// # Errors
    /// The first rule broken.
    pub fn validate(&self) -> Result<(), SettingError> {
        self.problems().into_iter().next().map_or(Ok(()), Err)
    }

    /// Delay after failed attempt number `failed` (1-based), with jitter drawn from `rng`.
    pub(crate) fn delay(&self, failed: u32, rng: &mut SplitMix64) -> Duration {
        RetryPolicy {
            initial: self.initial_backoff,
            max: self.max_backoff,
            multiplier: 2.0,
            jitter: 0.2,
            ..RetryPolicy::default()
        }
        .delay(failed, rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_from_the_initial_backoff_up_to_the_maximum_with_jitter() {
        let retry = StartRetry::default();
        let mut rng = SplitMix64::new(7);
        for (failed, base_ms) in [(1, 100.0), (2, 200.0), (3, 400.0), (6, 3200.0), (7, 5000.0)] {
            for _ in 0..50 {
                let d = retry.delay(failed, &mut rng).as_secs_f64() * 1e3;
                assert!(
                    (base_ms * 0.8..=base_ms * 1.2).contains(&d),
                    "attempt {failed}: {d} ms, base {base_ms}"
                );
            }
        }
        assert!(retry.delay(u32::MAX, &mut rng) <= Duration::from_secs(6));
    }

    #[test]
    fn the_default_has_a_deadline_and_until_started_has_none() {
        assert_eq!(
            StartRetry::default().deadline,
            Some(Duration::from_secs(60))
        );
        assert_eq!(StartRetry::until_started().deadline, None);
        assert_eq!(StartRetry::default().validate(), Ok(()));
        assert_eq!(
            StartRetry::default()
                .with_deadline(Some(Duration::ZERO))
                .validate(),
            Ok(())
        );
    }

    #[test]
    fn broken_backoffs_are_named() {
        let fields = |r: StartRetry| -> Vec<&'static str> {
            r.problems().into_iter().map(|p| p.field).collect()
        };
        let ms = Duration::from_millis;
        assert_eq!(
            fields(StartRetry::default().with_backoff(Duration::ZERO, ms(1))),
            ["start_retry.initial_backoff"]
        );
        assert_eq!(
            fields(StartRetry::default().with_backoff(ms(500), ms(100))),
            ["start_retry.max_backoff"]
        );
        assert_eq!(
            fields(StartRetry::default().with_backoff(ms(1), Duration::from_secs(7200))),
            ["start_retry.max_backoff"]
        );
    }
}
