//! Per-key TTLs and expiry: renewals and acquires over a tombstone keep the TTL, and a crashed
//! holder's lease expires on the server.

use super::*;

// ---------------------------------------------------------------------------------------------
// 3. + 4. TTL pitfalls: renewals and acquires over a tombstone keep the per-key TTL
// ---------------------------------------------------------------------------------------------

/// How long after the last write a key may take to expire on the server.
const EXPIRY_SLACK: Duration = Duration::from_millis(1500);

/// Waits for the key's expiry marker and asserts that it came at most TTL + [`EXPIRY_SLACK`]
/// after the last write seen (`last_write` names that write).
async fn assert_expires_in_time(
    entries: &mut mpsc::UnboundedReceiver<(Instant, kv::Entry)>,
    last_write: &str,
) {
    let (last_put, expired) = wait_expiry_marker(entries, None, TTL + Duration::from_secs(4)).await;
    let after = expired - last_put;
    eprintln!("key expired {after:?} after {last_write}");
    assert!(
        after <= TTL + EXPIRY_SLACK,
        "key expired {after:?} after {last_write}; expected <= ttl + {EXPIRY_SLACK:?}"
    );
}

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
    assert_expires_in_time(&mut entries, "the last renewal was seen").await;
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
    assert_expires_in_time(&mut entries, "the acquire over the tombstone").await;
}

// ---------------------------------------------------------------------------------------------
// 5. Crash fail-over through server-side expiry
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_fail_over_via_server_expiry() {
    let (_server, client) = server_and_client().await;
    let r = role("crash");
    let (a, la, b) = leader_and_follower(&client, "p_crash", &r).await;
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
    let within = TTL + Duration::from_secs(3);
    let e = wait_event(&mut events, within, "B promoted", is_promoted).await;
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
