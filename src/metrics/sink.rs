//! [`RoleMetrics`]: the tap sink that turns driver events into OpenTelemetry measurements.
//! Its tests read the measurements back as Prometheus text, so they are the exporter's:
//! `src/telemetry/role_metrics_tests/`.

use opentelemetry::KeyValue;
use opentelemetry::metrics::Meter;
use tokio::time::Instant;

use super::PerRole;
use super::gauges::Gauges;
use super::instruments::Instruments;
use super::labels::outcome_status;
use super::series_book::SeriesBook;
use crate::core::{WriteKind, WriteOutcome};
use crate::names::{InstanceId, RoleName};
use crate::status::RoleState;
use crate::tap::{FencedRefusal, PlacementEvent, SessionEvent, TapEvent, TapSink, WatcherEvent};

/// Records one manager's events as metrics. The gauges observe the book's shared map; a
/// stopped role is removed from it, so its gauge series disappear. A role without series of
/// its own ([`PerRole`]) is recorded on the instance's series: the same names without `role`.
pub(crate) struct RoleMetrics {
    instance: InstanceId,
    bucket: String,
    /// Which series each role's measurements go to, and what the gauges read.
    book: SeriesBook,
    instruments: Instruments,
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
        let book = SeriesBook::new(instance, bucket, per_role);
        let gauges = Gauges::new(meter, book.current(), book.instance_labels());
        let instruments = Instruments::new(meter, book.instance_labels());
        Self {
            instance: instance.clone(),
            bucket: bucket.to_owned(),
            book,
            instruments,
            _gauges: gauges,
        }
    }

    fn failure(&self, role: &RoleName, error_type: &'static str) {
        self.instruments.failures.add(
            1,
            &self
                .book
                .labels(role, &[KeyValue::new("error_type", error_type)]),
        );
    }
}

impl RoleMetrics {
    /// The sessions whose renewal time the book keeps (tests).
    #[cfg(test)]
    pub(crate) fn book_sessions(&self) -> Vec<uuid::Uuid> {
        self.book.sessions()
    }
}

impl TapSink for RoleMetrics {
    fn record(&self, instance: &InstanceId, role: &RoleName, event: &TapEvent, at: Instant) {
        debug_assert_eq!(instance, &self.instance);
        // A session's renewal comes once per term it holds (10,000 records per renewal for
        // 10,000 held roles): for a role without series of its own only the session's
        // renewal time is kept — no look-up of the role, whose name and entry are mostly out
        // of the cache by then (it was 64 % of such a holder's idle CPU). Its zero series
        // were made at its promotion.
        if let TapEvent::Renewed {
            session: Some(session),
            ..
        } = event
            && !self.book.has_series(role)
        {
            self.book.session_renewed(*session, at);
            return;
        }
        self.book.zero_series(role, &self.instruments);
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
                    WriteKind::Acquire => self
                        .instruments
                        .acquire_attempts
                        .add(1, &self.book.labels(role, &[status])),
                    WriteKind::Renew => self
                        .instruments
                        .heartbeat
                        .record(elapsed.as_secs_f64(), &self.book.labels(role, &[status])),
                    WriteKind::Release => {}
                }
                match outcome {
                    WriteOutcome::Unknown => self.failure(role, "timeout"),
                    WriteOutcome::Failed(k) => self.failure(role, k.as_str()),
                    _ => {}
                }
            }
            TapEvent::Promoted { session, .. } => self.book.update(role, |g| {
                g.leader = true;
                g.last_renewal = Some(at);
                g.session = *session;
            }),
            TapEvent::Renewed { .. } => self.book.update(role, |g| g.last_renewal = Some(at)),
            TapEvent::Demoted { held, .. } => {
                self.book.update(role, |g| {
                    g.leader = false;
                    g.last_renewal = None;
                    g.session = None;
                });
                self.instruments
                    .leader_duration
                    .record(held.as_secs_f64(), &self.book.labels(role, &[]));
            }
            TapEvent::StateChanged { from, to, reason } => {
                self.instruments.transitions.add(
                    1,
                    &self.book.labels(
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
                    self.book.remove(role);
                } else {
                    self.book
                        .update(role, |g| g.leader = *to == RoleState::Leader);
                }
            }
            TapEvent::FencedWrite { stored, .. } => match stored {
                Ok(_) => {}
                Err(FencedRefusal::Fenced) => self
                    .instruments
                    .token_validation_failures
                    .add(1, &self.book.labels(role, &[])),
                Err(FencedRefusal::Unknown) => self.failure(role, "timeout"),
                Err(FencedRefusal::Failed(k)) => self.failure(role, k.as_str()),
            },
            TapEvent::Failed(kind) => {
                self.failure(role, "role_failed");
                self.book.update(role, |g| g.failure = Some(*kind));
            }
            TapEvent::Recovered => self.book.update(role, |g| g.failure = None),
            TapEvent::VacancyEnded { cause, took } => self.instruments.role_vacancy.record(
                took.as_secs_f64(),
                &self.book.labels(role, &[KeyValue::new("cause", *cause)]),
            ),
            TapEvent::Connection(up) => self.book.update(role, |g| g.connected = *up),
        }
    }

    fn manager_stopped(&self, instance: &InstanceId) {
        debug_assert_eq!(instance, &self.instance);
        self.book.close();
    }

    fn placement(&self, instance: &InstanceId, event: PlacementEvent) {
        debug_assert_eq!(instance, &self.instance);
        match event {
            PlacementEvent::Members { live } => {
                self.instruments
                    .members_seen
                    .record(live, self.book.instance_labels());
            }
            PlacementEvent::VoluntaryMove { reason } => {
                let labels = self.book.instance_with(KeyValue::new("reason", reason));
                self.instruments.voluntary_moves.add(1, &labels);
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
                let mut labels = self
                    .book
                    .instance_with(KeyValue::new("session", key.to_owned()));
                if kind == crate::core::SessionWriteKind::Renew {
                    let mut labels = labels.clone();
                    labels.push(KeyValue::new(
                        "status",
                        outcome_status(WriteKind::Renew, outcome),
                    ));
                    self.instruments
                        .heartbeat
                        .record(elapsed.as_secs_f64(), &labels);
                }
                // Failed session writes count like failed lease writes, by session.
                let error_type = match outcome {
                    WriteOutcome::Unknown => "timeout",
                    WriteOutcome::Failed(k) => k.as_str(),
                    _ => return,
                };
                labels.push(KeyValue::new("error_type", error_type));
                self.instruments.failures.add(1, &labels);
            }
        }
    }

    fn watcher(&self, instance: &InstanceId, event: WatcherEvent) {
        debug_assert_eq!(instance, &self.instance);
        match event {
            WatcherEvent::Restarted => self
                .instruments
                .watcher_restarts
                .add(1, self.book.instance_labels()),
            WatcherEvent::Delivered { pending, lag } => {
                self.instruments
                    .watcher_pending
                    .record(pending, self.book.instance_labels());
                if let Some(lag) = lag {
                    self.instruments
                        .watcher_lag
                        .record(lag.as_secs_f64(), self.book.instance_labels());
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
