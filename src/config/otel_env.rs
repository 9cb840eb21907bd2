//! The standard OpenTelemetry environment variables (`OTEL_EXPORTER_OTLP_*`,
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) applied to the `telemetry` section.
//!
//! Precedence, as the OpenTelemetry SDKs apply it (a setting made in code or configuration
//! wins over the environment; the environment fills in what is left unset): a value written
//! in the YAML file wins, the variable fills in what the file leaves unset, the defaults come
//! last. Unlike `NATS_URL` and the other `NATS_ROLES_*` overrides, which replace the file's
//! values.

use std::collections::BTreeMap;

use super::telemetry::{OtlpConfig, OtlpProtocol, check_endpoint, check_header};
use super::{ConfigError, ConfigProblem, TelemetryConfig};

/// Base URL of the collector (`/v1/metrics`, `/v1/traces` appended).
pub const ENV_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The full URL of the metrics export, used as it is.
pub const ENV_OTLP_METRICS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
/// The full URL of the traces export, used as it is.
pub const ENV_OTLP_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// `http/protobuf` or `http/json` (`grpc` is refused: the exporter speaks OTLP/HTTP).
pub const ENV_OTLP_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// Request headers, `name=value,name2=value2` (values percent-decoded).
pub const ENV_OTLP_HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
/// The `service.name` resource attribute.
pub const ENV_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// Resource attributes, `key=value,key2=value2` (values percent-decoded).
pub const ENV_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

impl TelemetryConfig {
    /// Fills in what this section leaves unset from the standard OpenTelemetry variables, read
    /// through `env` (pass `|name| std::env::var(name).ok()` for the real ones):
    ///
    /// - `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`,
    ///   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: `otlp.endpoint`, `otlp.metrics_endpoint`,
    ///   `otlp.traces_endpoint` when the file sets none. Without an `otlp` section they turn
    ///   the export on: both signals with the base endpoint, else the signals that have a URL;
    /// - `OTEL_EXPORTER_OTLP_PROTOCOL`: `otlp.protocol` (`http/protobuf` or `http/json`);
    /// - `OTEL_EXPORTER_OTLP_HEADERS`: headers the file's `otlp.headers` does not name;
    /// - `OTEL_SERVICE_NAME`: `service_name`;
    /// - `OTEL_RESOURCE_ATTRIBUTES`: attributes `resource_attributes` does not name.
    ///
    /// Unset or blank variables are ignored. Either all are applied or, on error, none.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with one problem per invalid variable, each naming it: an
    /// endpoint that is not `http://host[:port][/path]`, a protocol other than the two, a list
    /// entry without `=`, a header name that is not an HTTP token.
    pub fn apply_otel_env(
        &mut self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        let (applied, problems) = self.with_otel_env(&env);
        if !problems.is_empty() {
            return Err(ConfigError::Invalid(problems));
        }
        *self = applied;
        Ok(())
    }

