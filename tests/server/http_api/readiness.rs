//! Readiness (`/readyz`): draining, disconnected, and a role that cannot campaign.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_when_draining_or_disconnected() {
    let mut server = NatsServer::start().await;
    let a = manager(&server.url(), "node-a", "ready", &["alpha"], &[]).await;
    let mut seen = Vec::new();
    let draining = api(&a, false);
    let app = draining.router();
    assert_eq!(get(&app, &mut seen, "/readyz").await.status, StatusCode::OK);
    draining.drain();
    let r = get(&app, &mut seen, "/readyz").await;
    r.assert_error(StatusCode::SERVICE_UNAVAILABLE, "not_ready");
    assert_eq!(r.json()["reasons"][0], "shutting down");
    assert_eq!(r.json()["shutting_down"], true);
    assert_eq!(
        r.json()["draining"],
        false,
        "placement draining is another flag"
    );

    let app = api(&a, false).router();
    assert_eq!(get(&app, &mut seen, "/readyz").await.status, StatusCode::OK);
    server.kill();
    let deadline = Instant::now() + WAIT;
    let r = loop {
        let r = get(&app, &mut seen, "/readyz").await;
        if r.status != StatusCode::OK || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    r.assert_error(StatusCode::SERVICE_UNAVAILABLE, "not_ready");
    assert_eq!(r.json()["connected"], false, "{}", r.body);
    assert!(r.body.contains("not connected to NATS"), "{}", r.body);
    // The liveness probe does not care.
    assert_eq!(
        get(&app, &mut seen, "/healthz").await.status,
        StatusCode::OK
    );
}

/// A role the server will not store (a stream too small for any lease) makes the instance not
/// ready, with a reason that says the role cannot campaign or renew and keeps retrying; the
/// same words are its `local.error` in `/api/roles`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_a_role_that_cannot_campaign_and_keeps_retrying() {
    let server = NatsServer::start().await;
    let js = async_nats::jetstream::new(testkit::connect(&server.url()).await);
    // No lease fits (one is about 400 bytes with its headers).
    testkit::create_kv(
        &js,
        async_nats::jetstream::kv::Config {
            bucket: "full".to_owned(),
            history: 1,
            limit_markers: Some(Duration::from_secs(60)),
            max_bytes: 200,
            ..Default::default()
        },
    )
    .await;
    let a = manager(&server.url(), "node-a", "full", &["alpha"], &[]).await;
    let mut error = None;
    wait_until(WAIT, "alpha reports why it cannot campaign", || {
        error = a.status(&role("alpha")).and_then(|s| s.last_error);
        error.is_some()
    })
    .await;
    let error = error.unwrap_or_default();
    let mut seen = Vec::new();
    let app = api(&a, false).router();
    let r = call(&app, &mut seen, "GET", "/readyz", None, "").await;
    r.assert_error(StatusCode::SERVICE_UNAVAILABLE, "not_ready");
    let want = format!("role alpha cannot campaign or renew: {error} (retrying)");
    assert_eq!(r.json()["reasons"], serde_json::json!([want]), "{}", r.body);
    assert!(
        r.json().get("healthy").is_none(),
        "no health checker: {}",
        r.body
    );
    let view = call(&app, &mut seen, "GET", "/api/roles/alpha", None, "").await;
    assert_eq!(
        view.json()["local"]["error"],
        error.as_str(),
        "{}",
        view.body
    );
    assert_ne!(
        a.status(&role("alpha")).map(|s| s.state),
        Some(nats_roles::RoleState::Stopped),
        "the role keeps retrying"
    );
    a.shutdown(WAIT).await.expect("clean shutdown");
}
