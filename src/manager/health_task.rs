//! The health task: runs the health checker, releases every role after repeated failures
//! and publishes the health state (readiness, membership record).

use super::role_input::RoleInput;
use super::shared::Shared;
use super::ticker::Ticker;
use crate::core::ReleaseReason;
use crate::health::{Advertised, FailureCounter, HealthChecker, HealthPolicy, HealthState};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::warn;

pub(super) async fn health_loop(
    shared: Arc<Shared>,
    checker: Arc<dyn HealthChecker>,
    policy: HealthPolicy,
    release_bound: Duration,
    state: watch::Sender<HealthState>,
    cancel: CancellationToken,
) {
    let mut failures = FailureCounter::default();
    let mut advertised = Advertised::default();
    let mut ticker = Ticker::new(policy.interval, MissedTickBehavior::Delay, cancel.clone());
    while ticker.tick().await {
        let healthy = tokio::time::timeout(policy.timeout, checker.check())
            .await
            .unwrap_or(false);
        state.send_modify(|s| s.checked(healthy, std::time::SystemTime::now()));
        if failures.record(healthy, policy.failure_threshold) {
            warn!(
                failures = policy.failure_threshold,
                cooldown = ?policy.cooldown,
                "health check failed repeatedly; releasing all roles"
            );
            // The other members learn first that this instance is unhealthy, so they take
            // its roles at once instead of holding back for it (bounded wait).
            if let Some(p) = &shared.placement {
                p.publish_health_and_wait(false, &cancel).await;
            }
            // The roles' cooldown starts when their release is done: after the drain of the
            // role work and the release write. Stay unhealthy in the record at least that long.
            advertised.released(Instant::now().into_std(), policy.cooldown + release_bound);
            // Readiness says so before the roles go (docs/http-api.md).
            publish(&state, &advertised);
            shared.broadcast(|| RoleInput::Release(ReleaseReason::Unhealthy, policy.cooldown));
        } else {
            let flag = advertised.observe(healthy, Instant::now().into_std());
            publish(&state, &advertised);
            if let Some(p) = shared.placement.as_ref().filter(|_| flag) {
                p.healthy.send_if_modified(|h| !std::mem::replace(h, true));
            }
        }
    }
}

/// Publishes the verdict of `advertised` (healthy, or unhealthy until at least when).
fn publish(state: &watch::Sender<HealthState>, advertised: &Advertised) {
    let until = advertised.until();
    state.send_if_modified(|s| {
        let before = (s.healthy, s.cooldown_until);
        s.healthy = until.is_none();
        s.cooldown_until = until.map(Instant::from_std);
        before != (s.healthy, s.cooldown_until)
    });
}
