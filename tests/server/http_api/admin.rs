//! The admin actions: release and evict move roles safely.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_and_evict_move_roles_safely() {
    let server = NatsServer::start().await;
    let url = server.url();
    let a = manager(&url, "node-a", "admin", &["alpha", "solo"], &["ghost"]).await;
    wait_until(WAIT, "node-a leads alpha and solo", || {
        a.is_leader(&role("alpha")) && a.is_leader(&role("solo"))
    })
    .await;
    let b = manager(&url, "node-b", "admin", &["alpha"], &[]).await;
    let (app_a, app_b) = (api(&a, true).router(), api(&b, true).router());
    let mut seen = Vec::new();
    let secrets_before = secrets(&[&a, &b]);
    let mut b_events = b.events();

    // Release only where the role is held.
    let (release, evict) = ("/api/roles/alpha/release", "/api/roles/alpha/evict");
    let r = admin(&app_b, &mut seen, release, "").await;
    r.assert_error(StatusCode::CONFLICT, "not_leader");
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap_or_default()
            .contains("node-a does"),
        "{}",
        r.body
    );
    let term_a = a.leadership(&role("alpha")).expect("a leads").term();
    let r = admin(&app_a, &mut seen, release, r#"{"cooldown": "1m"}"#).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let json = r.json();
    assert_eq!(
        (json["released"].clone(), json["term"].clone()),
        (true.into(), term_a.into())
    );
    assert_eq!(json["cooldown_ms"], 60_000);
    wait_until(WAIT, "node-b takes alpha over", || {
        b.is_leader(&role("alpha"))
    })
    .await;
    // node-b's acquire is acknowledged to node-b before node-a's watcher delivers it: wait
    // (bounded) until node-a's view has caught up.
    let deadline = Instant::now() + WAIT;
    let view = loop {
        let view: RoleView =
            serde_json::from_str(&get(&app_a, &mut seen, "/api/roles/alpha").await.body)
                .expect("a RoleView");
        if view.holder.as_deref() == Some("node-b") || Instant::now() >= deadline {
            break view;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(view.holder.as_deref(), Some("node-b"));
    assert_eq!(
        view.local.map(|l| l.state),
        Some("DEMOTED".to_owned()),
        "node-a cools down"
    );

    // Evict: a stale revision or term is refused, nothing is deleted; unknown and
    // never-written roles.
    let term_b = b.leadership(&role("alpha")).expect("b leads").term();
    let stale_revision = format!(r#"{{"revision": {}}}"#, term_b.saturating_sub(1));
    let stale_term = format!(r#"{{"term": {}}}"#, term_b + 1000);
    #[rustfmt::skip]
    let refusals: [Refusal; 4] = [
        ("POST", evict, Some(TOKEN), &stale_revision, 409, "revision_mismatch"),
        ("POST", evict, Some(TOKEN), &stale_term, 409, "term_mismatch"),
        ("POST", "/api/roles/nope/evict", Some(TOKEN), "", 404, "unknown_role"),
        ("POST", "/api/roles/ghost/evict", Some(TOKEN), "", 404, "unknown_role"),
    ];
    assert_refused(&app_a, &mut seen, &refusals).await;
    assert!(b.is_leader(&role("alpha")));
    assert_eq!(b.leadership(&role("alpha")).map(|l| l.term()), Some(term_b));

    // Evict node-b's term (from node-a's API: any instance can evict) at its current term.
    let r = admin(
        &app_a,
        &mut seen,
        evict,
        &format!(r#"{{"term": {term_b}}}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let evicted = r.json();
    assert_eq!(evicted["holder"], "node-b");
    assert_eq!(evicted["term"], term_b);
    let deadline = Instant::now() + WAIT;
    loop {
        let event = tokio::time::timeout_at(deadline, b_events.recv())
            .await
            .expect("node-b hears of the eviction")
            .expect("event");
        if let nats_roles::RoleEvent::Demoted {
            role: r,
            term,
            reason,
        } = event
            && r.as_str() == "alpha"
        {
            assert_eq!((term, reason.as_str()), (term_b, "evicted"));
            break;
        }
    }
    // node-a cools down, so node-b takes the role again, in a new term.
    wait_until(WAIT, "node-b leads alpha again", || {
        b.leadership(&role("alpha"))
            .is_some_and(|l| l.term() > term_b)
    })
    .await;

    // A vacant role: released by its only candidate, which cools down.
    let r = admin(
        &app_a,
        &mut seen,
        "/api/roles/solo/release",
        r#"{"cooldown": "1m"}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    wait_until(WAIT, "solo is vacant", || {
        b.holders().iter().all(|h| h.role.as_str() != "solo")
    })
    .await;
    admin(&app_a, &mut seen, "/api/roles/solo/evict", "")
        .await
        .assert_error(StatusCode::CONFLICT, "not_held");

    let mut all = secrets_before;
    all.extend(secrets(&[&a, &b]));
    assert_no_secret(&seen, &all);
    a.shutdown(WAIT).await.expect("clean shutdown");
    b.shutdown(WAIT).await.expect("clean shutdown");
}

/// `POST /api/roles/{role}/move` (protocol Q13): the named instance gets the role, the third
/// candidate never holds it in between; every way it cannot happen is a 4xx/5xx with a code;
/// hostile bodies are 400s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_hands_a_role_to_the_named_instance_over_http() {
    let server = NatsServer::start().await;
    let url = server.url();
    let a = manager(&url, "node-a", "admin-move", &["alpha"], &["seen"]).await;
    wait_until(WAIT, "node-a leads alpha", || a.is_leader(&role("alpha"))).await;
    let b = manager(&url, "node-b", "admin-move", &["alpha"], &[]).await;
    let c = manager(&url, "node-c", "admin-move", &["alpha"], &[]).await;
    let app = api(&c, true).router();
    let mut seen = Vec::new();
    let mut c_events = c.events();
    let path = "/api/roles/alpha/move";
    let r = admin(
        &app,
        &mut seen,
        path,
        r#"{"to": "node-b", "timeout": "10s"}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let json = r.json();
    assert_eq!(json["outcome"], "moved");
    assert_eq!(json["to"], "node-b");
    assert!(b.is_leader(&role("alpha")));
    let term = b.leadership(&role("alpha")).expect("b leads").term();
    assert_eq!(json["term"], term);
    // node-c (the instance serving the request, a candidate too) never held it.
    while let Ok(e) = c_events.try_recv() {
        assert!(
            !matches!(&e, nats_roles::RoleEvent::Promoted { .. }),
            "node-c was promoted: {e:?}"
        );
    }
    // Already there.
    let r = admin(&app, &mut seen, path, r#"{"to": "node-b"}"#).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()["outcome"], "already_there");
    // Not moved: the target is not running; the role is vacant; a role nobody manages.
    admin(&app, &mut seen, path, r#"{"to": "ghost"}"#)
        .await
        .assert_error(StatusCode::CONFLICT, "target_not_live");
    admin(
        &app,
        &mut seen,
        "/api/roles/seen/move",
        r#"{"to": "node-b"}"#,
    )
    .await
    .assert_error(StatusCode::CONFLICT, "vacant");
    // Bodies.
    #[rustfmt::skip]
    let bad: [(&str, &str); 7] = [
        ("", "bad_request"),
        ("{}", "bad_request"),
        (r#"{"to": 5}"#, "bad_request"),
        (r#"{"to": "bad id!"}"#, "bad_request"),
        (r#"{"to": "node-a", "timeout": "forever"}"#, "bad_request"),
        (r#"{"to": "node-a", "timeout": "1h"}"#, "bad_request"),
        (r#"{"to": "node-a", "tiemout": "1s"}"#, "bad_request"),
    ];
    for (body, code) in bad {
        admin(&app, &mut seen, path, body)
            .await
            .assert_error(StatusCode::BAD_REQUEST, code);
    }
    assert!(b.is_leader(&role("alpha")));
    drop((a, b, c));
}
