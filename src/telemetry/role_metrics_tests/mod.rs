//! The library's metrics ([`RoleMetrics`]) as the Prometheus exporter shows them (here, not
//! in `metrics/`, because `telemetry/` uses `metrics/`, not the other way): what the tests
//! share, and one module per topic — `events.rs` (a role's events move its instruments),
//! `role_series.rs` (which roles get series of their own, `telemetry.role_metrics`).

mod events;
mod role_series;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;

use crate::metrics::{PerRole, RoleMetrics};
use crate::names::InstanceId;
use crate::telemetry::PrometheusReader;

/// The sink of `node-a` on bucket `roles` where every role has series of its own.
fn setup() -> (SdkMeterProvider, PrometheusReader, RoleMetrics, InstanceId) {
    setup_with(PerRole::All)
}

/// The sink of `node-a` on bucket `roles` with `per_role`, its meter provider (keep it while
/// the test reads) and the reader of its Prometheus text.
fn setup_with(per_role: PerRole) -> (SdkMeterProvider, PrometheusReader, RoleMetrics, InstanceId) {
    let reader = PrometheusReader::new();
    let provider = SdkMeterProvider::builder()
        .with_reader(reader.clone())
        .build();
    let instance = InstanceId::new("node-a").expect("valid");
    let metrics = RoleMetrics::new(&provider.meter("test"), &instance, "roles", per_role);
    (provider, reader, metrics, instance)
}

/// The value of the one sample line starting with `series` (name and labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}
