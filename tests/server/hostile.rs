//! Protocol v2 under faults (issue 24), against a real nats-server: evidence that ages out,
//! values other clients write into session and role keys, refused releases, look-alike keys.
//! Each test states the item it covers; each failed before the fix it guards (see the note on
//! the issue for the figures before and after).

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use nats_roles::config::NatsConfig;
use nats_roles::tooling::history::{HistoryRecorder, check_loaded, load_paths};
use nats_roles::{RoleEvent, RoleManager, RoleName, RoleSpec};
use testkit::proxy::{Mode, Proxy};
use testkit::roles::*;
use testkit::{NatsServer, connect, connect_with, create_kv};
use tokio::time::Instant;

use crate::failures::shutdown_without_panics;

/// The backstop period of Q5 rule 4 with [`fast`] timing: TTL + heartbeat + 500 ms.
const PERIOD: Duration = Duration::from_millis(1_000 + 250 + 500);

/// The hold of a young bucket with [`fast`] timing (protocol Q6): TTL + heartbeat.
const YOUNG: Duration = Duration::from_millis(1_250);

/// The session key of `instance` for [`fast`] timing.
fn session_key(instance: &str) -> String {
    format!("session.{instance}.{}", TTL.as_millis())
}

/// The uuid of the session `key` holds now.
async fn session_uuid(store: &kv::Store, key: &str) -> String {
    let entry = store
        .entry(key)
        .await
        .expect("read the session key")
        .expect("a session value");
    let v: serde_json::Value = serde_json::from_slice(&entry.value).expect("session json");
    v["session"].as_str().expect("a session uuid").to_owned()
}

/// A role value naming `holder`'s session `session` in TTL class `ttl_ms`, as another client
/// writes it.
fn role_value(holder: &str, incarnation: &str, session: &str, ttl_ms: u128) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "v": 2,
        "holder": holder,
        "incarnation": incarnation,
        "session": session,
        "session_key": format!("session.{holder}.{ttl_ms}"),
        "nonce": "5b0e1c52-0000-4000-8000-0000000000ff",
        "priority": 0,
        "ttl_ms": ttl_ms,
    }))
    .expect("json")
}

/// A valid session value of `instance` (TTL class of [`fast`]) with another incarnation.
fn session_value(instance: &str, incarnation: &str, session: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "v": 2, "instance": instance, "incarnation": incarnation, "session": session,
        "ttl_ms": TTL.as_millis(), "heartbeat_ms": HEARTBEAT.as_millis()
    }))
    .expect("json")
}

/// A manager on `bucket` (auto-created) through `url` with fast timing, taking part in
/// `roles`, recording its history into `dir` when given.
async fn manager_at(
    url: &str,
    id: &str,
    bucket: &str,
    roles: &[RoleName],
    dir: Option<&std::path::Path>,
) -> (RoleManager, Option<HistoryRecorder>) {
    let client = connect(url).await;
    let mut b = RoleManager::builder(client, inst(id))
        .bucket(bucket)
        .auto_create(1);
    let recorder = dir.map(|d| HistoryRecorder::in_dir(d, &inst(id)).expect("recorder"));
    if let Some(r) = &recorder {
        b = b.history(r.clone());
    }
    for r in roles {
        b = b.role(spec(r));
    }
    let m = b
        .start()
        .await
        .unwrap_or_else(|e| panic!("manager {id}: {e}"));
    (m, recorder)
}

/// Stops the recorders and requires the histories in `dir` to be clean.
fn histories_clean(dir: &std::path::Path, recorders: &[Option<HistoryRecorder>]) {
    for r in recorders.iter().flatten() {
        r.stop();
    }
    let loaded = load_paths(&[dir.to_path_buf()]).expect("histories load");
    let report = check_loaded(&loaded);
    assert!(report.is_clean(), "{}", report.render_text());
}

