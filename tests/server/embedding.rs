//! The embedding API against a real server: role handles, `run_while_leader`, roles added and
//! removed at run time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use nats_roles::{InstanceId, RoleManager, RoleName, RoleSpec, RoleState, run_while_leader};
use testkit::NatsServer;
use testkit::roles::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_and_work_that_runs_only_while_leading() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let sweeper = RoleName::new("sweeper").unwrap();

    let running = Arc::new(AtomicBool::new(false));
    let sweeps = Arc::new(AtomicU32::new(0));
    let (r, s) = (running.clone(), sweeps.clone());
    let work = run_while_leader(move |l| {
        let (running, sweeps) = (r.clone(), s.clone());
        async move {
            running.store(true, Ordering::SeqCst);
            // Clear the flag however the work ends (drop at term end included).
            struct Clear(Arc<AtomicBool>);
            impl Drop for Clear {
                fn drop(&mut self) {
                    self.0.store(false, Ordering::SeqCst);
                }
            }
            let _clear = Clear(running);
            loop {
                l.fenced_put("progress", "x")
                    .await
                    .expect("fenced write while leading");
                sweeps.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });

    let manager = RoleManager::builder(client, InstanceId::new("embedder").unwrap())
        .bucket("embedding")
        .auto_create(1)
        .start()
        .await
        .unwrap();
    assert!(manager.role(&sweeper).is_none());

    // Added at run time.
    manager
        .add_role(
            RoleSpec::new(sweeper.clone())
                .timing(fast())
                .callbacks(work),
        )
        .unwrap();
    let handle = manager.role(&sweeper).expect("handle of a managed role");
    let term = tokio::time::timeout(Duration::from_secs(5), handle.wait_leader())
        .await
        .expect("leader within 5 s")
        .expect("role running");
    assert!(handle.is_leader());
    assert_eq!(handle.status().state, RoleState::Leader);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(running.load(Ordering::SeqCst), "work runs while leading");
    assert!(
        sweeps.load(Ordering::SeqCst) >= 5,
        "work made progress across renewals"
    );

    // Removed at run time: the work is gone before the lease is released.
    manager.remove_role(&sweeper).await.unwrap();
    assert!(
        !running.load(Ordering::SeqCst),
        "work stopped before remove_role returned"
    );
    assert!(!term.is_valid());
    assert!(!handle.is_leader());
    assert_eq!(handle.status().state, RoleState::Stopped);
    let after = sweeps.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        sweeps.load(Ordering::SeqCst),
        after,
        "no work after the term"
    );
    assert!(manager.role(&sweeper).is_none());

    manager.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// `RoleHandle::wait_leader` returns once the term is won, not after `on_promote` (as its docs
/// say): here `on_promote` is held until the test lets it go, and `wait_leader` returns
/// meanwhile with a valid term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_leader_returns_before_on_promote_has_finished() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let name = role("gate");
    let gate = Arc::new(tokio::sync::Notify::new());
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let entered_tx = Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let finished = Arc::new(AtomicBool::new(false));
    let (g, f) = (gate.clone(), finished.clone());
    let callbacks = nats_roles::FnCallbacks::new(
        move |_l| {
            let (gate, finished, entered) = (g.clone(), f.clone(), entered_tx.clone());
            async move {
                if let Some(tx) = entered.lock().ok().and_then(|mut t| t.take()) {
                    let _ = tx.send(());
                }
                gate.notified().await;
                finished.store(true, Ordering::SeqCst);
            }
        },
        |_d| async {},
    );
    let manager = RoleManager::builder(client, inst("waiter"))
        .bucket("wait_leader")
        .auto_create(1)
        .role(spec(&name).callbacks(callbacks))
        .start()
        .await
        .expect("manager starts");
    let handle = manager.role(&name).expect("managed");
    let term = tokio::time::timeout(Duration::from_secs(10), handle.wait_leader())
        .await
        .expect("won within 10 s")
        .expect("a term");
    assert!(term.is_valid());
    // on_promote is running (or about to) and cannot have finished: it waits for the gate.
    tokio::time::timeout(Duration::from_secs(10), entered_rx)
        .await
        .expect("on_promote called")
        .expect("on_promote called");
    assert!(
        !finished.load(Ordering::SeqCst),
        "on_promote finished before the gate opened"
    );
    gate.notify_one();
    shutdown(&[&manager]).await;
    assert!(finished.load(Ordering::SeqCst), "on_promote ran to its end");
}
