//! Failure handling against real nats-server processes: a missing bucket, permission errors,
//! full storage, a server restart and a paused (SIGSTOPped) server (foreign values in role keys:
//! `foreign.rs`).
//!
//! Every test starts its own server and uses its own bucket. Waits are bounded and fail with a
//! message saying what did not happen. Panics inside the library's tasks (tokio worker
//! threads) are counted by a panic hook and fail the test that checks them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, SystemTime};

use async_nats::jetstream::{self, kv};
use nats_roles::FailureKind;
use nats_roles::config::NatsConfig;
use nats_roles::{
    DemoteReason, Error, RoleEvent, RoleManager, RoleName, RoleSpec, RoleState, RoleStatus,
};
use testkit::roles::*;
use testkit::{NatsServer, connect, connect_with, create_kv, server_and_client};
use tokio::time::Instant;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Panics seen on tokio worker threads (library tasks) in this test binary.
static TASK_PANICS: AtomicUsize = AtomicUsize::new(0);
static TASK_PANIC_MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn count_task_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some("tokio-runtime-worker") {
                TASK_PANICS.fetch_add(1, Ordering::SeqCst);
                if let Ok(mut m) = TASK_PANIC_MESSAGES.lock() {
                    m.push(info.to_string());
                }
            }
            default(info);
        }));
    });
}

fn assert_no_task_panics() {
    let n = TASK_PANICS.load(Ordering::SeqCst);
    assert_eq!(
        n,
        0,
        "library tasks panicked: {:?}",
        TASK_PANIC_MESSAGES
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    );
}

/// Counts task panics from now on; a server, a client, and the lease bucket `bucket` created
/// by hand (before any manager starts).
pub(crate) async fn with_lease_bucket(bucket: &str) -> (NatsServer, async_nats::Client, kv::Store) {
    count_task_panics();
    let (server, client) = server_and_client().await;
    let store = create_kv(&jetstream::new(client.clone()), lease_bucket(bucket)).await;
    (server, client, store)
}

/// Writes a lease-shaped value of another client to `role.x` (no `Nats-TTL`): `holder` with the
/// incarnation and nonce `ids`, `term` if given, and `ttl_ms`; its revision.
pub(crate) async fn put_foreign_lease(
    store: &kv::Store,
    holder: &str,
    [incarnation, nonce]: [&str; 2],
    term: Option<u64>,
    ttl_ms: u64,
) -> u64 {
    let mut lease = serde_json::json!({
        "v": 2,
        "holder": holder,
        "incarnation": incarnation,
        "session": nonce,
        "session_key": format!("session.{holder}.{ttl_ms}"),
        "nonce": nonce,
        "priority": 0,
        "ttl_ms": ttl_ms,
    });
    if let Some(term) = term {
        lease["term"] = term.into();
    }
    let value = serde_json::to_vec(&lease).expect("json");
    store
        .put("role.x", value.into())
        .await
        .unwrap_or_else(|e| panic!("put a lease of {holder}: {e}"))
}

/// Shuts `managers` down, then fails if a library task panicked.
pub(crate) async fn shutdown_without_panics(managers: &[&RoleManager]) {
    shutdown(managers).await;
    assert_no_task_panics();
}

/// Samples `ms` every 20 ms until `stop` is cancelled; returns the roles seen held by more
/// than one manager at one sampling instant.
fn spawn_overlap_sampler(
    ms: Vec<Arc<RoleManager>>,
    roles: Vec<RoleName>,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<Vec<(Duration, RoleName)>> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut overlaps = Vec::new();
        while !stop.is_cancelled() {
            for r in &roles {
                if ms.iter().filter(|m| m.is_leader(r)).count() > 1 {
                    overlaps.push((started.elapsed(), r.clone()));
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        overlaps
    })
}

// ---------------------------------------------------------------------------------------------
// 1. Missing bucket
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_bucket_without_auto_create() {
    count_task_panics();
    let (_server, client) = server_and_client().await;
    let started = Instant::now();
    let result = RoleManager::builder(client, inst("node-a"))
        .bucket("f_missing")
        .role(spec(&role("x")))
        .start()
        .await;
    let took = started.elapsed();
    match result {
        Err(Error::BucketNotFound { bucket }) => assert_eq!(bucket, "f_missing"),
        Err(e) => panic!("expected BucketNotFound, got {e}"),
        Ok(m) => panic!("start must fail without the bucket and auto_create: {m:?}"),
    }
    assert!(
        took < Duration::from_secs(3),
        "BucketNotFound took {took:?}"
    );
    assert_no_task_panics();
}

// ---------------------------------------------------------------------------------------------
// 2. Permission denied
// ---------------------------------------------------------------------------------------------

/// `ro` may not publish to exactly one role key, `role.shard-10`.
const AUTH_DENY_SHARD_10: &str = r#"authorization {
  users = [
    { user: admin, password: a }
    {
      user: ro, password: r,
      permissions: {
        publish: { allow: [">"], deny: ["$KV.f_perm.role.shard-10"] }
        subscribe: { allow: [">"] }
      }
    }
  ]
}"#;

