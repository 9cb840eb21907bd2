//! Health checking: an unhealthy instance gives its roles up (protocol P8).

use std::time::Duration;

/// Decides whether this instance is fit to hold roles.
pub trait HealthChecker: Send + Sync + 'static {
    /// Returns `true` when healthy. Called every `interval` with a timeout; a timeout counts as
    /// a failure.
    fn check(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>>;
}

/// How failures turn into releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthPolicy {
    /// Time between checks.
    pub interval: Duration,
    /// Longest a single check may take.
    pub timeout: Duration,
    /// Consecutive failures that trigger a release of every held role.
    pub failure_threshold: u32,
    /// How long released roles stay away before campaigning again.
    pub cooldown: Duration,
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

/// Healthy when a command exits with status 0 (the binary's `health.command`).
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
            let status = tokio::process::Command::new(program)
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
