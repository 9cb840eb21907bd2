//! Admin request bodies: read only after the token check, bounded in size and timed out.

use super::*;

/// Sends `body` (a stream) through the router; status, error code and how long it took.
async fn call_streaming(
    app: &Router,
    uri: &str,
    headers: &[(header::HeaderName, &str)],
    body: Body,
) -> (StatusCode, String, Duration) {
    let mut req = Request::builder().method("POST").uri(uri);
    for (name, value) in headers {
        req = req.header(name, *value);
    }
    let req = req.body(body).expect("valid request");
    let started = Instant::now();
    let response = tokio::time::timeout(Duration::from_secs(3), app.clone().oneshot(req))
        .await
        .unwrap_or_else(|_| panic!("POST {uri} got no answer within 3 s"))
        .unwrap_or_else(|e| match e {});
    let took = started.elapsed();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    (
        status,
        json["code"].as_str().unwrap_or_default().to_owned(),
        took,
    )
}

/// A request body whose bytes never arrive (a stalled upload).
fn stalled_body() -> Body {
    Body::from_stream(futures_util::stream::pending::<
        Result<bytes::Bytes, std::io::Error>,
    >())
}

/// A 5,002-byte JSON body sent in 1,000-byte chunks, without a Content-Length.
fn oversized_body() -> Body {
    let padded = format!("{{{}}}", " ".repeat(5000));
    let chunks = futures_util::stream::iter(
        padded
            .into_bytes()
            .chunks(1000)
            .map(|c| Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    );
    Body::from_stream(chunks)
}

/// When an answer must come, measured against the request timeout.
#[derive(Clone, Copy, Debug)]
enum Within {
    /// Before it: refused without waiting for the body.
    Before,
    /// Not before it: the body was waited for.
    After,
    /// Whenever (the answer depends on reading the body).
    Any,
}

/// An admin upload: the router, the request headers, the body; then the HTTP status and error
/// code it must get, and when.
type Upload<'a> = (
    &'a Router,
    Vec<(header::HeaderName, &'a str)>,
    fn() -> Body,
    u16,
    &'a str,
    Within,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_bodies_are_read_after_the_token_check_bounded_and_timed_out() {
    let server = NatsServer::start().await;
    let a = manager(&server.url(), "node-a", "bodies", &["alpha"], &[]).await;
    wait_until(WAIT, "node-a leads alpha", || a.is_leader(&role("alpha"))).await;
    let timeout = Duration::from_millis(300);
    let app = Api::new(
        a.clone(),
        ApiOptions::default()
            .with_admin_token(Some(TOKEN.to_owned()))
            .with_request_timeout(timeout),
    )
    .router();
    let closed = Api::new(a.clone(), ApiOptions::default()).router();
    let bearer = format!("Bearer {TOKEN}");
    let bearer = bearer.as_str();
    let (auth, length, big) = (header::AUTHORIZATION, header::CONTENT_LENGTH, "1900000");
    let wrong = "Bearer wrong-token-0123456789";
    let stalled: fn() -> Body = stalled_body;
    let oversized: fn() -> Body = oversized_body;
    // Without a valid token (or with admin actions off) refused at once, the (stalled,
    // announced-large) body never read; authorised, a body announced above the limit is
    // refused unread, one that turns out larger (no Content-Length) is refused, and one that
    // does not arrive gets 408 after the request timeout.
    #[rustfmt::skip]
    let table: [Upload; 7] = [
        (&app, vec![], stalled, 401, "unauthorized", Within::Before),
        (&app, vec![(auth.clone(), wrong)], stalled, 401, "unauthorized", Within::Before),
        (&app, vec![(length.clone(), big)], stalled, 401, "unauthorized", Within::Before),
        (&closed, vec![], stalled, 403, "admin_disabled", Within::Any),
        (&app, vec![(auth.clone(), bearer), (length, big)], stalled, 413, "body_too_large", Within::Before),
        (&app, vec![(auth.clone(), bearer)], oversized, 413, "body_too_large", Within::Any),
        (&app, vec![(auth, bearer)], stalled, 408, "request_timeout", Within::After),
    ];
    for path in [
        "/api/roles/alpha/release",
        "/api/roles/alpha/evict",
        "/api/roles/alpha/move",
        "/api/drain",
    ] {
        for (n, (router, headers, body, status, code, within)) in table.iter().enumerate() {
            let (got, got_code, took) = call_streaming(router, path, headers, body()).await;
            let what = format!("{path}, case {n}: answered after {took:?}");
            assert_eq!(
                (got.as_u16(), got_code.as_str()),
                (*status, *code),
                "{what}"
            );
            match within {
                Within::Before => assert!(took < timeout, "{what}"),
                Within::After => assert!(took >= timeout, "{what}"),
                Within::Any => {}
            }
        }
    }
    assert!(
        a.is_leader(&role("alpha")),
        "a refused request changed nothing"
    );
    a.shutdown(WAIT).await.expect("clean shutdown");
}
