//! OpenTelemetry SDK plumbing for applications (cargo feature `otel`, on by default): what
//! `nats-roles run` uses to serve the library's metrics as Prometheus text and to export
//! metrics and traces over OTLP/HTTP.
//!
//! The library itself only records through the `opentelemetry` API (metric names in `docs/observability.md`) and
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
#[cfg(test)]
mod role_metrics_tests;
#[cfg(test)]
mod test_support;

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

/// The crate version: the `version` label of `nats_roles_build_info`.
pub const BUILD_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The lease protocol version this crate speaks (`docs/protocol.md`), as text: the `protocol`
/// label of `nats_roles_build_info`.
pub const BUILD_PROTOCOL: &str = concat!(crate::value::protocol_version!());

/// Records `nats_roles_build_info{version, protocol} 1` on `meter`: one series per process
/// saying which release runs and which lease protocol it speaks (`count by (version)` finds a
/// fleet half-way through an upgrade). [`Telemetry::new`] calls it for its meter provider; an
/// application with a meter provider of its own calls it once.
pub fn record_build_info(meter: &Meter) {
    meter
        .u64_gauge(crate::metrics::names::BUILD_INFO)
        .with_description("1, labelled with the version of nats-roles and its lease protocol")
        .build()
        .record(
            1,
            &[
                KeyValue::new("version", BUILD_VERSION),
                KeyValue::new("protocol", BUILD_PROTOCOL),
            ],
        );
}

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
    /// Where each OTLP signal goes, and why its latest export failed.
    exports: Vec<Export>,
}

/// One OTLP signal's destination, for the shutdown message.
#[derive(Debug)]
struct Export {
    /// `metrics` or `traces`.
    signal: &'static str,
    url: String,
    last_error: otlp::LastError,
}

impl Export {
    /// Says what could not be sent at exit, to where, and why: the reason of the latest
    /// failed export when there is one (the SDK itself only says "Failed to shutdown").
    fn warn_unsent(&self, what: &str, error: &dyn std::fmt::Display) {
        let reason = self
            .last_error
            .get()
            .unwrap_or_else(|| format!("the SDK reported: {error}"));
        tracing::warn!(
            signal = self.signal,
            url = %self.url,
            "could not send the {what} to the OTLP collector at {} before exit: {reason}",
            self.url
        );
    }
}