/// The same users after the operator fixed the permission.
const AUTH_FIXED: &str = r#"authorization {
  users = [
    { user: admin, password: a }
    {
      user: ro, password: r,
      permissions: {
        publish: { allow: [">"] }
        subscribe: { allow: [">"] }
      }
    }
  ]
}"#;

/// How soon after its roles start a denied role must report the denial (see the test).
const PERMISSION_DENIAL_BOUND: Duration = Duration::from_millis(50);

/// A permission violation for exactly one role's subject is reported at once (typed, with
/// the role's status saying so), does not touch the role whose name is a prefix of it
/// (`shard-1`), never stops the role for good: after the operator fixes the permission (server
/// config reload) the role is acquired without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_denied_is_fast_exact_and_retried_until_fixed() {
    count_task_panics();
    let mut server = NatsServer::start_with_config(AUTH_DENY_SHARD_10).await;
    let admin = connect_with(&server.url(), || {
        async_nats::ConnectOptions::with_user_and_password("admin".into(), "a".into())
    })
    .await;
    let admin_kv = create_kv(&jetstream::new(admin.clone()), lease_bucket("f_perm")).await;
    // The roles' first acquires go out at once (measured from them): a bucket past its young
    // hold and role keys that hold a delete marker (a key with no entry, or a new bucket, holds
    // the first acquire for a TTL + heartbeat: protocol Q5 rule 1, Q6).
    for key in ["role.shard-10", "role.shard-1"] {
        admin_kv.delete(key).await.expect("a marker");
    }
    tokio::time::sleep(TTL + HEARTBEAT).await;

    let config = NatsConfig {
        servers: vec![server.url()],
        user: Some("ro".into()),
        password: Some("r".into()),
        ..NatsConfig::default()
    };
    let (client, errors) = nats_roles::connect(&config, "ro-test")
        .await
        .expect("connect as ro");
    let slow = Duration::from_secs(1);
    let m = RoleManager::builder(client, inst("node-ro"))
        .bucket("f_perm")
        .server_errors(errors)
        .retry(nats_roles::RetryPolicy {
            persistent_interval: slow,
            ..nats_roles::RetryPolicy::default()
        })
        .start()
        .await
        .expect("reading the bucket is allowed");
    let mut events = m.events();
    let (denied, allowed) = (role("shard-10"), role("shard-1"));
    let started = Instant::now();
    m.add_role(spec(&allowed)).expect("add role");
    m.add_role(spec(&denied)).expect("add role");
    let e = wait_event(
        &mut events,
        Duration::from_secs(2),
        "Failed{PermissionDenied}",
        |e| matches!(e, RoleEvent::Failed { .. }),
    )
    .await;
    let took = started.elapsed();
    eprintln!("permission denial surfaced after {took:?}: {e:?}");
    // The claim (docs/failure-semantics.md): reported within a round trip (~5 ms after the
    // attempt), not after the 2 s request timeout an uncorrelated denial would take. Measured
    // from the roles' start (the session's first write, then the denied acquire): 15 runs on
    // the 2-core VM at load average ~6 (other builds and tests running): 2.4-8.1 ms, p50
    // 3.7 ms. The bound keeps 6 x the worst of those for a loaded CI machine.
    assert!(
        took < PERMISSION_DENIAL_BOUND,
        "permission denial surfaced after {took:?} (bound {PERMISSION_DENIAL_BOUND:?}): not \
         correlated with the server's error, or the machine is far slower than measured"
    );
    assert_eq!(
        e,
        RoleEvent::Failed {
            role: denied.clone(),
            kind: FailureKind::PermissionDenied
        },
        "only the denied subject's role fails"
    );
    let s = m.status(&denied).expect("status");
    assert_eq!(s.failure, Some(FailureKind::PermissionDenied), "{s:?}");
    assert_eq!(s.last_error.as_deref(), Some("permission_denied"), "{s:?}");
    assert_ne!(s.state, RoleState::Stopped, "stopped for good: {s:?}");
    wait_status(
        &m,
        &allowed,
        Duration::from_secs(2),
        "shard-1 LEADER",
        |s| s.is_leader(),
    )
    .await;

    // Retried at the slow cadence: more failures are not re-reported, nothing is written.
    tokio::time::sleep(slow * 2).await;
    while let Ok(e) = events.try_recv() {
        match &e {
            RoleEvent::Failed { .. } => {
                panic!("reported again, or a violation on shard-10 failed shard-1: {e:?}")
            }
            RoleEvent::Promoted { role, .. } if role == &denied => {
                panic!("promoted while denied: {e:?}")
            }
            _ => {}
        }
    }
    assert!(
        admin_kv
            .entry("role.shard-10")
            .await
            .expect("read")
            .is_none_or(|e| e.operation != async_nats::jetstream::kv::Operation::Put),
        "the denied user wrote the role key"
    );

    // The operator fixes the permission: the role comes back without a restart.
    server.reload_with(AUTH_FIXED);
    let fixed = Instant::now();
    wait_status(
        &m,
        &denied,
        slow * 2 + Duration::from_secs(3),
        "shard-10 LEADER after the fix",
        |s| s.is_leader(),
    )
    .await;
    eprintln!("held {:?} after the permission fix", fixed.elapsed());
    let s = m.status(&denied).expect("status");
    assert_eq!(s.failure, None, "{s:?}");
    assert_eq!(s.last_error, None, "{s:?}");
    assert!(
        std::iter::from_fn(|| events.try_recv().ok()).any(|e| e
            == RoleEvent::Recovered {
                role: denied.clone()
            }),
        "no Recovered event"
    );
    shutdown_without_panics(&[&m]).await;
}

