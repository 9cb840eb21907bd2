//! A session start stalled in the network while the bucket is deleted and recreated (protocol
//! Q6, "Bucket reset (P1)"): the start lands in the new bucket; the starting instance must not
//! let its roles work there with what it knew of the old bucket.

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use nats_roles::tooling::history::{
    Event, HistoryRecorder, Phase, Record, TrialInfo, check_loaded, load_paths, mono_now_ns,
};
use nats_roles::{InstanceId, RoleManager, RoleName, RoleSpec, Timing};
use testkit::NatsServer;
use testkit::proxy::{Mode, Proxy};
use tokio::time::Instant;

const BUCKET: &str = "stalled";

/// Every instance's timing: TTL 2 s, heartbeat 500 ms (a start stalled up to an operation
/// timeout of 1.5 s is still awaited when it lands).
fn timing() -> Timing {
    Timing {
        ttl: Duration::from_secs(2),
        heartbeat: Duration::from_millis(500),
        deadline_margin: 0.1,
        operation_timeout: Duration::from_millis(1500),
        disconnect_grace: Duration::from_secs(1),
        campaign_jitter: Duration::from_millis(1),
    }
}

/// A server, an admin's JetStream context, and a history directory whose harness file names
/// the trial (`kind`, the TTL and heartbeat the checker bounds L1 with).
struct Setup {
    server: NatsServer,
    upstream: std::net::SocketAddr,
    js: jetstream::Context,
    _tmp: tempfile::TempDir,
    dir: std::path::PathBuf,
}

impl Setup {
    async fn start(kind: &str, ttl_ms: u64, heartbeat_ms: u64) -> Setup {
        let server = NatsServer::start().await;
        let upstream = format!("127.0.0.1:{}", server.port())
            .parse()
            .expect("addr");
        let js = jetstream::new(testkit::connect(&server.url()).await);
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        harness(
            &dir,
            Event::Trial(TrialInfo {
                kind: kind.into(),
                ttl_ms,
                margin: 0.1,
                clock: 1.0,
                heartbeat_ms: Some(heartbeat_ms),
                ..TrialInfo::default()
            }),
        );
        Setup {
            server,
            upstream,
            js,
            _tmp: tmp,
            dir,
        }
    }
}

fn harness(dir: &Path, event: Event) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("harness.jsonl"))
        .expect("harness file");
    writeln!(
        f,
        "{}",
        Record::harness(mono_now_ns(), None, event).to_line()
    )
    .expect("harness");
}

fn fault(dir: &Path, phase: Phase) {
    harness(
        dir,
        Event::Fault {
            what: "bucket_reset".into(),
            target: "server".into(),
            phase,
        },
    );
}

