//! Observability end to end, with a real nats-server and `nats-roles run` processes:
//! - `GET /metrics` before and after a fail-over (and a server stall) moves the gauges and
//!   counters as it should;
//! - every metric the Grafana dashboard queries is in a real scrape;
//! - `telemetry.role_metrics`: no `role` label above 100 roles with `auto`, series for a
//!   listed role only;
//! - no fencing token (nonce) of any term appears in logs, stdout or scrapes;
//! - OTLP/HTTP export to an in-test receiver: a span per transition, metrics too.
#![cfg(all(feature = "http", feature = "otel"))]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use testkit::NatsServer;
use testkit::eventually;
use testkit::http;
use testkit::instances::Deployment;

/// TTL 1 s, heartbeat 250 ms (config validation: operation_timeout < ttl × 0.9).
const FAST: &str = "timing:\n  ttl: 1s\n  heartbeat: 250ms\n  operation_timeout: 500ms\n  \
                    disconnect_grace: 1000ms\n";
const WAIT: Duration = Duration::from_secs(20);

/// One scrape: the body and its samples (`name{labels}` → value).
struct Scrape {
    body: String,
    samples: BTreeMap<String, f64>,
}

impl Scrape {
    /// The value of the series `name` whose labels include every `label="value"` of `with`,
    /// summed over the matching series (`None` when there is none).
    fn sum(&self, name: &str, with: &[(&str, &str)]) -> Option<f64> {
        let mut found = None;
        for (series, v) in &self.samples {
            let (n, labels) = series.split_once('{').unwrap_or((series.as_str(), ""));
            if n != name {
                continue;
            }
            if with
                .iter()
                .all(|(k, val)| labels.contains(&format!("{k}=\"{val}\"")))
            {
                *found.get_or_insert(0.0) += v;
            }
        }
        found
    }

    /// Names of every sample (histogram series without their suffix too).
    fn names(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for series in self.samples.keys() {
            let name = series.split('{').next().unwrap_or_default().to_owned();
            for suffix in ["_bucket", "_sum", "_count"] {
                if let Some(base) = name.strip_suffix(suffix) {
                    out.insert(base.to_owned());
                }
            }
            out.insert(name);
        }
        out
    }
}

async fn scrape(port: u16) -> Scrape {
    let (status, body) = http::request(port, "GET", "/metrics", &[], "")
        .await
        .unwrap_or_else(|e| panic!("GET /metrics on {port}: {e}"));
    assert_eq!(status, 200, "GET /metrics: {body}");
    let mut samples = BTreeMap::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad sample line {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|e| panic!("bad value in {line:?}: {e}"));
        samples.insert(series.to_owned(), value);
    }
    Scrape { body, samples }
}

/// Waits until instance `port`'s scrape satisfies `check`; returns that scrape.
async fn scrape_until(what: &str, port: u16, check: impl Fn(&Scrape) -> bool) -> Scrape {
    eventually(what, WAIT, || async {
        let s = scrape(port).await;
        check(&s).then_some(s)
    })
    .await
}

fn is_leader(s: &Scrape, role: &str) -> Option<f64> {
    s.sum("nats_roles_election_is_leader", &[("role", role)])
}

