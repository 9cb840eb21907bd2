//! The HTTP API (`nats_roles::http`) called through `tower::ServiceExt::oneshot`, backed by real
//! role managers on a real nats-server: every endpoint, every error status, the admin actions,
//! the SSE stream (and its end on shutdown), readiness, and that no fencing token leaks.
#![cfg(feature = "http")]
mod admin;
mod bodies;
mod events;
mod limits;
mod placement;
mod readiness;
mod self_view;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use nats_roles::http::{Api, ApiOptions};
use nats_roles::tooling::inspect::{InstanceList, RoleList, RoleView};
use nats_roles::{InstanceId, RoleManager, RoleSpec};
use testkit::NatsServer;
use testkit::roles::{role, wait_until};
use tokio::time::Instant;
use tower::ServiceExt;

use limits::{serve, stop_serving};

const TOKEN: &str = "test-admin-token-0123456789";
const WAIT: Duration = Duration::from_secs(10);

/// A started manager in `bucket` taking part in `campaign` and observing `observe`.
async fn manager(
    url: &str,
    id: &str,
    bucket: &str,
    campaign: &[&str],
    observe: &[&str],
) -> Arc<RoleManager> {
    let client = testkit::connect(url).await;
    let mut meta = std::collections::BTreeMap::new();
    meta.insert("http".to_owned(), format!("http://{id}.test:8080/"));
    let mut builder = RoleManager::builder(client, InstanceId::new(id).expect("valid id"))
        .bucket(bucket)
        .auto_create(1)
        .meta(meta);
    for name in campaign {
        builder = builder.role(RoleSpec::new(role(name)));
    }
    for name in observe {
        builder = builder.role(RoleSpec::new(role(name)).observe_only());
    }
    let manager = builder.start().await.expect("manager starts");
    tokio::time::timeout(WAIT, manager.caught_up())
        .await
        .expect("watcher caught up");
    Arc::new(manager)
}

fn api(manager: &Arc<RoleManager>, admin: bool) -> Api {
    let token = admin.then(|| TOKEN.to_owned());
    Api::new(
        manager.clone(),
        ApiOptions::default().with_admin_token(token),
    )
}

struct Reply {
    /// `METHOD uri`, for assertion messages.
    request: String,
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// Asserts an error reply: status, JSON `{"error", "code"}`.
    fn assert_error(&self, status: StatusCode, code: &str) {
        let what = format!("{}: {}", self.request, self.body);
        assert_eq!(self.status, status, "{what}");
        let json = self.json();
        assert_eq!(json["code"], code, "{what}");
        assert!(
            json["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{what}"
        );
        assert_eq!(
            self.headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes()),
            Some(&b"application/json"[..]),
            "{what}"
        );
    }
}

/// Sends one request through the router; remembers every body in `seen`.
async fn call(
    app: &Router,
    seen: &mut Vec<String>,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: &str,
) -> Reply {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let req = req
        .body(Body::from(body.to_owned()))
        .expect("valid request");
    let response = tokio::time::timeout(WAIT, app.clone().oneshot(req))
        .await
        .unwrap_or_else(|_| panic!("{method} {uri} timed out"))
        .unwrap_or_else(|e| match e {});
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    let body = String::from_utf8(bytes.to_vec()).expect("UTF-8 body");
    seen.push(body.clone());
    Reply {
        request: format!("{method} {uri}"),
        status,
        headers,
        body,
    }
}

/// `GET uri` without a token.
async fn get(app: &Router, seen: &mut Vec<String>, uri: &str) -> Reply {
    call(app, seen, "GET", uri, None, "").await
}

/// `POST uri` with the admin token and `body`.
async fn admin(app: &Router, seen: &mut Vec<String>, uri: &str, body: &str) -> Reply {
    call(app, seen, "POST", uri, Some(TOKEN), body).await
}

/// A request that must be refused: method, URI, bearer token and body; then the HTTP status
/// and the error `code` it must get.
type Refusal<'a> = (&'a str, &'a str, Option<&'a str>, &'a str, u16, &'a str);

