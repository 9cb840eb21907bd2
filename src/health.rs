//! Health checking: an unhealthy instance gives its roles up (protocol P8).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::timing_error::fmt_duration;
use crate::core::{MAX_DURATION, SettingError};

/// Decides whether this instance is fit to hold roles.
pub trait HealthChecker: Send + Sync + 'static {
    /// Returns `true` when healthy. Called every `interval` with a timeout; a timeout counts as
    /// a failure.
    fn check(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>>;
}

/// How failures turn into releases; the configuration's `health` section (besides its
/// `command`). Every field is optional in YAML; a missing one takes its value from
/// [`HealthPolicy::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthPolicy {
    /// Interval between health checks; greater than zero. Default: `1s`.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Timeout of one health check; greater than zero and at most `interval`. Default: `500ms`.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Consecutive failures after which the instance is unhealthy and releases every held
    /// role; at least `1`. Default: `3`.
    pub failure_threshold: u32,
    /// Time after becoming unhealthy before contending for roles again. Default: `10s`.
    #[serde(with = "humantime_serde")]
    pub cooldown: Duration,
}

impl HealthPolicy {
    /// Every rule this policy breaks (empty when valid); fields are named as in YAML
    /// (`health.timeout`).
    #[must_use]
    pub fn problems(&self) -> Vec<SettingError> {
        let mut found = Vec::new();
        if self.interval.is_zero() {
            found.push(SettingError::new(
                "health.interval",
                "must be greater than 0s",
            ));
        }
        if self.timeout.is_zero() {
            found.push(SettingError::new(
                "health.timeout",
                "must be greater than 0s",
            ));
        } else if self.timeout > self.interval {
            found.push(SettingError::related(
                "health.timeout",
                format!(
                    "{} must not exceed interval {}",
                    fmt_duration(self.timeout),
                    fmt_duration(self.interval)
                ),
                "health.interval",
            ));
        }
        found.extend(
            [
                ("health.interval", self.interval),
                ("health.cooldown", self.cooldown),
            ]
            .into_iter()
            .filter_map(|(field, value)| SettingError::at_most(field, value, MAX_DURATION)),
        );
        if self.failure_threshold == 0 {
            found.push(SettingError::new(
                "health.failure_threshold",
                "must be at least 1",
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
}

impl Default for HealthPolicy {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            failure_threshold: 3,
            cooldown: Duration::from_secs(10),
        }
    }
}

/// systemd's notification variables, which a health command does not inherit.
const SERVICE_MANAGER_VARIABLES: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// Healthy when a command exits with status 0 (the binary's `health.command`). The command
/// inherits this process's environment except systemd's `NOTIFY_SOCKET`, `WATCHDOG_USEC` and
/// `WATCHDOG_PID`.
#[derive(Debug, Clone)]
pub struct CommandHealthChecker {
    argv: Vec<String>,
}

impl CommandHealthChecker {
    /// A checker running `argv[0]` with the remaining arguments. Returns `None` for an empty
    /// `argv`.
    #[must_use]
    pub fn new(argv: Vec<String>) -> Option<Self> {
        if argv.first().is_some_and(|p| !p.is_empty()) {
            Some(Self { argv })
        } else {
            None
        }
    }
}

impl HealthChecker for CommandHealthChecker {
    fn check(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            let Some((program, args)) = self.argv.split_first() else {
                return false;
            };
            let mut command = tokio::process::Command::new(program);
            // The service manager's notification variables are this process's, not the
            // check's (systemd's sd_notify protocol; `nats-roles run` speaks it).
            for name in SERVICE_MANAGER_VARIABLES {
                command.env_remove(name);
            }
            let status = command
                .args(args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .status()
                .await;
            matches!(status, Ok(s) if s.success())
        })
    }
}

/// Health checker from an async closure.
pub struct FnHealthChecker<F>(pub F);

impl<F, Fut> HealthChecker for FnHealthChecker<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    fn check(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>> {
        Box::pin((self.0)())
    }
}

/// Counts consecutive failures; returns true when a release is due (and resets).
#[derive(Debug, Default)]
pub(crate) struct FailureCounter {
    consecutive: u32,
}

impl FailureCounter {
    pub(crate) fn record(&mut self, healthy: bool, threshold: u32) -> bool {
        if healthy {
            self.consecutive = 0;
            return false;
        }
        self.consecutive += 1;
        if self.consecutive >= threshold.max(1) {
            self.consecutive = 0;
            return true;
        }
        false
    }
}

/// What the instance tells the other members about its health (the `healthy` flag of its
/// membership record): unhealthy from the moment the failure threshold releases its roles
/// until the cooldown has passed *and* a check passes again. So placement never prefers an
/// instance whose roles are cooling down (they would be handed to it and not taken), and a
/// single failed check below the threshold moves nothing.
#[derive(Debug, Default)]
pub(crate) struct Advertised {
    /// Unhealthy until this instant and the next passing check.
    until: Option<std::time::Instant>,
}

impl Advertised {
    /// Until when the instance stays unhealthy at least (`None` when it is healthy).
    pub(crate) fn until(&self) -> Option<std::time::Instant> {
        self.until
    }