/// The nonce of every term seen in the bucket's role keys (hyphenated and simple forms).
async fn record_nonces(kv: &jetstream::kv::Store, roles: &[&str], seen: &mut BTreeSet<String>) {
    for role in roles {
        let Ok(Some(entry)) = kv.entry(format!("role.{role}")).await else {
            continue;
        };
        let value: serde_json::Value = serde_json::from_slice(&entry.value).unwrap_or_default();
        if let Some(nonce) = value["nonce"].as_str() {
            seen.insert(nonce.to_owned());
            seen.insert(nonce.replace('-', ""));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_a_failover_and_never_show_a_token() {
    const ROLES: [&str; 2] = ["alpha", "beta"];
    let mut server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let mut d = Deployment::new(&server.url(), "obs", &ROLES, FAST);
    // As much logging as there is: the token scan covers debug lines too.
    d.env("RUST_LOG", "debug");
    let a = d.start("node-a").await;
    let js = jetstream::new(client);
    let kv = eventually("the bucket", WAIT, || {
        let js = js.clone();
        async move { js.get_key_value("obs").await.ok() }
    })
    .await;
    let mut scrapes = Vec::new();
    let mut nonces = BTreeSet::new();

    // Before: node-a holds both roles.
    let pa = d.instances[a].port;
    let before_a = scrape_until("node-a leads both roles", pa, |s| {
        ROLES.iter().all(|r| is_leader(s, r) == Some(1.0))
    })
    .await;
    assert_eq!(
        before_a.sum("nats_roles_roles_held", &[("instance_id", "node-a")]),
        Some(2.0),
        "{}",
        before_a.body
    );
    for r in ROLES {
        assert_eq!(
            before_a.sum(
                "nats_roles_election_acquire_attempts_total",
                &[("role", r), ("status", "won")]
            ),
            Some(1.0),
            "{}",
            before_a.body
        );
    }
    record_nonces(&kv, &ROLES, &mut nonces).await;
    let b = d.start("node-b").await;
    let pb = d.instances[b].port;
    let before_b = scrape_until("node-b follows both roles", pb, |s| {
        ROLES.iter().all(|r| is_leader(s, r) == Some(0.0))
    })
    .await;
    assert_eq!(
        before_b.sum("nats_roles_roles_held", &[]),
        Some(0.0),
        "{}",
        before_b.body
    );
    assert_eq!(
        before_b.sum(
            "nats_roles_election_transitions_total",
            &[("to_state", "LEADER")]
        ),
        None,
        "{}",
        before_b.body
    );
    // Renewals are measured on the holder.
    let renewed_a = scrape_until("node-a renews", pa, |s| {
        s.sum(
            "nats_roles_election_heartbeat_duration_seconds_count",
            &[("status", "ok")],
        )
        .is_some_and(|n| n >= 4.0)
    })
    .await;
    scrapes.extend([before_a, before_b, renewed_a]);

    // Fail-over: node-a stops (graceful release), node-b takes both roles.
    d.terminate(a);
    let status = d.wait_exit(a, WAIT).await;
    assert!(status.success(), "node-a exit: {status:?}\n{}", d.report());
    let after_b = scrape_until("node-b leads both roles", pb, |s| {
        ROLES.iter().all(|r| is_leader(s, r) == Some(1.0))
            && s.sum("nats_roles_roles_held", &[]) == Some(2.0)
    })
    .await;
    record_nonces(&kv, &ROLES, &mut nonces).await;
    for r in ROLES {
        assert_eq!(
            after_b.sum(
                "nats_roles_election_transitions_total",
                &[("role", r), ("to_state", "LEADER")]
            ),
            Some(1.0),
            "{}",
            after_b.body
        );
        assert_eq!(
            after_b.sum(
                "nats_roles_election_acquire_attempts_total",
                &[("role", r), ("status", "won")]
            ),
            Some(1.0),
            "{}",
            after_b.body
        );
        assert!(
            after_b
                .sum(
                    "nats_roles_election_seconds_since_last_renewal",
                    &[("role", r)]
                )
                .is_some_and(|s| s < 1.0),
            "{}",
            after_b.body
        );
    }
    assert_eq!(
        after_b.sum("nats_roles_election_connection_status", &[]),
        Some(2.0),
        "{}",
        after_b.body
    );
    scrapes.push(after_b);

    // A stalled server: renewals get no answer (failures by type), the holder's deadline
    // passes (a transition with its reason), and it wins the roles back afterwards.
    server.pause();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    server.resume();
    let recovered = scrape_until("node-b recovers after the stall", pb, |s| {
        ROLES.iter().all(|r| is_leader(s, r) == Some(1.0))
            && s.sum(
                "nats_roles_election_failures_total",
                &[("error_type", "timeout")],
            )
            .is_some_and(|n| n >= 1.0)
            && s.sum(
                "nats_roles_election_transitions_total",
                &[("from_state", "LEADER"), ("reason", "deadline_expired")],
            )
            .is_some_and(|n| n >= 1.0)
    })
    .await;
    record_nonces(&kv, &ROLES, &mut nonces).await;
    let durations = recovered
        .sum("nats_roles_election_leader_duration_seconds_count", &[])
        .unwrap_or_default();
    assert!(durations >= 2.0, "{}", recovered.body);

    // Every metric the dashboard queries is exported.
    let exported = recovered.names();
    for name in dashboard_metrics() {
        assert!(
            exported.contains(&name),
            "the dashboard queries {name}, which /metrics does not export:\n{}",
            recovered.body
        );
    }
    scrapes.push(recovered);

    // No token anywhere: scrapes, API answers, stdout and stderr of both processes.
    let (_, api) = http::request(pb, "GET", "/api/roles", &[], "")
        .await
        .unwrap_or_else(|e| panic!("GET /api/roles: {e}"));
    d.terminate(b);
    d.wait_exit(b, WAIT).await;
    assert!(nonces.len() >= 4, "nonces of the terms: {nonces:?}");
    let mut haystacks: Vec<(String, String)> = scrapes
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("scrape {i}"), s.body.clone()))
        .collect();
    haystacks.push(("/api/roles".into(), api));
    for i in &d.instances {
        haystacks.push((format!("{} stdout", i.id), i.stdout().join("\n")));
        haystacks.push((format!("{} stderr", i.id), i.stderr()));
    }
    let logs: usize = haystacks.iter().map(|(_, h)| h.len()).sum();
    assert!(logs > 10_000, "suspiciously little output ({logs} bytes)");
    for nonce in &nonces {
        for (what, text) in &haystacks {
            assert!(
                !text.to_lowercase().contains(nonce),
                "a token nonce ({nonce}) appears in {what}"
            );
        }
    }
}

/// A healthy instance that just started, with no failure and no term ended yet, already
/// exports every metric the dashboard queries (zero series), so no panel shows "No data".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_instance_exports_every_metric_the_dashboard_queries() {
    let server = NatsServer::start().await;
    let mut d = Deployment::new(&server.url(), "obs-fresh", &["alpha"], FAST);
    let a = d.start("node-a").await;
    let port = d.instances[a].port;
    let fresh = scrape_until("node-a leads", port, |s| is_leader(s, "alpha") == Some(1.0)).await;
    let exported = fresh.names();
    let missing: Vec<String> = dashboard_metrics()
        .into_iter()
        .filter(|name| !exported.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries {missing:?}, which a fresh instance does not export:\n{}",
        fresh.body
    );
    for (name, labels) in [
        (
            "nats_roles_election_failures_total",
            &[("role", "alpha"), ("error_type", "timeout")][..],
        ),
        (
            "nats_roles_election_token_validation_failures_total",
            &[("role", "alpha")],
        ),
        (
            "nats_roles_election_leader_duration_seconds_count",
            &[("role", "alpha")],
        ),
    ] {
        assert_eq!(
            fresh.sum(name, labels),
            Some(0.0),
            "{name}:\n{}",
            fresh.body
        );
    }
    d.terminate(a);
    d.wait_exit(a, WAIT).await;
}