/// Sends each request of `table` in order and asserts its error reply (see
/// [`Reply::assert_error`]).
async fn assert_refused(app: &Router, seen: &mut Vec<String>, table: &[Refusal<'_>]) {
    for &(method, uri, token, body, status, code) in table {
        let status = StatusCode::from_u16(status).expect("a status code");
        call(app, seen, method, uri, token, body)
            .await
            .assert_error(status, code);
    }
}

/// Every full token (and its nonce) of every held role of `managers`.
fn secrets(managers: &[&Arc<RoleManager>]) -> Vec<String> {
    let mut out = Vec::new();
    for m in managers {
        for r in m.roles() {
            if let Some(l) = m.leadership(&r) {
                let t = l.token();
                out.push(t.expose());
                out.push(t.nonce().simple().to_string());
                out.push(t.nonce().to_string());
            }
        }
    }
    out
}

fn assert_no_secret(bodies: &[String], secrets: &[String]) {
    assert!(!secrets.is_empty(), "no token to look for");
    for body in bodies {
        for secret in secrets {
            assert!(
                !body.contains(secret.as_str()),
                "a full token leaked: {body}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_with_json_and_the_right_status() {
    let server = NatsServer::start().await;
    let a = manager(
        &server.url(),
        "node-a",
        "api",
        &["alpha", "beta"],
        &["gamma"],
    )
    .await;
    // Leading is known at the acknowledgement; the bucket view (what the API lists) follows
    // one watcher delivery later.
    wait_until(
        WAIT,
        "node-a leads alpha and beta, and the bucket view shows it",
        || {
            a.is_leader(&role("alpha"))
                && a.is_leader(&role("beta"))
                && a.holders()
                    .iter()
                    .filter(|h| h.holder.as_ref().is_some_and(|i| i.as_str() == "node-a"))
                    .count()
                    == 2
        },
    )
    .await;
    let app = api(&a, true).router();
    let mut seen = Vec::new();

    // The dashboard: one page, its script and its style, all from this origin; the CSP allows
    // no inline code.
    let page = get(&app, &mut seen, "/").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("<title>nats-roles</title>"));
    assert!(
        page.body
            .contains(r#"<script src="dashboard.js"></script>"#)
    );
    assert!(
        page.body
            .contains(r#"<link rel="stylesheet" href="dashboard.css">"#)
    );
    assert!(
        !page.body.contains("<script>")
            && !page.body.contains("<style")
            && !page.body.contains(" style="),
        "inline script or style"
    );
    let script = get(&app, &mut seen, "/dashboard.js").await;
    assert_eq!(script.status, StatusCode::OK);
    assert_eq!(
        script.headers[header::CONTENT_TYPE],
        "text/javascript; charset=utf-8"
    );
    assert!(script.body.contains("new EventSource(\"api/events\")"));
    let style = get(&app, &mut seen, "/dashboard.css").await;
    assert_eq!(style.status, StatusCode::OK);
    assert_eq!(
        style.headers[header::CONTENT_TYPE],
        "text/css; charset=utf-8"
    );
    for asset in [&page.body, &script.body, &style.body] {
        assert!(
            !asset.contains("http://") && !asset.contains("https://"),
            "external asset"
        );
    }
    let csp = page.headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap_or_default();
    assert!(
        csp.contains("default-src 'none'")
            && csp.contains("script-src 'self'")
            && csp.contains("style-src 'self'")
            && csp.contains("connect-src 'self'")
            && !csp.contains("unsafe"),
        "{csp}"
    );
    assert_eq!(page.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");

    // Probes.
    let health = get(&app, &mut seen, "/healthz").await;
    assert_eq!(
        (health.status, health.json()["status"].clone()),
        (StatusCode::OK, "ok".into())
    );
    let ready = get(&app, &mut seen, "/readyz").await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.body);
    assert_eq!(ready.json()["status"], "ready");

    // Roles: every role, with this instance's own state.
    let list = get(&app, &mut seen, "/api/roles").await;
    assert_eq!(list.status, StatusCode::OK);
    let list: RoleList = serde_json::from_str(&list.body).expect("a RoleList");
    assert_eq!(
        (list.bucket.as_str(), list.instance.as_deref()),
        ("api", Some("node-a"))
    );
    let names: Vec<&str> = list.roles.iter().map(|r| r.role.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    let alpha = &list.roles[0];
    let term = a.leadership(&role("alpha")).expect("leading").term();
    assert_eq!(alpha.holder.as_deref(), Some("node-a"));
    assert_eq!(alpha.term, Some(term));
    assert_eq!(
        alpha.holder_url.as_deref(),
        Some("http://node-a.test:8080/")
    );
    assert!(
        alpha
            .token
            .as_deref()
            .is_some_and(|t| t.starts_with(&format!("{term}·…")))
    );
    assert!(alpha.held_since.is_some() && alpha.renewal_age_ms.is_some_and(|a| a < 3000));
    assert_eq!(alpha.ttl_ms, Some(3000));
    let local = alpha.local.as_ref().expect("this instance takes part");
    assert_eq!((local.state.as_str(), local.leader), ("LEADER", true));
    let gamma = &list.roles[2];
    assert_eq!(gamma.holder, None);
    assert_eq!(
        gamma.local.as_ref().map(|l| l.state.as_str()),
        Some("FOLLOWER")
    );

    let one = get(&app, &mut seen, "/api/roles/beta").await;
    assert_eq!(one.status, StatusCode::OK);
    let beta: RoleView = serde_json::from_str(&one.body).expect("a RoleView");
    assert_eq!(beta.holder.as_deref(), Some("node-a"));

    let instances = get(&app, &mut seen, "/api/instances").await;
    assert_eq!(instances.status, StatusCode::OK);
    let instances: InstanceList = serde_json::from_str(&instances.body).expect("an InstanceList");
    assert_eq!(instances.instances.len(), 1);
    let me = &instances.instances[0];
    assert!(me.this_instance);
    let held: Vec<&str> = me.roles.iter().map(|r| r.role.as_str()).collect();
    assert_eq!(held, ["alpha", "beta"]);

    // Unknown roles and paths, wrong methods (DELETE says what is allowed).
    let wrong = call(&app, &mut seen, "DELETE", "/api/roles", None, "").await;
    wrong.assert_error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    assert!(
        wrong.headers[header::ALLOW]
            .to_str()
            .unwrap_or_default()
            .contains("GET")
    );
    // Admin: a missing token is answered 401 with a challenge, before anything else is
    // looked at (the role `nope` does not exist).
    let (release, evict) = ("/api/roles/alpha/release", "/api/roles/alpha/evict");
    for path in [release, evict, "/api/roles/nope/evict"] {
        let r = call(&app, &mut seen, "POST", path, None, "").await;
        r.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
        assert!(r.headers.contains_key(header::WWW_AUTHENTICATE));
    }
    let wrong_token = Some("wrong-token-0123456789");
    #[rustfmt::skip]
    let refusals: [Refusal; 19] = [
        ("GET", "/api/roles/nope", None, "", 404, "unknown_role"),
        ("GET", "/api/roles/bad.name", None, "", 400, "invalid_role_name"),
        ("GET", "/api/nothing", None, "", 404, "not_found"),
        ("GET", release, Some(TOKEN), "", 405, "method_not_allowed"),
        ("POST", "/api/roles", None, "", 405, "method_not_allowed"),
        // A wrong token: 401 too, whatever the role.
        ("POST", release, wrong_token, "", 401, "unauthorized"),
        ("POST", evict, wrong_token, "", 401, "unauthorized"),
        ("POST", "/api/roles/nope/evict", wrong_token, "", 401, "unauthorized"),
        // Bodies.
        ("POST", release, Some(TOKEN), "{", 400, "bad_request"),
        ("POST", release, Some(TOKEN), "[1, 2]", 400, "bad_request"),
        ("POST", release, Some(TOKEN), r#"{"cooldown": 5}"#, 400, "bad_request"),
        ("POST", release, Some(TOKEN), r#"{"colldown": "5s"}"#, 400, "bad_request"),
        ("POST", release, Some(TOKEN), r#"{"cooldown": "forever"}"#, 400, "bad_request"),
        ("POST", evict, Some(TOKEN), "not json", 400, "bad_request"),
        ("POST", evict, Some(TOKEN), r#"{"revision": "7"}"#, 400, "bad_request"),
        ("POST", evict, Some(TOKEN), r#"{"revison": 7}"#, 400, "bad_request"),
        ("POST", "/api/roles/bad.name/evict", Some(TOKEN), "", 400, "invalid_role_name"),
        ("POST", "/api/roles/nope/release", Some(TOKEN), "", 404, "unknown_role"),
        ("POST", "/api/roles/gamma/release", Some(TOKEN), "", 409, "not_leader"),
    ];
    assert_refused(&app, &mut seen, &refusals).await;
    assert!(
        a.is_leader(&role("alpha")),
        "a refused request changed nothing"
    );

    // Admin actions are off without a configured token, whatever the request says.
    let closed = api(&a, false).router();
    #[rustfmt::skip]
    let refusals: [Refusal; 2] = [
        ("POST", release, Some(TOKEN), "", 403, "admin_disabled"),
        ("POST", evict, None, "", 403, "admin_disabled"),
    ];
    assert_refused(&closed, &mut seen, &refusals).await;

    assert_no_secret(&seen, &secrets(&[&a]));
    a.shutdown(WAIT).await.expect("clean shutdown");
}

/// A lease written by another client with 900 KB of metadata is shown capped in
/// `/api/roles`, `/api/roles/{role}` and `/api/instances` (before, it was echoed verbatim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_metadata_is_capped_in_every_view() {
    let server = NatsServer::start().await;
    let a = manager(&server.url(), "node-a", "hostile", &[], &["alpha"]).await;
    let js = async_nats::jetstream::new(testkit::connect(&server.url()).await);
    let kv = js.get_key_value("hostile").await.expect("the bucket");
    let blob = "x".repeat(900 * 1024);
    let mut meta = serde_json::Map::new();
    meta.insert("blob".into(), blob.clone().into());
    meta.insert(
        "http".into(),
        format!("http://intruder/{}", "p".repeat(1000)).into(),
    );
    meta.insert("k".repeat(5000), "v".into());
    for n in 0..1000 {
        meta.insert(format!("m{n:04}"), n.to_string().into());
    }
    let lease = serde_json::json!({
        "v": 2,
        "holder": "intruder",
        "incarnation": uuid::Uuid::new_v4(),
        "session": uuid::Uuid::new_v4(),
        "session_key": "session.intruder.3000",
        "nonce": uuid::Uuid::new_v4(),
        "priority": 0,
        "ttl_ms": 3000,
        "meta": meta,
    });
    kv.put(
        "role.alpha",
        serde_json::to_vec(&lease).expect("JSON").into(),
    )
    .await
    .expect("put the foreign lease");
    wait_until(WAIT, "node-a sees the intruder", || {
        a.holders()
            .iter()
            .any(|h| h.holder.as_ref().is_some_and(|i| i.as_str() == "intruder"))
    })
    .await;
    let app = api(&a, false).router();
    let mut seen = Vec::new();
    for path in ["/api/roles", "/api/roles/alpha", "/api/instances"] {
        let reply = get(&app, &mut seen, path).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert!(
            reply.body.len() < 16 * 1024,
            "{path}: {} bytes",
            reply.body.len()
        );
        assert!(!reply.body.contains(&blob[..1024]), "{path}");
    }
    let view: RoleView = serde_json::from_str(&seen[1]).expect("a RoleView");
    assert_eq!(view.holder.as_deref(), Some("intruder"));
    assert!(view.meta_truncated);
    assert_eq!(
        view.meta.len(),
        nats_roles::tooling::inspect::MAX_SHOWN_META
    );
    assert!(view.meta["blob"].ends_with('…'));
    assert_eq!(view.holder_url, None, "a cut URL is no link");
    let list: InstanceList = serde_json::from_str(&seen[2]).expect("an InstanceList");
    let intruder = list
        .instances
        .iter()
        .find(|i| i.instance == "intruder")
        .expect("the intruder is listed");
    assert!(intruder.meta_truncated && intruder.url.is_none());
    a.shutdown(WAIT).await.expect("clean shutdown");
}
