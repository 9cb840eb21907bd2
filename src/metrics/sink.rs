//! [`RoleMetrics`]: the tap sink that turns driver events into OpenTelemetry measurements.
//! Its tests read the measurements back as Prometheus text, so they are the exporter's:
//! `src/telemetry/role_metrics_tests.rs`.

use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{BoundHistogram, Counter, Gauge, Histogram, Meter};
use tokio::time::Instant;

use super::gauges::{Gauges, RoleGauges, Shared, lock};
use super::labels::{ERROR_TYPES, outcome_status};
use super::{LATENCY_BUCKETS, PerRole, TERM_BUCKETS, names};
use crate::core::{WriteKind, WriteOutcome};
use crate::names::{InstanceId, RoleName};
use crate::status::RoleState;
use crate::tap::{FencedRefusal, PlacementEvent, SessionEvent, TapEvent, TapSink, WatcherEvent};

/// A counter named `name` on `meter`.
fn counter(meter: &Meter, name: &'static str, description: &'static str) -> Counter<u64> {
    meter
        .u64_counter(name)
        .with_description(description)
        .build()
}

/// A gauge named `name` on `meter`.
fn gauge(meter: &Meter, name: &'static str, description: &'static str) -> Gauge<u64> {
    meter.u64_gauge(name).with_description(description).build()
}

/// A histogram of seconds named `name` on `meter`, with bucket boundaries `buckets`.
fn seconds_histogram(
    meter: &Meter,
    name: &'static str,
    description: &'static str,
    buckets: &[f64],
) -> Histogram<f64> {
    meter
        .f64_histogram(name)
        .with_description(description)
        .with_unit("s")
        .with_boundaries(buckets.to_vec())
        .build()
}

/// Records one manager's events as metrics. The gauges observe a shared map; a stopped role
/// is removed from it, so its gauge series disappear. A role without series of its own
/// ([`PerRole`]) is recorded on the instance's series: the same names without `role`.
pub(crate) struct RoleMetrics {
    instance: InstanceId,
    bucket: String,
    /// `instance_id`, `bucket`.
    instance_labels: Vec<KeyValue>,
    current: Shared,
    transitions: Counter<u64>,
    failures: Counter<u64>,
    heartbeat: Histogram<f64>,
    leader_duration: Histogram<f64>,
    acquire_attempts: Counter<u64>,
    token_validation_failures: Counter<u64>,
    watcher_restarts: Counter<u64>,
    watcher_pending: Gauge<u64>,
    watcher_lag: Histogram<f64>,
    /// Keeps a zero series of the watcher's delivery lag from the start (a fresh instance's
    /// dashboard panel has data before the first delivery).
    _watcher_lag_zero: BoundHistogram<f64>,
    members_seen: Gauge<u64>,
    voluntary_moves: Counter<u64>,
    role_vacancy: Histogram<f64>,
    /// Which roles have series of their own (label `role`); the others are recorded on the
    /// instance's series.
    per_role: PerRole,
    /// Kept so the callbacks live as long as the sink.
    _gauges: Gauges,
}

impl RoleMetrics {
    /// The instruments of one manager (`instance` on `bucket`) on `meter`; `per_role` says
    /// which roles have series of their own.
    pub(crate) fn new(
        meter: &Meter,
        instance: &InstanceId,
        bucket: &str,
        per_role: PerRole,
    ) -> Self {
        let current: Shared = Arc::default();
        let instance_labels = vec![
            KeyValue::new("instance_id", instance.to_string()),
            KeyValue::new("bucket", bucket.to_owned()),
        ];
        let gauges = Gauges::new(meter, &current, &instance_labels);
        let watcher_lag = seconds_histogram(
            meter,
            names::WATCHER_LAG,
            "delivery time minus the entry's server timestamp",
            &LATENCY_BUCKETS,
        );
        let watcher_lag_zero = watcher_lag.bind(&instance_labels);
        let watcher_restarts = counter(
            meter,
            names::WATCHER_RESTARTS,
            "bucket watcher restarts after errors",
        );
        // Present from the start (at 0), so that rate() and dashboards work before a restart.
        watcher_restarts.add(0, &instance_labels);
        let voluntary_moves = counter(
            meter,
            names::VOLUNTARY_MOVES,
            "roles handed over voluntarily by placement",
        );
        for reason in ["priority", "share", "draining", "unhealthy"] {
            let mut labels = instance_labels.clone();
            labels.push(KeyValue::new("reason", reason));
            voluntary_moves.add(0, &labels);
        }
        Self {
            instance: instance.clone(),
            bucket: bucket.to_owned(),
            instance_labels,
            current,
            transitions: counter(
                meter,
                names::TRANSITIONS,
                "state changes of a role on this instance",
            ),
            failures: counter(
                meter,
                names::FAILURES,
                "failed lease and fenced writes by error type; role_failed: the role gave up",
            ),
            heartbeat: seconds_histogram(
                meter,
                names::HEARTBEAT_DURATION,
                "duration of renewal writes by outcome",
                &LATENCY_BUCKETS,
            ),
            leader_duration: seconds_histogram(
                meter,
                names::LEADER_DURATION,
                "how long terms lasted (recorded when a term ends)",
                &TERM_BUCKETS,
            ),
            acquire_attempts: counter(meter, names::ACQUIRE_ATTEMPTS, "acquire writes by outcome"),
            token_validation_failures: counter(
                meter,
                names::TOKEN_VALIDATION_FAILURES,
                "fenced writes refused because the term was over",
            ),
            watcher_restarts,
            watcher_pending: gauge(
                meter,
                names::WATCHER_PENDING,
                "entries pending behind the last one the watcher delivered",
            ),
            _watcher_lag_zero: watcher_lag_zero,
            watcher_lag,
            members_seen: gauge(
                meter,
                names::MEMBERS_SEEN,
                "members the placement controller counts as live",
            ),
            voluntary_moves,
            role_vacancy: seconds_histogram(
                meter,
                names::ROLE_VACANCY,
                "time a role spent without a holder, by cause",
                &LATENCY_BUCKETS,
            ),
            per_role,
            _gauges: gauges,
        }
    }