/// `telemetry.role_metrics`: above 100 roles at start, `auto` gives no role series of its own
/// (says so in the log), the dashboard's metrics are still exported (all but `is_leader`, the
/// per-role panels) and the instance's counters count every role; a listed role has series,
/// an unlisted one has not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_series_follow_role_metrics() {
    let server = NatsServer::start().await;
    let names: Vec<String> = (0..101).map(|i| format!("r{i:03}")).collect();
    let roles: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut d = Deployment::new(&server.url(), "obs-auto", &roles, FAST);
    let a = d.start("node-a").await;
    let port = d.instances[a].port;
    let held = |s: &Scrape| s.sum("nats_roles_roles_held", &[]) == Some(101.0);
    let s = scrape_until("node-a holds the 101 roles", port, held).await;
    assert!(!s.body.contains("role=\""), "{}", s.body);
    let exported = s.names();
    let missing: Vec<String> = dashboard_metrics()
        .into_iter()
        .filter(|name| name != "nats_roles_election_is_leader" && !exported.contains(name))
        .collect();
    assert!(missing.is_empty(), "{missing:?} missing:\n{}", s.body);
    assert_eq!(
        s.sum(
            "nats_roles_election_acquire_attempts_total",
            &[("status", "won")]
        ),
        Some(101.0),
        "{}",
        s.body
    );
    assert_eq!(
        s.sum("nats_roles_election_connection_status", &[]),
        Some(1.0),
        "{}",
        s.body
    );
    d.terminate(a);
    d.wait_exit(a, WAIT).await;
    let log = d.instances[a].stderr();
    assert!(log.contains("metrics: no per-role series"), "{log}");

    let extra = format!("{FAST}telemetry:\n  role_metrics: [alpha]\n");
    let mut d = Deployment::new(&server.url(), "obs-list", &["alpha", "beta"], &extra);
    let a = d.start("node-a").await;
    let port = d.instances[a].port;
    let both = |s: &Scrape| s.sum("nats_roles_roles_held", &[]) == Some(2.0);
    let s = scrape_until("node-a holds alpha and beta", port, both).await;
    assert_eq!(is_leader(&s, "alpha"), Some(1.0), "{}", s.body);
    assert!(!s.body.contains("beta"), "{}", s.body);
    assert_eq!(
        s.sum(
            "nats_roles_election_acquire_attempts_total",
            &[("status", "won")]
        ),
        Some(2.0),
        "alpha on its own series, beta on the instance's:\n{}",
        s.body
    );
    d.terminate(a);
    d.wait_exit(a, WAIT).await;
    assert!(!d.instances[a].stderr().contains("no per-role series"));
}

