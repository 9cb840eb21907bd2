//! The server-sent event stream: transitions, and its end on shutdown.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use futures_util::StreamExt;
use nats_roles::http::ApiOptions;
use nats_roles::tooling::inspect::EventView;
use testkit::NatsServer;
use testkit::roles::{role, wait_until};
use tokio::time::Instant;
use tower::ServiceExt;

use super::*;

/// Reads SSE `data:` lines from a response body until `pick` returns something.
async fn next_event<T>(
    body: &mut (impl futures_util::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Unpin),
    buffer: &mut String,
    all: &mut Vec<String>,
    mut pick: impl FnMut(&EventView) -> Option<T>,
) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            all.push(frame.clone());
            for line in frame.lines() {
                if let Some(data) = line.strip_prefix("data: ") {
                    let event: EventView = serde_json::from_str(data)
                        .unwrap_or_else(|e| panic!("bad event {data}: {e}"));
                    if let Some(found) = pick(&event) {
                        return found;
                    }
                }
            }
        }
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .expect("an event within 10 s")
            .expect("the stream is open")
            .expect("a chunk");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_report_transitions_and_end_on_shutdown() {
    let server = NatsServer::start().await;
    let url = server.url();
    let a = manager(&url, "node-a", "events", &["alpha"], &[]).await;
    wait_until(WAIT, "node-a leads alpha", || a.is_leader(&role("alpha"))).await;
    let b = manager(&url, "node-b", "events", &["alpha"], &[]).await;
    let api_b = api(&b, false);
    let response = api_b
        .router()
        .oneshot(
            Request::get("/api/events")
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .unwrap_or_else(|e| match e {});
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "text/event-stream"
    );
    let mut body = response.into_body().into_data_stream();
    let (mut buffer, mut frames) = (String::new(), Vec::new());
    next_event(&mut body, &mut buffer, &mut frames, |e| {
        matches!(e, EventView::Hello { instance: Some(i), .. } if i == "node-b").then_some(())
    })
    .await;
    let secrets = secrets(&[&a]);

    // A hand-over: node-a releases, node-b is promoted; both show on node-b's stream.
    a.release(&role("alpha"), Duration::from_secs(60))
        .expect("release");
    let (promoted, holder) = {
        let (mut promoted, mut holder) = (None, None);
        next_event(&mut body, &mut buffer, &mut frames, |e| {
            match e {
                EventView::Promoted {
                    role,
                    instance,
                    term,
                    ..
                } if role == "alpha" => {
                    assert_eq!(instance, "node-b");
                    promoted = Some(*term);
                }
                EventView::Holder {
                    role,
                    holder: h,
                    previous,
                    handover,
                    term,
                    token,
                    ..
                } if role == "alpha" => {
                    assert_eq!(
                        (h.as_deref(), previous.as_deref(), *handover),
                        (Some("node-b"), Some("node-a"), true)
                    );
                    assert!(token.as_deref().is_some_and(|t| t.contains('…')));
                    holder = *term;
                }
                _ => {}
            }
            (promoted.is_some() && holder.is_some()).then_some(())
        })
        .await;
        (promoted, holder)
    };
    assert_eq!(
        promoted, holder,
        "promotion and holder change name the same term"
    );

    // Shutdown ends the open stream at once.
    let started = Instant::now();
    api_b.shutdown_token().cancel();
    let end = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(chunk) = body.next().await {
            let _ = chunk;
        }
    })
    .await;
    assert!(end.is_ok(), "the SSE stream did not end after shutdown");
    assert!(started.elapsed() < Duration::from_secs(1));
    let mut all = secrets;
    all.extend(self::secrets(&[&b]));
    assert_no_secret(&frames, &all);
    a.shutdown(WAIT).await.expect("clean shutdown");
    b.shutdown(WAIT).await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_returns_on_shutdown_while_a_client_holds_an_event_stream() {
    let server = NatsServer::start().await;
    let a = manager(&server.url(), "node-a", "serve", &["alpha"], &[]).await;
    let (api, port, serving) = serve(&a, ApiOptions::default()).await;
    let mut client = testkit::tcp::send(
        port,
        b"GET /api/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n",
    )
    .await;
    let mut received = Vec::new();
    testkit::tcp::read_until(&mut client, &mut received, testkit::tcp::HELLO, WAIT).await;
    let started = Instant::now();
    stop_serving(&api, serving, "although a client holds an event stream").await;
    // The client sees the end of the stream (the connection closes).
    let eof = testkit::tcp::read_to_close(&mut client, &mut received, Duration::from_secs(2)).await;
    assert!(eof, "the client connection stayed open");
    assert!(started.elapsed() < Duration::from_secs(3));
    a.shutdown(WAIT).await.expect("clean shutdown");
}