    /// This section with the variables applied, and the problems of the invalid ones.
    pub(super) fn with_otel_env(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> (TelemetryConfig, Vec<ConfigProblem>) {
        let get = |name: &str| {
            env(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let mut problems = Vec::new();
        let mut url = |name: &'static str| {
            let value = get(name)?;
            match check_endpoint(&value) {
                Ok(()) => Some(value),
                Err(why) => {
                    problems.push(ConfigProblem::new(name, why));
                    None
                }
            }
        };
        let endpoint = url(ENV_OTLP_ENDPOINT);
        let metrics_endpoint = url(ENV_OTLP_METRICS_ENDPOINT);
        let traces_endpoint = url(ENV_OTLP_TRACES_ENDPOINT);
        let protocol = get(ENV_OTLP_PROTOCOL).and_then(|v| match v.as_str() {
            "http/protobuf" => Some(OtlpProtocol::HttpProtobuf),
            "http/json" => Some(OtlpProtocol::HttpJson),
            "grpc" => {
                problems.push(ConfigProblem::new(
                    ENV_OTLP_PROTOCOL,
                    "grpc is not supported: the exporter speaks OTLP over HTTP (use http/protobuf \
                     and the collector's HTTP port, usually 4318)",
                ));
                None
            }
            other => {
                problems.push(ConfigProblem::new(
                    ENV_OTLP_PROTOCOL,
                    format!("{other:?} is not http/protobuf or http/json"),
                ));
                None
            }
        });
        let headers = get(ENV_OTLP_HEADERS)
            .map(|v| pairs(ENV_OTLP_HEADERS, &v, &mut problems))
            .unwrap_or_default();
        for (name, value) in &headers {
            if let Err(why) = check_header(name, value) {
                problems.push(ConfigProblem::new(ENV_OTLP_HEADERS, why));
            }
        }
        let attributes = get(ENV_RESOURCE_ATTRIBUTES)
            .map(|v| pairs(ENV_RESOURCE_ATTRIBUTES, &v, &mut problems))
            .unwrap_or_default();
        let service_name = get(ENV_SERVICE_NAME);

        let mut t = self.clone();
        if t.service_name.is_none() {
            t.service_name = service_name;
        }
        for (key, value) in attributes {
            t.resource_attributes.entry(key).or_insert(value);
        }
        let any_url = endpoint.is_some() || metrics_endpoint.is_some() || traces_endpoint.is_some();
        if t.otlp.is_none() && any_url {
            t.otlp = Some(OtlpConfig {
                metrics: endpoint.is_some() || metrics_endpoint.is_some(),
                traces: endpoint.is_some() || traces_endpoint.is_some(),
                ..OtlpConfig::default()
            });
        }
        if let Some(o) = &mut t.otlp {
            if o.endpoint.trim().is_empty()
                && let Some(endpoint) = endpoint
            {
                o.endpoint = endpoint;
            }
            if o.metrics_endpoint.is_none() {
                o.metrics_endpoint = metrics_endpoint;
            }
            if o.traces_endpoint.is_none() {
                o.traces_endpoint = traces_endpoint;
            }
            if o.protocol.is_none() {
                o.protocol = protocol;
            }
            for (name, value) in headers {
                if !o.headers.keys().any(|k| k.eq_ignore_ascii_case(&name)) {
                    o.headers.insert(name, value);
                }
            }
        }
        (t, problems)
    }
}

/// `key=value,key2=value2` (the W3C baggage form the OpenTelemetry variables use): keys and
/// values trimmed, values percent-decoded. An entry without `=` or with an empty key is a
/// problem of `var`.
fn pairs(var: &str, text: &str, problems: &mut Vec<ConfigProblem>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        match entry.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => {
                out.insert(key.trim().to_owned(), percent_decode(value.trim()));
            }
            _ => problems.push(ConfigProblem::new(
                var,
                format!(
                    "entry {} is not key=value",
                    super::message::shorten(entry.split('=').next().unwrap_or(entry))
                ),
            )),
        }
    }
    out
}

