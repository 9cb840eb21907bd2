//! [`SeriesBook`]: where a role's measurements go — its own series (label `role`) or the
//! instance's ([`PerRole`]) — what the observable gauges read for each role, and the zero
//! series a role gets when it is first seen.

use std::sync::Arc;

use opentelemetry::KeyValue;

use super::PerRole;
use super::gauges::{RoleGauges, Shared, lock};
use super::instruments::Instruments;
use super::labels::ERROR_TYPES;
use crate::names::{InstanceId, RoleName};

/// The series bookkeeping of one manager: its labels, which roles have series of their own,
/// and the state of every role the gauges observe (a stopped role is removed, so its gauge
/// series disappear).
pub(super) struct SeriesBook {
    /// `instance_id`, `bucket`.
    instance_labels: Vec<KeyValue>,
    /// What the observable gauges read.
    current: Shared,
    /// Which roles have series of their own (label `role`); the others are recorded on the
    /// instance's series.
    per_role: PerRole,
}

impl SeriesBook {
    /// The book of `instance` on `bucket`, where `per_role` says which roles have series of
    /// their own; no role seen yet.
    pub(super) fn new(instance: &InstanceId, bucket: &str, per_role: PerRole) -> Self {
        Self {
            instance_labels: vec![
                KeyValue::new("instance_id", instance.to_string()),
                KeyValue::new("bucket", bucket.to_owned()),
            ],
            current: Arc::default(),
            per_role,
        }
    }

    /// The labels of the instance's series: `instance_id`, `bucket`.
    pub(super) fn instance_labels(&self) -> &[KeyValue] {
        &self.instance_labels
    }

    /// The instance's labels plus `extra`.
    pub(super) fn instance_with(&self, extra: KeyValue) -> Vec<KeyValue> {
        let mut labels = self.instance_labels.clone();
        labels.push(extra);
        labels
    }

    /// What the observable gauges read.
    pub(super) fn current(&self) -> &Shared {
        &self.current
    }

    /// `labels` of `role` plus `extra`: with `role` when the role has series of its own,
    /// else the instance's labels plus `extra`.
    pub(super) fn labels(&self, role: &RoleName, extra: &[KeyValue]) -> Vec<KeyValue> {
        let mut v = Vec::with_capacity(3 + extra.len());
        if self.per_role.has_series(role) {
            v.push(KeyValue::new("role", role.to_string()));
        }
        v.extend(self.instance_labels.iter().cloned());
        v.extend(extra.iter().cloned());
        v
    }

    /// Applies `f` to what the gauges read for `role` (a role seen for the first time is
    /// added), unless the manager stopped.
    pub(super) fn update(&self, role: &RoleName, f: impl FnOnce(&mut RoleGauges)) {
        let mut current = lock(&self.current);
        if current.closed {
            return;
        }
        // Every renewal of every held term comes here: no clone of the name once it is known.
        if let Some(g) = current.roles.get_mut(role) {
            f(g);
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

    /// Whether `role` has series of its own.
    pub(super) fn has_series(&self, role: &RoleName) -> bool {
        self.per_role.has_series(role)
    }

    /// `session` was renewed at `at`: the renewal time of every held role resting on it
    /// that has no series of its own (their gauges read it: [`RoleGauges::since_renewal`]).
    pub(super) fn session_renewed(&self, session: uuid::Uuid, at: tokio::time::Instant) {
        let mut current = lock(&self.current);
        if current.closed {
            return;
        }
        let last = current.sessions.entry(session).or_insert(at);
        if *last < at {
            *last = at;
        }
    }

    /// The sessions whose renewal time is kept (tests).
    #[cfg(test)]
    pub(super) fn sessions(&self) -> Vec<uuid::Uuid> {
        lock(&self.current).sessions.keys().copied().collect()
    }

    /// The role is gone: its gauge series go with it.
    pub(super) fn remove(&self, role: &RoleName) {
        lock(&self.current).roles.remove(role);
    }

    /// The manager stopped: the gauges observe nothing from now on and no role is added back.
    pub(super) fn close(&self) {
        let mut current = lock(&self.current);
        current.closed = true;
        current.roles.clear();
    }

    /// Gives a role seen for the first time a zero series of every per-role counter and
    /// histogram of `instruments` that only moves on trouble, on a renewal or at the end of a
    /// term (`failures_total` per error type, `acquire_attempts_total` per status,
    /// `token_validation_failures_total`, `heartbeat_duration_seconds{status="ok"}`,
    /// `leader_duration_seconds`), so that dashboards and `rate()` have a series from the
    /// start (Prometheus practice). The roles without series of their own share one set of
    /// zero series on the instance's series, made when the first of them is seen.
    pub(super) fn zero_series(&self, role: &RoleName, instruments: &Instruments) {
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
            instruments.failures.add(
                0,
                &self.labels(role, &[KeyValue::new("error_type", error_type)]),
            );
        }
        for status in ["won", "lost", "retry", "unknown", "failed"] {
            instruments
                .acquire_attempts
                .add(0, &self.labels(role, &[KeyValue::new("status", status)]));
        }
        let labels = self.labels(role, &[]);
        instruments.token_validation_failures.add(0, &labels);
        let bound = [
            instruments.leader_duration.bind(&labels),
            instruments
                .heartbeat
                .bind(&self.labels(role, &[KeyValue::new("status", "ok")])),
        ];
        if own {
            current.zeroed.insert(role.clone(), bound);
        } else {
            current.instance_zeroed = Some(bound);
        }
    }
}
