//! Jittered exponential backoff and the small deterministic RNG the pure core uses.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::setting_error::SettingError;
use super::timing_error::fmt_duration;
use super::types::MAX_DURATION;

/// Retry policy for failed NATS operations: jittered exponential backoff; the configuration's
/// `retry` section (where `initial` and `max` are called `initial_backoff` and `max_backoff`).
/// Every field is optional in YAML; a missing one takes its value from
/// [`RetryPolicy::default`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// First backoff delay; greater than zero. Default: `50ms`.
    #[serde(rename = "initial_backoff", with = "humantime_serde")]
    pub initial: Duration,
    /// Largest backoff delay; at least `initial`. Default: `2s`.
    #[serde(rename = "max_backoff", with = "humantime_serde")]
    pub max: Duration,
    /// Factor applied to the delay after each failure; at least `1.0`. Default: `2.0`.
    pub multiplier: f64,
    /// Random variation of each delay as a ± fraction, `0.0..=1.0` (0.2 = ±20 %).
    /// Default: `0.2`.
    pub jitter: f64,
    /// Consecutive failed attempts after which the fast retries end and the role retries at
    /// `persistent_interval` (reported as `gave_up`, never stopped); `0` means never.
    /// Default: `0`.
    pub max_attempts: u32,
    /// Cadence of retries after a persistent failure (a permission violation for exactly the
    /// role's subject, a configuration error, `max_attempts` reached); at least `100ms`; up to
    /// a fifth more is added at random. Default: `10s`.
    #[serde(with = "humantime_serde")]
    pub persistent_interval: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(2),
            multiplier: 2.0,
            jitter: 0.2,
            max_attempts: 0,
            persistent_interval: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// Every rule this policy breaks (empty when valid); fields are named as in YAML
    /// (`retry.max_backoff`).
    #[must_use]
    pub fn problems(&self) -> Vec<SettingError> {
        let mut found = Vec::new();
        if self.initial.is_zero() {
            found.push(SettingError::new(
                "retry.initial_backoff",
                "must be greater than 0s",
            ));
        }
        found.extend(
            [
                ("retry.initial_backoff", self.initial),
                ("retry.max_backoff", self.max),
                ("retry.persistent_interval", self.persistent_interval),
            ]
            .into_iter()
            .filter_map(|(field, value)| SettingError::at_most(field, value, MAX_DURATION)),
        );
        if self.persistent_interval < Duration::from_millis(100) {
            found.push(SettingError::new(
                "retry.persistent_interval",
                format!(
                    "{} is too short: persistent failures are retried slowly, at least 100ms",
                    fmt_duration(self.persistent_interval)
                ),
            ));
        }
        if self.max < self.initial {
            found.push(SettingError::related(
                "retry.max_backoff",
                format!(
                    "{} must be at least initial_backoff {}",
                    fmt_duration(self.max),
                    fmt_duration(self.initial)
                ),
                "retry.initial_backoff",
            ));
        }
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            found.push(SettingError::new(
                "retry.multiplier",
                format!(
                    "{} must be a finite number of at least 1.0",
                    self.multiplier
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            found.push(SettingError::new(
                "retry.jitter",
                format!(
                    "{} is out of range: it must be between 0.0 and 1.0",
                    self.jitter
                ),
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

    /// Delay before retry number `attempt` (1-based), with jitter drawn from `rng`.
    pub(crate) fn delay(&self, attempt: u32, rng: &mut SplitMix64) -> Duration {
        let exp = i32::try_from(attempt.saturating_sub(1).min(64)).unwrap_or(64);
        let base = self.initial.as_secs_f64() * self.multiplier.max(1.0).powi(exp);
        let base = base.min(self.max.as_secs_f64());
        let spread = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 + spread * (2.0 * rng.next_f64() - 1.0);
        Duration::from_secs_f64((base * factor).max(0.0))
    }
}

/// SplitMix64: a tiny, seedable PRNG so the core stays deterministic under test.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator with the given seed.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        // 53 random mantissa bits.
        #[allow(clippy::cast_precision_loss)]
        let v = (self.next_u64() >> 11) as f64;
        v / (1u64 << 53) as f64
    }

    /// Uniform duration in `[0, max)`.
    pub fn below(&mut self, max: Duration) -> Duration {
        max.mul_f64(self.next_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        let p = RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        };
        let mut rng = SplitMix64::new(1);
        assert_eq!(p.delay(1, &mut rng), Duration::from_millis(50));
        assert_eq!(p.delay(2, &mut rng), Duration::from_millis(100));
        assert_eq!(p.delay(30, &mut rng), Duration::from_secs(2));
    }

    #[test]
    fn jitter_stays_in_band() {
        let p = RetryPolicy::default();
        let mut rng = SplitMix64::new(7);
        for _ in 0..1000 {
            let d = p.delay(1, &mut rng);
            assert!(
                d >= Duration::from_millis(40) && d <= Duration::from_millis(60),
                "{d:?}"
            );
        }
    }
}
