//! Warm hand-over (docs/placement.md): before a voluntary move the chosen receiver runs its
//! `on_prepare`, announces it in its membership record, and only then does the holder release
//! the role; a receiver that never gets ready is waited for `prepare_timeout` at most, and one
//! whose preparation fails says so and gets the role at once (cold).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nats_roles::callbacks::{BoxFuture, PrepareFuture};
use nats_roles::manager::PlacementSettings;
use nats_roles::{
    Demotion, InstanceId, Leadership, PrepareError, RoleCallbacks, RoleManager, RoleSpec,
};
use testkit::NatsServer;
use testkit::roles::*;
use tokio::time::Instant;

/// Records when `on_prepare` started and returned and when the role was promoted; prepares
/// for `takes` (forever when `None`), then succeeds, or fails when `fails`.
struct Warm {
    takes: Option<Duration>,
    fails: bool,
    log: Arc<Mutex<Vec<(&'static str, Instant)>>>,
}

impl RoleCallbacks for Warm {
    fn on_promote(&self, _l: Leadership) -> BoxFuture<'_> {
        self.log
            .lock()
            .expect("log")
            .push(("promoted", Instant::now()));
        Box::pin(async {})
    }
    fn on_demote(&self, _d: Demotion) -> BoxFuture<'_> {
        Box::pin(async {})
    }
    fn prepares(&self) -> bool {
        true
    }
    fn on_prepare(&self, _role: nats_roles::RoleName) -> PrepareFuture<'_> {
        let log = self.log.clone();
        let (takes, fails) = (self.takes, self.fails);
        Box::pin(async move {
            log.lock()
                .expect("log")
                .push(("prepare started", Instant::now()));
            match takes {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
            log.lock().expect("log").push(("prepared", Instant::now()));
            if fails {
                return Err(PrepareError::new("the cache cannot be loaded"));
            }
            Ok(())
        })
    }
}

fn settings() -> PlacementSettings {
    PlacementSettings {
        enabled: true,
        stability_window: Duration::from_millis(200),
        leave_delay: Duration::from_secs(1),
        claim_grace: Duration::from_millis(300),
        prepare_timeout: Duration::from_secs(2),
        member_ttl: Some(Duration::from_secs(1)),
        ..PlacementSettings::default()
    }
}

async fn manager(
    url: &str,
    bucket: &str,
    id: &str,
    draining: bool,
    callbacks: Option<Warm>,
) -> RoleManager {
    let client = testkit::connect(url).await;
    let mut spec = RoleSpec::new(role("warm")).timing(fast());
    if let Some(c) = callbacks {
        spec = spec.callbacks(c);
    }
    RoleManager::builder(client, InstanceId::new(id).expect("valid"))
        .bucket(bucket)
        .auto_create(1)
        .placement(PlacementSettings {
            draining,
            ..settings()
        })
        .role(spec)
        .start()
        .await
        .expect("manager starts")
}