/// The metric names in every `expr` of the Grafana dashboard.
fn dashboard_metrics() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/dashboards/nats-roles.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let json: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not JSON: {e}"));
    let mut exprs = Vec::new();
    collect_exprs(&json, &mut exprs);
    assert!(exprs.len() >= 10, "few queries in the dashboard: {exprs:?}");
    let mut names = BTreeSet::new();
    for expr in exprs {
        let mut rest = expr.as_str();
        while let Some(at) = rest.find("nats_roles_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            names.insert(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    assert!(names.len() >= 8, "{names:?}");
    // The datasource is a variable, so the dashboard imports as is.
    let vars = json["templating"]["list"]
        .as_array()
        .unwrap_or_else(|| panic!("no templating list"));
    assert!(
        vars.iter()
            .any(|v| v["type"] == "datasource" && v["query"] == "prometheus"),
        "no prometheus datasource variable"
    );
    names
}

fn collect_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// What the in-test OTLP receiver got: (path, content type, body, `x-tenant` header).
type Received = Arc<Mutex<Vec<(String, String, Vec<u8>, Option<String>)>>>;

/// A minimal OTLP/HTTP receiver on a free loopback port (answers `{}` / an empty message).
async fn otlp_receiver() -> (u16, Received) {
    let got: Received = Arc::default();
    let receiver = |path: &'static str| {
        let got = got.clone();
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                let content_type = headers
                    .get(axum::http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                got.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((
                        path.to_owned(),
                        content_type.clone(),
                        body.to_vec(),
                        headers
                            .get("x-tenant")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned),
                    ));
                let answer: &'static [u8] = if content_type == "application/json" {
                    b"{}"
                } else {
                    b""
                };
                ([(axum::http::header::CONTENT_TYPE, content_type)], answer)
            },
        )
    };
    let app = axum::Router::new()
        .route("/v1/traces", receiver("/v1/traces"))
        .route("/v1/metrics", receiver("/v1/metrics"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the OTLP receiver");
    let port = listener.local_addr().expect("local address").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, got)
}

