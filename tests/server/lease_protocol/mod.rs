//! Integration tests of the lease protocol (docs/protocol.md) against real nats-server
//! processes: acquire/renew/release, hand-over, the two per-key TTL pitfalls, crash fail-over,
//! restart adoption, duplicate instance ids, observers, fenced writes, health-driven releases
//! and a 3-node cluster.
//!
//! Every test starts its own server and uses its own bucket. Waits are bounded and fail with a
//! message saying what did not happen.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures_util::StreamExt;
use nats_roles::health::{FnHealthChecker, HealthPolicy};
use nats_roles::tooling::value::LeaseValue;
use nats_roles::{
    DemoteReason, Demotion, FnCallbacks, Leadership, ReleaseReason, RoleEvent, RoleManager,
    RoleName, RoleSpec, Timing,
};
use testkit::roles::*;
use testkit::{NatsCluster, connect, server_and_client};
use tokio::sync::mpsc;
use tokio::time::Instant;

mod cluster;
mod expiry;
mod fencing;
mod identity;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

async fn kv_store(client: &async_nats::Client, bucket: &str) -> kv::Store {
    jetstream::new(client.clone())
        .get_key_value(bucket)
        .await
        .unwrap_or_else(|e| panic!("open bucket {bucket}: {e}"))
}

/// The last raw message of a key, read from the stream (headers included).
async fn raw_last(
    client: &async_nats::Client,
    bucket: &str,
    key: &str,
) -> async_nats::jetstream::message::StreamMessage {
    let stream = jetstream::new(client.clone())
        .get_stream(format!("KV_{bucket}"))
        .await
        .unwrap_or_else(|e| panic!("stream KV_{bucket}: {e}"));
    stream
        .get_last_raw_message_by_subject(&format!("$KV.{bucket}.{key}"))
        .await
        .unwrap_or_else(|e| panic!("last message of {key}: {e}"))
}

fn header<'a>(
    msg: &'a async_nats::jetstream::message::StreamMessage,
    name: &str,
) -> Option<&'a str> {
    msg.headers.get(name).map(async_nats::HeaderValue::as_str)
}

/// Spawns a watcher of `key` on its own client; every entry arrives with its arrival time.
async fn watch_key(
    client: &async_nats::Client,
    bucket: &str,
    key: &str,
) -> mpsc::UnboundedReceiver<(Instant, kv::Entry)> {
    let store = kv_store(client, bucket).await;
    let mut watch = store
        .watch_with_history(key)
        .await
        .unwrap_or_else(|e| panic!("watch {key}: {e}"));
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(entry)) = watch.next().await {
            if tx.send((Instant::now(), entry)).is_err() {
                return;
            }
        }
    });
    rx
}

/// Asserts that the last entry of `key` is a delete marker; `what` says why it must be.
async fn assert_delete_marker(store: &kv::Store, key: &str, what: &str) {
    let entry = store
        .entry(key)
        .await
        .unwrap_or_else(|e| panic!("read {key}: {e}"))
        .unwrap_or_else(|| panic!("{key}: no entry, not even a marker"));
    assert_eq!(entry.operation, kv::Operation::Delete, "{what}: {entry:?}");
}

/// `node-a` leading `r` in `bucket`, and `node-b` started after it (a follower).
async fn leader_and_follower(
    client: &async_nats::Client,
    bucket: &str,
    r: &RoleName,
) -> (RoleManager, nats_roles::Leadership, RoleManager) {
    let (a, la) = leading(client, "node-a", bucket, r).await;
    let b = manager_of(client, "node-b", bucket, r).await;
    (a, la, b)
}

