//! `GET /api/self`: this instance's roles for followers in any language, the long-poll, and
//! whole tokens only for a loopback caller with the local token.

use super::limits::{serve, stop_serving};
use super::*;

const LOCAL: &str = "local-token-0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_lists_held_roles_and_the_long_poll_returns_on_change() {
    let server = NatsServer::start().await;
    let a = manager(
        &server.url(),
        "node-a",
        "self-view",
        &["alpha", "beta"],
        &[],
    )
    .await;
    wait_until(WAIT, "node-a leads both", || {
        a.is_leader(&role("alpha")) && a.is_leader(&role("beta"))
    })
    .await;
    let app = api(&a, false).router();
    let mut seen = Vec::new();
    let r = get(&app, &mut seen, "/api/self").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let first = r.json();
    let names: Vec<&str> = first["roles"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["role"].as_str())
        .collect();
    assert_eq!(names, ["alpha", "beta"], "{first}");
    let version = first["version"].as_str().expect("version").to_owned();
    assert_eq!(first["changed"], true);
    // The same version again: no wait, unchanged.
    let r = get(&app, &mut seen, &format!("/api/self?since={version}")).await;
    assert_eq!(r.json()["changed"], false, "{}", r.body);
    // Long-poll: returns as soon as alpha is released.
    let poll = {
        let app = app.clone();
        let uri = format!("/api/self?since={version}&wait=20s");
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let t = Instant::now();
            let r = get(&app, &mut seen, &uri).await;
            (r.status, r.body, t.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.release(&role("alpha"), Duration::from_secs(30))
        .expect("release");
    let (status, body, took) = poll.await.expect("poll task");
    assert_eq!(status, StatusCode::OK, "{body}");
    let after: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(after["changed"], true, "{after}");
    assert_eq!(after["roles"].as_array().map(Vec::len), Some(1), "{after}");
    assert!(took < Duration::from_secs(5), "the long-poll took {took:?}");
    // A wait with no change ends after the wait, unchanged.
    let v2 = after["version"].as_str().expect("version").to_owned();
    let t = Instant::now();
    let r = get(&app, &mut seen, &format!("/api/self?since={v2}&wait=300ms")).await;
    assert_eq!(r.json()["changed"], false, "{}", r.body);
    assert!(t.elapsed() >= Duration::from_millis(290));
    // Bad queries.
    #[rustfmt::skip]
    let refusals: [Refusal; 3] = [
        ("GET", "/api/self?wait=forever", None, "", 400, "bad_request"),
        ("GET", "/api/self?wait=61s", None, "", 400, "bad_request"),
        ("GET", "/api/self?bogus=1", None, "", 400, "bad_request"),
    ];
    assert_refused(&app, &mut seen, &refusals).await;
    // Tokens are redacted for everyone without the local token.
    assert_no_secret(&seen, &secrets(&[&a]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_tokens_only_for_a_loopback_caller_with_the_local_token() {
    let server = NatsServer::start().await;
    let a = manager(&server.url(), "node-a", "self-local", &["alpha"], &[]).await;
    wait_until(WAIT, "node-a leads alpha", || a.is_leader(&role("alpha"))).await;
    let token = a
        .leadership(&role("alpha"))
        .expect("leads")
        .token()
        .expose();
    let (api, port, serving) = serve(
        &a,
        ApiOptions::default().with_local_token(Some(LOCAL.to_owned())),
    )
    .await;
    let auth = format!("Bearer {LOCAL}");
    let (code, body) =
        testkit::http::request(port, "GET", "/api/self", &[("Authorization", &auth)], "")
            .await
            .expect("GET /api/self");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains(&token),
        "the whole token for the local caller: {body}"
    );
    let (code, body) = testkit::http::request(port, "GET", "/api/self", &[], "")
        .await
        .expect("GET /api/self");
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains(&token), "redacted without the token: {body}");
    let wrong = "Bearer wrong-local-token-0123456789";
    let (code, body) =
        testkit::http::request(port, "GET", "/api/self", &[("Authorization", wrong)], "")
            .await
            .expect("GET /api/self");
    assert_eq!(code, 401, "{body}");
    assert!(!body.contains(&token));
    stop_serving(&api, serving, "after the local-token checks").await;
}