/// Item 12: a put or a delete of a look-alike of a live instance's session key
/// (`session.node-a.+1000`) is another key: it ends no session, and the instance's roles keep
/// their terms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_alike_session_key_ends_no_session() {
    let server = NatsServer::start().await;
    let client = connect(&server.url()).await;
    create_kv(&jetstream::new(client.clone()), lease_bucket("h_alike")).await;
    let r = role("x");
    let (a, _) = manager_at(
        &server.url(),
        "node-a",
        "h_alike",
        std::slice::from_ref(&r),
        None,
    )
    .await;
    let term = wait_leader(&a, &r, YOUNG + TTL * 3).await.term();
    let mut events = a.events();
    // The KV API refuses `+` in keys; any other client can publish to the subject.
    let js = jetstream::new(client.clone());
    let subject = format!("$KV.h_alike.session.node-a.+{}", TTL.as_millis());
    let other = session_value(
        "node-a",
        "5b0e1c52-0000-4000-8000-000000000001",
        "5b0e1c52-0000-4000-8000-000000000002",
    );
    js.publish(subject.clone(), other.into())
        .await
        .expect("publish")
        .await
        .expect("a look-alike put stored");
    tokio::time::sleep(HEARTBEAT * 2).await;
    let mut delete = async_nats::HeaderMap::new();
    delete.insert("KV-Operation", "DEL");
    js.publish_with_headers(subject, delete, bytes::Bytes::new())
        .await
        .expect("publish")
        .await
        .expect("a look-alike delete stored");
    tokio::time::sleep(HEARTBEAT * 3).await;
    while let Ok(e) = events.try_recv() {
        assert!(!is_demoted(&e), "a look-alike key ended a term: {e:?}");
    }
    assert_eq!(
        a.leadership(&r).map(|l| l.term()),
        Some(term),
        "the term changed"
    );
    shutdown_without_panics(&[&a]).await;
}

/// Item 6 (Q5 rule 4): a follower cut off while the holder died, until the session's expiry
/// marker aged out (a 1 s marker TTL here), still believes the session when it comes back. The
/// absence it then reads proves nothing by itself; its reap on the revision it knew is refused,
/// the leader read finds no entry, and the reap on 0 makes the role vacant: it is held again
/// within a period or two — not never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_missed_the_expiry_marker_takes_the_role_over() {
    let server = NatsServer::start().await;
    let client = connect(&server.url()).await;
    let store = create_kv(
        &jetstream::new(client.clone()),
        kv::Config {
            limit_markers: Some(Duration::from_secs(1)),
            ..lease_bucket("h_aged")
        },
    )
    .await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let upstream: std::net::SocketAddr = format!("127.0.0.1:{}", server.port())
        .parse()
        .expect("addr");
    let (link_a, link_b) = (Proxy::start(upstream).await, Proxy::start(upstream).await);
    let r = role("x");
    let (a, rec_a) = manager_at(
        &link_a.url(),
        "node-a",
        "h_aged",
        std::slice::from_ref(&r),
        Some(tmp.path()),
    )
    .await;
    wait_leader(&a, &r, YOUNG + TTL * 3).await;
    let (b, rec_b) = manager_at(
        &link_b.url(),
        "node-b",
        "h_aged",
        std::slice::from_ref(&r),
        Some(tmp.path()),
    )
    .await;
    wait_status(&b, &r, TTL * 3, "node-b follows node-a", |s| {
        s.leader_id.as_ref().is_some_and(|l| l.as_str() == "node-a")
    })
    .await;
    // The follower is cut off (its connections broken, new ones stalled), then the holder
    // dies the same way.
    link_b.set_mode(Mode::Stall);
    link_b.reset();
    link_a.set_mode(Mode::Stall);
    link_a.reset();
    // The holder's session expires (TTL) and its marker ages out (1 s later).
    let key = session_key("node-a");
    let gone_by = Instant::now() + TTL + Duration::from_secs(6);
    loop {
        let entry = store.entry(key.as_str()).await.expect("read");
        if entry.is_none() {
            break;
        }
        assert!(
            Instant::now() < gone_by,
            "the session's marker never aged out: {entry:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let back = Instant::now();
    link_b.set_mode(Mode::Pass);
    // Reconnecting, then a reap refused (the key has no entry), a leader read, a reap on 0.
    wait_until(
        PERIOD * 2 + Duration::from_secs(3),
        "node-b takes the role over",
        || b.is_leader(&r),
    )
    .await;
    eprintln!("re-held {:?} after the follower came back", back.elapsed());
    shutdown_without_panics(&[&b]).await;
    link_a.set_mode(Mode::Pass);
    shutdown_without_panics(&[&a]).await;
    histories_clean(tmp.path(), &[rec_a, rec_b]);
}

/// Item 7 (Q4): a session value of this instance's id with another incarnation and no TTL (a
/// restored backup, a buggy tool) in the instance's session key: the instance yields while it
/// could be a live duplicate, but a value unchanged for the backstop period is not one: the
/// instance starts its session over it and holds its roles again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_same_id_session_without_ttl_is_written_over() {
    let server = NatsServer::start().await;
    let client = connect(&server.url()).await;
    let store = create_kv(&jetstream::new(client.clone()), lease_bucket("h_stale")).await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let roles = roles(5);
    let (a, rec) = manager_at(&server.url(), "node-a", "h_stale", &roles, Some(tmp.path())).await;
    wait_until(YOUNG + TTL * 3, "node-a holds its roles", || {
        roles.iter().all(|r| a.is_leader(r))
    })
    .await;
    let restored = session_value(
        "node-a",
        "5b0e1c52-0000-4000-8000-0000000000aa",
        "5b0e1c52-0000-4000-8000-0000000000bb",
    );
    let written = Instant::now();
    store
        .put(session_key("node-a").as_str(), restored.into())
        .await
        .expect("put a stale session");
    wait_until(TTL, "node-a lets go", || {
        roles.iter().all(|r| !a.is_leader(r))
    })
    .await;
    wait_until(
        PERIOD * 2 + Duration::from_secs(1),
        "node-a holds its roles again",
        || roles.iter().all(|r| a.is_leader(r)),
    )
    .await;
    let took = written.elapsed();
    eprintln!("re-held all 5 roles {took:?} after the stale session was written");
    assert!(
        took >= PERIOD - Duration::from_millis(100),
        "did not wait the period: {took:?}"
    );
    shutdown_without_panics(&[&a]).await;
    histories_clean(tmp.path(), &[rec]);
}