/// Consumes watcher entries until an expiry marker (`Purge` operation) arrives; returns the
/// arrival time of the last `Put` seen before it and the marker's arrival time.
async fn wait_expiry_marker(
    rx: &mut mpsc::UnboundedReceiver<(Instant, kv::Entry)>,
    mut last_put: Option<Instant>,
    timeout: Duration,
) -> (Instant, Instant) {
    let deadline = Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((at, e))) => match e.operation {
                kv::Operation::Put => last_put = Some(at),
                kv::Operation::Purge => {
                    let put = last_put.expect("an expiry marker without a put before it");
                    return (put, at);
                }
                // A delete marker replayed before the lease (a tombstone) is history.
                kv::Operation::Delete if last_put.is_none() => {}
                kv::Operation::Delete => panic!("unexpected delete marker {e:?}: nobody released"),
            },
            Ok(None) => panic!("key watcher ended"),
            Err(_) => panic!("no expiry marker within {timeout:?}: the key does not expire"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. acquire -> renew -> release
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_renew_release() {
    let (_server, client) = server_and_client().await;
    let r = role("solo");
    let (tx, mut demotes) = mpsc::unbounded_channel::<(bool, bool, DemoteReason, u64)>();
    let callbacks = FnCallbacks::new(
        |_l: Leadership| async {},
        move |d: Demotion| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((
                    d.leadership.is_valid(),
                    d.leadership.cancellation_token().is_cancelled(),
                    d.reason,
                    d.leadership.term(),
                ));
            }
        },
    );
    let m = RoleManager::builder(client.clone(), inst("node-a"))
        .bucket("p_arr")
        .auto_create(1)
        .role(spec(&r).callbacks(callbacks))
        .start()
        .await
        .expect("start");

    let l = wait_leader(&m, &r, Duration::from_secs(3)).await;
    let term = l.term();
    assert!(term > 0, "term must be a stream revision (> 0)");
    assert_eq!(l.revision(), term, "a fresh term's revision is the term");
    assert!(l.is_valid());

    // Protocol v2 (Q4): the session is renewed every heartbeat and moves the term's deadline;
    // the role key is not rewritten during the term.
    let first_deadline = l.deadline();
    wait_until(
        Duration::from_secs(2),
        "two session renewals moving the deadline",
        || l.deadline() >= first_deadline + HEARTBEAT * 2,
    )
    .await;
    assert!(l.is_valid(), "session renewals keep the term valid");
    assert_eq!(l.term(), term, "renewals keep the term");
    assert_eq!(
        l.revision(),
        term,
        "the role key is not rewritten during the term"
    );
    let status = m.status(&r).expect("status");
    assert!(status.is_leader());
    assert_eq!(status.term, Some(term));
    assert!(status.last_heartbeat.is_some());

    // The stored value is a Q2 role value of ours naming our session; the session key holds
    // the session and has moved past the role key.
    let store = kv_store(&client, "p_arr").await;
    let entry = store
        .entry("role.solo")
        .await
        .expect("read role key")
        .expect("role key present");
    assert_eq!(entry.operation, kv::Operation::Put);
    assert_eq!(
        entry.revision, term,
        "the role key stays at the term's revision"
    );
    let value: LeaseValue =
        serde_json::from_slice(&entry.value).expect("value parses as LeaseValue");
    assert_eq!(value.v, 2);
    assert_eq!(value.holder, inst("node-a"));
    assert_eq!(value.incarnation, m.incarnation());
    assert_eq!(value.nonce, l.token().nonce());
    assert_eq!(value.term, None, "the one write of a term starts it");
    assert_eq!(value.ttl_ms, 1000);
    assert_eq!(value.session_key, "session.node-a.1000");
    let session = store
        .entry("session.node-a.1000")
        .await
        .expect("read session key")
        .expect("session key present");
    assert!(
        session.revision > term,
        "the session is renewed after the acquire"
    );
    let sv: nats_roles::tooling::value::SessionValue =
        serde_json::from_slice(&session.value).expect("session value parses");
    assert_eq!(sv.session, value.session, "the role names the live session");
    assert_eq!(sv.incarnation, m.incarnation());

    shutdown(&[&m]).await;

    // A delete marker, no value; the session ended after the release (Q4).
    assert_delete_marker(&store, "role.solo", "shutdown must CAS-delete the lease").await;
    assert_delete_marker(
        &store,
        "session.node-a.1000",
        "shutdown must end the session",
    )
    .await;
    assert!(!l.is_valid(), "the term ends with the release");

    // on_demote ran (shutdown waits for it) after the token was cancelled.
    let (valid, cancelled, reason, demoted_term) = demotes
        .try_recv()
        .expect("on_demote ran before shutdown returned");
    assert!(!valid, "on_demote must see an invalid leadership");
    assert!(cancelled, "the token is cancelled before on_demote");
    assert_eq!(reason, DemoteReason::Released(ReleaseReason::Shutdown));
    assert_eq!(demoted_term, term);
    assert!(demotes.try_recv().is_err(), "exactly one demotion");
}

// ---------------------------------------------------------------------------------------------
// 2. Two managers, five roles, hand-over on shutdown
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_managers_five_roles_hand_over() {
    let (_server, client) = server_and_client().await;
    let rs = roles(5);
    let a = manager(&client, "node-a", "p_handover", &rs).await;
    let b = manager(&client, "node-b", "p_handover", &rs).await;

    wait_until(
        Duration::from_secs(5),
        "exactly one leader per role",
        || rs.iter().all(|r| leaders(&[&a, &b], r) == 1),
    )
    .await;
    let held_by_a: Vec<(RoleName, u64)> = rs
        .iter()
        .filter_map(|r| a.leadership(r).map(|l| (r.clone(), l.term())))
        .collect();
    assert!(
        !held_by_a.is_empty(),
        "A started first and should hold roles"
    );
    // Followers see the holder.
    for (r, term) in &held_by_a {
        let s = wait_status(&b, r, Duration::from_secs(2), "B sees A as holder", |s| {
            s.leader_id.as_ref() == Some(&inst("node-a"))
        })
        .await;
        assert_eq!(s.term, Some(*term));
        assert!(!s.is_leader());
    }

    let mut events = b.events();
    let started = Instant::now();
    shutdown(&[&a]).await;
    let shutdown_took = started.elapsed();
    let mut pending: BTreeMap<RoleName, u64> = held_by_a.iter().cloned().collect();
    while !pending.is_empty() {
        let e = wait_event(
            &mut events,
            Duration::from_secs(3),
            "B takes over A's roles",
            |e| matches!(e, RoleEvent::Promoted { role, .. } if pending.contains_key(role)),
        )
        .await;
        if let RoleEvent::Promoted { role, term } = e {
            let old = pending.remove(&role).expect("pending role");
            assert!(
                term > old,
                "{role}: new term {term} must exceed A's term {old}"
            );
        }
    }
    let latency = started.elapsed();
    eprintln!(
        "hand-over of {} roles: shutdown took {shutdown_took:?}, all taken over after {latency:?}",
        held_by_a.len()
    );
    assert!(
        latency < Duration::from_secs(2),
        "graceful hand-over should be fast: {latency:?}"
    );
    for r in &rs {
        assert!(b.is_leader(r), "B must hold {r} now");
    }
    shutdown(&[&b]).await;
}
