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

/// `GET /api/events?since=N` of `app`, as JSON (asserting 200).
async fn journal(app: &Router, seen: &mut Vec<String>, since: u64) -> serde_json::Value {
    let r = get(app, seen, &format!("/api/events?since={since}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        r.headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );
    r.json()
}

/// `(seq, type, role)` of each event of a journal answer.
fn listed(page: &serde_json::Value) -> Vec<(u64, String, String)> {
    page["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["seq"].as_u64().expect("seq"),
                e["type"].as_str().expect("type").to_owned(),
                e["role"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The journal keeps what happened before anyone asked: node-b's API lists the hand-over of
/// alpha (vacant, promoted, holder with the previous holder), numbered and stamped; `since`
/// returns only newer events; a stream opened later starts at the cursor and carries the same
/// numbers (SSE `id`), and one reconnecting with `Last-Event-ID` gets what it missed. The
/// endpoint is an unauthenticated read like `/api/roles`: an admin token configured or a wrong
/// bearer token change nothing, and no full token is in any answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_lists_transitions_from_before_the_request() {
    let server = NatsServer::start().await;
    let url = server.url();
    let a = manager(&url, "node-a", "journal", &["alpha"], &[]).await;
    wait_until(WAIT, "node-a leads alpha", || a.is_leader(&role("alpha"))).await;
    let b = manager(&url, "node-b", "journal", &["alpha"], &[]).await;
    // An admin token is configured: reads still need none.
    let app = api(&b, true).router();
    let mut seen = Vec::new();
    let before = journal(&app, &mut seen, 0).await;
    assert_eq!(before["instance"], "node-b", "{before}");
    assert_eq!(before["capacity"], 256, "{before}");
    assert_eq!(before["truncated"], false, "{before}");
    let start = before["cursor"].as_u64().expect("cursor");

    // The hand-over happens while nobody is reading.
    a.release(&role("alpha"), Duration::from_secs(60))
        .expect("release");
    wait_until(WAIT, "node-b leads alpha", || b.is_leader(&role("alpha"))).await;
    let held_secrets = secrets(&[&b]);
    let page = eventually_page(&app, &mut seen, start, |p| {
        listed(p)
            .iter()
            .any(|(_, t, r)| t == "holder" && r == "alpha")
    })
    .await;
    let events = listed(&page);
    let kinds: Vec<&str> = events.iter().map(|(_, t, _)| t.as_str()).collect();
    for kind in ["vacant", "promoted", "holder"] {
        assert!(kinds.contains(&kind), "{kind} missing: {page}");
    }
    let seqs: Vec<u64> = events.iter().map(|(s, _, _)| *s).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1) && seqs[0] == start + 1,
        "consecutive from the cursor: {seqs:?}"
    );
    assert_eq!(page["cursor"].as_u64(), seqs.last().copied(), "{page}");
    assert_eq!(page["since"].as_u64(), Some(start));
    assert_eq!(page["truncated"], false, "{page}");
    let holder = page["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["type"] == "holder"))
        .expect("holder event");
    assert_eq!(holder["holder"], "node-b", "{holder}");
    assert_eq!(holder["previous"], "node-a", "{holder}");
    assert_eq!(holder["handover"], true, "{holder}");
    for e in page["events"].as_array().expect("events") {
        let at = e["at"].as_str().expect("at");
        assert!(
            time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339).is_ok(),
            "wall-clock time: {e}"
        );
    }
    // Only newer events after a cursor; none after the newest.
    let cursor = page["cursor"].as_u64().expect("cursor");
    let tail = journal(&app, &mut seen, seqs[0]).await;
    assert_eq!(
        listed(&tail).iter().map(|(s, _, _)| *s).collect::<Vec<_>>(),
        seqs[1..]
    );
    assert!(listed(&journal(&app, &mut seen, cursor).await).is_empty());
    // A wrong bearer token changes nothing for a read.
    let r = call(
        &app,
        &mut seen,
        "GET",
        &format!("/api/events?since={start}"),
        Some("not-the-token"),
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(listed(&r.json()), events);

    // A stream opened now starts at the cursor; the next transition comes with the next id.
    let mut body = open_stream(&app, None).await;
    let (mut buffer, mut frames) = (String::new(), Vec::new());
    next_event(&mut body, &mut buffer, &mut frames, |e| match e {
        EventView::Hello { cursor: c, .. } => {
            assert_eq!(*c, Some(cursor));
            Some(())
        }
        _ => None,
    })
    .await;
    b.release(&role("alpha"), Duration::from_secs(60))
        .expect("release");
    next_event(&mut body, &mut buffer, &mut frames, |e| {
        matches!(e, EventView::Demoted { role, .. } if role == "alpha").then_some(())
    })
    .await;
    let first = frames
        .iter()
        .find(|f| f.contains("\"demoted\""))
        .expect("the demoted frame");
    assert!(
        first.contains(&format!("id: {}\n", cursor + 1))
            && first.contains(&format!("\"seq\":{}", cursor + 1)),
        "{first}"
    );
    // Reconnecting with Last-Event-ID: the events after it again, same numbers.
    let mut again = open_stream(&app, Some(start)).await;
    let (mut buffer2, mut frames2) = (String::new(), Vec::new());
    next_event(&mut again, &mut buffer2, &mut frames2, |e| {
        matches!(e, EventView::Demoted { role, .. } if role == "alpha").then_some(())
    })
    .await;
    let replayed: Vec<&String> = frames2
        .iter()
        .filter(|f| f.contains(&format!("id: {}\n", start + 1)))
        .collect();
    assert_eq!(replayed.len(), 1, "{frames2:?}");
    seen.extend(frames);
    seen.extend(frames2);
    assert_no_secret(&seen, &held_secrets);
    a.shutdown(WAIT).await.expect("clean shutdown");
    b.shutdown(WAIT).await.expect("clean shutdown");
}

/// `GET /api/events` as a stream (with `Last-Event-ID: last` when given).
async fn open_stream(
    app: &Router,
    last: Option<u64>,
) -> impl futures_util::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Unpin {
    let mut req = Request::get("/api/events").header(header::ACCEPT, "text/event-stream");
    if let Some(last) = last {
        req = req.header("last-event-id", last.to_string());
    }
    let response = app
        .clone()
        .oneshot(req.body(Body::empty()).expect("request"))
        .await
        .unwrap_or_else(|e| match e {});
    assert_eq!(response.status(), StatusCode::OK);
    response.into_body().into_data_stream()
}

/// Polls `GET /api/events?since=since` until `done` holds (10 s).
async fn eventually_page(
    app: &Router,
    seen: &mut Vec<String>,
    since: u64,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let page = journal(app, seen, since).await;
        if done(&page) {
            return page;
        }
        assert!(Instant::now() < deadline, "not in the journal: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A small journal drops its oldest events: `since=0` says `truncated` and starts at the
/// oldest kept; a cursor at or after the one before the oldest kept is not truncated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_older_than_the_journal_is_reported_as_truncated() {
    let server = NatsServer::start().await;
    let a = manager(&server.url(), "node-a", "journal-small", &[], &[]).await;
    let journal_of_a = nats_roles::http::EventJournal::with_capacity(3);
    journal_of_a.follow(
        a.events(),
        a.instance_id().clone(),
        nats_roles::tooling::inspect::TransitionTracker::new(&a.holders()),
    );
    let app = nats_roles::http::Api::with_journal(a.clone(), ApiOptions::default(), journal_of_a)
        .router();
    let mut seen = Vec::new();
    // Three roles won: promoted and holder each, six events.
    for name in ["alpha", "beta", "gamma"] {
        a.add_role(nats_roles::RoleSpec::new(role(name)))
            .expect("add role");
    }
    let page = eventually_page(&app, &mut seen, 0, |p| p["cursor"].as_u64() >= Some(6)).await;
    let cursor = page["cursor"].as_u64().expect("cursor");
    let seqs: Vec<u64> = listed(&page).iter().map(|(s, _, _)| *s).collect();
    assert_eq!(seqs, [cursor - 2, cursor - 1, cursor], "{page}");
    assert_eq!(page["oldest"].as_u64(), Some(cursor - 2), "{page}");
    assert_eq!(page["truncated"], true, "{page}");
    assert_eq!(page["capacity"], 3, "{page}");
    let connected = journal(&app, &mut seen, cursor - 3).await;
    assert_eq!(connected["truncated"], false, "{connected}");
    assert_eq!(listed(&connected).len(), 3, "{connected}");
    let behind = journal(&app, &mut seen, cursor - 4).await;
    assert_eq!(behind["truncated"], true, "{behind}");
    a.shutdown(WAIT).await.expect("clean shutdown");
}

/// Hostile cursors get a 400 with a JSON error naming the problem, never a panic; the
/// endpoint answers normally afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_cursors_are_refused_with_a_clear_error() {
    let server = NatsServer::start().await;
    let a = manager(&server.url(), "node-a", "journal-bad", &["alpha"], &[]).await;
    wait_until(WAIT, "node-a leads alpha", || a.is_leader(&role("alpha"))).await;
    let app = api(&a, false).router();
    let mut seen = Vec::new();
    let huge = "9".repeat(4000);
    let huge_uri = format!("/api/events?since={huge}");
    let table: Vec<Refusal<'_>> = vec![
        ("GET", "/api/events?since=-1", None, "", 400, "bad_cursor"),
        ("GET", "/api/events?since=abc", None, "", 400, "bad_cursor"),
        ("GET", "/api/events?since=", None, "", 400, "bad_cursor"),
        ("GET", "/api/events?since=1.5", None, "", 400, "bad_cursor"),
        ("GET", "/api/events?since=1e3", None, "", 400, "bad_cursor"),
        ("GET", "/api/events?since=%2B1", None, "", 400, "bad_cursor"),
        ("GET", "/api/events?since=%201", None, "", 400, "bad_cursor"),
        ("GET", "/api/events?since=0x10", None, "", 400, "bad_cursor"),
        (
            "GET",
            "/api/events?since=1&since=2",
            None,
            "",
            400,
            "bad_cursor",
        ),
        (
            "GET",
            "/api/events?since=18446744073709551616",
            None,
            "",
            400,
            "bad_cursor",
        ),
        ("GET", &huge_uri, None, "", 400, "bad_cursor"),
        // A whole number, but never handed out by this process (a restart, another instance).
        (
            "GET",
            "/api/events?since=18446744073709551615",
            None,
            "",
            400,
            "cursor_ahead",
        ),
        (
            "GET",
            "/api/events?since=1000000",
            None,
            "",
            400,
            "cursor_ahead",
        ),
    ];
    assert_refused(&app, &mut seen, &table).await;
    // The error quotes at most a short prefix of what it was given.
    assert!(seen.iter().all(|b| b.len() < 1000), "{seen:?}");
    let page = journal(&app, &mut seen, 0).await;
    assert!(page["cursor"].as_u64().is_some(), "{page}");
    a.shutdown(WAIT).await.expect("clean shutdown");
}

/// A vacant role is an alarm only while someone campaigns for it: an observed role nobody here
/// campaigns for (no placement to know more) says `unknown` and this instance's view says it
/// only observes; a role this instance campaigns for but stays away from (a release with a
/// cooldown) says `present`; a held role has no such field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vacancies_say_whether_anyone_campaigns() {
    let server = NatsServer::start().await;
    let a = manager(&server.url(), "node-a", "candidates", &["alpha"], &["beta"]).await;
    // Led here and seen so by the watcher (the API's holder view: the put reaches the watcher
    // about when its acknowledgement reaches the role).
    wait_until(WAIT, "node-a leads alpha", || {
        a.is_leader(&role("alpha")) && a.holders().iter().any(|h| h.role == role("alpha"))
    })
    .await;
    let app = api(&a, false).router();
    let mut seen = Vec::new();
    let roles = get(&app, &mut seen, "/api/roles").await.json();
    let find = |list: &serde_json::Value, name: &str| -> serde_json::Value {
        list["roles"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["role"] == name).cloned())
            .unwrap_or_else(|| panic!("{name} missing: {list}"))
    };
    let beta = find(&roles, "beta");
    assert_eq!(beta["status"], "vacant", "{beta}");
    assert_eq!(beta["candidates"], "unknown", "{beta}");
    assert_eq!(beta["local"]["campaign"], false, "{beta}");
    let alpha = find(&roles, "alpha");
    assert!(alpha.get("candidates").is_none(), "{alpha}");
    assert_eq!(alpha["local"]["campaign"], true, "{alpha}");
    a.release(&role("alpha"), Duration::from_secs(60))
        .expect("release");
    wait_until(WAIT, "alpha vacant", || {
        a.holders().iter().all(|h| h.role != role("alpha"))
    })
    .await;
    let alpha = get(&app, &mut seen, "/api/roles/alpha").await.json();
    assert_eq!(alpha["status"], "vacant", "{alpha}");
    assert_eq!(alpha["candidates"], "present", "{alpha}");
    let beta = get(&app, &mut seen, "/api/roles/beta").await.json();
    assert_eq!(beta["candidates"], "unknown", "{beta}");
    a.shutdown(WAIT).await.expect("clean shutdown");
}
