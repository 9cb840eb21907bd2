//! The `telemetry:` section: log format, OTLP export of metrics and traces, and which roles
//! get metric series of their own.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::message::shorten;
use crate::metrics::RoleSeries;

/// Default `service.name` resource attribute of exported telemetry.
pub const DEFAULT_SERVICE_NAME: &str = "nats-roles";

/// Logs, metrics and traces of `nats-roles run`. Metrics are always served as Prometheus text
/// on `GET /metrics` of the HTTP server; OTLP export is off unless `otlp` is set (or the
/// standard `OTEL_EXPORTER_OTLP_*` variables set it, see [`Config::apply_env`](super::Config::apply_env)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Log line format on stderr: `text` or `json`. `--log-format` (or
    /// `NATS_ROLES_LOG_FORMAT`) overrides it. Default: `text`.
    pub log_format: LogFormat,
    /// The `service.name` resource attribute of OTLP metrics and traces. Default: `None`:
    /// `OTEL_SERVICE_NAME`, else `service.name` of the resource attributes, else
    /// [`DEFAULT_SERVICE_NAME`] ([`TelemetryConfig::service_name`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Resource attributes of OTLP metrics and traces (`deployment.environment.name`,
    /// `k8s.pod.name`, …), merged with `OTEL_RESOURCE_ATTRIBUTES` (the keys written here win).
    /// `service.instance.id` is always the instance id. Default: none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_attributes: BTreeMap<String, String>,
    /// OTLP/HTTP export to a collector. Default: `None` (no export).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpConfig>,
    /// Which roles get metric series of their own (label `role`): `auto`, `all`, `none` or a
    /// list of role names ([`RoleSeries`]). Default: `auto` (every role while the instance
    /// has at most [`RoleSeries::AUTO_LIMIT`] roles when it starts, else none).
    pub role_metrics: RoleSeries,
}

impl TelemetryConfig {
    /// The effective `service.name`: [`TelemetryConfig::service_name`], else `service.name` of
    /// [`TelemetryConfig::resource_attributes`], else [`DEFAULT_SERVICE_NAME`].
    #[must_use]
    pub fn service_name(&self) -> &str {
        self.service_name
            .as_deref()
            .or_else(|| {
                self.resource_attributes
                    .get(SERVICE_NAME_ATTRIBUTE)
                    .map(String::as_str)
            })
            .unwrap_or(DEFAULT_SERVICE_NAME)
    }
}

/// The resource attribute naming the service.
pub(super) const SERVICE_NAME_ATTRIBUTE: &str = "service.name";

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Wire encoding of OTLP over HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum OtlpProtocol {
    /// Protobuf bodies (`application/x-protobuf`), what collectors expect by default.
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// JSON bodies (`application/json`).
    #[serde(rename = "http/json")]
    HttpJson,
}

/// Where and how to export metrics and traces over OTLP/HTTP.
///
/// `Debug` output redacts header values.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpConfig {
    /// Base URL of the collector's OTLP/HTTP receiver, `http://host:port` (usually port
    /// 4318); `/v1/metrics` and `/v1/traces` are appended. Plain HTTP only (run the collector
    /// beside the instance). Required unless every exported signal has its own URL
    /// (`metrics_endpoint`, `traces_endpoint`). Default: empty.
    pub endpoint: String,
    /// The full URL metrics are posted to, used as it is (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`
    /// semantics). Default: `None` (`endpoint` + `/v1/metrics`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_endpoint: Option<String>,
    /// The full URL spans are posted to, used as it is (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
    /// semantics). Default: `None` (`endpoint` + `/v1/traces`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traces_endpoint: Option<String>,
    /// `http/protobuf` or `http/json`. Default: `None`: `OTEL_EXPORTER_OTLP_PROTOCOL`, else
    /// `http/protobuf` ([`OtlpConfig::protocol`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<OtlpProtocol>,
    /// Export metrics. Default: `true`.
    pub metrics: bool,
    /// Export traces (spans per term, transition and KV operation). Default: `true`.
    pub traces: bool,
    /// Interval between metric exports; greater than zero. Default: `10s`.
    #[serde(with = "humantime_serde")]
    pub export_interval: Duration,
    /// Timeout of one export request; greater than zero. Default: `5s`.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Extra request headers (e.g. `authorization`). Default: none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        Self {
            endpoint: String::new(),
            metrics_endpoint: None,
            traces_endpoint: None,
            protocol: None,
            metrics: true,
            traces: true,
            export_interval: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            headers: BTreeMap::new(),
        }
    }
}