/// Item 8 (Q4, Q5 rule 5): role values naming a live session of an instance that does not
/// hold them — (a) a role that instance does not campaign for, (b) its session with another
/// incarnation, (c) its session of another TTL class — are held again within a round trip or
/// two, and the named instance reports no duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_values_naming_a_live_session_that_does_not_hold_them_are_released() {
    let server = NatsServer::start().await;
    let client = connect(&server.url()).await;
    let store = create_kv(&jetstream::new(client.clone()), lease_bucket("h_named")).await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (only_b, both, other_class) = (role("only-b"), role("both"), role("other-class"));
    let slow = nats_roles::Timing {
        ttl: Duration::from_secs(2),
        heartbeat: Duration::from_millis(500),
        ..fast()
    };
    // node-a: `both` (fast timing), and `slow-one` in a second TTL class; node-b: all three
    // of `only-b`, `both`, `other-class`.
    let client_a = connect(&server.url()).await;
    let rec_a = HistoryRecorder::in_dir(tmp.path(), &inst("node-a")).expect("recorder");
    let a = RoleManager::builder(client_a, inst("node-a"))
        .bucket("h_named")
        .auto_create(1)
        .history(rec_a.clone())
        .role(spec(&both))
        .role(RoleSpec::new(role("slow-one")).timing(slow))
        .start()
        .await
        .expect("node-a");
    let (b, rec_b) = manager_at(
        &server.url(),
        "node-b",
        "h_named",
        &[only_b.clone(), both.clone(), other_class.clone()],
        Some(tmp.path()),
    )
    .await;
    tokio::time::sleep(YOUNG + TTL).await;
    let a_fast = session_uuid(&store, &session_key("node-a")).await;
    let a_slow = session_uuid(&store, "session.node-a.2000").await;
    let a_incarnation = {
        let e = store
            .entry(session_key("node-a").as_str())
            .await
            .expect("read")
            .expect("value");
        let v: serde_json::Value = serde_json::from_slice(&e.value).expect("json");
        v["incarnation"].as_str().expect("incarnation").to_owned()
    };
    let other_incarnation = "5b0e1c52-0000-4000-8000-0000000000ee";
    let cases = [
        // (a) node-a does not campaign for `only-b`.
        (
            &only_b,
            role_value("node-a", &a_incarnation, &a_fast, TTL.as_millis()),
        ),
        // (b) node-a's session, another incarnation.
        (
            &both,
            role_value("node-a", other_incarnation, &a_fast, TTL.as_millis()),
        ),
        // (c) node-a's session of its other TTL class, for a role of the first class.
        (
            &other_class,
            role_value("node-a", other_incarnation, &a_slow, 2000),
        ),
    ];
    let mut events = a.events();
    for (r, value) in cases {
        let written = Instant::now();
        store
            .put(format!("role.{r}").as_str(), value.into())
            .await
            .expect("put a role value");
        wait_until(Duration::from_secs(2), "the role is held again", || {
            leaders(&[&a, &b], r) == 1
        })
        .await;
        eprintln!("{r}: held again after {:?}", written.elapsed());
    }
    while let Ok(e) = events.try_recv() {
        assert!(
            !matches!(e, RoleEvent::DuplicateInstance { .. }),
            "a false duplicate: {e:?}"
        );
    }
    assert!(
        !a.status(&both).expect("status").duplicate_instance,
        "a false duplicate on {both}"
    );
    shutdown_without_panics(&[&a, &b]).await;
    histories_clean(tmp.path(), &[Some(rec_a), rec_b]);
}

