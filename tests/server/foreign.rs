//! Values other clients write into role keys, against a real nats-server: hostile and
//! unreadable values (foreign: bounded by the backstop), a lease naming us written after we
//! started (a duplicate, not adopted), and a lease of a newer protocol version (never taken
//! over); and (protocol v2) hostile values in a holder's session key.

use std::time::Duration;

use nats_roles::{DemoteReason, RoleEvent, RoleManager};
use testkit::roles::*;
use tokio::time::Instant;

use crate::failures::{put_foreign_lease, shutdown_without_panics, with_lease_bucket};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_lease_is_foreign_and_bounded_by_the_backstop() {
    let (_server, client, store) = with_lease_bucket("f_hostile").await;
    let r = role("x");
    let ids = [
        "5b0e1c52-0000-4000-8000-000000000001",
        "5b0e1c52-0000-4000-8000-000000000002",
    ];
    let hostile_rev = put_foreign_lease(&store, "evil", ids, Some(u64::MAX), 1u64 << 63).await;
    let started = Instant::now();
    let a = manager_of(&client, "node-a", "f_hostile", &r).await;
    let s = wait_status(&a, &r, Duration::from_millis(800), "foreign holder", |s| {
        s.foreign_holder
    })
    .await;
    assert_eq!(
        s.term, None,
        "a hostile term shown as the role's term: {s:?}"
    );
    assert_eq!(s.leader_id, None, "{s:?}");
    assert_eq!(s.revision, hostile_rev);
    // The watcher's view (which the API and the stdout lines show) says the same.
    let mut observed = a.observe(&r);
    let info = tokio::time::timeout(Duration::from_secs(2), observed.wait_for(|h| h.is_some()))
        .await
        .expect("the watcher reports the holder")
        .expect("watch open")
        .clone()
        .expect("holder info");
    assert!(info.foreign && info.term.is_none(), "{info:?}");
    assert_eq!(info.revision, hostile_rev);
    // Taken over after the backstop on this follower's own TTL (not the hostile 2^63 ms).
    let upper = 2 * TTL + HEARTBEAT + Duration::from_millis(500);
    wait_until(upper, "the hostile-held role is taken over", || {
        a.is_leader(&r)
    })
    .await;
    eprintln!("hostile lease taken over after {:?}", started.elapsed());
    let term = a.status(&r).and_then(|s| s.term).expect("own term");
    assert!(term > hostile_rev && term < 1_000, "term {term}");
    shutdown_without_panics(&[&a]).await;
}

/// P5: a lease naming a live instance but written after that instance started (here by a
/// foreign client; the same as a second process with the same id) is not adopted: the instance
/// reports `duplicate_instance` and waits like any follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_naming_us_written_after_we_started_is_a_duplicate_not_adopted() {
    let (_server, client, store) = with_lease_bucket("f_dup").await;
    let r = role("x");
    let b = manager_of(&client, "node-b", "f_dup", &r).await;
    wait_status(&b, &r, Duration::from_secs(2), "node-b LEADER", |s| {
        s.is_leader()
    })
    .await;
    let a = manager_of(&client, "node-a", "f_dup", &r).await;
    wait_status(&a, &r, Duration::from_secs(2), "node-a follows", |s| {
        s.leader_id.as_ref().is_some_and(|l| l.as_str() == "node-b")
    })
    .await;
    // Another writer puts a lease naming node-a (another incarnation) after node-a started.
    let ids = [
        "5b0e1c52-0000-4000-8000-0000000000aa",
        "5b0e1c52-0000-4000-8000-0000000000bb",
    ];
    put_foreign_lease(&store, "node-a", ids, None, 1000).await;
    let s = wait_status(&a, &r, Duration::from_secs(2), "duplicate reported", |s| {
        s.duplicate_instance
    })
    .await;
    assert!(
        !s.is_leader(),
        "adopted a lease written after it started: {s:?}"
    );
    // The value names a session node-a never had: once node-a's own session is renewed
    // above it, that session is known gone (Q5 rule 2) and the role is vacant for everyone.
    wait_until(Duration::from_secs(3), "the role is held again", || {
        leaders(&[&a, &b], &r) == 1
    })
    .await;
    shutdown_without_panics(&[&a, &b]).await;
}

/// A version 1 lease as a version 1 instance writes it: with a per-key TTL (3 s).
fn v1_lease() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "v": 1, "holder": "node-v1", "incarnation": "5b0e1c52-0000-4000-8000-0000000000aa",
        "nonce": "5b0e1c52-0000-4000-8000-0000000000bb", "priority": 0, "ttl_ms": 3000
    }))
    .expect("json")
}

/// Puts `value` into `key` of `bucket` with `Nats-TTL: 3` (as a version 1 instance renews).
async fn put_with_ttl(client: &async_nats::Client, bucket: &str, key: &str, value: Vec<u8>) -> u64 {
    let js = async_nats::jetstream::new(client.clone());
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-TTL", "3");
    js.publish_with_headers(format!("$KV.{bucket}.{key}"), headers, value.into())
        .await
        .expect("publish")
        .await
        .expect("stored")
        .sequence
}

