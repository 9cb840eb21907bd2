//! Metrics of a [`RoleManager`](crate::RoleManager), recorded with the OpenTelemetry metrics
//! API.
//!
//! Every manager records into a [`Meter`](opentelemetry::metrics::Meter): the one given to
//! [`RoleManagerBuilder::meter`](crate::RoleManagerBuilder::meter), or by default
//! `opentelemetry::global::meter("nats-roles")`, which records nothing until the application
//! installs a meter provider (the `opentelemetry` API is a no-op without one). The library
//! never installs a provider; `nats-roles run` does (Prometheus text on `GET /metrics`, OTLP
//! when configured).
//!
//! The instrument names are the names Prometheus shows ([`names`]); every series carries the
//! labels `instance_id` and `bucket`, and the series of a role that has series of its own
//! ([`RoleSeries`]) also `role`. The list with units, labels and meaning is in
//! `docs/observability.md`.

mod gauges;
mod instruments;
mod labels;
mod series;
mod series_book;
mod sink;

#[cfg(all(test, feature = "otel"))]
pub(crate) use labels::ERROR_TYPES;
pub(crate) use series::PerRole;
pub use series::RoleSeries;
pub(crate) use sink::RoleMetrics;

/// `Content-Type` of the Prometheus text exposition format (version 0.0.4), as served on
/// `GET /metrics`.
#[cfg(any(feature = "http", feature = "otel"))]
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The names of every instrument (identical in Prometheus and OTLP backends).
pub mod names {
    /// Gauge: 1 while this instance holds the role, else 0.
    pub const IS_LEADER: &str = "nats_roles_election_is_leader";
    /// Counter: state changes of a role (`from_state`, `to_state`, `reason`).
    pub const TRANSITIONS: &str = "nats_roles_election_transitions_total";
    /// Counter: failed lease writes and reported role failures (`error_type`).
    pub const FAILURES: &str = "nats_roles_election_failures_total";
    /// Histogram: duration of renewal writes in seconds (`status`).
    pub const HEARTBEAT_DURATION: &str = "nats_roles_election_heartbeat_duration_seconds";
    /// Histogram: how long terms lasted in seconds (recorded when a term ends).
    pub const LEADER_DURATION: &str = "nats_roles_election_leader_duration_seconds";
    /// Counter: acquire writes by outcome (`status`).
    pub const ACQUIRE_ATTEMPTS: &str = "nats_roles_election_acquire_attempts_total";
    /// Counter: fenced writes refused because the term was over.
    pub const TOKEN_VALIDATION_FAILURES: &str =
        "nats_roles_election_token_validation_failures_total";
    /// Gauge: 1 while the NATS connection is up, else 0 (per role, as its driver sees it).
    pub const CONNECTION_STATUS: &str = "nats_roles_election_connection_status";
    /// Gauge: seconds since the last successful acquire or renewal of a held role.
    pub const SECONDS_SINCE_RENEWAL: &str = "nats_roles_election_seconds_since_last_renewal";
    /// Gauge: roles this instance holds (labels `instance_id`, `bucket`).
    pub const ROLES_HELD: &str = "nats_roles_roles_held";
    /// Counter: bucket watcher restarts (labels `instance_id`, `bucket`).
    pub const WATCHER_RESTARTS: &str = "nats_roles_watcher_restarts_total";
    /// Gauge: entries pending on the server behind the last one the watcher delivered.
    pub const WATCHER_PENDING: &str = "nats_roles_watcher_pending_entries";
    /// Histogram: local time of delivery minus the entry's server timestamp, in seconds.
    pub const WATCHER_LAG: &str = "nats_roles_watcher_delivery_lag_seconds";

    /// Gauge: members the placement controller counts as live, this instance included
    /// (labels `instance_id`, `bucket`; only with placement enabled).
    pub const MEMBERS_SEEN: &str = "nats_roles_placement_members_seen";
    /// Counter: roles this instance handed over voluntarily by placement (`reason`:
    /// `priority`, `share`, `draining`, `unhealthy`).
    pub const VOLUNTARY_MOVES: &str = "nats_roles_placement_voluntary_moves_total";
    /// Histogram: seconds a role spent without a holder (`role`, `cause`: `crash`,
    /// `hand_over`, `move`), each vacancy recorded once across the deployment: by the
    /// releasing instance for hand-overs and moves, by the new holder after a crash (from the
    /// moment its watcher saw the holder gone).
    pub const ROLE_VACANCY: &str = "nats_roles_role_vacancy_seconds";

    /// Gauge: 1 while the role cannot campaign or renew because of a server condition or a
    /// persistent failure (`error_type`, `code`: the JetStream error code or `0`), with one
    /// series at 0 (`error_type="none"`, `code="0"`) otherwise.
    pub const ROLE_BLOCKED: &str = "nats_roles_election_role_blocked";

    /// Gauge: always 1, labelled with the crate's `version` and the lease `protocol` version
    /// it speaks (recorded once per meter provider by `nats_roles::telemetry::Telemetry`).
    #[cfg(feature = "otel")]
    pub const BUILD_INFO: &str = "nats_roles_build_info";
}

/// Bucket boundaries (seconds) of the write-latency histograms: 0.5 ms to 30 s.
pub const LATENCY_BUCKETS: [f64; 15] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Bucket boundaries (seconds) of the term-duration histogram: 100 ms to a day.
pub const TERM_BUCKETS: [f64; 14] = [
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1_800.0, 3_600.0, 14_400.0, 86_400.0,
];