/// Item 10 (Q5 rule 4): a session marker below the revision of the role value naming the
/// session — an acquire that committed after its session expired, its holder dead before it
/// started a new session — is seen by a candidate that never saw the session's uuid. Not
/// vacant by rule 2; the reap after the period settles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_marker_below_the_role_value_is_reaped() {
    let server = NatsServer::start().await;
    let client = connect(&server.url()).await;
    let store = create_kv(&jetstream::new(client.clone()), lease_bucket("h_below")).await;
    let key = session_key("node-z");
    let session = "5b0e1c52-0000-4000-8000-000000000022";
    store
        .put(
            key.as_str(),
            session_value("node-z", "5b0e1c52-0000-4000-8000-000000000021", session).into(),
        )
        .await
        .expect("put session");
    store.delete(key.as_str()).await.expect("delete: a marker");
    let role_rev = store
        .put(
            "role.x",
            role_value(
                "node-z",
                "5b0e1c52-0000-4000-8000-000000000021",
                session,
                TTL.as_millis(),
            )
            .into(),
        )
        .await
        .expect("put role value");
    let r = role("x");
    let started = Instant::now();
    let (a, _) = manager_at(
        &server.url(),
        "node-a",
        "h_below",
        std::slice::from_ref(&r),
        None,
    )
    .await;
    wait_until(
        PERIOD + YOUNG + Duration::from_secs(2),
        "node-a takes x over",
        || a.is_leader(&r),
    )
    .await;
    eprintln!("taken over after {:?}", started.elapsed());
    assert!(a.leadership(&r).expect("term").term() > role_rev);
    shutdown_without_panics(&[&a]).await;
}

/// Server users for item 9: `ro` may publish anywhere except to `role.x` of `h_perm`; `admin`
/// everywhere.
const AUTH_DENY_X: &str = r#"authorization {
  users = [
    { user: admin, password: a }
    {
      user: ro, password: r,
      permissions: {
        publish: { allow: [">"], deny: ["$KV.h_perm.role.x"] }
        subscribe: { allow: [">"] }
      }
    }
  ]
}"#;

/// Before the revocation: `ro` may publish everywhere.
const AUTH_ALLOW_ALL: &str = r#"authorization {
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

/// Item 9 (Q4, Q5 rule 5): a holder whose publish permission on its role key is revoked at
/// run time keeps its term (the key is not written during a term); its release is refused,
/// the term is handed over through its session, and another instance holds the role within a
/// round trip or two — not never — while the refusal is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_release_hands_the_role_over_through_the_session() {
    let mut server = NatsServer::start_with_config(AUTH_ALLOW_ALL).await;
    let admin = connect_with(&server.url(), || {
        async_nats::ConnectOptions::with_user_and_password("admin".into(), "a".into())
    })
    .await;
    create_kv(&jetstream::new(admin.clone()), lease_bucket("h_perm")).await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = NatsConfig {
        servers: vec![server.url()],
        user: Some("ro".into()),
        password: Some("r".into()),
        ..NatsConfig::default()
    };
    let (client, errors) = nats_roles::connect(&config, "ro-test")
        .await
        .expect("connect as ro");
    let r = role("x");
    let rec_a = HistoryRecorder::in_dir(tmp.path(), &inst("node-a")).expect("recorder");
    let a = RoleManager::builder(client, inst("node-a"))
        .bucket("h_perm")
        .server_errors(errors)
        .history(rec_a.clone())
        .role(spec(&r))
        .start()
        .await
        .expect("node-a");
    wait_leader(&a, &r, YOUNG + TTL * 3).await;
    let rec_b = HistoryRecorder::in_dir(tmp.path(), &inst("node-b")).expect("recorder");
    let b = RoleManager::builder(admin.clone(), inst("node-b"))
        .bucket("h_perm")
        .history(rec_b.clone())
        .role(spec(&r))
        .start()
        .await
        .expect("node-b");
    server.reload_with(AUTH_DENY_X);
    // The holder keeps its term: nothing is written to the role key while it lasts.
    tokio::time::sleep(HEARTBEAT * 4).await;
    assert!(
        a.is_leader(&r),
        "the holder lost its term to a revoked permission"
    );
    let released = Instant::now();
    a.release(&r, Duration::from_secs(30)).expect("release");
    wait_until(Duration::from_secs(3), "node-b holds x", || b.is_leader(&r)).await;
    eprintln!(
        "handed over {:?} after the refused release",
        released.elapsed()
    );
    let s = a.status(&r).expect("status");
    assert_eq!(
        s.failure,
        Some(nats_roles::FailureKind::PermissionDenied),
        "the refusal is reported: {s:?}"
    );
    shutdown_without_panics(&[&a, &b]).await;
    histories_clean(tmp.path(), &[Some(rec_a), Some(rec_b)]);
}