/// `%XX` sequences decoded (invalid ones kept as they are; invalid UTF-8 replaced).
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(&h), Some(&l)) = (bytes.get(i + 1), bytes.get(i + 2))
            && let (Some(h), Some(l)) = (hex(h), hex(l))
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::Config;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    fn yaml(text: &str) -> Config {
        Config::from_yaml_str(text).expect("valid yaml")
    }

    const ALL: &[(&str, &str)] = &[
        (ENV_OTLP_ENDPOINT, "http://env-collector:4318"),
        (ENV_OTLP_PROTOCOL, "http/json"),
        (ENV_OTLP_HEADERS, "authorization=Bearer%20env,x-tenant=env"),
        (ENV_SERVICE_NAME, "env-service"),
        (
            ENV_RESOURCE_ATTRIBUTES,
            "deployment.environment.name=prod, k8s.pod.name=pod-0,service.name=attr-service",
        ),
    ];

    /// Without a telemetry section, the variables set everything (and turn export on).
    #[test]
    fn the_environment_fills_an_empty_section() {
        let mut c = yaml("");
        c.apply_env(env_of(ALL)).expect("valid");
        let t = &c.telemetry;
        assert_eq!(
            t.service_name(),
            "env-service",
            "OTEL_SERVICE_NAME beats service.name"
        );
        assert_eq!(t.resource_attributes["deployment.environment.name"], "prod");
        assert_eq!(t.resource_attributes["k8s.pod.name"], "pod-0");
        let o = t.otlp.as_ref().expect("export turned on");
        assert!(o.metrics && o.traces);
        assert_eq!(o.metrics_url(), "http://env-collector:4318/v1/metrics");
        assert_eq!(o.traces_url(), "http://env-collector:4318/v1/traces");
        assert_eq!(o.protocol(), OtlpProtocol::HttpJson);
        assert_eq!(o.headers["authorization"], "Bearer env");
        assert!(c.validate().is_ok());
        // OTEL_RESOURCE_ATTRIBUTES' service.name when OTEL_SERVICE_NAME is not set.
        let mut c = yaml("");
        c.apply_env(env_of(&ALL[4..])).expect("valid");
        assert_eq!(c.telemetry.service_name(), "attr-service");
        assert!(c.telemetry.otlp.is_none(), "no endpoint: no export");
        assert_eq!(
            yaml("").telemetry.service_name(),
            crate::config::DEFAULT_SERVICE_NAME
        );
    }

    /// What the file writes wins; the variables fill in the rest.
    #[test]
    fn the_file_wins_over_the_environment() {
        let mut c = yaml(
            "telemetry:\n  service_name: file-service\n  resource_attributes:\n    \
             k8s.pod.name: file-pod\n  otlp:\n    endpoint: http://file-collector:4318\n    \
             protocol: http/protobuf\n    headers:\n      Authorization: Bearer file\n",
        );
        c.apply_env(env_of(ALL)).expect("valid");
        let t = &c.telemetry;
        assert_eq!(t.service_name(), "file-service");
        assert_eq!(t.resource_attributes["k8s.pod.name"], "file-pod");
        assert_eq!(t.resource_attributes["deployment.environment.name"], "prod");
        let o = t.otlp.as_ref().expect("otlp");
        assert_eq!(o.endpoint, "http://file-collector:4318");
        assert_eq!(o.protocol(), OtlpProtocol::HttpProtobuf);
        assert_eq!(o.headers["Authorization"], "Bearer file");
        assert!(
            !o.headers.contains_key("authorization"),
            "names compare without case"
        );
        assert_eq!(o.headers["x-tenant"], "env");
        // What the section leaves unset (protocol, headers, the signals' own URLs) comes from
        // the variables; its endpoint is required (the file is valid on its own, as
        // `nats-roles validate` checks it).
        let mut c =
            yaml("telemetry:\n  otlp:\n    endpoint: http://file:4318\n    traces: false\n");
        c.apply_env(env_of(&[
            ALL[1],
            ALL[2],
            (
                ENV_OTLP_METRICS_ENDPOINT,
                "http://mimir:9009/otlp/v1/metrics",
            ),
        ]))
        .expect("valid");
        let o = c.telemetry.otlp.as_ref().expect("otlp");
        assert_eq!(o.endpoint, "http://file:4318");
        assert_eq!(o.protocol(), OtlpProtocol::HttpJson);
        assert_eq!(o.headers["x-tenant"], "env");
        assert_eq!(o.metrics_url(), "http://mimir:9009/otlp/v1/metrics");
        assert!(!o.traces, "the file's traces: false stays");
        assert!(c.validate().is_ok());
    }

    /// A signal's own URL is used as it is; alone it turns on only that signal.
    #[test]
    fn signal_endpoints_are_used_as_they_are() {
        let mut c = yaml("");
        c.apply_env(env_of(&[(
            ENV_OTLP_TRACES_ENDPOINT,
            "http://tempo:4318/otlp/v1/traces",
        )]))
        .expect("valid");
        let o = c.telemetry.otlp.as_ref().expect("otlp");
        assert!(o.traces && !o.metrics);
        assert_eq!(o.traces_url(), "http://tempo:4318/otlp/v1/traces");
        assert!(
            c.validate().is_ok(),
            "no base endpoint needed: {:?}",
            c.validate()
        );
        let mut c = yaml("");
        c.apply_env(env_of(&[
            (ENV_OTLP_ENDPOINT, "http://collector:4318/"),
            (
                ENV_OTLP_METRICS_ENDPOINT,
                "http://mimir:9009/otlp/v1/metrics",
            ),
        ]))
        .expect("valid");
        let o = c.telemetry.otlp.as_ref().expect("otlp");
        assert_eq!(o.metrics_url(), "http://mimir:9009/otlp/v1/metrics");
        assert_eq!(o.traces_url(), "http://collector:4318/v1/traces");
    }

    #[test]
    fn invalid_variables_are_named_and_nothing_is_applied() {
        let mut c = yaml("");
        let err = c
            .apply_env(env_of(&[
                (ENV_OTLP_ENDPOINT, "https://collector:4318"),
                (ENV_OTLP_PROTOCOL, "grpc"),
                (ENV_OTLP_HEADERS, "ok=1,broken"),
                (ENV_RESOURCE_ATTRIBUTES, "=x"),
                (ENV_SERVICE_NAME, "fine"),
                ("NATS_ROLES_BUCKET", "fine"),
            ]))
            .expect_err("invalid");
        let fields: Vec<&str> = err.problems().iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                ENV_OTLP_ENDPOINT,
                ENV_OTLP_PROTOCOL,
                ENV_OTLP_HEADERS,
                ENV_RESOURCE_ATTRIBUTES
            ],
            "{err}"
        );
        assert!(err.to_string().contains("grpc is not supported"), "{err}");
        assert_eq!(c, yaml(""), "nothing applied");
        let err = c
            .apply_env(env_of(&[(ENV_OTLP_HEADERS, "bad name=1")]))
            .expect_err("not a token");
        assert!(
            err.to_string().contains("not a valid HTTP header name"),
            "{err}"
        );
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%2Cc"), "a b,c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("%C3%A9"), "é");
    }
}
