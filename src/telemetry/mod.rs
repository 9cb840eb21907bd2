//! OpenTelemetry SDK plumbing for applications (cargo feature `otel`, on by default): what
//! `nats-roles run` uses to serve the library's metrics as Prometheus text and to export
//! metrics and traces over OTLP/HTTP.
//!
//! The library itself only records through the `opentelemetry` API ([`crate::metrics`]) and
//! emits `tracing` spans and events; it never installs a meter provider or a subscriber.
//! [`Telemetry`] builds the providers; the application decides what to install:
//!
//! ```no_run
//! # fn run(client: async_nats::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use nats_roles::config::TelemetryConfig;
//! use nats_roles::telemetry::Telemetry;
//! use tracing_subscriber::prelude::*;
//!
//! let runtime = tokio::runtime::Runtime::new()?;
//! let telemetry = Telemetry::new(&TelemetryConfig::default(), "node-a", runtime.handle())?;
//! tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer())
//!     .with(telemetry.tracing_layer())
//!     .init();
//! let builder = nats_roles::RoleManager::builder(client, nats_roles::InstanceId::new("node-a")?)
//!     .meter(telemetry.meter());
//! // ... serve `telemetry.prometheus().render()` on GET /metrics ...
//! telemetry.shutdown();
//! # Ok(()) }
//! ```

mod otlp;
pub mod prometheus;

use std::collections::HashMap;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracerProvider, Tracer};
use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;

use crate::config::{OtlpConfig, OtlpProtocol, TelemetryConfig};
pub use prometheus::PrometheusReader;

/// The instrumentation scope (meter and tracer name) of the library's telemetry.
pub const SCOPE: &str = "nats-roles";

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// An OTLP exporter could not be built from the configuration.
    #[error("cannot set up OTLP {signal} export to {url}: {message}")]
    Exporter {
        /// `metrics` or `traces`.
        signal: &'static str,
        /// The signal's URL.
        url: String,
        /// What the SDK said.
        message: String,
    },
}

/// The meter provider (Prometheus pull reader, optional OTLP push) and the optional tracer
/// provider of one process.
#[derive(Debug)]
pub struct Telemetry {
    meters: SdkMeterProvider,
    tracers: Option<SdkTracerProvider>,
    prometheus: PrometheusReader,
}

impl Telemetry {
    /// Builds the providers for `config`: metrics always have a Prometheus reader; with
    /// `config.otlp` metrics and/or traces are also exported to the collector from threads of
    /// the SDK, whose HTTP requests run on `runtime`. `instance` becomes the
    /// `service.instance.id` resource attribute.
    ///
    /// # Errors
    /// [`TelemetryError::Exporter`] when an OTLP exporter cannot be built.
    pub fn new(
        config: &TelemetryConfig,
        instance: &str,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Self, TelemetryError> {
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .with_attribute(KeyValue::new("service.instance.id", instance.to_owned()))
            .build();
        let prometheus = PrometheusReader::new();
        let mut meters = SdkMeterProvider::builder()
            .with_resource(resource.clone())
            .with_reader(prometheus.clone());
        let mut tracers = None;
        if let Some(otlp) = &config.otlp {
            if otlp.metrics {
                let url = otlp.signal_url("/v1/metrics");
                let exporter = opentelemetry_otlp::MetricExporter::builder()
                    .with_http()
                    .with_http_client(otlp::RuntimeHttpClient::new(
                        runtime.clone(),
                        otlp.timeout,
                        "metrics",
                    ))
                    .with_protocol(protocol(otlp))
                    .with_endpoint(url.clone())
                    .with_timeout(otlp.timeout)
                    .with_headers(headers(otlp))
                    .build()
                    .map_err(|e| TelemetryError::Exporter {
                        signal: "metrics",
                        url,
                        message: e.to_string(),
                    })?;
                meters = meters.with_reader(
                    PeriodicReader::builder(exporter)
                        .with_interval(otlp.export_interval)
                        .build(),
                );
            }
            if otlp.traces {
                let url = otlp.signal_url("/v1/traces");
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_http_client(otlp::RuntimeHttpClient::new(
                        runtime.clone(),
                        otlp.timeout,
                        "traces",
                    ))
                    .with_protocol(protocol(otlp))
                    .with_endpoint(url.clone())
                    .with_timeout(otlp.timeout)
                    .with_headers(headers(otlp))
                    .build()
                    .map_err(|e| TelemetryError::Exporter {
                        signal: "traces",
                        url,
                        message: e.to_string(),
                    })?;
                tracers = Some(
                    SdkTracerProvider::builder()
                        .with_resource(resource)
                        .with_batch_exporter(exporter)
                        .build(),
                );
            }
        }
        Ok(Self {
            meters: meters.build(),
            tracers,
            prometheus,
        })
    }

    /// The meter to give [`RoleManagerBuilder::meter`](crate::RoleManagerBuilder::meter).
    #[must_use]
    pub fn meter(&self) -> Meter {
        self.meters.meter(SCOPE)
    }

    /// The Prometheus reader: [`PrometheusReader::render`] per scrape.
    #[must_use]
    pub fn prometheus(&self) -> &PrometheusReader {
        &self.prometheus
    }

    /// The tracer exporting spans over OTLP, when traces are exported.
    #[must_use]
    pub fn tracer(&self) -> Option<Tracer> {
        self.tracers.as_ref().map(|t| t.tracer(SCOPE))
    }

    /// A `tracing` layer turning spans into OTLP spans (`None`, which is a no-op layer, when
    /// traces are not exported). Add it to the application's subscriber.
    #[must_use]
    pub fn tracing_layer<S>(&self) -> Option<tracing_opentelemetry::OpenTelemetryLayer<S, Tracer>>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        self.tracer()
            .map(|tracer| tracing_opentelemetry::layer().with_tracer(tracer))
    }

    /// Exports what is pending and stops the exporters (blocks up to the export timeouts).
    /// Errors are logged, not returned: they are of no use at exit.
    pub fn shutdown(self) {
        if let Some(tracers) = self.tracers
            && let Err(e) = tracers.shutdown()
        {
            tracing::warn!(error = %e, "trace export did not shut down cleanly");
        }
        if let Err(e) = self.meters.shutdown() {
            tracing::warn!(error = %e, "metric export did not shut down cleanly");
        }
    }
}

fn protocol(otlp: &OtlpConfig) -> Protocol {
    match otlp.protocol {
        OtlpProtocol::HttpProtobuf => Protocol::HttpBinary,
        OtlpProtocol::HttpJson => Protocol::HttpJson,
    }
}

fn headers(otlp: &OtlpConfig) -> HashMap<String, String> {
    otlp.headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
