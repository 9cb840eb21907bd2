//! The observable gauges of the metrics sink: what each role looks like now (`is_leader`,
//! connection, blocked, seconds since the last renewal, roles held), read from the sink's
//! shared state at collection time. The roles without series of their own are summed up in
//! one series per instance (per `error_type` and `code` for `role_blocked`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, BoundHistogram, Meter, ObservableGauge};
use tokio::time::Instant;

use super::names;
use crate::core::FailureKind;
use crate::names::RoleName;

/// What the observable gauges read for one role.
pub(super) struct RoleGauges {
    /// `role`, `instance_id`, `bucket`; `None` when the role has no series of its own (its
    /// state is summed up in the instance's series).
    pub(super) labels: Option<Vec<KeyValue>>,
    pub(super) leader: bool,
    pub(super) connected: bool,
    /// When the held term's lease was last written (acquire or renewal; for a role without
    /// series of its own, the promotion only: its session's renewals are in
    /// [`Current::sessions`]).
    pub(super) last_renewal: Option<Instant>,
    /// The session the held term rests on (`None` outside a session clock).
    pub(super) session: Option<uuid::Uuid>,
    /// The reported failure that keeps the role from campaigning or renewing.
    pub(super) failure: Option<FailureKind>,
}

impl RoleGauges {
    /// A role just seen: connected, not held, not blocked.
    pub(super) fn new(labels: Option<Vec<KeyValue>>) -> Self {
        Self {
            labels,
            leader: false,
            connected: true,
            last_renewal: None,
            session: None,
            failure: None,
        }
    }

    /// `error_type` and `code` of `role_blocked`.
    fn blocked_by(&self) -> (&'static str, i64) {
        self.failure.map_or(("none", 0), |f| {
            (f.as_str(), f.server_code().map_or(0, |c| i64::from(c.0)))
        })
    }

    /// Seconds since the held term's lease was last written; `None` unless held.
    fn since_renewal(&self, sessions: &HashMap<uuid::Uuid, Instant>) -> Option<f64> {
        let session = self.session.and_then(|s| sessions.get(&s).copied());
        match (self.leader, self.last_renewal.max(session)) {
            (true, Some(at)) => Some(at.elapsed().as_secs_f64()),
            _ => None,
        }
    }
}

/// The current state of every role, read by the observable gauges at collection time.
#[derive(Default)]
pub(super) struct Current {
    pub(super) roles: HashMap<RoleName, RoleGauges>,
    /// Roles with series of their own whose counters and histograms have their zero series,
    /// with the histogram bindings that keep those series (never removed: like counters,
    /// histograms stay).
    pub(super) zeroed: HashMap<RoleName, [BoundHistogram<f64>; 2]>,
    /// The same for the instance's series, made when the first role without series of its
    /// own is seen.
    pub(super) instance_zeroed: Option<[BoundHistogram<f64>; 2]>,
    /// When each session was last renewed, as its terms' renewal records said (the roles
    /// without series of their own read theirs here; pruned of sessions no held role rests
    /// on when the gauges are read).
    pub(super) sessions: HashMap<uuid::Uuid, Instant>,
    /// The manager stopped: the gauges observe nothing and no role is added back.
    pub(super) closed: bool,
}

pub(super) type Shared = Arc<Mutex<Current>>;

pub(super) fn lock(current: &Mutex<Current>) -> MutexGuard<'_, Current> {
    current.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `base` plus `extra`.
fn with(base: &[KeyValue], extra: [KeyValue; 2]) -> Vec<KeyValue> {
    let mut labels = base.to_vec();
    labels.extend(extra);
    labels
}

/// The observable gauges; kept so that their callbacks live as long as the sink. Their
/// descriptions are those of the per-role series (what `all` exported before the setting
/// existed); the instance's series are described in `docs/observability.md`.
pub(super) struct Gauges {
    _u64: Vec<ObservableGauge<u64>>,
    _f64: ObservableGauge<f64>,
}