/// The S4/S2 window of protocol Q6's "Bucket reset" paragraph, on real connections: a foreign
/// value sits in `role.r` of a bucket whose revisions are in the hundreds (another client's
/// put: a follower's backstop reads it after `ttl + heartbeat + 0.5 s`, Q10). B follows `r`; A
/// starts last, and a proxy holds A's session start write (its `PUB` line) and everything A
/// sends after it. The bucket is deleted and recreated 1.5 s later, then A's link heals: its
/// start lands in the new bucket. A's watcher is blind to it (its consumer went with the old
/// stream; it notices only at a missed idle heartbeat, ~10 s later). B restarts its session
/// and takes `r` after the young-bucket hold; the new bucket's revisions then climb past the
/// old one's (so A's guard against revisions that went back stays silent).
///
/// At 81787d6 (before 824ba10: the epoch check *before* the start write; A confirmed epoch 1 before its
/// stalled start) A's roles heard of the session at once: its backstop read of `r` found the
/// key absent, its acquire a hold later was refused (B's term), its read found B's term, and
/// A's old session book, showing B's session key with an older uuid at a revision above the
/// term's, judged it "replaced": A's takeover CAS overwrote B's live term (`superseded`) and A
/// promoted with the *old* epoch's token — `S2` (3 of 3 runs). With the epoch confirmed after
/// the start's acknowledgement, A applies the new epoch before its roles hear of the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_start_stalled_across_a_bucket_reset_takes_no_live_term() {
    let Setup {
        server,
        upstream,
        js,
        _tmp,
        dir,
    } = Setup::start("bucket-reset-stalled-start", 2000, 500).await;
    let r = RoleName::new("r").unwrap();
    let config = || kv::Config {
        bucket: BUCKET.into(),
        history: 1,
        limit_markers: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let store = testkit::create_kv(&js, config()).await;
    // Revisions climb: B's session key sits far above anything the new bucket reaches.
    for i in 0..300 {
        store
            .put(format!("data.filler.{i}"), "x".into())
            .await
            .expect("filler");
    }
    store
        .put("role.r", "left by another client".into())
        .await
        .expect("foreign value");
    let mut recorders = Vec::new();
    let mut start = |id: &str, client: async_nats::Client| {
        let id = InstanceId::new(id).unwrap();
        let recorder = HistoryRecorder::in_dir(&dir, &id).expect("recorder");
        recorders.push(recorder.clone());
        let r = r.clone();
        tokio::spawn(async move {
            RoleManager::builder(client, id)
                .bucket(BUCKET)
                .history(recorder)
                .role(RoleSpec::new(r).timing(timing()))
                .start()
                .await
                .expect("manager starts")
        })
    };
    let mb = start("b", testkit::connect(&server.url()).await)
        .await
        .unwrap();
    let link_a = Proxy::start(upstream).await;
    link_a.hold_up_from(format!("PUB $KV.{BUCKET}.session.a.2000 ").as_bytes());
    let start_a = start("a", testkit::connect(&link_a.url()).await);
    tokio::time::timeout(Duration::from_secs(10), link_a.tripped())
        .await
        .expect("A's session start write never went through the proxy");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    fault(&dir, Phase::Start);
    js.delete_key_value(BUCKET).await.expect("delete");
    let recreated = Instant::now();
    testkit::create_kv(&js, config()).await;
    fault(&dir, Phase::End);
    link_a.set_mode(Mode::Pass);
    let ma = start_a.await.expect("a");
    // r is held again in the new bucket (by B: A, unaware of the reset, still follows the
    // foreign value; or, with A aware, by either); then the new bucket's revisions climb past
    // the old one's (A's guard against revisions that went back no longer sees the reset).
    let deadline = Instant::now() + Duration::from_secs(8);
    while !(ma.is_leader(&r) || mb.is_leader(&r)) {
        assert!(
            Instant::now() < deadline,
            "r not held in the new bucket within 8 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let fresh = js.get_key_value(BUCKET).await.expect("new bucket");
    for i in 0..320 {
        fresh
            .put(format!("data.filler.{i}"), "x".into())
            .await
            .expect("filler");
    }
    println!(
        "fillers written {:?} after the recreation",
        recreated.elapsed()
    );

    // Watch for two holders while B takes r again in the new bucket and after.
    let until = Instant::now() + Duration::from_secs(9);
    let mut both = None;
    while Instant::now() < until {
        if ma.is_leader(&r) && mb.is_leader(&r) {
            both.get_or_insert(recreated.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!(
        "a: {:?} / b: {:?}",
        ma.leadership(&r)
            .map(|l| (l.token().epoch(), l.token().term())),
        mb.leadership(&r)
            .map(|l| (l.token().epoch(), l.token().term()))
    );
    ma.shutdown(Duration::from_secs(5)).await.unwrap();
    mb.shutdown(Duration::from_secs(5)).await.unwrap();
    for recorder in &recorders {
        recorder.stop();
    }
    let loaded = load_paths(std::slice::from_ref(&dir)).expect("history loads");
    let report = check_loaded(&loaded);
    assert!(
        both.is_none(),
        "A and B both held r ({both:?} after the recreation)\n{}",
        report.render_text()
    );
    assert!(report.is_clean(), "{}", report.render_text());
    // Nobody's term was overwritten: a live term is never taken over here.
    for id in ["a", "b"] {
        let text = std::fs::read_to_string(dir.join(format!("{id}.jsonl"))).expect("history");
        assert!(
            !text.contains("\"reason\":\"superseded\""),
            "{id}'s term was overwritten while it held r"
        );
    }
}

/// Mixed TTLs across a bucket reset (protocol Q6, found by an attack): C holds `r` and `late`
/// with TTL 4 s; B campaigns for `r` with TTL 1 s. C's link is cut (a proxy stalls it) just
/// before the bucket is deleted and recreated, so C learns of nothing and acts until its own
/// deadline (3.6 s after its last renewal, at most 1 s before the cut). B, which saw C's session in the old bucket, must
/// hold its acquires in the new bucket for C's TTL, not only its own — also for `late`, a role
/// it adds as soon as it applied the new epoch (its own holds then end about 1.7 s after the
/// reset, before C's deadline). Before the fix B took `r` 1.26 s after the reset and `late`
/// about 1.7 s after it, while C still acted (S4); each path alone shows the overlap (checked
/// by disabling each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_with_a_longer_ttl_are_waited_for_after_a_bucket_reset_also_by_roles_added_later() {
    const MIXED: &str = "mixed";
    let Setup {
        server,
        upstream,
        js,
        _tmp,
        dir,
    } = Setup::start("mixed-ttl-reset", 4000, 1000).await;
    let (r, late) = (RoleName::new("r").unwrap(), RoleName::new("late").unwrap());
    testkit::create_kv(&js, testkit::roles::lease_bucket(MIXED)).await;
    let long = Timing {
        ttl: Duration::from_secs(4),
        heartbeat: Duration::from_secs(1),
        deadline_margin: 0.1,
        operation_timeout: Duration::from_secs(1),
        disconnect_grace: Duration::from_secs(1),
        campaign_jitter: Duration::from_millis(1),
    };
    let short = Timing {
        ttl: Duration::from_secs(1),
        heartbeat: Duration::from_millis(250),
        deadline_margin: 0.1,
        operation_timeout: Duration::from_millis(300),
        disconnect_grace: Duration::from_secs(1),
        campaign_jitter: Duration::from_millis(1),
    };
    let mut recorders = Vec::new();
    let mut manager = |id: &str, client: async_nats::Client, roles: &[(&RoleName, Timing)]| {
        let id = InstanceId::new(id).unwrap();
        let recorder = HistoryRecorder::in_dir(&dir, &id).expect("recorder");
        recorders.push(recorder.clone());
        let mut builder = RoleManager::builder(client, id)
            .bucket(MIXED)
            .history(recorder);
        for (role, timing) in roles {
            builder = builder.role(RoleSpec::new((*role).clone()).timing(*timing));
        }
        builder.start()
    };
    let link_c = Proxy::start(upstream).await;
    let mc = manager(
        "c",
        testkit::connect(&link_c.url()).await,
        &[(&r, long), (&late, long)],
    )
    .await
    .expect("c starts");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !(mc.is_leader(&r) && mc.is_leader(&late)) {
        assert!(Instant::now() < deadline, "c never held r and late");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mb = manager("b", testkit::connect(&server.url()).await, &[(&r, short)])
        .await
        .expect("b starts");
    // B has seen C's session (its watcher delivers every session key's last value at once).
    tokio::time::sleep(Duration::from_millis(500)).await;
    link_c.set_mode(Mode::Stall);
    let cut = Instant::now();
    fault(&dir, Phase::Start);
    js.delete_key_value(MIXED).await.expect("delete");
    testkit::create_kv(&js, testkit::roles::lease_bucket(MIXED)).await;
    fault(&dir, Phase::End);
    // C acts until its deadline; B takes both roles after the young-bucket hold of C's TTL
    // (4 s + B's heartbeat after the recreation).
    let until = cut + Duration::from_millis(5_500);
    let mut added = false;
    let mut both = None;
    let mut b_held = [None, None];
    while Instant::now() < until {
        // Once B applied the new epoch (its holders map forgot C), before its own holds end.
        if !added && mb.status(&r).is_some_and(|st| st.leader_id.is_none()) {
            mb.add_role(RoleSpec::new(late.clone()).timing(short))
                .expect("add late");
            added = true;
        }
        for (i, role) in [&r, &late].into_iter().enumerate() {
            let (c, b) = (mc.is_leader(role), mb.is_leader(role));
            if c && b {
                both.get_or_insert((role.clone(), cut.elapsed()));
            }
            if b {
                b_held[i].get_or_insert(cut.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    mb.shutdown(Duration::from_secs(5)).await.unwrap();
    drop(link_c);
    let _ = mc.shutdown(Duration::from_secs(3)).await;
    for recorder in &recorders {
        recorder.stop();
    }
    let report = check_loaded(&load_paths(std::slice::from_ref(&dir)).expect("history loads"));
    println!("b held r, late {b_held:?} after the cut");
    assert!(
        both.is_none(),
        "C and B both held a role ({both:?} after the cut)\n{}",
        report.render_text()
    );
    assert!(
        b_held.iter().all(Option::is_some),
        "B did not take both roles within 5.5 s of the reset: {b_held:?}\n{}",
        report.render_text()
    );
    assert!(report.is_clean(), "{}", report.render_text());
}

const AUTH_ALL: &str = r#"authorization {
  users = [
    { user: admin, password: a }
    { user: app, password: p, permissions: { publish: { allow: [">"] }, subscribe: { allow: [">"] } } }
  ]
}"#;

const AUTH_NO_INFO: &str = r#"authorization {
  users = [
    { user: admin, password: a }
    { user: app, password: p, permissions: { publish: { allow: [">"], deny: ["$JS.API.STREAM.INFO.KV_perm"] }, subscribe: { allow: [">"] } } }
  ]
}"#;

/// The epoch check after a session start (Q6) refused by the server: the user may write the
/// bucket but not ask for its stream info. The session's roles acquire nothing and say why
/// (`permission_denied` in the role's status, not a silent `Candidate`); once the permission
/// is back (a config reload) the role is held again without a restart and the failure clears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_epoch_check_after_a_session_start_is_reported_and_heals() {
    let mut server = NatsServer::start_with_config(AUTH_ALL).await;
    let admin = testkit::connect_with(&server.url(), || {
        async_nats::ConnectOptions::with_user_and_password("admin".into(), "a".into())
    })
    .await;
    let js = jetstream::new(admin.clone());
    let store = testkit::create_kv(&js, testkit::roles::lease_bucket("perm")).await;
    let config = nats_roles::config::NatsConfig {
        servers: vec![server.url()],
        user: Some("app".into()),
        password: Some("p".into()),
        ..nats_roles::config::NatsConfig::default()
    };
    let (client, errors) = nats_roles::connect(&config, "app").await.expect("connect");
    let r = RoleName::new("r").unwrap();
    let m = RoleManager::builder(client, InstanceId::new("a").unwrap())
        .bucket("perm")
        .server_errors(errors)
        .role(RoleSpec::new(r.clone()).timing(timing()))
        .start()
        .await
        .expect("start");
    wait("r held", Duration::from_secs(10), &|| m.is_leader(&r)).await;
    server.reload_with(AUTH_NO_INFO);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Another client deletes the session key: the session is lost and starts again.
    store
        .delete("session.a.2000")
        .await
        .expect("delete the session key");
    wait("r demoted", Duration::from_secs(5), &|| !m.is_leader(&r)).await;
    let failure = || m.status(&r).and_then(|s| s.failure);
    wait("the refusal reported", Duration::from_secs(10), &|| {
        failure() == Some(nats_roles::FailureKind::PermissionDenied)
    })
    .await;
    // Still refused: nothing is acquired meanwhile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!m.is_leader(&r), "r acquired without a confirmed epoch");
    server.reload_with(AUTH_ALL);
    wait("r held again", Duration::from_secs(10), &|| m.is_leader(&r)).await;
    wait("the failure cleared", Duration::from_secs(5), &|| {
        failure().is_none()
    })
    .await;
    m.shutdown(Duration::from_secs(5)).await.expect("shutdown");
}

/// Polls `ok` every 20 ms until it holds; fails the test after `limit`.
async fn wait(what: &str, limit: Duration, ok: &dyn Fn() -> bool) {
    let until = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < until, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