/// Q10: a live version 1 lease (a v1 instance renews it every heartbeat, with a per-key TTL)
/// refuses the start of a configured role, and a role that meets it later reports the
/// incompatible protocol and never takes it over while it is renewed; once the v1 holder is
/// gone (its key expires) the role is held. A lease of a newer version is never taken over
/// either, until it is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_lease_of_another_protocol_version_is_never_taken_over() {
    let (_server, client, store) = with_lease_bucket("f_newer").await;
    // A live v1 holder: renewed every 250 ms.
    let renewing = tokio_util::sync::CancellationToken::new();
    let v1_rev = put_with_ttl(&client, "f_newer", "role.x", v1_lease()).await;
    let v1_client = client.clone();
    let stop = renewing.clone();
    let v1_holder = tokio::spawn(async move {
        while !stop.is_cancelled() {
            tokio::time::sleep(Duration::from_millis(250)).await;
            put_with_ttl(&v1_client, "f_newer", "role.x", v1_lease()).await;
        }
    });
    let v3 = serde_json::json!({"v": 3, "holder": "node-v3", "anything": true});
    let v3_rev = store
        .put("role.y", serde_json::to_vec(&v3).expect("json").into())
        .await
        .expect("put");
    let (x, y) = (role("x"), role("y"));
    // Configured at start, a live v1 lease refuses the start (Q10).
    let refused = RoleManager::builder(client.clone(), inst("node-a"))
        .bucket("f_newer")
        .role(spec(&x))
        .start()
        .await;
    assert!(
        matches!(
            refused,
            Err(nats_roles::Error::IncompatibleProtocol { found: 1, .. })
        ),
        "{:?}",
        refused.map(|_| ())
    );
    // Added later (or met after the start), it is reported and never taken over.
    let a = RoleManager::builder(client.clone(), inst("node-a"))
        .bucket("f_newer")
        .start()
        .await
        .expect("start a");
    let b = RoleManager::builder(client.clone(), inst("node-b"))
        .bucket("f_newer")
        .start()
        .await
        .expect("start b");
    for m in [&a, &b] {
        m.add_role(spec(&x)).expect("add x");
        m.add_role(spec(&y)).expect("add y");
    }
    // Three backstop periods: a foreign (or a stale v1) value would have been taken over.
    tokio::time::sleep(3 * (2 * TTL + HEARTBEAT + Duration::from_millis(500))).await;
    for m in [&a, &b] {
        for (r, version) in [(&x, 1), (&y, 3)] {
            let s = m.status(r).expect("status");
            assert!(
                !s.is_leader(),
                "a lease of protocol v{version} was taken over: {s:?}"
            );
            assert!(s.foreign_holder, "{s:?}");
            let error = s.last_error.clone().unwrap_or_default();
            assert!(
                error.contains(&format!("incompatible protocol v{version} in role.{r}")),
                "the status names the mismatch: {error:?}"
            );
        }
        assert_eq!(m.status(&y).expect("status").revision, v3_rev);
        assert!(m.status(&x).expect("status").revision > v1_rev, "renewed");
    }
    // The v1 holder stops: its key expires (3 s); the v3 lease is deleted.
    renewing.cancel();
    v1_holder.await.expect("v1 holder");
    store.delete("role.y").await.expect("delete the v3 lease");
    wait_until(
        Duration::from_secs(3) + 2 * TTL + HEARTBEAT,
        "the vacated roles are held again",
        || leaders(&[&a, &b], &x) == 1 && leaders(&[&a, &b], &y) == 1,
    )
    .await;
    shutdown_without_panics(&[&a, &b]).await;
}

