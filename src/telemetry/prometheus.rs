//! Prometheus text exposition (format 0.0.4) of collected OpenTelemetry metrics, and the pull
//! reader that collects them on request.
//!
//! Instrument names are written as they are (the crate names its instruments the Prometheus
//! way already, see `docs/observability.md`); characters Prometheus does not allow become
//! `_`. Monotonic sums are `counter`s, other sums and gauges `gauge`s, histograms cumulative
//! `_bucket{le=...}` / `_sum` / `_count` series. Resource attributes are not repeated on
//! every series.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, Temporality};

/// The `Content-Type` of [`encode`]'s output.
pub const CONTENT_TYPE: &str = crate::metrics::PROMETHEUS_CONTENT_TYPE;

/// A pull reader for a meter provider: register a clone with
/// `SdkMeterProvider::builder().with_reader(..)`, then call [`PrometheusReader::render`] per
/// scrape. Cheap to clone (clones share the reader).
#[derive(Debug, Clone)]
pub struct PrometheusReader {
    inner: Arc<ManualReader>,
}

impl Default for PrometheusReader {
    fn default() -> Self {
        Self::new()
    }
}

impl PrometheusReader {
    /// A reader with cumulative temporality (what Prometheus expects).
    #[must_use]
    pub fn new() -> Self {
        Self {
            inner: Arc::new(
                ManualReader::builder()
                    .with_temporality(Temporality::Cumulative)
                    .build(),
            ),
        }
    }

    /// Collects every instrument now and encodes it as Prometheus text.
    ///
    /// # Errors
    /// The SDK's error when the provider is shut down (or not registered yet).
    pub fn render(&self) -> Result<String, opentelemetry_sdk::error::OTelSdkError> {
        let mut rm = ResourceMetrics::default();
        self.inner.collect(&mut rm)?;
        Ok(encode(&rm))
    }
}

impl MetricReader for PrometheusReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.inner.register_pipeline(pipeline);
    }

    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.inner.collect(rm)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.inner.temporality(kind)
    }
}

/// One metric family: its help, type and sample lines.
#[derive(Default)]
struct Family {
    help: String,
    kind: &'static str,
    lines: String,
}

/// Encodes collected metrics as Prometheus text (families sorted by name; same-named
/// instruments of several scopes merged into one family).
#[must_use]
pub fn encode(rm: &ResourceMetrics) -> String {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for scope in rm.scope_metrics() {
        for metric in scope.metrics() {
            let name = sanitize_name(metric.name());
            let family = families.entry(name.clone()).or_default();
            if family.help.is_empty() {
                family.help = metric.description().to_owned();
            }
            encode_metric(&name, metric, family);
        }
    }
    let mut out = String::new();
    for (name, family) in families {
        if family.kind.is_empty() {
            continue;
        }
        let _ = writeln!(out, "# HELP {name} {}", escape_help(&family.help));
        let _ = writeln!(out, "# TYPE {name} {}", family.kind);
        out.push_str(&family.lines);
    }
    out
}

fn encode_metric(name: &str, metric: &Metric, family: &mut Family) {
    match metric.data() {
        AggregatedMetrics::F64(data) => encode_data(name, data, family),
        AggregatedMetrics::U64(data) => encode_data(name, data, family),
        AggregatedMetrics::I64(data) => encode_data(name, data, family),
    }
}

/// A sample value as Prometheus writes it.
trait Sample: Copy {
    fn text(self) -> String;
}

impl Sample for f64 {
    fn text(self) -> String {
        float(self)
    }
}

impl Sample for u64 {
    fn text(self) -> String {
        self.to_string()
    }
}

impl Sample for i64 {
    fn text(self) -> String {
        self.to_string()
    }
}

fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v == f64::INFINITY {
        "+Inf".to_owned()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        v.to_string()
    }
}

/// One line `name{labels} value` per point of a gauge or a sum.
fn write_samples<'a, T: Sample, A: Iterator<Item = &'a KeyValue>>(
    out: &mut String,
    name: &str,
    points: impl Iterator<Item = (A, T)>,
) {
    for (attributes, value) in points {
        let _ = writeln!(out, "{name}{} {}", labels(attributes, None), value.text());
    }
}