    /// `labels` of `role` plus `extra`: with `role` when the role has series of its own,
    /// else the instance's labels plus `extra`.
    fn labels(&self, role: &RoleName, extra: &[KeyValue]) -> Vec<KeyValue> {
        let mut v = Vec::with_capacity(3 + extra.len());
        if self.per_role.has_series(role) {
            v.push(KeyValue::new("role", role.to_string()));
        }
        v.extend(self.instance_labels.iter().cloned());
        v.extend(extra.iter().cloned());
        v
    }

    fn update(&self, role: &RoleName, f: impl FnOnce(&mut RoleGauges)) {
        let mut current = lock(&self.current);
        if current.closed {
            return;
        }
        let g = current.roles.entry(role.clone()).or_insert_with(|| {
            RoleGauges::new(
                self.per_role
                    .has_series(role)
                    .then(|| self.labels(role, &[])),
            )
        });
        f(g);
    }

    /// Gives a role seen for the first time a zero series of every per-role counter and
    /// histogram that only moves on trouble, on a renewal or at the end of a term
    /// (`failures_total` per error type, `acquire_attempts_total` per status,
    /// `token_validation_failures_total`, `heartbeat_duration_seconds{status="ok"}`,
    /// `leader_duration_seconds`), so that dashboards and `rate()` have a series from the
    /// start (Prometheus practice). The roles without series of their own share one set of
    /// zero series on the instance's series, made when the first of them is seen.
    fn zero_series(&self, role: &RoleName) {
        let own = self.per_role.has_series(role);
        let mut current = lock(&self.current);
        let done = if own {
            current.zeroed.contains_key(role)
        } else {
            current.instance_zeroed.is_some()
        };
        if current.closed || done {
            return;
        }
        for error_type in ERROR_TYPES {
            self.failures.add(
                0,
                &self.labels(role, &[KeyValue::new("error_type", error_type)]),
            );
        }
        for status in ["won", "lost", "retry", "unknown", "failed"] {
            self.acquire_attempts
                .add(0, &self.labels(role, &[KeyValue::new("status", status)]));
        }
        let labels = self.labels(role, &[]);
        self.token_validation_failures.add(0, &labels);
        let bound = [
            self.leader_duration.bind(&labels),
            self.heartbeat
                .bind(&self.labels(role, &[KeyValue::new("status", "ok")])),
        ];
        if own {
            current.zeroed.insert(role.clone(), bound);
        } else {
            current.instance_zeroed = Some(bound);
        }
    }

    fn failure(&self, role: &RoleName, error_type: &'static str) {
        self.failures.add(
            1,
            &self.labels(role, &[KeyValue::new("error_type", error_type)]),
        );
    }
}

