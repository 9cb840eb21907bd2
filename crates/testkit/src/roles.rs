//! Helpers shared by the election tests: fast timing, names, managers, bounded waits.

use std::time::Duration;

use nats_roles::{
    InstanceId, Leadership, RoleEvent, RoleManager, RoleName, RoleSpec, RoleStatus, Timing,
};
use tokio::sync::broadcast;
use tokio::time::Instant;

/// Lease TTL of [`fast`] timing.
pub const TTL: Duration = Duration::from_secs(1);
/// Heartbeat of [`fast`] timing.
pub const HEARTBEAT: Duration = Duration::from_millis(250);
/// Deadline margin of [`fast`] timing.
pub const MARGIN: f64 = 0.1;

/// Fast timing for tests: TTL 1 s, heartbeat 250 ms, margin 0.1.
pub fn fast() -> Timing {
    Timing {
        ttl: TTL,
        heartbeat: HEARTBEAT,
        deadline_margin: MARGIN,
        operation_timeout: Duration::from_millis(300),
        disconnect_grace: Duration::from_secs(1),
        campaign_jitter: Duration::from_millis(1),
    }
}

/// A valid role name.
pub fn role(name: &str) -> RoleName {
    RoleName::new(name).expect("valid role name")
}

/// A valid instance id.
pub fn inst(name: &str) -> InstanceId {
    InstanceId::new(name).expect("valid instance id")
}

/// Roles `r0`..`r{n-1}`.
pub fn roles(n: usize) -> Vec<RoleName> {
    (0..n).map(|i| role(&format!("r{i}"))).collect()
}

/// A role with [`fast`] timing.
pub fn spec(name: &RoleName) -> RoleSpec {
    RoleSpec::new(name.clone()).timing(fast())
}

/// The bucket layout the library creates (P1): history 1, limit markers (60 s).
pub fn lease_bucket(name: &str) -> async_nats::jetstream::kv::Config {
    async_nats::jetstream::kv::Config {
        bucket: name.to_owned(),
        history: 1,
        limit_markers: Some(Duration::from_secs(60)),
        ..Default::default()
    }
}

/// Starts a manager on `bucket` (auto-created, R1) taking part in `roles` with fast timing.
pub async fn manager(
    client: &async_nats::Client,
    id: &str,
    bucket: &str,
    roles: &[RoleName],
) -> RoleManager {
    let mut b = RoleManager::builder(client.clone(), inst(id))
        .bucket(bucket)
        .auto_create(1);
    for r in roles {
        b = b.role(spec(r));
    }
    b.start()
        .await
        .unwrap_or_else(|e| panic!("manager {id} failed to start: {e}"))
}

/// [`manager`] taking part in the one role `role`.
pub async fn manager_of(
    client: &async_nats::Client,
    id: &str,
    bucket: &str,
    role: &RoleName,
) -> RoleManager {
    manager(client, id, bucket, std::slice::from_ref(role)).await
}

/// [`manager_of`] the role `role`, once it leads it (within 3 s): the manager and its
/// leadership.
pub async fn leading(
    client: &async_nats::Client,
    id: &str,
    bucket: &str,
    role: &RoleName,
) -> (RoleManager, Leadership) {
    let m = manager_of(client, id, bucket, role).await;
    let l = wait_leader(&m, role, Duration::from_secs(3)).await;
    (m, l)
}

/// Waits (bounded) until `pred` holds for the status of `role` on `m`.
pub async fn wait_status(
    m: &RoleManager,
    role: &RoleName,
    timeout: Duration,
    what: &str,
    pred: impl FnMut(&RoleStatus) -> bool,
) -> RoleStatus {
    let mut rx = m
        .role(role)
        .map(|h| h.watch())
        .unwrap_or_else(|| panic!("role {role} not managed by {m:?}"));
    match tokio::time::timeout(timeout, rx.wait_for(pred)).await {
        Ok(Ok(s)) => s.clone(),
        Ok(Err(_)) => panic!("{m:?}: status channel of {role} closed while waiting for {what}"),
        Err(_) => panic!(
            "{m:?}: {what} did not happen within {timeout:?}; status of {role}: {:?}",
            m.status(role)
        ),
    }
}

pub async fn wait_leader(m: &RoleManager, role: &RoleName, timeout: Duration) -> Leadership {
    wait_status(m, role, timeout, "promotion", RoleStatus::is_leader).await;
    m.leadership(role)
        .unwrap_or_else(|| panic!("{m:?} reports LEADER for {role} but has no valid leadership"))
}

/// Polls `cond` every 10 ms until it holds; panics with `what` after `timeout`.
pub async fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A `Promoted` event (a predicate for [`wait_event`]).
pub fn is_promoted(e: &RoleEvent) -> bool {
    matches!(e, RoleEvent::Promoted { .. })
}

/// A `Demoted` event (a predicate for [`wait_event`]).
pub fn is_demoted(e: &RoleEvent) -> bool {
    matches!(e, RoleEvent::Demoted { .. })
}

/// Receives events until `pred` matches one (bounded); returns it.
pub async fn wait_event(
    rx: &mut broadcast::Receiver<RoleEvent>,
    timeout: Duration,
    what: &str,
    mut pred: impl FnMut(&RoleEvent) -> bool,
) -> RoleEvent {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(e)) if pred(&e) => return e,
            Ok(Ok(e)) => seen.push(e),
            Ok(Err(broadcast::error::RecvError::Lagged(n))) => {
                panic!("event receiver lagged by {n} while waiting for {what}")
            }
            Ok(Err(broadcast::error::RecvError::Closed)) => {
                panic!("event channel closed while waiting for {what}; seen: {seen:?}")
            }
            Err(_) => panic!("{what}: no such event within {timeout:?}; seen: {seen:?}"),
        }
    }
}

/// Number of managers in `ms` that currently hold `role`.
pub fn leaders(ms: &[&RoleManager], role: &RoleName) -> usize {
    ms.iter().filter(|m| m.is_leader(role)).count()
}

/// Shuts `managers` down in order, each within 5 s; panics naming the one that fails.
pub async fn shutdown(managers: &[&RoleManager]) {
    for m in managers {
        m.shutdown(Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("{m:?}: shutdown failed: {e}"));
    }
}