fn encode_data<T: Sample>(name: &str, data: &MetricData<T>, family: &mut Family) {
    let kind = match data {
        MetricData::Gauge(_) => "gauge",
        MetricData::Sum(s) if s.is_monotonic() => "counter",
        MetricData::Sum(_) => "gauge",
        MetricData::Histogram(_) => "histogram",
        // Not used by this crate; Prometheus text has no native form for it.
        MetricData::ExponentialHistogram(_) => return,
    };
    if !family.kind.is_empty() && family.kind != kind {
        return; // same name, different type in another scope: keep the first
    }
    family.kind = kind;
    let out = &mut family.lines;
    match data {
        MetricData::Gauge(g) => {
            write_samples(
                out,
                name,
                g.data_points().map(|p| (p.attributes(), p.value())),
            );
        }
        MetricData::Sum(s) => {
            write_samples(
                out,
                name,
                s.data_points().map(|p| (p.attributes(), p.value())),
            );
        }
        MetricData::Histogram(h) => {
            for p in h.data_points() {
                let mut cumulative = 0u64;
                let bounds: Vec<f64> = p.bounds().collect();
                for (i, count) in p.bucket_counts().enumerate() {
                    cumulative = cumulative.saturating_add(count);
                    let le = bounds
                        .get(i)
                        .map_or_else(|| "+Inf".to_owned(), |b| float(*b));
                    let _ = writeln!(
                        out,
                        "{name}_bucket{} {cumulative}",
                        labels(p.attributes(), Some(&le))
                    );
                }
                if bounds.len() >= p.bucket_counts().count() {
                    // No overflow bucket reported: +Inf is the count.
                    let _ = writeln!(
                        out,
                        "{name}_bucket{} {}",
                        labels(p.attributes(), Some("+Inf")),
                        p.count()
                    );
                }
                let attrs = labels(p.attributes(), None);
                let _ = writeln!(out, "{name}_sum{attrs} {}", p.sum().text());
                let _ = writeln!(out, "{name}_count{attrs} {}", p.count());
            }
        }
        MetricData::ExponentialHistogram(_) => {}
    }
}

/// `{a="1",b="2"}` (sorted by key), with `le` last; empty when there are none.
fn labels<'a>(attrs: impl Iterator<Item = &'a KeyValue>, le: Option<&str>) -> String {
    let mut pairs: Vec<(String, String)> = attrs
        .map(|kv| {
            (
                sanitize_label(kv.key.as_str()),
                kv.value.as_str().into_owned(),
            )
        })
        .collect();
    pairs.sort();
    if let Some(le) = le {
        pairs.push(("le".to_owned(), le.to_owned()));
    }
    if pairs.is_empty() {
        return String::new();
    }
    let mut out = String::from("{");
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"{}\"", escape_value(v));
    }
    out.push('}');
    out
}

fn sanitize_name(name: &str) -> String {
    sanitize(name, true)
}

fn sanitize_label(name: &str) -> String {
    sanitize(name, false)
}

/// Replaces what a metric (`colon` allowed) or label name may not contain with `_`; a leading
/// digit gets a `_` in front.
fn sanitize(name: &str, colon: bool) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    for (i, c) in name.chars().enumerate() {
        if i == 0 && c.is_ascii_digit() {
            out.push('_');
        }
        let ok = c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':');
        out.push(if ok { c } else { '_' });
    }
    out
}

fn escape_value(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', r"\\").replace('\n', r"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::SdkMeterProvider;

    fn provider() -> (SdkMeterProvider, PrometheusReader) {
        let reader = PrometheusReader::new();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader.clone())
            .build();
        (provider, reader)
    }

    #[test]
    fn counters_gauges_and_histograms_in_text_format() {
        let (provider, reader) = provider();
        let meter = provider.meter("test");
        let c = meter
            .u64_counter("x_events_total")
            .with_description("events\nseen")
            .build();
        c.add(2, &[KeyValue::new("role", "a\"b\\c\nd")]);
        c.add(1, &[KeyValue::new("role", "z")]);
        let g = meter.i64_gauge("x.level").build();
        g.record(-3, &[]);
        let h = meter
            .f64_histogram("x_seconds")
            .with_boundaries(vec![0.001, 0.5])
            .build();
        h.record(0.000_976_562_5, &[KeyValue::new("status", "ok")]);
        h.record(0.25, &[KeyValue::new("status", "ok")]);
        h.record(7.0, &[KeyValue::new("status", "ok")]);
        let text = reader.render().expect("render");
        let expected = [
            "# HELP x_events_total events\\nseen",
            "# TYPE x_events_total counter",
            r#"x_events_total{role="a\"b\\c\nd"} 2"#,
            r#"x_events_total{role="z"} 1"#,
            "# TYPE x_level gauge",
            "x_level -3",
            "# TYPE x_seconds histogram",
            r#"x_seconds_bucket{status="ok",le="0.001"} 1"#,
            r#"x_seconds_bucket{status="ok",le="0.5"} 2"#,
            r#"x_seconds_bucket{status="ok",le="+Inf"} 3"#,
            r#"x_seconds_sum{status="ok"} 7.2509765625"#,
            r#"x_seconds_count{status="ok"} 3"#,
        ];
        for line in expected {
            assert!(
                text.lines().any(|l| l == line),
                "missing line {line:?} in\n{text}"
            );
        }
        // Exactly one +Inf bucket per series.
        assert_eq!(text.matches("le=\"+Inf\"").count(), 1, "{text}");
    }

    #[test]
    fn empty_provider_renders_nothing_and_shut_down_is_an_error() {
        let (provider, reader) = provider();
        assert_eq!(reader.render().expect("render"), "");
        provider.shutdown().expect("shutdown");
        assert!(reader.render().is_err());
    }

    #[test]
    fn names_are_sanitized() {
        assert_eq!(sanitize_name("a.b-c:d"), "a_b_c:d");
        assert_eq!(sanitize_label("9x:y"), "_9x_y");
        assert_eq!(float(f64::INFINITY), "+Inf");
        assert_eq!(float(1.0), "1");
    }
}