    /// Records a release for ill health at `now`: unhealthy for at least `duration` (the
    /// roles' cooldown plus the time their release can take).
    pub(crate) fn released(&mut self, now: std::time::Instant, duration: std::time::Duration) {
        self.until = Some(now + duration);
    }

    /// The flag to publish after a check with result `healthy` at `now`.
    pub(crate) fn observe(&mut self, healthy: bool, now: std::time::Instant) -> bool {
        match self.until {
            Some(until) if healthy && now >= until => {
                self.until = None;
                true
            }
            Some(_) => false,
            None => true,
        }
    }
}

/// What the health checker says about this instance ([`crate::RoleManager::health`]): the
/// verdict the instance acts on and publishes, and the checks behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthState {
    /// Whether the instance is fit to hold roles. `false` from the moment
    /// `failure_threshold` consecutive failed checks released every role (`reason=unhealthy`)
    /// until the cooldown, plus the time a release can take, has passed *and* a check passes
    /// again: meanwhile it takes no role (an instance that stays unhealthy releases again
    /// every `failure_threshold` checks). The same as the `healthy` flag of its membership
    /// record with placement. Failed checks below the threshold leave it `true`.
    pub healthy: bool,
    /// Failed checks in a row, the latest included (0 after a passing check).
    pub consecutive_failures: u32,
    /// When the first of those failed checks ended (`None` after a passing check).
    pub failing_since: Option<std::time::SystemTime>,
    /// While unhealthy: the earliest moment it can be healthy again, the end of the latest
    /// release's cooldown plus the time the release can take (`None` when healthy).
    pub cooldown_until: Option<tokio::time::Instant>,
}

impl Default for HealthState {
    fn default() -> Self {
        Self {
            healthy: true,
            consecutive_failures: 0,
            failing_since: None,
            cooldown_until: None,
        }
    }
}

impl HealthState {
    /// Records one check's result, ended at `now`.
    pub(crate) fn checked(&mut self, healthy: bool, now: std::time::SystemTime) {
        if healthy {
            self.consecutive_failures = 0;
            self.failing_since = None;
        } else {
            self.consecutive_failures = self.consecutive_failures.saturating_add(1);
            self.failing_since.get_or_insert(now);
        }
    }

    /// Why the instance takes no roles, in words (`None` when [`healthy`](Self::healthy)), e.g.
    /// `unhealthy: the health check failed 4 times in a row (for 3 s); roles released,
    /// cooling down for 7 s more`.
    #[must_use]
    pub fn reason(&self) -> Option<String> {
        self.reason_at(std::time::SystemTime::now(), tokio::time::Instant::now())
    }