impl Telemetry {
    /// Builds the providers for `config`: metrics always have a Prometheus reader; with
    /// `config.otlp` metrics and/or traces are also exported to the collector from threads of
    /// the SDK, whose HTTP requests run on `runtime`. `instance` becomes the
    /// `service.instance.id` resource attribute, over `config.resource_attributes` and the
    /// effective [`TelemetryConfig::service_name`]. Records `nats_roles_build_info`
    /// ([`record_build_info`]). Reads no environment variable: apply the `OTEL_*` ones to the
    /// configuration first ([`TelemetryConfig::apply_otel_env`], or `Config::apply_env`).
    ///
    /// # Errors
    /// [`TelemetryError::Exporter`] when an OTLP exporter cannot be built.
    pub fn new(
        config: &TelemetryConfig,
        instance: &str,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Self, TelemetryError> {
        // The SDK's own attributes (telemetry.sdk.*), the configured ones (which already hold
        // OTEL_RESOURCE_ATTRIBUTES once `Config::apply_env` ran: the environment is read there,
        // not by the SDK's detectors), then the service name and instance id over them.
        let resource = Resource::builder_empty()
            .with_detector(Box::new(
                opentelemetry_sdk::resource::TelemetryResourceDetector,
            ))
            .with_attributes(
                config
                    .resource_attributes
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
            )
            .with_service_name(config.service_name().to_owned())
            .with_attribute(KeyValue::new("service.instance.id", instance.to_owned()))
            .build();
        let prometheus = PrometheusReader::new();
        let mut meters = SdkMeterProvider::builder()
            .with_resource(resource.clone())
            .with_reader(prometheus.clone());
        let mut tracers = None;
        let mut exports = Vec::new();
        if let Some(otlp) = &config.otlp {
            let mut exporter = Exporters {
                otlp,
                runtime,
                exports: &mut exports,
            };
            if otlp.metrics {
                let exporter = exporter.http(
                    "metrics",
                    opentelemetry_otlp::MetricExporter::builder().with_http(),
                    |b| b.build(),
                )?;
                meters = meters.with_reader(
                    PeriodicReader::builder(exporter)
                        .with_interval(otlp.export_interval)
                        .build(),
                );
            }
            if otlp.traces {
                let exporter = exporter.http(
                    "traces",
                    opentelemetry_otlp::SpanExporter::builder().with_http(),
                    |b| b.build(),
                )?;
                tracers = Some(
                    SdkTracerProvider::builder()
                        .with_resource(resource)
                        .with_batch_exporter(exporter)
                        .build(),
                );
            }
        }
        let meters = meters.build();
        record_build_info(&meters.meter(SCOPE));
        Ok(Self {
            meters,
            tracers,
            prometheus,
            exports,
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
    /// Errors are logged, not returned: they are of no use at exit. A failure names what
    /// could not be sent, the collector's URL and the reason (e.g. `connection refused`).
    pub fn shutdown(self) {
        let export = |signal: &str| self.exports.iter().find(|e| e.signal == signal);
        if let Some(tracers) = &self.tracers
            && let Err(e) = tracers.shutdown()
        {
            match export("traces") {
                Some(export) => export.warn_unsent("pending spans", &e),
                None => tracing::warn!(error = %e, "trace export did not shut down cleanly"),
            }
        }
        if let Err(e) = self.meters.shutdown() {
            match export("metrics") {
                Some(export) => export.warn_unsent("final metrics", &e),
                None => tracing::warn!(error = %e, "metric export did not shut down cleanly"),
            }
        }
    }
}

/// Builds the OTLP/HTTP exporters of one [`OtlpConfig`], noting where each sends.
struct Exporters<'a> {
    otlp: &'a OtlpConfig,
    runtime: &'a tokio::runtime::Handle,
    exports: &'a mut Vec<Export>,
}

impl Exporters<'_> {
    /// The exporter of `signal` (`metrics` or `traces`, posting to `/v1/<signal>` under the
    /// endpoint) that `build` makes of `builder` once it is pointed at the collector through
    /// a [`otlp::RuntimeHttpClient`] with the protocol, timeout and headers of the config.
    fn http<B, E>(
        &mut self,
        signal: &'static str,
        builder: B,
        build: impl FnOnce(B) -> Result<E, opentelemetry_otlp::ExporterBuildError>,
    ) -> Result<E, TelemetryError>
    where
        B: WithExportConfig + WithHttpConfig,
    {
        let otlp = self.otlp;
        let url = if signal == "metrics" {
            otlp.metrics_url()
        } else {
            otlp.traces_url()
        };
        let client =
            otlp::RuntimeHttpClient::new(self.runtime.clone(), otlp.timeout, signal, &otlp.headers);
        self.exports.push(Export {
            signal,
            url: url.clone(),
            last_error: client.last_error(),
        });
        let builder = builder
            .with_http_client(client)
            .with_protocol(protocol(otlp))
            .with_endpoint(url.clone())
            .with_timeout(otlp.timeout);
        build(builder).map_err(|e| TelemetryError::Exporter {
            signal,
            url,
            message: e.to_string(),
        })
    }
}

fn protocol(otlp: &OtlpConfig) -> Protocol {
    match otlp.protocol() {
        OtlpProtocol::HttpProtobuf => Protocol::HttpBinary,
        OtlpProtocol::HttpJson => Protocol::HttpJson,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use opentelemetry::trace::{Span as _, Tracer as _};

    use super::test_support::{Captured, free_port, runtime};
    use super::*;

    /// Every provider carries `nats_roles_build_info{version, protocol} 1`, at every scrape
    /// (a gauge recorded once stays), and the resource holds the configured attributes under
    /// the service name and the instance id.
    #[test]
    fn build_info_and_resource_attributes() {
        use opentelemetry_sdk::metrics::reader::MetricReader as _;
        let runtime = runtime();
        let mut config = TelemetryConfig::default();
        config
            .resource_attributes
            .insert("k8s.pod.name".into(), "pod-0".into());
        config
            .resource_attributes
            .insert("service.name".into(), "from-attributes".into());
        config
            .resource_attributes
            .insert("service.instance.id".into(), "ignored".into());
        let telemetry = Telemetry::new(&config, "node-a", runtime.handle()).expect("built");
        let line = "nats_roles_build_info{protocol=\"2\",version=\"0.1.0\"} 1";
        assert_eq!(BUILD_VERSION, "0.1.0");
        assert_eq!(BUILD_PROTOCOL, crate::value::VALUE_VERSION.to_string());
        for scrape in 0..2 {
            let text = telemetry.prometheus().render().expect("rendered");
            assert!(
                text.lines().any(|l| l == line),
                "scrape {scrape}: no {line:?} in\n{text}"
            );
        }
        let mut rm = opentelemetry_sdk::metrics::data::ResourceMetrics::default();
        telemetry.prometheus().collect(&mut rm).expect("collected");
        let attr = |key: &'static str| {
            rm.resource()
                .get(&opentelemetry::Key::from_static_str(key))
                .map(|v| v.to_string())
        };
        assert_eq!(attr("k8s.pod.name").as_deref(), Some("pod-0"));
        assert_eq!(attr("service.name").as_deref(), Some("from-attributes"));
        assert_eq!(attr("service.instance.id").as_deref(), Some("node-a"));
        assert_eq!(attr("telemetry.sdk.language").as_deref(), Some("rust"));
        telemetry.shutdown();
    }

    /// With the collector down, shutdown says what could not be sent, to which URL and why
    /// (the SDK alone only says `InternalFailure("Failed to shutdown")`).
    #[test]
    fn a_failed_shutdown_names_what_was_not_sent_and_where() {
        let runtime = runtime();
        let port = free_port();
        let config = TelemetryConfig {
            otlp: Some(OtlpConfig {
                endpoint: format!("http://127.0.0.1:{port}"),
                export_interval: Duration::from_secs(3600),
                timeout: Duration::from_secs(1),
                ..OtlpConfig::default()
            }),
            ..TelemetryConfig::default()
        };
        let logs = Captured::default();
        logs.during(|| {
            let telemetry = Telemetry::new(&config, "node-a", runtime.handle()).expect("built");
            let tracer = telemetry.tracer().expect("traces are exported");
            tracer.start("a span nobody receives").end();
            telemetry
                .meter()
                .u64_counter("nats_roles_test_total")
                .build()
                .add(1, &[]);
            telemetry.shutdown();
        });
        let text = logs.text();
        // The metrics' final export fails; the span batch's failure is not reported by the
        // SDK's shutdown (and if it were, it would be named the same way).
        let url = format!("http://127.0.0.1:{port}/v1/metrics");
        let line = text
            .lines()
            .find(|l| l.contains("could not send the final metrics"))
            .unwrap_or_else(|| panic!("no line about the final metrics:\n{text}"));
        assert!(
            line.contains(&format!("collector at {url} before exit")),
            "{line}"
        );
        assert!(line.to_lowercase().contains("connection refused"), "{line}");
        assert!(!text.contains("did not shut down cleanly"), "{text}");
        assert!(!text.contains("Failed to shutdown"), "{text}");
    }
}