impl fmt::Debug for OtlpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<&str> = self.headers.keys().map(String::as_str).collect();
        f.debug_struct("OtlpConfig")
            .field("endpoint", &self.endpoint)
            .field("metrics_endpoint", &self.metrics_endpoint)
            .field("traces_endpoint", &self.traces_endpoint)
            .field("protocol", &self.protocol)
            .field("metrics", &self.metrics)
            .field("traces", &self.traces)
            .field("export_interval", &self.export_interval)
            .field("timeout", &self.timeout)
            .field("headers (values redacted)", &headers)
            .finish()
    }
}

impl OtlpConfig {
    /// The URL of one signal: the endpoint without a trailing `/`, then `path`
    /// (`/v1/metrics`, `/v1/traces`).
    #[must_use]
    pub fn signal_url(&self, path: &str) -> String {
        format!("{}{path}", self.endpoint.trim().trim_end_matches('/'))
    }

    /// Where metrics are posted: `metrics_endpoint` as it is, else `endpoint` + `/v1/metrics`.
    #[must_use]
    pub fn metrics_url(&self) -> String {
        self.metrics_endpoint
            .as_deref()
            .map_or_else(|| self.signal_url("/v1/metrics"), |u| u.trim().to_owned())
    }

    /// Where spans are posted: `traces_endpoint` as it is, else `endpoint` + `/v1/traces`.
    #[must_use]
    pub fn traces_url(&self) -> String {
        self.traces_endpoint
            .as_deref()
            .map_or_else(|| self.signal_url("/v1/traces"), |u| u.trim().to_owned())
    }

    /// The effective wire encoding: `protocol`, else `http/protobuf`.
    #[must_use]
    pub fn protocol(&self) -> OtlpProtocol {
        self.protocol.unwrap_or_default()
    }

    /// Whether `endpoint` is needed: an exported signal has no URL of its own.
    pub(super) fn needs_endpoint(&self) -> bool {
        (self.metrics && self.metrics_endpoint.is_none())
            || (self.traces && self.traces_endpoint.is_none())
    }
}

/// Checks one OTLP request header: an HTTP token as name, a value without control characters
/// (never echoed: it is often a credential).
pub(super) fn check_header(name: &str, value: &str) -> Result<(), String> {
    let token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        return Err(format!("{} is not a valid HTTP header name", shorten(name)));
    }
    if value.bytes().any(|b| b.is_ascii_control()) {
        return Err("the value contains control characters".to_owned());
    }
    Ok(())
}

/// Checks an OTLP endpoint: `http://host[:port][/path]`.
pub(super) fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let e = endpoint.trim();
    if e.is_empty() {
        return Err("is required (e.g. \"http://127.0.0.1:4318\")".to_owned());
    }
    let Some(rest) = e.strip_prefix("http://") else {
        return Err(format!(
            "{} must start with http:// (the built-in client speaks plain HTTP; run the \
             collector beside the instance)",
            shorten(e)
        ));
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    // `[v6]:port`, `host:port`, `[v6]` or `host`.
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !authority.starts_with('[') || host.ends_with(']') => {
            (host, Some(port))
        }
        _ => (authority, None),
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'));
    if !host_ok {
        return Err(format!("{} has no valid host", shorten(e)));
    }
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return Err(format!("{} has an invalid port", shorten(e)));
    }
    if !path.bytes().all(|b| b.is_ascii_graphic()) || path.contains(['?', '#']) {
        return Err(format!("{} has an invalid path", shorten(e)));
    }
    Ok(())
}