    fn reason_at(&self, wall: std::time::SystemTime, now: tokio::time::Instant) -> Option<String> {
        if self.healthy {
            return None;
        }
        let failing = self.failing_since.map(|since| {
            let secs = wall
                .duration_since(since)
                .unwrap_or(Duration::ZERO)
                .as_secs();
            let what = match self.consecutive_failures {
                1 => "failed once".to_owned(),
                n => format!("failed {n} times in a row"),
            };
            format!("the health check {what} (for {secs} s)")
        });
        let cooling = self
            .cooldown_until
            .filter(|until| *until > now)
            .map(|until| until - now);
        let text = match (failing, cooling) {
            (Some(f), Some(left)) => format!(
                "{f}; roles released, cooling down for {:.1} s more",
                left.as_secs_f64()
            ),
            (None, Some(left)) => format!(
                "roles released after failed health checks, cooling down for {:.1} s more (the \
                 last check passed)",
                left.as_secs_f64()
            ),
            (Some(f), None) => format!(
                "{f}; the cooldown is over, but the roles are released again while it keeps \
                 failing"
            ),
            (None, None) => "roles released after failed health checks; the cooldown is over, \
                             waiting for the next check"
                .to_owned(),
        };
        Some(format!("unhealthy: {text}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn advertised_unhealthy_from_the_release_until_cooldown_and_a_passing_check() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut a = Advertised::default();
        // Failures below the threshold change nothing.
        assert!(a.observe(false, t0));
        a.released(t0, 2 * s);
        // Passing checks inside the cooldown keep it unhealthy.
        assert!(!a.observe(true, t0 + s));
        // After the cooldown, only a passing check ends it.
        assert!(!a.observe(false, t0 + 3 * s));
        assert!(a.observe(true, t0 + 4 * s));
        assert!(a.observe(true, t0 + 4 * s));
        // Another release restarts it.
        a.released(t0 + 5 * s, s);
        assert!(!a.observe(true, t0 + 5 * s));
    }

    #[test]
    fn the_health_state_counts_failures_and_says_why_it_is_unhealthy() {
        let wall = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let now = tokio::time::Instant::now();
        let s = Duration::from_secs(1);
        let mut h = HealthState::default();
        assert_eq!(h.reason_at(wall, now), None);
        h.checked(false, wall);
        h.checked(false, wall + s);
        assert_eq!((h.consecutive_failures, h.failing_since), (2, Some(wall)));
        // Below the threshold: still healthy, no reason.
        assert_eq!(h.reason_at(wall + s, now), None);
        h.healthy = false;
        h.cooldown_until = Some(now + 7 * s);
        h.checked(false, wall + 3 * s);
        assert_eq!(
            h.reason_at(wall + 3 * s, now).as_deref(),
            Some(
                "unhealthy: the health check failed 3 times in a row (for 3 s); roles released, \
                 cooling down for 7.0 s more"
            )
        );
        h.checked(true, wall + 4 * s);
        assert_eq!((h.consecutive_failures, h.failing_since), (0, None));
        let reason = h.reason_at(wall + 4 * s, now + s).unwrap_or_default();
        assert!(
            reason.contains("cooling down for 6.0 s more (the last check passed)"),
            "{reason}"
        );
        h.checked(false, wall + 8 * s);
        let reason = h.reason_at(wall + 9 * s, now + 8 * s).unwrap_or_default();
        assert!(
            reason.contains("failed once (for 1 s); the cooldown is over"),
            "{reason}"
        );
    }

    #[test]
    fn releases_after_threshold_consecutive_failures() {
        let mut c = FailureCounter::default();
        assert!(!c.record(false, 3));
        assert!(!c.record(false, 3));
        assert!(!c.record(true, 3));
        assert!(!c.record(false, 3));
        assert!(!c.record(false, 3));
        assert!(c.record(false, 3));
        assert!(!c.record(false, 3));
    }

    #[tokio::test]
    async fn command_checker_uses_exit_status() {
        let ok = CommandHealthChecker::new(vec!["true".into()]).unwrap();
        let bad = CommandHealthChecker::new(vec!["false".into()]).unwrap();
        assert!(ok.check().await);
        assert!(!bad.check().await);
        assert!(CommandHealthChecker::new(vec![]).is_none());
    }
}
