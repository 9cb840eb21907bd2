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

    // More than two heartbeats: the revision moves with every renewal.
    wait_until(
        Duration::from_secs(2),
        "two renewals moving the revision",
        || l.revision() >= term + 2,
    )
    .await;
    assert!(l.is_valid(), "renewals keep the term valid");
    assert_eq!(l.term(), term, "renewals keep the term");
    let status = m.status(&r).expect("status");
    assert!(status.is_leader());
    assert_eq!(status.term, Some(term));
    assert!(status.last_heartbeat.is_some());

    // The stored value is a P2 lease of ours continuing the term.
    let store = kv_store(&client, "p_arr").await;
    let entry = store
        .entry("role.solo")
        .await
        .expect("read role key")
        .expect("role key present");
    assert_eq!(entry.operation, kv::Operation::Put);
    let value: LeaseValue =
        serde_json::from_slice(&entry.value).expect("value parses as LeaseValue");
    assert_eq!(value.v, 1);
    assert_eq!(value.holder, inst("node-a"));
    assert_eq!(value.incarnation, m.incarnation());
    assert_eq!(value.nonce, l.token().nonce());
    assert_eq!(value.term, Some(term), "renewals carry the term number");
    assert_eq!(value.ttl_ms, 1000);

    shutdown(&[&m]).await;

    // A delete marker, no value.
    let entry = store
        .entry("role.solo")
        .await
        .expect("read role key")
        .expect("a marker is left");
    assert_eq!(
        entry.operation,
        kv::Operation::Delete,
        "shutdown must CAS-delete the lease: {entry:?}"
    );
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

// ---------------------------------------------------------------------------------------------
// 3. + 4. TTL pitfalls: renewals and acquires over a tombstone keep the per-key TTL
// ---------------------------------------------------------------------------------------------

