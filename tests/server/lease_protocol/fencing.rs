//! Fenced writes following the term, and health-driven releases.

use super::*;

/// The value of the role's fenced data key `key` (`data.fenced.<key>`), if any.
async fn fenced_data(store: &kv::Store, key: &str) -> Option<Vec<u8>> {
    store
        .get(format!("data.fenced.{key}"))
        .await
        .unwrap_or_else(|e| panic!("get data.fenced.{key}: {e}"))
        .map(|b| b.to_vec())
}

// ---------------------------------------------------------------------------------------------
// 9. Fenced writes
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_follow_the_term() {
    let (_server, client) = server_and_client().await;
    let r = role("fenced");
    let (a, la, b) = leader_and_follower(&client, "p_fence", &r).await;
    let store = kv_store(&client, "p_fence").await;

    let rev = la
        .fenced_put("k", "from-a")
        .await
        .expect("fenced put by the leader");
    assert!(rev > 0);
    assert_eq!(
        fenced_data(&store, "k").await.as_deref(),
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
        fenced_data(&store, "k").await.as_deref(),
        Some(&b"from-a"[..]),
        "the stale write must not be stored"
    );
    let s = a.status(&r).expect("status");
    assert_eq!(
        s.last_demote_reason,
        Some(DemoteReason::Released(ReleaseReason::Requested))
    );
    assert!(!a.is_leader(&r));

    // Fenced writes across session renewals: all must succeed, and the role key's revision
    // (the fence) stays the term's for the whole term (Q4: only the session is renewed).
    let fence = lb.revision();
    let first_deadline = lb.deadline();
    let mut failures = Vec::new();
    for i in 0..100 {
        if let Err(e) = lb.fenced_put("counter", i.to_string()).await {
            failures.push((i, e.to_string()));
        }
        assert_eq!(
            lb.revision(),
            fence,
            "the fence does not move during a term"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        failures.is_empty(),
        "fenced writes failed while leading: {failures:?}"
    );
    assert!(
        lb.deadline() >= first_deadline + HEARTBEAT * 3,
        "the writes should have spanned several session renewals"
    );
    assert_eq!(
        fenced_data(&store, "counter").await.as_deref(),
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
        fenced_data(&store, "counter").await.as_deref(),
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
    let within = Duration::from_secs(2);
    let e = wait_event(&mut a_events, within, "A demoted", is_demoted).await;
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
    let within = cooldown + Duration::from_secs(2);
    let e = wait_event(&mut a_events, within, "A promoted again", is_promoted).await;
    let took = recovered.elapsed();
    eprintln!("A promoted {took:?} after becoming healthy (cooldown {cooldown:?}): {e:?}");
    // The last release (every 2 failed checks, 200 ms) restarted the cooldown shortly before.
    assert!(
        took >= cooldown - Duration::from_millis(400),
        "A campaigned {took:?} after recovering, before its cooldown of {cooldown:?} ended"
    );
    shutdown(&[&a]).await;
}
