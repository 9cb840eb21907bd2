//! One deadline per session (issue 27, docs/protocol.md Q4) against real processes: a role
//! whose local lease is shorter than its session's (a larger `deadline_margin` than the first
//! role of its TTL class) demotes at its own deadline when a renewal comes late, and is taken
//! again once the session's next renewal is acknowledged — a renewal wakes no role task, so
//! something must still wake the role that waits for one. Judged by the history checker (L1).

use std::time::Duration;

use testkit::instances::Deployment;
use testkit::process::mono_now_ns;
use testkit::server::NatsServer;

use super::exec::{history_check, records, wait_for};

/// node-a's records `ev` of role `role`.
fn role_records(d: &Deployment, role: &str, ev: &str) -> Vec<(u64, serde_json::Value)> {
    records(&d.dir().join("node-a.jsonl"), ev)
        .into_iter()
        .filter(|(_, v)| v["role"] == role)
        .collect()
}

/// Roles `first` (margin 0.1: the session's timing, local lease 2.7 s) and `short` (margin
/// 0.45: local lease 1.65 s) of one TTL class (3 s, heartbeat 1 s) held by node-a. The server
/// is paused from 0.3 s after a renewal until 1.95 s after it: the renewal sent at 1 s is
/// acknowledged after `short`'s deadline (1.65 s) but before the session's (2.7 s). `short`
/// demotes at its deadline (`deadline_expired`), `first` keeps its term, and `short` is
/// promoted again on node-a within the L1 bound (TTL + heartbeat + backoff): its old value
/// names node-a's live session, so nobody else can take it. On e8485fb it is promoted again at
/// the next renewal (about 1 s); at 021f94d nothing wakes it (the renewal is only published in
/// the session's clock) and it stays unheld until the process stops.
#[tokio::test]
async fn a_role_with_a_shorter_lease_than_its_session_is_taken_again_after_a_late_renewal() {
    let mut server = NatsServer::start().await;
    let mut d = Deployment::new(&server.url(), "clock-margins", &[], "");
    let yaml = "bucket:\n  name: clock-margins\n  replicas: 1\n  auto_create: true\n\
                timing:\n  ttl: 3s\n  heartbeat: 1s\n  deadline_margin: 0.1\n  \
                operation_timeout: 1s\n  disconnect_grace: 3s\n\
                roles:\n  - name: first\n  - name: short\n    deadline_margin: 0.45\n";
    std::fs::write(&d.config, yaml).expect("write config");
    d.arg("--history");
    d.arg("{dir}/{id}.jsonl");
    let trial = serde_json::json!({
        "mono_ns": mono_now_ns(), "src": "harness", "node": "harness", "ev": "trial",
        "seed": 0, "kind": "server-pause", "ttl_ms": 3000, "margin": 0.1, "clock": 1.0,
        "heartbeat_ms": 1000, "epsilon_ms": 5,
    });
    std::fs::write(d.dir().join("harness.jsonl"), format!("{trial}\n")).expect("harness.jsonl");
    d.start("node-a").await;

    // Both roles held and renewed at least once.
    wait_for(&d, Duration::from_secs(20), "both roles renewed", || {
        !role_records(&d, "first", "renew").is_empty()
            && !role_records(&d, "short", "renew").is_empty()
    })
    .await;
    // A fresh renewal of `short` to count from.
    let seen = role_records(&d, "short", "renew").len();
    wait_for(&d, Duration::from_secs(5), "a fresh renewal", || {
        role_records(&d, "short", "renew").len() > seen
    })
    .await;
    let (renewed_at, _) = role_records(&d, "short", "renew").pop().expect("a renewal");
    let sleep_until = |at_ns: u64| {
        let left = at_ns.saturating_sub(mono_now_ns());
        tokio::time::sleep(Duration::from_nanos(left))
    };
    sleep_until(renewed_at + 300_000_000).await;
    server.pause();
    sleep_until(renewed_at + 1_950_000_000).await;
    server.resume();

    // The precondition: `short` lost its term at its own deadline, the session lived on.
    wait_for(&d, Duration::from_secs(5), "short demoted", || {
        !role_records(&d, "short", "demote").is_empty()
    })
    .await;
    let (demoted_at, demote) = role_records(&d, "short", "demote")
        .pop()
        .expect("short's demotion");
    assert_eq!(demote["reason"], "deadline_expired", "{demote}");
    assert!(
        role_records(&d, "first", "demote").is_empty(),
        "the session was lost too (the late renewal came after 2.7 s): the pause missed its \
         window\n{}",
        history_check(&d).await.text()
    );

    // `short` is taken again: well within L1's bound (TTL + heartbeat + backoff = 4.5 s).
    let limit = Duration::from_secs(8);
    let again = tokio::time::timeout(limit, async {
        while role_records(&d, "short", "promote").len() < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let out = history_check(&d).await;
    assert!(
        again.is_ok(),
        "`short` (demoted at its deadline, its value naming node-a's live session) was not \
         promoted again within {limit:?}\n{}",
        out.text()
    );
    let (promoted_at, _) = role_records(&d, "short", "promote")
        .pop()
        .expect("short's second promotion");
    eprintln!(
        "short: promoted again {:.0} ms after its demotion",
        (promoted_at - demoted_at) as f64 / 1e6
    );
    d.terminate(0);
    d.wait_exit(0, Duration::from_secs(15)).await;
    let out = history_check(&d).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains("CLEAN"), "{}", out.text());
}