/// How long after the last write a key may take to expire on the server.
const EXPIRY_SLACK: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_keeps_the_ttl() {
    let (_server, client) = server_and_client().await;
    let r = role("ttl-renew");
    let (m, l) = leading(&client, "node-a", "p_ttl_renew", &r).await;
    let mut entries = watch_key(&client, "p_ttl_renew", "role.ttl-renew").await;
    wait_until(Duration::from_secs(3), "several renewals", || {
        l.revision() >= l.term() + 3
    })
    .await;

    // The last write is a renewal (it carries the term) with a per-key TTL.
    let msg = raw_last(&client, "p_ttl_renew", "role.ttl-renew").await;
    let value: LeaseValue = serde_json::from_slice(&msg.payload).expect("lease value");
    assert_eq!(
        value.term,
        Some(l.term()),
        "the last write must be a renewal"
    );
    assert_eq!(
        header(&msg, "Nats-TTL"),
        Some("1"),
        "renewals must carry Nats-TTL (headers: {:?})",
        msg.headers
    );

    // "Freeze" the process: no shutdown, no delete; only the TTL can free the key.
    drop(m);
    let (last_put, expired) =
        wait_expiry_marker(&mut entries, None, TTL + Duration::from_secs(4)).await;
    let after = expired - last_put;
    eprintln!("key expired {after:?} after the last renewal was seen");
    assert!(
        after <= TTL + EXPIRY_SLACK,
        "key expired {after:?} after the last renewal; expected <= ttl + {EXPIRY_SLACK:?}"
    );
    let marker = raw_last(&client, "p_ttl_renew", "role.ttl-renew").await;
    assert_eq!(header(&marker, "Nats-Marker-Reason"), Some("MaxAge"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_over_tombstone_keeps_the_ttl() {
    let (_server, client) = server_and_client().await;
    let r = role("ttl-tomb");
    let (a, _) = leading(&client, "node-a", "p_ttl_tomb", &r).await;
    shutdown(&[&a]).await;
    let tomb = raw_last(&client, "p_ttl_tomb", "role.ttl-tomb").await;
    assert_eq!(
        header(&tomb, "KV-Operation"),
        Some("DEL"),
        "release leaves a delete marker"
    );

    let mut entries = watch_key(&client, "p_ttl_tomb", "role.ttl-tomb").await;
    let (b, l) = leading(&client, "node-b", "p_ttl_tomb", &r).await;
    // Drop at once, before the first renewal: the acquire is the only write of the term.
    drop(b);
    assert_eq!(
        l.term(),
        tomb.sequence + 1,
        "acquired directly over the tombstone"
    );
    let msg = raw_last(&client, "p_ttl_tomb", "role.ttl-tomb").await;
    let value: LeaseValue = serde_json::from_slice(&msg.payload).expect("lease value");
    assert_eq!(value.holder, inst("node-b"));
    if value.term.is_none() {
        // Still the acquire itself (the usual case).
        assert_eq!(msg.sequence, l.term());
    }
    assert_eq!(
        header(&msg, "Nats-TTL"),
        Some("1"),
        "an acquire over a tombstone must carry Nats-TTL (headers: {:?})",
        msg.headers
    );
    let (last_put, expired) =
        wait_expiry_marker(&mut entries, None, TTL + Duration::from_secs(4)).await;
    let after = expired - last_put;
    eprintln!("key expired {after:?} after the acquire over the tombstone");
    assert!(
        after <= TTL + EXPIRY_SLACK,
        "expired {after:?} after the last write"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Crash fail-over through server-side expiry
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_fail_over_via_server_expiry() {
    let (_server, client) = server_and_client().await;
    let r = role("crash");
    let (a, la) = leading(&client, "node-a", "p_crash", &r).await;
    let b = manager_of(&client, "node-b", "p_crash", &r).await;
    wait_status(&b, &r, Duration::from_secs(2), "B follows A", |s| {
        s.leader_id.as_ref() == Some(&inst("node-a"))
    })
    .await;
    // Let a few renewals happen so that the crash hits a renewed lease.
    wait_until(Duration::from_secs(2), "renewals", || {
        la.revision() > la.term() + 1
    })
    .await;

    let mut events = b.events();
    let crashed = Instant::now();
    drop(a);
    let e = wait_event(
        &mut events,
        TTL + Duration::from_secs(3),
        "B promoted",
        |e| matches!(e, RoleEvent::Promoted { .. }),
    )
    .await;
    let took = crashed.elapsed();
    eprintln!("crash fail-over took {took:?} (ttl {TTL:?})");
    let RoleEvent::Promoted { term, .. } = e else {
        unreachable!()
    };
    assert!(term > la.term());
    assert!(
        took <= TTL + Duration::from_millis(500),
        "B promoted {took:?} after the crash; expected <= ttl + 500 ms"
    );
    shutdown(&[&b]).await;
}

// ---------------------------------------------------------------------------------------------
// 6. Restart adoption
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_adopts_own_lease() {
    let (_server, client) = server_and_client().await;
    let r = role("adopt");
    let (first, old) = leading(&client, "node-x", "p_adopt", &r).await;
    let old_incarnation = first.incarnation();
    drop(first);

    let restarted = Instant::now();
    let (second, new) = leading(&client, "node-x", "p_adopt", &r).await;
    let took = restarted.elapsed();
    eprintln!("restart adoption took {took:?}");
    assert_ne!(second.incarnation(), old_incarnation);
    assert!(new.term() > old.term(), "adoption starts a new term");
    assert!(
        took < Duration::from_millis(500),
        "adoption must not wait for the TTL: took {took:?}"
    );
    let s = second.status(&r).expect("status");
    assert!(
        !s.duplicate_instance,
        "one adoption is not a duplicate: {s:?}"
    );
    shutdown(&[&second]).await;
}

// ---------------------------------------------------------------------------------------------
// 7. Duplicate instance detection
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_instance_is_detected() {
    let (_server, client) = server_and_client().await;
    let rs = roles(2);
    let a = Arc::new(manager(&client, "twin", "p_dup", &rs).await);
    for r in &rs {
        wait_leader(&a, r, Duration::from_secs(3)).await;
    }
    let mut a_events = a.events();
    let b = Arc::new(manager(&client, "twin", "p_dup", &rs).await);
    let mut b_events = b.events();

    // Sample both managers every 20 ms for 3 s.
    let sampler = {
        let (a, b, rs) = (a.clone(), b.clone(), rs.clone());
        tokio::spawn(async move {
            let mut overlaps = Vec::new();
            let end = Instant::now() + Duration::from_secs(3);
            while Instant::now() < end {
                for r in &rs {
                    if a.is_leader(r) && b.is_leader(r) {
                        overlaps.push(r.clone());
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            overlaps
        })
    };

    let deadline = Instant::now() + 4 * TTL;
    let detected = loop {
        let dup = |e: &Result<RoleEvent, _>| matches!(e, Ok(RoleEvent::DuplicateInstance { .. }));
        tokio::select! {
            e = a_events.recv() => if dup(&e) { break "A" },
            e = b_events.recv() => if dup(&e) { break "B" },
            () = tokio::time::sleep_until(deadline) => {
                let flagged = rs.iter().any(|r| {
                    a.status(r).is_some_and(|s| s.duplicate_instance)
                        || b.status(r).is_some_and(|s| s.duplicate_instance)
                });
                assert!(
                    flagged,
                    "no DuplicateInstance within {:?}; A: {:?} B: {:?}",
                    4 * TTL,
                    a.statuses(),
                    b.statuses()
                );
                break "status";
            }
        }
    };
    eprintln!("duplicate instance detected by {detected}");
    let overlaps = sampler.await.expect("sampler");
    assert!(
        overlaps.is_empty(),
        "both processes of instance `twin` claimed these roles at the same instant: {overlaps:?}"
    );
    for r in &rs {
        assert!(leaders(&[&a, &b], r) <= 1);
    }
    shutdown(&[&a, &b]).await;
}

// ---------------------------------------------------------------------------------------------
// 8. Observer
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_sees_holder_but_never_leads() {
    let (_server, client) = server_and_client().await;
    let r = role("watched");
    let observer = RoleManager::builder(client.clone(), inst("obs"))
        .bucket("p_observe")
        .auto_create(1)
        .role(spec(&r).observe_only())
        .start()
        .await
        .expect("observer start");
    let mut events = observer.events();
    let mut holder = observer.observe(&r);

    let (leader, l) = leading(&client, "node-l", "p_observe", &r).await;
    let e = wait_event(
        &mut events,
        Duration::from_secs(2),
        "HolderChanged to node-l",
        |e| matches!(e, RoleEvent::HolderChanged(h) if h.holder.as_ref() == Some(&inst("node-l"))),
    )
    .await;
    if let RoleEvent::HolderChanged(h) = e {
        assert_eq!(h.term, Some(l.term()));
        assert!(!h.foreign);
    }
    let seen = tokio::time::timeout(
        Duration::from_secs(2),
        holder.wait_for(|h| h.as_ref().and_then(|h| h.holder.clone()) == Some(inst("node-l"))),
    )
    .await
    .expect("observe() reports node-l")
    .expect("observe channel open")
    .clone()
    .expect("holder");
    assert_eq!(seen.term, Some(l.term()));
    let s = wait_status(
        &observer,
        &r,
        Duration::from_secs(2),
        "observer status",
        |s| s.leader_id.as_ref() == Some(&inst("node-l")),
    )
    .await;
    assert!(!s.is_leader());
    assert!(observer.holders().iter().any(|h| h.role == r));

    // The holder leaves: the observer sees the vacancy and does not campaign.
    shutdown(&[&leader]).await;
    wait_event(
        &mut events,
        Duration::from_secs(2),
        "HolderChanged to vacant",
        |e| matches!(e, RoleEvent::HolderChanged(h) if h.role == r && h.holder.is_none()),
    )
    .await;
    let vacant_until = Instant::now() + TTL + HEARTBEAT + Duration::from_millis(250);
    while Instant::now() < vacant_until {
        assert!(!observer.is_leader(&r), "an observer must never lead");
        assert!(!observer.status(&r).expect("status").is_leader());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while let Ok(e) = events.try_recv() {
        assert!(
            !matches!(e, RoleEvent::Promoted { .. }),
            "observer promoted: {e:?}"
        );
    }
    let entry = kv_store(&client, "p_observe")
        .await
        .entry("role.watched")
        .await
        .expect("read")
        .expect("marker");
    assert_eq!(
        entry.operation,
        kv::Operation::Delete,
        "nobody took the role"
    );
    shutdown(&[&observer]).await;
}

// ---------------------------------------------------------------------------------------------
// 9. Fenced writes
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_follow_the_term() {
    let (_server, client) = server_and_client().await;
    let r = role("fenced");
    let (a, la) = leading(&client, "node-a", "p_fence", &r).await;
    let b = manager_of(&client, "node-b", "p_fence", &r).await;
    let store = kv_store(&client, "p_fence").await;

    let rev = la
        .fenced_put("k", "from-a")
        .await
        .expect("fenced put by the leader");
    assert!(rev > 0);
    assert_eq!(
        store.get("data.fenced.k").await.expect("get").as_deref(),
        Some(&b"from-a"[..])
    );
    la.validate().await.expect("validate while leading");

    // A hands over; B takes over.
    a.release(&r, Duration::from_secs(30)).expect("release");
    let lb = wait_leader(&b, &r, Duration::from_secs(3)).await;
    assert!(lb.term() > la.term());
    match la.fenced_put("k", "stale").await {
        Err(nats_roles::FenceError::Fenced { role }) => assert_eq!(role, r),
        other => panic!("a fenced put of the old term must fail with Fenced: {other:?}"),
    }
    assert!(matches!(
        la.validate().await,
        Err(nats_roles::FenceError::Fenced { .. })
    ));
    lb.validate().await.expect("validate of the new term");
    assert_eq!(
        store.get("data.fenced.k").await.expect("get").as_deref(),
        Some(&b"from-a"[..]),
        "the stale write must not be stored"
    );
    let s = a.status(&r).expect("status");
    assert_eq!(
        s.last_demote_reason,
        Some(DemoteReason::Released(ReleaseReason::Requested))
    );
    assert!(!a.is_leader(&r));

    // Fenced writes racing renewals: all must succeed.
    let mut revisions = std::collections::BTreeSet::from([lb.revision()]);
    let mut failures = Vec::new();
    for i in 0..100 {
        if let Err(e) = lb.fenced_put("counter", i.to_string()).await {
            failures.push((i, e.to_string()));
        }
        revisions.insert(lb.revision());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let renewals = revisions.len() - 1;
    eprintln!("100 fenced writes raced {renewals} renewals of the lease");
    assert!(
        failures.is_empty(),
        "fenced writes failed while leading: {failures:?}"
    );
    assert!(
        renewals >= 3,
        "the writes should have raced several renewals"
    );
    assert_eq!(
        store
            .get("data.fenced.counter")
            .await
            .expect("get")
            .as_deref(),
        Some(&b"99"[..])
    );

    // A foreign overwrite of the lease fences at once: whether the watcher demoted B first
    // (term invalid) or the server rejects the write (lease revision moved), it fails.
    store
        .put("role.fenced", "overwritten".into())
        .await
        .expect("foreign put");
    match lb.fenced_put("counter", "after-overwrite").await {
        Err(nats_roles::FenceError::Fenced { .. }) => {}
        other => panic!("a fenced put after the lease was overwritten must fail: {other:?}"),
    }
    assert_eq!(
        store
            .get("data.fenced.counter")
            .await
            .expect("get")
            .as_deref(),
        Some(&b"99"[..]),
        "the write after the overwrite must not be stored"
    );
    shutdown(&[&b, &a]).await;
}

// ---------------------------------------------------------------------------------------------
// 10. Health
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_leader_releases_and_cools_down() {
    let (_server, client) = server_and_client().await;
    let r = role("health");
    let healthy = Arc::new(AtomicBool::new(true));
    let cooldown = Duration::from_millis(1500);
    let policy = HealthPolicy {
        interval: Duration::from_millis(100),
        timeout: Duration::from_millis(100),
        failure_threshold: 2,
        cooldown,
    };
    let flag = healthy.clone();
    let checker = FnHealthChecker(move || {
        let flag = flag.clone();
        async move { flag.load(Ordering::SeqCst) }
    });
    let a = RoleManager::builder(client.clone(), inst("node-a"))
        .bucket("p_health")
        .auto_create(1)
        .health_checker(checker, policy)
        .role(spec(&r))
        .start()
        .await
        .expect("A start");
    let la = wait_leader(&a, &r, Duration::from_secs(3)).await;
    let b = manager_of(&client, "node-b", "p_health", &r).await;
    wait_status(&b, &r, Duration::from_secs(2), "B follows A", |s| {
        s.leader_id.as_ref() == Some(&inst("node-a"))
    })
    .await;
    let mut a_events = a.events();

    healthy.store(false, Ordering::SeqCst);
    let e = wait_event(&mut a_events, Duration::from_secs(2), "A demoted", |e| {
        matches!(e, RoleEvent::Demoted { .. })
    })
    .await;
    assert_eq!(
        e,
        RoleEvent::Demoted {
            role: r.clone(),
            term: la.term(),
            reason: DemoteReason::Released(ReleaseReason::Unhealthy)
        }
    );
    let lb = wait_leader(&b, &r, Duration::from_secs(2)).await;
    assert!(lb.term() > la.term());

    // B leaves while A is still unhealthy: A must not campaign (the vacancy stays).
    shutdown(&[&b]).await;
    let unhealthy_until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < unhealthy_until {
        assert!(
            !a.is_leader(&r),
            "an unhealthy instance in cooldown must not campaign"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = a.status(&r).expect("status");
    assert!(!s.is_leader(), "{s:?}");

    // Healthy again: A campaigns once the cooldown has passed, not before.
    healthy.store(true, Ordering::SeqCst);
    let recovered = Instant::now();
    while let Ok(e) = a_events.try_recv() {
        assert!(
            !matches!(e, RoleEvent::Promoted { .. }),
            "promoted during cooldown: {e:?}"
        );
    }
    let e = wait_event(
        &mut a_events,
        cooldown + Duration::from_secs(2),
        "A promoted again",
        |e| matches!(e, RoleEvent::Promoted { .. }),
    )
    .await;
    let took = recovered.elapsed();
    eprintln!("A promoted {took:?} after becoming healthy (cooldown {cooldown:?}): {e:?}");
    // The last release (every 2 failed checks, 200 ms) restarted the cooldown shortly before.
    assert!(
        took >= cooldown - Duration::from_millis(400),
        "A campaigned {took:?} after recovering, before its cooldown of {cooldown:?} ended"
    );
    shutdown(&[&a]).await;
}

// ---------------------------------------------------------------------------------------------
// 11. 3-node cluster, R3 bucket
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_r3_hand_over_and_node_loss() {
    let mut cluster = NatsCluster::start(3).await;
    let timing = Timing {
        ttl: Duration::from_secs(2),
        heartbeat: Duration::from_millis(500),
        deadline_margin: 0.1,
        operation_timeout: Duration::from_secs(1),
        disconnect_grace: Duration::from_secs(2),
        campaign_jitter: Duration::from_millis(1),
    };
    let rs = roles(5);
    let start = |client: async_nats::Client, id: &'static str| {
        let rs = rs.clone();
        async move {
            let mut builder = RoleManager::builder(client, inst(id))
                .bucket("p_cluster")
                .auto_create(3);
            for r in &rs {
                builder = builder.role(RoleSpec::new(r.clone()).timing(timing));
            }
            builder
                .start()
                .await
                .unwrap_or_else(|e| panic!("{id} start: {e}"))
        }
    };
    let client_a = connect(&cluster.url(0)).await;
    let client_b = connect(&cluster.url(1)).await;
    let a = start(client_a.clone(), "node-a").await;
    let b = start(client_b.clone(), "node-b").await;
    wait_until(
        Duration::from_secs(10),
        "exactly one leader per role",
        || rs.iter().all(|r| leaders(&[&a, &b], r) == 1),
    )
    .await;

    // Hand-over on shutdown.
    let started = Instant::now();
    shutdown(&[&a]).await;
    wait_until(Duration::from_secs(5), "B holds every role", || {
        rs.iter().all(|r| b.is_leader(r))
    })
    .await;
    eprintln!("R3 hand-over of all roles took {:?}", started.elapsed());
    drop(a);
    drop(client_a);

    // Kill a node that is neither the stream leader nor B's server: nothing may change.
    let info = jetstream::new(client_b.clone())
        .get_stream("KV_p_cluster")
        .await
        .expect("stream")
        .info()
        .await
        .expect("stream info")
        .clone();
    let stream_leader = info
        .cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .expect("stream leader");
    assert_eq!(
        info.config.num_replicas, 3,
        "auto_create(3) makes an R3 bucket"
    );
    let b_server = client_b.server_info().server_name;
    let victim = (0..3)
        .find(|&i| {
            let n = cluster.node(i).name();
            n != stream_leader && n != b_server
        })
        .expect("a third node");
    let terms: Vec<u64> = rs
        .iter()
        .map(|r| b.leadership(r).expect("held").term())
        .collect();
    let mut events = b.events();
    cluster.kill(victim);
    let watch_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < watch_until {
        for r in &rs {
            assert!(
                b.is_leader(r),
                "B lost {r} after a follower node was killed"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while let Ok(e) = events.try_recv() {
        assert!(
            !matches!(e, RoleEvent::Demoted { .. }),
            "demotion after killing a follower: {e:?}"
        );
    }
    for (r, t) in rs.iter().zip(&terms) {
        let l = b.leadership(r).expect("still held");
        assert_eq!(l.term(), *t, "{r}: same term");
        assert!(
            l.revision() > *t,
            "{r}: renewals continued on the R3 bucket"
        );
    }
    shutdown(&[&b]).await;
}