/// Item 3 (Q6, no acquire in a young bucket): the bucket is deleted and recreated while its
/// holder acts, and a fresh process starts right after. The old holder is cut off (it cannot
/// learn of the reset, so it acts until its local deadline); the fresh process, which never
/// saw the old bucket, must not act before that deadline: it acquires only once the new
/// bucket is a TTL + heartbeat old. The histories of both show no overlap (S4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_process_after_a_bucket_reset_waits_for_the_old_holders_deadline() {
    use nats_roles::tooling::history::{Event, Phase, Record, TrialInfo, mono_now_ns};
    let server = NatsServer::start().await;
    let client = connect(&server.url()).await;
    let js = jetstream::new(client.clone());
    create_kv(&js, lease_bucket("h_reset")).await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let harness = |event: Event| {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(tmp.path().join("harness.jsonl"))
            .expect("harness file");
        let line = Record::harness(mono_now_ns(), None, event).to_line();
        writeln!(f, "{line}").expect("harness record");
    };
    harness(Event::Trial(TrialInfo {
        kind: "bucket-reset-fresh-process".into(),
        ttl_ms: 1000,
        margin: 0.1,
        clock: 1.0,
        heartbeat_ms: Some(250),
        ..TrialInfo::default()
    }));
    let upstream: std::net::SocketAddr = format!("127.0.0.1:{}", server.port())
        .parse()
        .expect("addr");
    let link_a = Proxy::start(upstream).await;
    let r = role("x");
    let (a, rec_a) = manager_at(
        &link_a.url(),
        "node-a",
        "h_reset",
        std::slice::from_ref(&r),
        Some(tmp.path()),
    )
    .await;
    let first = wait_leader(&a, &r, YOUNG + TTL * 3).await;
    // The holder is cut off: it can neither renew nor hear of the reset.
    link_a.set_mode(Mode::Stall);
    harness(Event::Fault {
        what: "bucket_reset".into(),
        target: "server".into(),
        phase: Phase::Start,
    });
    js.delete_key_value("h_reset")
        .await
        .expect("delete the bucket");
    create_kv(&js, lease_bucket("h_reset")).await;
    let recreated = Instant::now();
    harness(Event::Fault {
        what: "bucket_reset".into(),
        target: "server".into(),
        phase: Phase::End,
    });
    let (c, rec_c) = manager_at(
        &server.url(),
        "node-c",
        "h_reset",
        std::slice::from_ref(&r),
        Some(tmp.path()),
    )
    .await;
    let second = wait_leader(&c, &r, YOUNG + Duration::from_secs(3)).await;
    let took = recreated.elapsed();
    eprintln!("the fresh process acquired {took:?} after the bucket was recreated");
    assert!(!first.is_valid(), "the old holder still acts");
    assert!(
        took >= YOUNG - Duration::from_millis(100),
        "acquired {took:?} after the reset: in a young bucket"
    );
    assert!(second.token().epoch() > first.token().epoch());
    shutdown_without_panics(&[&c]).await;
    link_a.set_mode(Mode::Pass);
    shutdown_without_panics(&[&a]).await;
    histories_clean(tmp.path(), &[rec_a, rec_c]);
}