/// A span as received: name and attributes (values as text).
type Span = (String, BTreeMap<String, String>);

/// Every span of the received traces, decoded from JSON or protobuf by content type.
fn spans(got: &Received) -> Vec<Span> {
    let mut out = Vec::new();
    let got = got
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (_, content_type, body, _) in got.iter().filter(|(p, _, _, _)| p == "/v1/traces") {
        if content_type == "application/json" {
            out.extend(json_spans(body));
        } else {
            assert_eq!(content_type, "application/x-protobuf");
            out.extend(protobuf_spans(body));
        }
    }
    out
}

fn json_spans(body: &[u8]) -> Vec<Span> {
    let body: serde_json::Value =
        serde_json::from_slice(body).unwrap_or_else(|e| panic!("OTLP JSON: {e}"));
    let mut out = Vec::new();
    for rs in body["resourceSpans"].as_array().into_iter().flatten() {
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            for span in ss["spans"].as_array().into_iter().flatten() {
                let mut attrs = BTreeMap::new();
                for kv in span["attributes"].as_array().into_iter().flatten() {
                    let v = &kv["value"];
                    let text = v["stringValue"]
                        .as_str()
                        .map(str::to_owned)
                        .or_else(|| v["intValue"].as_str().map(str::to_owned))
                        .or_else(|| v["intValue"].as_i64().map(|n| n.to_string()))
                        .unwrap_or_else(|| v.to_string());
                    attrs.insert(kv["key"].as_str().unwrap_or_default().to_owned(), text);
                }
                out.push((span["name"].as_str().unwrap_or_default().to_owned(), attrs));
            }
        }
    }
    out
}

fn protobuf_spans(body: &[u8]) -> Vec<Span> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message as _;
    let request = ExportTraceServiceRequest::decode(body)
        .unwrap_or_else(|e| panic!("OTLP protobuf traces: {e}"));
    let mut out = Vec::new();
    for rs in request.resource_spans {
        for ss in rs.scope_spans {
            for span in ss.spans {
                let attrs = span
                    .attributes
                    .into_iter()
                    .map(|kv| {
                        let text = match kv.value.and_then(|v| v.value) {
                            Some(Value::StringValue(s)) => s,
                            Some(Value::IntValue(n)) => n.to_string(),
                            other => format!("{other:?}"),
                        };
                        (kv.key, text)
                    })
                    .collect();
                out.push((span.name, attrs));
            }
        }
    }
    out
}