fn at(log: &Mutex<Vec<(&'static str, Instant)>>, what: &str) -> Option<Instant> {
    log.lock()
        .expect("log")
        .iter()
        .find(|(w, _)| *w == what)
        .map(|(_, t)| *t)
}

/// node-a leads the role; node-b (whose `on_prepare` takes `takes`, forever when `None`)
/// joins; node-a drains, so the plan moves the role to node-b. Returns both managers and
/// node-b's log once node-b was promoted.
async fn drain_to_a_preparing_receiver(
    url: &str,
    bucket: &str,
    (takes, fails): (Option<Duration>, bool),
) -> (
    RoleManager,
    RoleManager,
    Arc<Mutex<Vec<(&'static str, Instant)>>>,
) {
    let a = manager(url, bucket, "node-a", false, None).await;
    let handle = a.role(&role("warm")).expect("role");
    tokio::time::timeout(Duration::from_secs(5), handle.wait_leader())
        .await
        .expect("a leads")
        .expect("running");
    let log = Arc::new(Mutex::new(Vec::new()));
    let warm = Warm {
        takes,
        fails,
        log: log.clone(),
    };
    let b = manager(url, bucket, "node-b", false, Some(warm)).await;
    assert!(a.set_draining(true));
    let deadline = Instant::now() + Duration::from_secs(10);
    while at(&log, "promoted").is_none() {
        assert!(
            Instant::now() < deadline,
            "b never promoted: {:?}",
            log.lock().expect("log")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (a, b, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_releases_only_once_the_receiver_prepared() {
    let server = NatsServer::start().await;
    let (a, b, log) = drain_to_a_preparing_receiver(
        &server.url(),
        "prepare-ready",
        (Some(Duration::from_millis(500)), false),
    )
    .await;
    let started = at(&log, "prepare started").expect("b prepared");
    let prepared = at(&log, "prepared").expect("b finished preparing");
    let promoted = at(&log, "promoted").expect("promoted");
    assert!(prepared >= started + Duration::from_millis(450));
    assert!(promoted >= prepared, "promoted before it was prepared");
    // Released once b said so: within a record write and a hand-over (docs/placement.md:
    // ≈ 6 ms), not the prepare timeout (2 s here). 15 runs on the 2-core VM at load average ~6
    // (other builds and tests running): 3.8-19.6 ms, p50 6.0 ms. The bound keeps 5 x the
    // worst of those for a loaded CI machine.
    let waited = promoted - prepared;
    eprintln!("prepared → promoted {waited:?}");
    assert!(
        waited < Duration::from_millis(100),
        "prepared → promoted took {waited:?} (bound 100 ms)"
    );
    b.shutdown(Duration::from_secs(5)).await.expect("b stops");
    a.shutdown(Duration::from_secs(5)).await.expect("a stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_gets_ready_is_waited_for_the_prepare_timeout_only() {
    let server = NatsServer::start().await;
    let (a, b, log) =
        drain_to_a_preparing_receiver(&server.url(), "prepare-timeout", (None, false)).await;
    let started = at(&log, "prepare started").expect("b started preparing");
    let promoted = at(&log, "promoted").expect("promoted");
    let waited = promoted - started;
    eprintln!("prepare started → promoted {waited:?} (prepare_timeout 2 s)");
    assert!(waited >= Duration::from_millis(1900), "{waited:?}");
    assert!(waited < Duration::from_secs(4), "{waited:?}");
    b.shutdown(Duration::from_secs(5)).await.expect("b stops");
    a.shutdown(Duration::from_secs(5)).await.expect("a stops");
}

/// A receiver whose `on_prepare` fails says so (`prepare_failed`) and the holder hands the role
/// over at once instead of waiting out `prepare_timeout` (2 s here) for a readiness that will
/// not come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_preparation_is_not_ready_and_is_not_waited_for() {
    let server = NatsServer::start().await;
    let (a, b, log) = drain_to_a_preparing_receiver(
        &server.url(),
        "prepare-fails",
        (Some(Duration::from_millis(300)), true),
    )
    .await;
    let started = at(&log, "prepare started").expect("b started preparing");
    let failed = at(&log, "prepared").expect("b's preparation ended");
    let promoted = at(&log, "promoted").expect("promoted");
    assert!(promoted >= failed, "promoted before the preparation ended");
    // A record write and a hand-over (≈ 6 ms, bound 100 ms as above), far from the 2 s the
    // holder would wait for a receiver that does not answer.
    let waited = promoted - failed;
    eprintln!(
        "failed → promoted {waited:?}; started → promoted {:?}",
        promoted - started
    );
    assert!(
        waited < Duration::from_millis(100),
        "failed → promoted took {waited:?} (bound 100 ms)"
    );
    b.shutdown(Duration::from_secs(5)).await.expect("b stops");
    a.shutdown(Duration::from_secs(5)).await.expect("a stops");
}

/// A receiver that never answers (its `on_prepare` never returns and its own limit is 60 s).
struct Silent;

impl RoleCallbacks for Silent {
    fn on_promote(&self, _l: Leadership) -> BoxFuture<'_> {
        Box::pin(async {})
    }
    fn on_demote(&self, _d: Demotion) -> BoxFuture<'_> {
        Box::pin(async {})
    }
    fn prepares(&self) -> bool {
        true
    }
    fn on_prepare(&self, _role: nats_roles::RoleName) -> PrepareFuture<'_> {
        Box::pin(std::future::pending())
    }
}

/// Issue 26 item 11 (a): node-a (draining from the start, `prepare_timeout` 2 s) holds w1 and
/// w2; node-b joins and never answers for either. Both roles wait for node-b at the same time:
/// the second is promoted right after the first, not one more `prepare_timeout` (2 s) later
/// (the issue measured r1 after 2.04 s, r2 after 4.07 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_moving_to_a_silent_receiver_wait_one_prepare_timeout_together() {
    let server = NatsServer::start().await;
    let url = server.url();
    let bucket = "prepare-together";
    let start = |id: &'static str, receiver: bool| {
        let url = url.clone();
        async move {
            let client = testkit::connect(&url).await;
            let mut builder = RoleManager::builder(client, InstanceId::new(id).expect("valid"))
                .bucket(bucket)
                .auto_create(1);
            let draining = !receiver;
            for name in ["w1", "w2"] {
                let mut spec = RoleSpec::new(role(name)).timing(fast());
                if receiver {
                    spec = spec.callbacks(Silent);
                }
                builder = builder.role(spec);
            }
            builder
                .placement(PlacementSettings {
                    draining,
                    // The receiver's own limit: it does not answer within the test.
                    prepare_timeout: if draining {
                        Duration::from_secs(2)
                    } else {
                        Duration::from_secs(60)
                    },
                    ..settings()
                })
                .start()
                .await
                .expect("manager starts")
        }
    };
    let a = start("node-a", false).await;
    for name in ["w1", "w2"] {
        let handle = a.role(&role(name)).expect("role");
        tokio::time::timeout(Duration::from_secs(5), handle.wait_leader())
            .await
            .expect("a leads")
            .expect("running");
    }
    let joined = Instant::now();
    let b = start("node-b", true).await;
    // Promotions as the role handles report them (not `on_promote`: the receiver's callbacks
    // are not what this test is about).
    let mut promoted = Vec::new();
    for name in ["w1", "w2"] {
        let handle = b.role(&role(name)).expect("role");
        promoted.push(tokio::spawn(async move {
            tokio::time::timeout(Duration::from_secs(15), handle.wait_leader())
                .await
                .expect("b leads within 15 s")
                .expect("running");
            Instant::now()
        }));
    }
    let mut promoted: Vec<Instant> = futures_util::future::join_all(promoted)
        .await
        .into_iter()
        .map(|r| r.expect("waiter"))
        .collect();
    promoted.sort();
    let (first, second) = (promoted[0] - joined, promoted[1] - joined);
    eprintln!("node-b joined → promoted: first {first:?}, second {second:?} (prepare_timeout 2 s)");
    // The first waited out the prepare timeout (node-b never answered)…
    assert!(first >= Duration::from_millis(1900), "{first:?}");
    // …and the second did not wait for another one: it follows once the first move is done
    // (milliseconds; 1 s leaves a loaded CI machine room and is half the 2 s it took before).
    assert!(
        second - first < Duration::from_secs(1),
        "second promotion {:?} after the first",
        second - first
    );
    b.shutdown(Duration::from_secs(5)).await.expect("b stops");
    a.shutdown(Duration::from_secs(5)).await.expect("a stops");
}