/// Q5 rule 5 is no hole: another client copies a live holder's session value into its
/// session key with a forged list of released terms. Candidates may take the listed role at
/// once (they cannot tell the forgery from the owner's own release), so the owner must stop
/// as it does for any other foreign write to its session key: at once, not never — its
/// session is lost when its watcher delivers the forged value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_release_in_a_session_value_ends_the_owners_session() {
    let server = NatsServer::start().await;
    let client = connect(&server.url()).await;
    let store = create_kv(&jetstream::new(client.clone()), lease_bucket("h_forged")).await;
    let r = role("x");
    let (a, _) = manager_at(
        &server.url(),
        "node-a",
        "h_forged",
        std::slice::from_ref(&r),
        None,
    )
    .await;
    let term = wait_leader(&a, &r, YOUNG + TTL * 3).await;
    let (b, _) = manager_at(
        &server.url(),
        "node-b",
        "h_forged",
        std::slice::from_ref(&r),
        None,
    )
    .await;
    tokio::time::sleep(HEARTBEAT * 2).await;
    let key = session_key("node-a");
    let entry = store
        .entry(key.as_str())
        .await
        .expect("read")
        .expect("a session value");
    let mut forged: serde_json::Value = serde_json::from_slice(&entry.value).expect("json");
    forged["released"] = serde_json::json!([{"role": "x", "revision": term.term()}]);
    let mut events = a.events();
    store
        .put(
            key.as_str(),
            serde_json::to_vec(&forged).expect("json").into(),
        )
        .await
        .expect("put the forged value");
    let e = wait_event(&mut events, TTL, "node-a demoted", is_demoted).await;
    assert!(
        matches!(
            e,
            RoleEvent::Demoted {
                reason: nats_roles::DemoteReason::Superseded,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!term.is_valid(), "the owner still acts");
    wait_until(TTL * 3, "one holder again", || leaders(&[&a, &b], &r) == 1).await;
    shutdown_without_panics(&[&a, &b]).await;
}

/// Q5 rule 1, Q6 (attack A02 of the issue-24 review): a stream purge removes every key without
/// a marker and without a new epoch. The holder is cut off (it cannot learn of it and acts
/// until its deadline); a fresh process reads the role key absent — which is not a marker —
/// and acquires only once it stayed absent for a TTL + heartbeat, after the holder's deadline:
/// no overlap in the histories.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_process_after_a_stream_purge_waits_for_the_old_holders_deadline() {
    let server = NatsServer::start().await;
    let client = connect(&server.url()).await;
    let js = jetstream::new(client.clone());
    create_kv(&js, lease_bucket("h_purge")).await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let upstream: std::net::SocketAddr = format!("127.0.0.1:{}", server.port())
        .parse()
        .expect("addr");
    let link_a = Proxy::start(upstream).await;
    let r = role("x");
    let (a, rec_a) = manager_at(
        &link_a.url(),
        "node-a",
        "h_purge",
        std::slice::from_ref(&r),
        Some(tmp.path()),
    )
    .await;
    let first = wait_leader(&a, &r, YOUNG + TTL * 3).await;
    // The bucket is no longer young; the holder is cut off; the stream is purged.
    tokio::time::sleep(YOUNG).await;
    link_a.set_mode(Mode::Stall);
    let purged: serde_json::Value = client
        .request("$JS.API.STREAM.PURGE.KV_h_purge", "".into())
        .await
        .map(|m| serde_json::from_slice(&m.payload).expect("json"))
        .expect("purge");
    assert_eq!(purged["success"], true, "{purged}");
    let purge = Instant::now();
    let (c, rec_c) = manager_at(
        &server.url(),
        "node-c",
        "h_purge",
        std::slice::from_ref(&r),
        Some(tmp.path()),
    )
    .await;
    let second = wait_leader(&c, &r, YOUNG + Duration::from_secs(3)).await;
    let took = purge.elapsed();
    eprintln!("the fresh process acquired {took:?} after the stream purge");
    assert!(!first.is_valid(), "the old holder still acts");
    assert!(
        took >= YOUNG - Duration::from_millis(100),
        "acquired {took:?} after the purge"
    );
    assert!(second.term() > first.term());
    shutdown_without_panics(&[&c]).await;
    link_a.set_mode(Mode::Pass);
    shutdown_without_panics(&[&a]).await;
    histories_clean(tmp.path(), &[rec_a, rec_c]);
}