// ---------------------------------------------------------------------------------------------
// 2b. Full storage
// ---------------------------------------------------------------------------------------------

/// A bucket whose `max_bytes` cannot hold every role's lease: the roles that cannot be stored
/// report the server's code (a full stream is a condition that heals, retried with backoff),
/// and once the operator raises `max_bytes` (stream update) every role is held within 2 × TTL,
/// without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_storage_heals_when_max_bytes_is_raised() {
    count_task_panics();
    let (_server, client) = server_and_client().await;
    let js = jetstream::new(client.clone());
    // Room for about three leases (each ~400 bytes with headers).
    create_kv(
        &js,
        kv::Config {
            max_bytes: 1_200,
            ..lease_bucket("f_full")
        },
    )
    .await;
    let timing = nats_roles::Timing {
        ttl: Duration::from_secs(2),
        heartbeat: Duration::from_millis(500),
        ..fast()
    };
    let names: Vec<RoleName> = (0..8).map(|i| role(&format!("full-{i}"))).collect();
    let mut builder = RoleManager::builder(client.clone(), inst("node-full")).bucket("f_full");
    for r in &names {
        builder = builder.role(RoleSpec::new(r.clone()).timing(timing));
    }
    let m = Arc::new(builder.start().await.expect("start"));
    let api = nats_roles::http::Api::new(m.clone(), nats_roles::http::ApiOptions::default());
    // Some roles are held, the others report the full stream with its code.
    let deadline = Instant::now() + Duration::from_secs(10);
    let blocked = loop {
        let statuses: Vec<RoleStatus> = names.iter().filter_map(|r| m.status(r)).collect();
        let blocked: Vec<RoleStatus> = statuses
            .iter()
            .filter(|s| s.failure.is_some())
            .cloned()
            .collect();
        if !blocked.is_empty() && blocked.iter().all(|s| !s.is_leader()) {
            break blocked;
        }
        assert!(
            Instant::now() < deadline,
            "no role reported the full stream: {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let held = names.iter().filter(|r| m.is_leader(r)).count();
    eprintln!(
        "{held} of {} roles held; blocked: {:?}",
        names.len(),
        blocked
            .iter()
            .map(|s| (s.role.to_string(), s.last_error.clone()))
            .collect::<Vec<_>>()
    );
    assert!(held < names.len(), "every role was stored in a full bucket");
    // Readiness says so, with the code.
    let readiness = api.readiness();
    assert!(
        !readiness.is_ready() && readiness.reasons.iter().any(|r| r.contains("10077")),
        "{readiness:?}"
    );
    for s in &blocked {
        let Some(FailureKind::Server(code)) = s.failure else {
            panic!("not a server code: {s:?}");
        };
        assert_eq!(code.class(), nats_roles::FailureClass::Transient, "{s:?}");
        let text = s.last_error.clone().unwrap_or_default();
        // The server's own words for the code (10077: "maximum bytes exceeded").
        let prefix = format!("server_error {} (", code.0);
        assert!(
            text.starts_with(&prefix) && text.len() > prefix.len() + 2,
            "the status names the code and its description: {text}"
        );
        assert_ne!(s.state, RoleState::Stopped, "{s:?}");
    }

    // The operator raises max_bytes.
    let mut stream = js.get_stream("KV_f_full").await.expect("stream");
    let mut config = stream.info().await.expect("info").config.clone();
    config.max_bytes = 1 << 20;
    js.update_stream(&config).await.expect("raise max_bytes");
    let raised = Instant::now();
    for r in &names {
        wait_status(
            &m,
            r,
            timing.ttl * 2 - raised.elapsed().min(timing.ttl * 2),
            "LEADER within 2 x TTL of raising max_bytes",
            |s| s.is_leader() && s.failure.is_none(),
        )
        .await;
    }
    eprintln!(
        "every role held {:?} after max_bytes was raised",
        raised.elapsed()
    );
    let readiness = api.readiness();
    assert!(
        !readiness.reasons.iter().any(|r| r.contains("10077")),
        "{readiness:?}"
    );
    drop(api);
    shutdown_without_panics(&[&m]).await;
}

// ---------------------------------------------------------------------------------------------
// 3. Foreign values
// ---------------------------------------------------------------------------------------------

/// A lease-shaped value written by another client with a term of 2^64 − 1 and a `ttl_ms` of
/// 2^63 and no `Nats-TTL`: it is shown as foreign (flag and raw revision, never as a term, so
/// displayed terms never go back), and the role is taken over after the follower's own backstop
/// instead of never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_keeps_one_leader_per_role() {
    count_task_panics();
    let mut server = NatsServer::start().await;
    let client_a = connect(&server.url()).await;
    let client_b = connect(&server.url()).await;
    let rs: Vec<RoleName> = (0..4).map(|i| role(&format!("r{i}"))).collect();
    let a = Arc::new(manager(&client_a, "node-a", "f_restart", &rs).await);
    let b = Arc::new(manager(&client_b, "node-b", "f_restart", &rs).await);
    let all_led = || rs.iter().all(|r| leaders(&[&a, &b], r) == 1);
    wait_until(
        Duration::from_secs(5),
        "one leader per role before the restart",
        all_led,
    )
    .await;

    let stop = tokio_util::sync::CancellationToken::new();
    let sampler = spawn_overlap_sampler(vec![a.clone(), b.clone()], rs.clone(), stop.clone());

    // A quick restart (SIGKILL, same store): leases survive; whoever leads afterwards, one
    // leader per role.
    let restarted = Instant::now();
    server.restart().await;
    let back = restarted.elapsed();
    wait_until(
        back + 5 * TTL,
        "one leader per role after a quick restart",
        all_led,
    )
    .await;
    eprintln!(
        "quick restart: server back after {back:?}, all roles led after {:?}",
        restarted.elapsed()
    );

    // An outage longer than the TTL: every leader demotes; after the restart the roles are
    // elected again.
    let mut events_a = a.events();
    let mut events_b = b.events();
    let down = Instant::now();
    server.kill();
    tokio::time::sleep(TTL + Duration::from_millis(500)).await;
    for r in &rs {
        assert_eq!(
            leaders(&[&a, &b], r),
            0,
            "{r} still held {:?} into the outage",
            down.elapsed()
        );
    }
    server.restart().await;
    let back = down.elapsed();
    wait_until(
        Duration::from_secs(5) + 3 * TTL,
        "one leader per role after the outage",
        all_led,
    )
    .await;
    eprintln!(
        "outage: server back after {back:?}, all roles led after {:?}",
        down.elapsed()
    );
    let mut demotions = 0;
    for rx in [&mut events_a, &mut events_b] {
        while let Ok(e) = rx.try_recv() {
            if let RoleEvent::Demoted { reason, .. } = e {
                assert!(
                    matches!(
                        reason,
                        DemoteReason::DeadlineExpired | DemoteReason::Disconnected
                    ),
                    "unexpected demote reason during an outage: {reason:?}"
                );
                demotions += 1;
            }
        }
    }
    assert_eq!(
        demotions,
        rs.len(),
        "every leader demoted once during the outage"
    );

    // Keep sampling a little longer: the leaders must be stable.
    tokio::time::sleep(2 * TTL).await;
    stop.cancel();
    let overlaps = sampler.await.expect("sampler");
    assert!(
        overlaps.is_empty(),
        "two managers held a role at once: {overlaps:?}"
    );
    for r in &rs {
        assert_eq!(
            leaders(&[&a, &b], r),
            1,
            "{r}: a: {:?} b: {:?}",
            a.status(r),
            b.status(r)
        );
    }
    shutdown_without_panics(&[&a, &b]).await;
}

