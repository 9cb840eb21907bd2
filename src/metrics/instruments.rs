//! [`Instruments`]: the counters, histograms and gauges one manager records into, made on its
//! meter with their names, descriptions, units and bucket boundaries, and the instance's
//! series that exist from the start.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{BoundHistogram, Counter, Gauge, Histogram, Meter};

use super::{LATENCY_BUCKETS, TERM_BUCKETS, names};

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

/// The synchronous instruments of one manager (the observable gauges are in
/// [`Gauges`](super::gauges::Gauges)).
pub(super) struct Instruments {
    pub(super) transitions: Counter<u64>,
    pub(super) failures: Counter<u64>,
    pub(super) heartbeat: Histogram<f64>,
    pub(super) leader_duration: Histogram<f64>,
    pub(super) acquire_attempts: Counter<u64>,
    pub(super) token_validation_failures: Counter<u64>,
    pub(super) watcher_restarts: Counter<u64>,
    pub(super) watcher_pending: Gauge<u64>,
    pub(super) watcher_lag: Histogram<f64>,
    /// Keeps a zero series of the watcher's delivery lag from the start (a fresh instance's
    /// dashboard panel has data before the first delivery).
    _watcher_lag_zero: BoundHistogram<f64>,
    pub(super) members_seen: Gauge<u64>,
    pub(super) voluntary_moves: Counter<u64>,
    pub(super) role_vacancy: Histogram<f64>,
}

impl Instruments {
    /// The instruments on `meter`; `instance_labels` (`instance_id`, `bucket`) get the
    /// instance's zero series of the watcher's restarts and delivery lag and of the voluntary
    /// moves by reason.
    pub(super) fn new(meter: &Meter, instance_labels: &[KeyValue]) -> Self {
        let watcher_lag = seconds_histogram(
            meter,
            names::WATCHER_LAG,
            "delivery time minus the entry's server timestamp",
            &LATENCY_BUCKETS,
        );
        let watcher_lag_zero = watcher_lag.bind(instance_labels);
        let watcher_restarts = counter(
            meter,
            names::WATCHER_RESTARTS,
            "bucket watcher restarts after errors",
        );
        // Present from the start (at 0), so that rate() and dashboards work before a restart.
        watcher_restarts.add(0, instance_labels);
        let voluntary_moves = counter(
            meter,
            names::VOLUNTARY_MOVES,
            "roles handed over voluntarily by placement",
        );
        for reason in ["priority", "share", "draining", "unhealthy"] {
            let mut labels = instance_labels.to_vec();
            labels.push(KeyValue::new("reason", reason));
            voluntary_moves.add(0, &labels);
        }
        Self {
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
        }
    }
}