/// Issue 24 (attack A06): one put of a version-1-shaped value by another client — without the
/// per-key TTL every version 1 lease carries — is foreign, not a v1 holder: it refuses no start
/// and is taken over after the backstop period like any foreign value; a stale v1 lease (not
/// renewed) would be too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_shaped_value_without_a_ttl_blocks_nothing() {
    let (_server, client, store) = with_lease_bucket("f_v1_foreign").await;
    let rev = store.put("role.x", v1_lease().into()).await.expect("put");
    let x = role("x");
    let started = Instant::now();
    let a = RoleManager::builder(client.clone(), inst("node-a"))
        .bucket("f_v1_foreign")
        .role(spec(&x))
        .start()
        .await
        .expect("no refusal: the value is no live v1 lease");
    wait_until(
        2 * TTL + HEARTBEAT + Duration::from_millis(500) + Duration::from_secs(1),
        "the role is taken over",
        || a.is_leader(&x),
    )
    .await;
    eprintln!("taken over {:?} after the start", started.elapsed());
    assert!(a.leadership(&x).expect("term").term() > rev);
    shutdown_without_panics(&[&a]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_value_is_an_unknown_holder_until_the_backstop() {
    let (_server, client, store) = with_lease_bucket("f_foreign").await;
    let r = role("x");
    let garbage_rev = store
        .put("role.x", "garbage".into())
        .await
        .expect("foreign put");

    let started = Instant::now();
    let a = manager_of(&client, "node-a", "f_foreign", &r).await;
    let b = manager_of(&client, "node-b", "f_foreign", &r).await;
    for m in [&a, &b] {
        let s = wait_status(
            m,
            &r,
            Duration::from_millis(800),
            "foreign holder seen",
            |s| s.foreign_holder,
        )
        .await;
        assert!(!s.is_leader(), "{s:?}");
        assert_eq!(s.leader_id, None);
        assert_eq!(s.revision, garbage_rev);
    }
    assert!(!a.is_leader(&r) && !b.is_leader(&r));

    // Taken over after the observed-expiry backstop (ttl + heartbeat after first sight).
    let upper = 2 * TTL + HEARTBEAT + Duration::from_millis(500);
    wait_until(upper, "a manager takes over the foreign-held role", || {
        leaders(&[&a, &b], &r) == 1
    })
    .await;
    let took = started.elapsed();
    eprintln!("foreign value taken over after {took:?}");
    assert!(
        took > TTL,
        "took over after {took:?}, before the TTL: the backstop must wait"
    );
    let holder = if a.is_leader(&r) { &a } else { &b };
    let other = if a.is_leader(&r) { &b } else { &a };
    let l = holder.leadership(&r).expect("leadership");
    assert!(l.term() > garbage_rev);
    wait_status(
        other,
        &r,
        Duration::from_secs(1),
        "the other follows",
        |s| !s.foreign_holder && s.leader_id.as_ref() == Some(holder.instance_id()),
    )
    .await;

    // Garbage written while a manager leads: it demotes (Superseded) and the role recovers.
    let mut events = holder.events();
    let second_garbage = store
        .put("role.x", "more garbage".into())
        .await
        .expect("foreign put");
    let within = Duration::from_secs(1);
    let e = wait_event(&mut events, within, "leader demoted", is_demoted).await;
    // Checked at the end, so that the recovery below is exercised either way.
    let valid_when_demoted = l.is_valid();
    assert_eq!(
        e,
        RoleEvent::Demoted {
            role: r.clone(),
            term: l.term(),
            reason: DemoteReason::Superseded
        }
    );
    let recovering = Instant::now();
    wait_until(
        upper,
        "the role recovers from the second foreign value",
        || leaders(&[&a, &b], &r) == 1,
    )
    .await;
    eprintln!(
        "recovered from a foreign overwrite after {:?}",
        recovering.elapsed()
    );
    let holder = if a.is_leader(&r) { &a } else { &b };
    assert!(holder.leadership(&r).expect("leadership").term() > second_garbage);
    shutdown_without_panics(&[&a, &b]).await;
    assert!(!l.is_valid());
    assert!(
        !valid_when_demoted,
        "RoleEvent::Demoted was delivered while the ended term's Leadership was still valid: \
         the event must be emitted after the term's token is cancelled"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. nats-server restart
// ---------------------------------------------------------------------------------------------

/// Protocol v2: values other clients write into a holder's **session** key — garbage, a
/// session of another instance, 512 KiB of text, a delete — never panic, never leave two
/// holders, and never leave the role without a holder: the holder treats its session as lost
/// (like an eviction), starts a new one and the role is held again within a few TTLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_values_in_a_session_key_end_in_one_holder() {
    let (_server, client, store) = with_lease_bucket("f_session").await;
    let r = role("x");
    let a = manager_of(&client, "node-a", "f_session", &r).await;
    wait_until(TTL * 3, "node-a leads", || a.is_leader(&r)).await;
    let b = manager_of(&client, "node-b", "f_session", &r).await;
    let key = format!("session.node-a.{}", TTL.as_millis());
    let other = serde_json::json!({
        "v": 2, "instance": "node-z", "incarnation": "5b0e1c52-0000-4000-8000-000000000001",
        "session": "5b0e1c52-0000-4000-8000-000000000002", "ttl_ms": TTL.as_millis(),
        "heartbeat_ms": HEARTBEAT.as_millis()
    });
    let values: [Option<Vec<u8>>; 4] = [
        Some(b"\xff\xfe not json".to_vec()),
        Some(serde_json::to_vec(&other).expect("json")),
        Some(vec![b'x'; 512 * 1024]),
        None,
    ];
    for value in values {
        match value {
            Some(v) => {
                store.put(key.as_str(), v.into()).await.expect("put");
            }
            None => store.delete(key.as_str()).await.expect("delete"),
        }
        // The holder notices at its next session renewal (a conflict), at the latest at its
        // deadline; then the role is re-acquired.
        tokio::time::sleep(TTL * 2).await;
        wait_until(TTL * 4, "one holder again", || {
            a.is_leader(&r) ^ b.is_leader(&r)
        })
        .await;
        // And it stays so for a while (no flapping between the two).
        let holder_a = a.is_leader(&r);
        tokio::time::sleep(TTL).await;
        assert_eq!(
            (a.is_leader(&r), b.is_leader(&r)),
            (holder_a, !holder_a),
            "the holder changed without a fault"
        );
    }
    shutdown_without_panics(&[&a, &b]).await;
}
