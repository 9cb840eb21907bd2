//! Member records (protocol Q9, issue 27) against another client's writes: a record replaced by
//! a value that is no member record is written again, as a deleted or replaced one is.

use std::time::Duration;

use testkit::instances::Deployment;
use testkit::server::NatsServer;

/// The value of `key` in `kv` now (`None`: absent or deleted).
async fn value_of(kv: &async_nats::jetstream::kv::Store, key: &str) -> Option<serde_json::Value> {
    kv.get(key)
        .await
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

/// Protocol Q9 (issue 27): a member record is written only on change, and again when another
/// process deleted or replaced it. Replaced by a value that is no member record at all
/// (another client's garbage), it must come back too: otherwise every instance that starts
/// later (and `nats-roles plan`/`status`) never sees this member. At e8485fb the record's
/// heartbeat rewrote it within a period; at 021f94d the garbage stays (the watcher ignores an
/// unreadable record without asking for a rewrite).
#[tokio::test]
async fn a_member_record_replaced_by_garbage_is_written_again() {
    let server = NatsServer::start().await;
    let extra = "timing:\n  ttl: 3s\n  heartbeat: 1s\n\
                 placement:\n  enabled: true\n  stability_window: 1s\n";
    let mut d = Deployment::new(&server.url(), "member-garbage", &["alpha", "beta"], extra);
    d.start("node-a").await;
    let client = testkit::client::connect(&server.url()).await;
    let kv = async_nats::jetstream::new(client)
        .get_key_value("member-garbage")
        .await
        .expect("the bucket");
    let names_node_a = |v: &Option<serde_json::Value>| {
        v.as_ref()
            .is_some_and(|v| v["instance"] == "node-a" && v["v"].is_u64())
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !names_node_a(&value_of(&kv, "member.node-a").await) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "node-a wrote no member record\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    kv.put("member.node-a", "garbage".into())
        .await
        .expect("foreign put");
    // Several member heartbeats (a third of the TTL each) and a rewrite's hold-back.
    let limit = Duration::from_secs(6);
    let rewritten = tokio::time::timeout(limit, async {
        while !names_node_a(&value_of(&kv, "member.node-a").await) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let raw = kv.get("member.node-a").await.ok().flatten();
    assert!(
        rewritten.is_ok(),
        "member.node-a still holds {raw:?} {limit:?} after another client replaced it with \
         garbage\n{}",
        d.report()
    );
}