impl Gauges {
    /// The gauges on `meter` reading `current`; `instance` are the labels of the instance's
    /// series (`instance_id`, `bucket`).
    pub(super) fn new(meter: &Meter, current: &Shared, instance: &[KeyValue]) -> Self {
        let is_leader = {
            let current = current.clone();
            meter
                .u64_observable_gauge(names::IS_LEADER)
                .with_description("1 while this instance holds the role, else 0")
                .with_callback(move |o: &dyn AsyncInstrument<u64>| {
                    // Only per role: the instance's count is `roles_held`.
                    for g in lock(&current).roles.values() {
                        if let Some(labels) = &g.labels {
                            o.observe(u64::from(g.leader), labels);
                        }
                    }
                })
                .build()
        };
        let connection = {
            let (current, instance) = (current.clone(), instance.to_vec());
            meter
                .u64_observable_gauge(names::CONNECTION_STATUS)
                .with_description("1 while the NATS connection is up, else 0")
                .with_callback(move |o: &dyn AsyncInstrument<u64>| {
                    // The instance's series: 0 while any role without series sees it down.
                    let mut others: Option<bool> = None;
                    for g in lock(&current).roles.values() {
                        match &g.labels {
                            Some(labels) => o.observe(u64::from(g.connected), labels),
                            None => others = Some(others.unwrap_or(true) && g.connected),
                        }
                    }
                    if let Some(up) = others {
                        o.observe(u64::from(up), &instance);
                    }
                })
                .build()
        };
        let held = {
            let (current, instance) = (current.clone(), instance.to_vec());
            meter
                .u64_observable_gauge(names::ROLES_HELD)
                .with_description("roles this instance holds")
                .with_callback(move |o: &dyn AsyncInstrument<u64>| {
                    let current = lock(&current);
                    if current.closed {
                        return;
                    }
                    let n = current.roles.values().filter(|g| g.leader).count();
                    o.observe(u64::try_from(n).unwrap_or(u64::MAX), &instance);
                })
                .build()
        };
        let blocked = {
            let (current, instance) = (current.clone(), instance.to_vec());
            meter
                .u64_observable_gauge(names::ROLE_BLOCKED)
                .with_description(
                    "1 while the role cannot campaign or renew because of a server condition or \
                     a persistent failure (error_type, code), else 0",
                )
                .with_callback(move |o: &dyn AsyncInstrument<u64>| {
                    // The instance's series: blocked roles without series, by kind, and the
                    // zero series `none` while there is any such role.
                    let mut others: Option<BTreeMap<(&'static str, i64), u64>> = None;
                    for g in lock(&current).roles.values() {
                        let (error_type, code) = g.blocked_by();
                        match &g.labels {
                            Some(labels) => {
                                let labels = with(
                                    labels,
                                    [
                                        KeyValue::new("error_type", error_type),
                                        KeyValue::new("code", code.to_string()),
                                    ],
                                );
                                o.observe(u64::from(g.failure.is_some()), &labels);
                            }
                            None => {
                                let counts = others
                                    .get_or_insert_with(|| BTreeMap::from([(("none", 0), 0)]));
                                if g.failure.is_some() {
                                    *counts.entry((error_type, code)).or_default() += 1;
                                }
                            }
                        }
                    }
                    for ((error_type, code), n) in others.unwrap_or_default() {
                        let labels = with(
                            &instance,
                            [
                                KeyValue::new("error_type", error_type),
                                KeyValue::new("code", code.to_string()),
                            ],
                        );
                        o.observe(n, &labels);
                    }
                })
                .build()
        };
        let since_renewal = {
            let (current, instance) = (current.clone(), instance.to_vec());
            meter
                .f64_observable_gauge(names::SECONDS_SINCE_RENEWAL)
                .with_description("seconds since the held role's lease was last written")
                .with_unit("s")
                .with_callback(move |o: &dyn AsyncInstrument<f64>| {
                    let mut others: Option<f64> = None;
                    let mut current = lock(&current);
                    let current = &mut *current;
                    let sessions = &current.sessions;
                    for g in current.roles.values() {
                        let Some(seconds) = g.since_renewal(sessions) else {
                            continue;
                        };
                        match &g.labels {
                            Some(labels) => o.observe(seconds, labels),
                            None => others = Some(others.map_or(seconds, |m| m.max(seconds))),
                        }
                    }
                    if let Some(seconds) = others {
                        o.observe(seconds, &instance);
                    }
                    // Sessions no held role rests on any more (a lost or ended session).
                    let resting: std::collections::HashSet<uuid::Uuid> = current
                        .roles
                        .values()
                        .filter(|g| g.leader)
                        .filter_map(|g| g.session)
                        .collect();
                    current.sessions.retain(|s, _| resting.contains(s));
                })
                .build()
        };
        Self {
            _u64: vec![is_leader, connection, held, blocked],
            _f64: since_renewal,
        }
    }
}