/// Names of every metric in the received metric exports.
fn metric_names(got: &Received) -> BTreeSet<String> {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use prost::Message as _;
    let mut out = BTreeSet::new();
    let got = got
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (_, content_type, body, _) in got.iter().filter(|(p, _, _, _)| p == "/v1/metrics") {
        if content_type == "application/json" {
            let json: serde_json::Value =
                serde_json::from_slice(body).unwrap_or_else(|e| panic!("OTLP JSON: {e}"));
            for rm in json["resourceMetrics"].as_array().into_iter().flatten() {
                for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
                    for m in sm["metrics"].as_array().into_iter().flatten() {
                        out.insert(m["name"].as_str().unwrap_or_default().to_owned());
                    }
                }
            }
        } else {
            let request = ExportMetricsServiceRequest::decode(body.as_slice())
                .unwrap_or_else(|e| panic!("OTLP protobuf metrics: {e}"));
            for rm in request.resource_metrics {
                for sm in rm.scope_metrics {
                    out.extend(sm.metrics.into_iter().map(|m| m.name));
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_json_export_has_a_span_per_transition_and_the_metrics() {
    otlp_export("http/json").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_protobuf_export_has_a_span_per_transition_and_the_metrics() {
    otlp_export("http/protobuf").await;
}

/// One instance exporting to the in-test receiver with `protocol`, through promotion and a
/// graceful stop.
async fn otlp_export(protocol: &str) {
    let server = NatsServer::start().await;
    let (port, got) = otlp_receiver().await;
    let extra = format!(
        "{FAST}telemetry:\n  log_format: json\n  otlp:\n    endpoint: http://127.0.0.1:{port}\n    \
         protocol: {protocol}\n    export_interval: 500ms\n"
    );
    let mut d = Deployment::new(&server.url(), "otlp", &["alpha"], &extra);
    let a = d.start("node-a").await;
    let pa = d.instances[a].port;
    scrape_until("node-a leads", pa, |s| is_leader(s, "alpha") == Some(1.0)).await;
    let js = jetstream::new(testkit::connect(&server.url()).await);
    let kv = js.get_key_value("otlp").await.expect("the bucket");
    let mut nonces = BTreeSet::new();
    record_nonces(&kv, &["alpha"], &mut nonces).await;
    assert_eq!(nonces.len(), 2, "the term's nonce in two forms: {nonces:?}");
    // Metrics arrive while the process runs (periodic export).
    eventually("OTLP metrics", WAIT, || async {
        let names = metric_names(&got);
        [
            "nats_roles_election_is_leader",
            "nats_roles_election_transitions_total",
        ]
        .iter()
        .all(|n| names.contains(*n))
        .then_some(())
    })
    .await;
    d.terminate(a);
    let status = d.wait_exit(a, WAIT).await;
    assert!(status.success(), "exit: {status:?}\n{}", d.report());

    // The stderr log is JSON, one transition event (at info) per state change of a term or
    // the end; a candidate's waiting and contending logs at debug (not shown at `info`).
    let stderr = d.instances[a].stderr();
    let mut logged = Vec::new();
    for line in stderr.lines() {
        let json: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line}"));
        let f = &json["fields"];
        if f["message"] == "transition" {
            assert_eq!(f["role"], "alpha", "{line}");
            assert_eq!(f["instance"], "node-a", "{line}");
            logged.push((
                f["from"].as_str().unwrap_or_default().to_owned(),
                f["to"].as_str().unwrap_or_default().to_owned(),
                f["reason"].as_str().unwrap_or_default().to_owned(),
            ));
        }
    }
    assert!(
        logged.iter().any(|(_, to, _)| to == "LEADER")
            && logged.iter().any(|(_, _, r)| r == "shutdown")
            && logged.last().is_some_and(|(_, to, _)| to == "STOPPED"),
        "transitions logged: {logged:?}\n{stderr}"
    );

    // Exported at shutdown at the latest: one span per transition, same order of states.
    let spans = spans(&got);
    let mut exported: Vec<(String, String, String)> = spans
        .iter()
        .filter(|(name, _)| name == "transition")
        .map(|(_, a)| {
            assert_eq!(a.get("role").map(String::as_str), Some("alpha"), "{a:?}");
            assert_eq!(
                a.get("instance").map(String::as_str),
                Some("node-a"),
                "{a:?}"
            );
            (
                a.get("from").cloned().unwrap_or_default(),
                a.get("to").cloned().unwrap_or_default(),
                a.get("reason").cloned().unwrap_or_default(),
            )
        })
        .collect();
    let term_state = |s: &str| ["LEADER", "DEMOTED", "STOPPED"].contains(&s);
    assert!(
        logged
            .iter()
            .all(|(from, to, _)| term_state(from) || term_state(to)),
        "a candidate's transition logged at info: {logged:?}"
    );
    assert!(
        exported
            .iter()
            .any(|(from, to, _)| from == "INIT" && to == "CANDIDATE"),
        "every transition has a span, a candidate's too: {exported:?}"
    );
    let mut expected = logged.clone();
    exported.retain(|(from, to, _)| term_state(from) || term_state(to));
    exported.sort();
    expected.sort();
    assert_eq!(exported, expected, "transition spans vs logged transitions");
    // The term has a span with its number and end reason; KV writes are spans too.
    let term = spans
        .iter()
        .find(|(name, _)| name == "term")
        .unwrap_or_else(|| panic!("no term span in {spans:?}"));
    assert!(
        term.1.get("term").is_some_and(|t| t.parse::<u64>().is_ok()),
        "{term:?}"
    );
    assert_eq!(
        term.1.get("reason").map(String::as_str),
        Some("shutdown"),
        "{term:?}"
    );
    // Protocol v2: role keys are written when a term starts and ends; the session key is
    // what is renewed.
    for kind in [
        "acquire",
        "release",
        "session_start",
        "session_renew",
        "session_end",
    ] {
        assert!(
            spans
                .iter()
                .any(|(n, a)| n == "kv" && a.get("kind").map(String::as_str) == Some(kind)),
            "no kv span for {kind}"
        );
    }
    // No token in what was exported, nor in the log.
    let got = got
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for nonce in &nonces {
        for (path, _, body, _) in got.iter() {
            let text = String::from_utf8_lossy(body).to_lowercase();
            assert!(
                !text.contains(nonce),
                "the term's nonce is in an export to {path}"
            );
        }
        assert!(
            !stderr.to_lowercase().contains(nonce),
            "the term's nonce is in the log"
        );
    }
}

/// `nats_roles_build_info{version, protocol} 1` on `GET /metrics`, and an instance whose file
/// has no `telemetry` section exports over OTLP as the standard `OTEL_*` variables say: to
/// `OTEL_EXPORTER_OTLP_ENDPOINT`, with `OTEL_EXPORTER_OTLP_PROTOCOL` and
/// `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` on the
/// resource (`service.instance.id` stays the instance id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_info_and_otel_variables() {
    let server = NatsServer::start().await;
    let (port, got) = otlp_receiver().await;
    let mut d = Deployment::new(&server.url(), "obs-otel-env", &["alpha"], FAST);
    d.env(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        &format!("http://127.0.0.1:{port}"),
    );
    d.env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
    d.env("OTEL_SERVICE_NAME", "roles-from-env");
    d.env("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=ci%20tenant");
    d.env(
        "OTEL_RESOURCE_ATTRIBUTES",
        "deployment.environment.name=ci%20run,service.instance.id=not-this",
    );
    let a = d.start("node-a").await;
    let pa = d.instances[a].port;
    let s = scrape_until("node-a leads", pa, |s| is_leader(s, "alpha") == Some(1.0)).await;
    let protocol = nats_roles::tooling::value::VALUE_VERSION.to_string();
    assert_eq!(
        s.sum(
            "nats_roles_build_info",
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("protocol", &protocol)
            ]
        ),
        Some(1.0),
        "{}",
        s.body
    );
    d.terminate(a);
    let status = d.wait_exit(a, WAIT).await;
    assert!(status.success(), "exit: {status:?}\n{}", d.report());
    // The final export at shutdown at the latest.
    assert!(
        metric_names(&got).contains("nats_roles_build_info"),
        "exported: {:?}",
        metric_names(&got)
    );
    let got = got
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (_, content_type, body, tenant) = got
        .iter()
        .find(|(path, _, _, _)| path == "/v1/metrics")
        .expect("a metrics export");
    assert_eq!(content_type, "application/json");
    assert_eq!(
        tenant.as_deref(),
        Some("ci tenant"),
        "OTEL_EXPORTER_OTLP_HEADERS"
    );
    let json: serde_json::Value = serde_json::from_slice(body).expect("OTLP JSON");
    let mut resource = BTreeMap::new();
    for kv in json["resourceMetrics"][0]["resource"]["attributes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        resource.insert(
            kv["key"].as_str().unwrap_or_default().to_owned(),
            kv["value"]["stringValue"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    for (key, value) in [
        ("service.name", "roles-from-env"),
        ("deployment.environment.name", "ci run"),
        ("service.instance.id", "node-a"),
    ] {
        assert_eq!(
            resource.get(key).map(String::as_str),
            Some(value),
            "{key} in {resource:?}"
        );
    }
}