// ---------------------------------------------------------------------------------------------
// 5. Server paused longer than the TTL
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_demotes_at_the_local_deadline() {
    count_task_panics();
    let mut server = NatsServer::start().await;
    let client = connect(&server.url()).await;
    let r = role("p");
    let a = manager_of(&client, "node-a", "f_pause", &r).await;
    let l = wait_status(
        &a,
        &r,
        Duration::from_secs(3),
        "promotion",
        RoleStatus::is_leader,
    )
    .await;
    let la = a.leadership(&r).expect("leadership");
    let term = l.term.expect("term");
    let first_deadline = la.deadline();
    wait_until(Duration::from_secs(2), "session renewals", || {
        la.deadline() >= first_deadline + HEARTBEAT * 2
    })
    .await;

    let mut events = a.events();
    let paused = Instant::now();
    server.pause();
    let within = TTL + Duration::from_secs(1);
    let e = wait_event(&mut events, within, "demotion while paused", is_demoted).await;
    let demoted_after = paused.elapsed();
    let RoleEvent::Demoted { reason, .. } = e else {
        unreachable!()
    };
    assert!(
        matches!(
            reason,
            DemoteReason::DeadlineExpired | DemoteReason::Disconnected
        ),
        "demote reason {reason:?}"
    );
    assert!(!la.is_valid());
    let s = a.status(&r).expect("status");
    let last_renew = s.last_heartbeat.expect("renewed before the pause");
    let demoted_at = s.last_transition;
    let gap = demoted_at
        .duration_since(last_renew)
        .unwrap_or_else(|e| panic!("demote before last renew? {e}"));
    let bound = TTL.mul_f64(1.0 - MARGIN) + Duration::from_millis(200);
    eprintln!(
        "demoted ({reason}) {gap:?} after the last renewal, {demoted_after:?} after the pause"
    );
    assert!(
        gap <= bound,
        "demoted {gap:?} after the last renewal; the local deadline allows {bound:?}"
    );
    assert!(
        SystemTime::now()
            .duration_since(demoted_at)
            .unwrap_or_default()
            < Duration::from_secs(1)
    );

    // Keep the server stopped past the TTL, then resume: a leader exists again.
    let resume_at = paused + TTL + Duration::from_millis(500);
    tokio::time::sleep_until(resume_at).await;
    server.resume();
    let resumed = Instant::now();
    let l2 = wait_status(
        &a,
        &r,
        Duration::from_secs(5),
        "promotion after resume",
        RoleStatus::is_leader,
    )
    .await;
    eprintln!("leader again {:?} after resume", resumed.elapsed());
    assert!(l2.term.expect("term") > term, "a new term after the pause");
    shutdown_without_panics(&[&a]).await;
}
