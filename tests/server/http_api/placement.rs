//! The placement endpoints: `GET /api/members`, `POST /api/placement/freeze` and
//! `POST /api/plan/simulate` (admin), with hostile and malformed requests.

use super::*;
use nats_roles::manager::PlacementSettings;

async fn placed(url: &str, id: &str, bucket: &str) -> Arc<RoleManager> {
    let client = testkit::connect(url).await;
    let mut builder = RoleManager::builder(client, InstanceId::new(id).expect("valid id"))
        .bucket(bucket)
        .auto_create(1)
        .placement(PlacementSettings {
            enabled: true,
            stability_window: Duration::from_millis(200),
            ..PlacementSettings::default()
        });
    for name in ["p1", "p2", "p3", "p4"] {
        builder = builder.role(RoleSpec::new(role(name)));
    }
    let manager = builder.start().await.expect("manager starts");
    tokio::time::timeout(WAIT, manager.caught_up())
        .await
        .expect("watcher caught up");
    Arc::new(manager)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_freeze_and_what_if_through_the_api() {
    let server = NatsServer::start().await;
    let url = server.url();
    let a = placed(&url, "node-a", "api-placement").await;
    let b = placed(&url, "node-b", "api-placement").await;
    let app = api(&a, true).router();
    let mut seen = Vec::new();
    wait_until(WAIT, "both members seen, every role held", || {
        a.member_list().members.len() == 2 && a.holders().len() == 4
    })
    .await;

    // Members: read without a token, both listed, placement on.
    let r = get(&app, &mut seen, "/api/members").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let members = r.json();
    assert_eq!(members["placement"], true, "{members}");
    assert_eq!(
        members["members"].as_array().map(Vec::len),
        Some(2),
        "{members}"
    );
    assert!(members["frozen"].is_null(), "{members}");

    // Admin only, bounded, well-formed.
    let big = format!(r#"{{"drain": ["{}"]}}"#, "x".repeat(8192));
    let long_reason = format!(r#"{{"frozen": true, "reason": "{}"}}"#, "r".repeat(300));
    #[rustfmt::skip]
    let refusals: [Refusal; 9] = [
        ("POST", "/api/plan/simulate", None, "{}", 401, "unauthorized"),
        ("POST", "/api/plan/simulate", Some("wrong-token-0123456789"), "{}", 401, "unauthorized"),
        ("POST", "/api/plan/simulate", Some(TOKEN), "{not json", 400, "bad_request"),
        ("POST", "/api/plan/simulate", Some(TOKEN), r#"{"drain": ["nobody"]}"#, 400, "bad_request"),
        ("POST", "/api/plan/simulate", Some(TOKEN), r#"{"join": [{"id": "node-a"}]}"#, 400, "bad_request"),
        ("POST", "/api/plan/simulate", Some(TOKEN), r#"{"join": [{"id": "x", "weight": 0}]}"#, 400, "bad_request"),
        ("POST", "/api/plan/simulate", Some(TOKEN), &big, 413, "body_too_large"),
        ("POST", "/api/placement/freeze", None, "", 401, "unauthorized"),
        ("POST", "/api/placement/freeze", Some(TOKEN), &long_reason, 400, "bad_request"),
    ];
    assert_refused(&app, &mut seen, &refusals).await;

    // What-if: draining node-a hands its roles to node-b; nothing changes.
    let before = a.holders();
    let a_holds = before
        .iter()
        .filter(|h| h.holder.as_ref().is_some_and(|i| i.as_str() == "node-a"))
        .count();
    let r = admin(
        &app,
        &mut seen,
        "/api/plan/simulate",
        r#"{"drain": ["node-a"]}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let sim = r.json();
    assert_eq!(
        sim["moves"].as_array().map(Vec::len),
        Some(a_holds),
        "{sim}"
    );
    assert!(
        sim["moves"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|m| m["to"] == "node-b" && m["reason"] == "draining"),
        "{sim}"
    );
    let r = admin(
        &app,
        &mut seen,
        "/api/plan/simulate",
        r#"{"join": [{"id": "node-x", "zone": "z9"}]}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    // Freeze with a reason: both instances see it; unfreeze.
    let r = admin(
        &app,
        &mut seen,
        "/api/placement/freeze",
        r#"{"frozen": true, "reason": "<b>maintenance</b>"}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    wait_until(WAIT, "both instances frozen by the operator", || {
        [&a, &b].iter().all(|m| {
            matches!(
                m.frozen(),
                Some(nats_roles::manager::Frozen::Operator { ref reason, .. }) if reason == "<b>maintenance</b>"
            )
        })
    })
    .await;
    let r = admin(
        &app,
        &mut seen,
        "/api/placement/freeze",
        r#"{"frozen": false}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    wait_until(WAIT, "unfrozen everywhere", || {
        a.frozen().is_none() && b.frozen().is_none()
    })
    .await;
    // Secrets never appear in any answer.
    assert_no_secret(&seen, &secrets(&[&a, &b]));
}
