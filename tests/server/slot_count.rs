//! The slot count record `control.slots.<role>` (protocol Q15) against a real server: the
//! first instance of a role with slots creates it, an instance with the same count agrees, one
//! with another count is refused (at start and by `add_role_checked`, no slot added), a
//! damaged or foreign value refuses every count, and a delete or purge marker is created over.

use std::time::Duration;

use nats_roles::{Error, RoleManager};
use testkit::NatsServer;
use testkit::roles::*;

async fn start(
    client: &async_nats::Client,
    id: &str,
    bucket: &str,
    slots: u32,
) -> Result<RoleManager, Error> {
    RoleManager::builder(client.clone(), inst(id))
        .bucket(bucket)
        .auto_create(1)
        .role(spec(&role("sem")).slots(slots))
        .start()
        .await
}

async fn kv(client: &async_nats::Client, bucket: &str) -> async_nats::jetstream::kv::Store {
    async_nats::jetstream::new(client.clone())
        .get_key_value(bucket)
        .await
        .expect("bucket")
}

/// The JSON stored under `control.slots.sem`.
async fn recorded(kv: &async_nats::jetstream::kv::Store) -> serde_json::Value {
    let bytes = kv
        .get("control.slots.sem")
        .await
        .expect("get")
        .expect("a slot count record");
    serde_json::from_slice(&bytes).expect("JSON")
}

fn assert_conflict(result: Result<RoleManager, Error>, configured: u32, recorded: u32) {
    match result {
        Err(Error::SlotCountConflict {
            role: r,
            configured: c,
            recorded: n,
        }) => {
            assert_eq!((r, c, n), (role("sem"), configured, recorded));
        }
        Err(other) => panic!("not a slot count conflict: {other}"),
        Ok(m) => panic!("{} started with {configured} slots", m.instance_id()),
    }
}

/// Created by the first, agreed by the same count, refused with another at start and at run
/// time (nothing added, the record unchanged); an observer of the role is not checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_count_is_recorded_and_another_is_refused() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let a = start(&client, "a", "slot-count", 2).await.expect("a");
    let kv = kv(&client, "slot-count").await;
    let record = recorded(&kv).await;
    assert_eq!(record["v"], 1, "{record}");
    assert_eq!(record["role"], "sem", "{record}");
    assert_eq!(record["slots"], 2, "{record}");
    assert_eq!(record["by"], "a", "{record}");
    let b = start(&client, "b", "slot-count", 2)
        .await
        .expect("b agrees");
    for slots in [3, 4] {
        let started = tokio::time::Instant::now();
        assert_conflict(start(&client, "c", "slot-count", slots).await, slots, 2);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "not refused at once"
        );
    }
    assert_eq!(recorded(&kv).await["slots"], 2);
    // At run time: `add_role` cannot check, `add_role_checked` does (all or none).
    let other = role("other");
    match a.add_role(spec(&other).slots(3)) {
        Err(Error::SlotCountUnchecked { role: r, slots: 3 }) => assert_eq!(r, other),
        x => panic!("{x:?}"),
    }
    a.add_role_checked(spec(&other).slots(3))
        .await
        .expect("other recorded with 3");
    assert_eq!(a.roles().len(), 5, "{:?}", a.roles());
    match b.add_role_checked(spec(&other).slots(2)).await {
        Err(Error::SlotCountConflict {
            configured: 2,
            recorded: 3,
            ..
        }) => {}
        x => panic!("{x:?}"),
    }
    assert_eq!(b.roles().len(), 2, "a slot added: {:?}", b.roles());
    // Removed and added again with the same count: no read needed.
    a.remove_role(&other).await.expect("removed");
    a.add_role(spec(&other).slots(3)).expect("checked before");
    // An observer opens no slot: not checked.
    let o = RoleManager::builder(client.clone(), inst("o"))
        .bucket("slot-count")
        .role(spec(&role("sem")).slots(5).observe_only())
        .start()
        .await
        .expect("observer");
    shutdown(&[&a, &b, &o]).await;
}

/// A value that is no valid record (garbage, another version, a count out of range, another
/// role's record) refuses every count and is left alone; a delete or purge marker over the
/// record is created over by the next start (expecting the marker's revision).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_record_refuses_and_a_cleared_one_is_created_again() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let first = start(&client, "a", "slot-damage", 2).await.expect("a");
    first.shutdown(Duration::from_secs(5)).await.expect("down");
    let kv = kv(&client, "slot-damage").await;
    for damaged in [
        &b"garbage"[..],
        b"",
        br#"{"v":2,"role":"sem","slots":2}"#,
        br#"{"v":1,"role":"sem","slots":1}"#,
        br#"{"v":1,"role":"sem","slots":65}"#,
        br#"{"v":1,"role":"other","slots":2}"#,
    ] {
        kv.put("control.slots.sem", damaged.to_vec().into())
            .await
            .expect("put");
        for slots in [2, 3] {
            match start(&client, "b", "slot-damage", slots).await {
                Err(Error::SlotCountRecordInvalid { role: r, problem }) => {
                    assert_eq!(r, role("sem"));
                    assert!(!problem.is_empty());
                }
                Err(other) => panic!("{damaged:?}: {other}"),
                Ok(_) => panic!("{damaged:?} taken for agreement with {slots}"),
            }
        }
        let left = kv.get("control.slots.sem").await.expect("get");
        assert_eq!(left.as_deref(), Some(damaged), "the value was replaced");
    }
    for (clear, slots) in [("delete", 3), ("purge", 4)] {
        if clear == "delete" {
            kv.delete("control.slots.sem").await.expect("delete");
        } else {
            kv.purge("control.slots.sem").await.expect("purge");
        }
        let m = start(&client, "b", "slot-damage", slots)
            .await
            .unwrap_or_else(|e| panic!("over a {clear} marker: {e}"));
        assert_eq!(recorded(&kv).await["slots"], slots);
        m.shutdown(Duration::from_secs(5)).await.expect("down");
        assert_conflict(start(&client, "c", "slot-damage", 2).await, 2, slots);
    }
}

/// A record lost under running slots is written again by the instances that run them: deleted
/// (the watcher delivers the marker), or with the whole stream purged (no marker: the bucket
/// check that the failed session renewals ask for finds the same bucket) — so a newcomer with
/// another count is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_instance_writes_a_lost_record_again() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let a = start(&client, "a", "slot-lost", 2).await.expect("a");
    let kv = kv(&client, "slot-lost").await;
    let back = |what: &'static str| {
        let kv = kv.clone();
        async move {
            let until = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                if let Ok(Some(bytes)) = kv.get("control.slots.sem").await {
                    let r: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
                    assert_eq!(r["slots"], 2, "{r}");
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < until,
                    "not written again after {what}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    kv.delete("control.slots.sem").await.expect("delete");
    back("a delete").await;
    assert_conflict(start(&client, "c", "slot-lost", 3).await, 3, 2);
    async_nats::jetstream::new(client.clone())
        .get_stream("KV_slot-lost")
        .await
        .expect("stream")
        .purge()
        .await
        .expect("purge");
    back("a stream purge").await;
    assert_conflict(start(&client, "c", "slot-lost", 3).await, 3, 2);
    a.shutdown(Duration::from_secs(5)).await.expect("down");
}
