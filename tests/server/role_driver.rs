//! The role driver (one per session class, docs/layout.md) against a real server: many roles
//! of one class removed and added again while held, and a shutdown whose `on_demote` hangs.

use std::time::Duration;

use nats_roles::{Error, FnCallbacks, RoleManager, RoleState};
use testkit::NatsServer;
use testkit::roles::*;

/// Many roles of one session class removed and added again in a burst, while held, the
/// removals awaited: every role is held again, each with a new term, and stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_roles_removed_and_added_again_are_all_held_again() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let names = roles(200);
    let m = manager(&client, "a", "churn", &names).await;
    let mut first = Vec::new();
    for r in &names {
        first.push(wait_leader(&m, r, Duration::from_secs(20)).await.term());
    }
    for round in 0..3 {
        for r in &names {
            tokio::time::timeout(Duration::from_secs(10), m.remove_role(r))
                .await
                .unwrap_or_else(|_| panic!("round {round}: remove_role({r}) hung"))
                .expect("removed");
            m.add_role(spec(r)).expect("added again");
        }
    }
    for (r, before) in names.iter().zip(first) {
        let l = wait_leader(&m, r, Duration::from_secs(20)).await;
        assert!(l.term() > before, "{r}: term {} after {before}", l.term());
    }
    tokio::time::sleep(TTL * 3).await;
    let lapsed: Vec<_> = names.iter().filter(|r| !m.is_leader(r)).collect();
    assert!(lapsed.is_empty(), "not held any more: {lapsed:?}");
    m.shutdown(Duration::from_secs(10)).await.expect("shutdown");
}

/// A shutdown whose `on_demote` never returns ends with [`Error::ShutdownTimeout`] naming that
/// role, within its timeout (plus room for a loaded machine); the other role of the same
/// session class is released and stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_with_a_hung_on_demote_times_out() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let (stuck, fine) = (role("stuck"), role("fine"));
    let hangs = FnCallbacks::new(|_l| async {}, |_d| std::future::pending::<()>());
    let m = RoleManager::builder(client, inst("a"))
        .bucket("hung")
        .auto_create(1)
        .drain_timeout(Duration::from_millis(300))
        .role(spec(&stuck).callbacks(hangs))
        .role(spec(&fine))
        .start()
        .await
        .expect("manager");
    wait_leader(&m, &stuck, Duration::from_secs(5)).await;
    wait_leader(&m, &fine, Duration::from_secs(5)).await;
    let fine_status = m.role(&fine).expect("handle").watch();
    let timeout = Duration::from_secs(2);
    let started = tokio::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), m.shutdown(timeout))
        .await
        .expect("shutdown returned (did not hang)");
    let took = started.elapsed();
    match result {
        Err(Error::ShutdownTimeout { roles, .. }) => assert_eq!(roles, vec![stuck.clone()]),
        other => panic!("expected ShutdownTimeout naming {stuck}: {other:?}"),
    }
    assert!(took < timeout + Duration::from_secs(2), "took {took:?}");
    assert_eq!(fine_status.borrow().state, RoleState::Stopped);
}

/// A role added again while its removal still runs (a slow `on_demote`, `remove_role` not
/// awaited) is refused with [`Error::RoleStopping`] instead of running two of it on one session
/// (the stopping one handed the new term over through the session: evicted, found by an
/// attack); once the removal returned it is added, held, and stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_is_not_added_again_while_its_removal_runs() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let x = role("x");
    let slow = FnCallbacks::new(
        |_l| async {},
        |_d| tokio::time::sleep(Duration::from_millis(800)),
    );
    let m = std::sync::Arc::new(
        RoleManager::builder(client, inst("a"))
            .bucket("readd")
            .auto_create(1)
            .role(spec(&x).callbacks(slow))
            .start()
            .await
            .expect("manager"),
    );
    let first = wait_leader(&m, &x, Duration::from_secs(5)).await;
    let removing = {
        let (m, x) = (m.clone(), x.clone());
        tokio::spawn(async move { m.remove_role(&x).await })
    };
    tokio::time::timeout(Duration::from_secs(5), async {
        while first.is_valid() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the first term ends");
    match m.add_role(spec(&x)) {
        Err(Error::RoleStopping(r)) => assert_eq!(r, x),
        other => panic!("added while its removal runs: {other:?}"),
    }
    removing.await.expect("task").expect("removed");
    m.add_role(spec(&x)).expect("added after the removal");
    let second = wait_leader(&m, &x, Duration::from_secs(10)).await;
    assert!(second.term() > first.term());
    tokio::time::sleep(TTL * 3).await;
    assert!(second.is_valid(), "the new term ended: {:?}", m.status(&x));
    m.shutdown(Duration::from_secs(10)).await.expect("shutdown");
}
