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
async fn session_renewals_keep_the_ttl_and_role_keys_have_none() {
    let (_server, client) = server_and_client().await;
    let r = role("ttl-renew");
    let (m, l) = leading(&client, "node-a", "p_ttl_renew", &r).await;
    let session_key = "session.node-a.1000";
    let mut entries = watch_key(&client, "p_ttl_renew", session_key).await;
    let first = raw_last(&client, "p_ttl_renew", session_key).await.sequence;
    // Three heartbeats: at least two session renewals.
    tokio::time::sleep(HEARTBEAT * 3).await;

    // The last session write is a renewal with a per-key TTL (Q3); the role key has none.
    let msg = raw_last(&client, "p_ttl_renew", session_key).await;
    assert!(
        msg.sequence >= first + 2,
        "the session is renewed every heartbeat"
    );
    assert_eq!(
        header(&msg, "Nats-TTL"),
        Some("1"),
        "session renewals must carry Nats-TTL (headers: {:?})",
        msg.headers
    );
    let role_msg = raw_last(&client, "p_ttl_renew", "role.ttl-renew").await;
    assert_eq!(
        role_msg.sequence,
        l.term(),
        "the role key is written once per term"
    );
    assert_eq!(
        header(&role_msg, "Nats-TTL"),
        None,
        "role keys carry no TTL (Q1)"
    );

    // "Freeze" the process: no shutdown, no delete; only the TTL can end the session.
    drop(m);
    assert_expires_in_time(&mut entries, "the last session renewal was seen").await;
    let marker = raw_last(&client, "p_ttl_renew", session_key).await;
    assert_eq!(header(&marker, "Nats-Marker-Reason"), Some("MaxAge"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_started_over_a_tombstone_keeps_the_ttl() {
    let (_server, client) = server_and_client().await;
    let r = role("ttl-tomb");
    let session_key = "session.node-a.1000";
    let (a, _) = leading(&client, "node-a", "p_ttl_tomb", &r).await;
    shutdown(&[&a]).await;
    let tomb = raw_last(&client, "p_ttl_tomb", session_key).await;
    assert_eq!(
        header(&tomb, "KV-Operation"),
        Some("DEL"),
        "a graceful stop ends the session with a delete marker"
    );

    let mut entries = watch_key(&client, "p_ttl_tomb", session_key).await;
    let (b, _l) = leading(&client, "node-a", "p_ttl_tomb", &r).await;
    // Drop at once, before the first renewal: the start is the only session write.
    drop(b);
    let msg = raw_last(&client, "p_ttl_tomb", session_key).await;
    assert!(
        msg.sequence > tomb.sequence,
        "a new session over the tombstone"
    );
    assert_eq!(
        header(&msg, "Nats-TTL"),
        Some("1"),
        "a session started over a tombstone must carry Nats-TTL (headers: {:?})",
        msg.headers
    );
    assert_expires_in_time(&mut entries, "the session start over the tombstone").await;
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
    // Let a few session renewals happen so that the crash hits a renewed session.
    let first_deadline = la.deadline();
    wait_until(Duration::from_secs(2), "session renewals", || {
        la.deadline() >= first_deadline + HEARTBEAT * 2
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