impl TapSink for RoleMetrics {
    fn record(&self, instance: &InstanceId, role: &RoleName, event: &TapEvent, at: Instant) {
        debug_assert_eq!(instance, &self.instance);
        self.zero_series(role);
        match event {
            TapEvent::WriteInvoked { .. } => {}
            TapEvent::WriteCompleted {
                kind,
                outcome,
                elapsed,
                ..
            } => {
                let status = KeyValue::new("status", outcome_status(*kind, *outcome));
                match kind {
                    WriteKind::Acquire => {
                        self.acquire_attempts.add(1, &self.labels(role, &[status]))
                    }
                    WriteKind::Renew => self
                        .heartbeat
                        .record(elapsed.as_secs_f64(), &self.labels(role, &[status])),
                    WriteKind::Release => {}
                }
                match outcome {
                    WriteOutcome::Unknown => self.failure(role, "timeout"),
                    WriteOutcome::Failed(k) => self.failure(role, k.as_str()),
                    _ => {}
                }
            }
            TapEvent::Promoted { .. } => self.update(role, |g| {
                g.leader = true;
                g.last_renewal = Some(at);
            }),
            TapEvent::Renewed { .. } => self.update(role, |g| g.last_renewal = Some(at)),
            TapEvent::Demoted { held, .. } => {
                self.update(role, |g| {
                    g.leader = false;
                    g.last_renewal = None;
                });
                self.leader_duration
                    .record(held.as_secs_f64(), &self.labels(role, &[]));
            }
            TapEvent::StateChanged { from, to, reason } => {
                self.transitions.add(
                    1,
                    &self.labels(
                        role,
                        &[
                            KeyValue::new("from_state", from.as_str()),
                            KeyValue::new("to_state", to.as_str()),
                            KeyValue::new("reason", reason.map_or("none", |r| r.as_str())),
                        ],
                    ),
                );
                if *to == RoleState::Stopped {
                    // The role is gone: its gauge series go with it.
                    lock(&self.current).roles.remove(role);
                } else {
                    self.update(role, |g| g.leader = *to == RoleState::Leader);
                }
            }
            TapEvent::FencedWrite { stored, .. } => match stored {
                Ok(_) => {}
                Err(FencedRefusal::Fenced) => self
                    .token_validation_failures
                    .add(1, &self.labels(role, &[])),
                Err(FencedRefusal::Unknown) => self.failure(role, "timeout"),
                Err(FencedRefusal::Failed(k)) => self.failure(role, k.as_str()),
            },
            TapEvent::Failed(kind) => {
                self.failure(role, "role_failed");
                self.update(role, |g| g.failure = Some(*kind));
            }
            TapEvent::Recovered => self.update(role, |g| g.failure = None),
            TapEvent::VacancyEnded { cause, took } => self.role_vacancy.record(
                took.as_secs_f64(),
                &self.labels(role, &[KeyValue::new("cause", *cause)]),
            ),
            TapEvent::Connection(up) => self.update(role, |g| g.connected = *up),
        }
    }

    fn manager_stopped(&self, instance: &InstanceId) {
        debug_assert_eq!(instance, &self.instance);
        let mut current = lock(&self.current);
        current.closed = true;
        current.roles.clear();
    }

    fn placement(&self, instance: &InstanceId, event: PlacementEvent) {
        debug_assert_eq!(instance, &self.instance);
        match event {
            PlacementEvent::Members { live } => {
                self.members_seen.record(live, &self.instance_labels);
            }
            PlacementEvent::VoluntaryMove { reason } => {
                let mut labels = self.instance_labels.clone();
                labels.push(KeyValue::new("reason", reason));
                self.voluntary_moves.add(1, &labels);
            }
        }
    }

    fn session(&self, instance: &InstanceId, event: SessionEvent<'_>) {
        debug_assert_eq!(instance, &self.instance);
        match event {
            SessionEvent::Written {
                key,
                kind,
                outcome,
                elapsed,
            } => {
                // Protocol v2: the heartbeat is the session renewal (one per TTL class), so
                // its series carry the session key instead of a role.
                let mut labels = self.instance_labels.clone();
                labels.push(KeyValue::new("session", key.to_owned()));
                if kind == crate::core::SessionWriteKind::Renew {
                    let mut labels = labels.clone();
                    labels.push(KeyValue::new(
                        "status",
                        outcome_status(WriteKind::Renew, outcome),
                    ));
                    self.heartbeat.record(elapsed.as_secs_f64(), &labels);
                }
                // Failed session writes count like failed lease writes, by session.
                let error_type = match outcome {
                    WriteOutcome::Unknown => "timeout",
                    WriteOutcome::Failed(k) => k.as_str(),
                    _ => return,
                };
                labels.push(KeyValue::new("error_type", error_type));
                self.failures.add(1, &labels);
            }
        }
    }

    fn watcher(&self, instance: &InstanceId, event: WatcherEvent) {
        debug_assert_eq!(instance, &self.instance);
        match event {
            WatcherEvent::Restarted => self.watcher_restarts.add(1, &self.instance_labels),
            WatcherEvent::Delivered { pending, lag } => {
                self.watcher_pending.record(pending, &self.instance_labels);
                if let Some(lag) = lag {
                    self.watcher_lag
                        .record(lag.as_secs_f64(), &self.instance_labels);
                }
            }
        }
    }
}

impl std::fmt::Debug for RoleMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoleMetrics")
            .field("instance", &self.instance)
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}
