//! Instance identity and observers: restart adoption, duplicate instance ids, observe-only roles.

use super::*;

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
    let store = kv_store(&client, "p_observe").await;
    assert_delete_marker(&store, "role.watched", "nobody took the role").await;
    shutdown(&[&observer]).await;
}
