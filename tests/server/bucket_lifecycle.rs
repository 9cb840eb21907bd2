//! The bucket itself changing under the managers: deleted and recreated (new epoch), or
//! configured with a `max_age` too short for the leases (refused in every TTL mode, by the
//! library and by `nats-roles run`); and role timing checked before a role starts.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use std::sync::{Arc, Mutex};

use nats_roles::tooling::history::{Phase, Report, TrialInfo, check_loaded, load_paths};
use nats_roles::{
    Error, FencingToken, FnCallbacks, InstanceId, Leadership, RoleManager, RoleName, RoleSpec,
    Timing, TimingError,
};
use testkit::NatsServer;
use testkit::faults::HarnessLog;
use testkit::roles::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_bucket_is_noticed_and_roles_come_back_with_a_newer_epoch() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let js = jetstream::new(client.clone());
    let role = RoleName::new("phoenix").unwrap();

    // Every promoted token, in order: they must strictly increase across the recreation.
    let tokens: Arc<Mutex<Vec<FencingToken>>> = Arc::default();
    let seen = tokens.clone();
    let callbacks = FnCallbacks::new(
        move |l: Leadership| {
            seen.lock().unwrap().push(l.token());
            async {}
        },
        |_| async {},
    );
    let manager = RoleManager::builder(client, InstanceId::new("a").unwrap())
        .bucket("lifecycle")
        .auto_create(1)
        .role(
            RoleSpec::new(role.clone())
                .timing(fast())
                .callbacks(callbacks),
        )
        .start()
        .await
        .unwrap();
    let handle = manager.role(&role).unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), handle.wait_leader())
        .await
        .expect("leader")
        .expect("running");

    // An operator deletes the bucket and creates it again.
    let started = tokio::time::Instant::now();
    js.delete_key_value("lifecycle").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    recreate(&js, "lifecycle").await;

    // The old term ends; a new one starts in the new bucket with a larger token.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let second = loop {
        if let Some(l) = handle.leadership()
            && l.token() > first.token()
        {
            break l;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new term in the recreated bucket within 20 s (status {:?})",
            handle.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!first.is_valid());
    assert!(
        second.token().epoch() > first.token().epoch(),
        "a new epoch"
    );
    let promoted = tokens.lock().unwrap().clone();
    assert!(
        promoted.windows(2).all(|w| w[0] < w[1]),
        "promoted tokens went back: {:?}",
        promoted
            .iter()
            .map(|t| (t.epoch(), t.term()))
            .collect::<Vec<_>>()
    );
    println!("bucket recreation: new term after {:?}", started.elapsed());
    let entry = js
        .get_key_value("lifecycle")
        .await
        .unwrap()
        .entry("role.phoenix")
        .await
        .unwrap()
        .expect("lease in the new bucket");
    assert_eq!(entry.revision, second.revision().max(entry.revision));
    manager.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Recreating the bucket under two managers: the holder's term ends at once (`bucket_reset`,
/// not at its deadline) when its renewal finds the key gone; roles added (or removed and
/// re-added) after the reset start on the new epoch; fencing tokens strictly increase per role
/// across the whole sequence, and the history checker finds no two valid holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_bucket_ends_terms_at_once_and_new_roles_take_the_new_epoch() {
    use nats_roles::tooling::history::{
        Event, HistoryRecorder, Record, TrialInfo, check_loaded, load_paths, mono_now_ns,
    };
    use nats_roles::{DemoteReason, RoleEvent};

    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let js = jetstream::new(client.clone());
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_path_buf();
    let trial = TrialInfo {
        kind: "bucket-reset".into(),
        ttl_ms: 1000,
        margin: 0.1,
        clock: 1.0,
        heartbeat_ms: Some(250),
        ..TrialInfo::default()
    };
    std::fs::write(
        dir.join("harness.jsonl"),
        format!(
            "{}\n",
            Record::harness(mono_now_ns(), None, Event::Trial(trial)).to_line()
        ),
    )
    .expect("harness file");
    let (p, late) = (RoleName::new("p").unwrap(), RoleName::new("late").unwrap());
    let mut managers = Vec::new();
    let mut recorders = Vec::new();
    for id in ["a", "b"] {
        let id = InstanceId::new(id).unwrap();
        let recorder = HistoryRecorder::in_dir(&dir, &id).expect("recorder");
        let m = RoleManager::builder(client.clone(), id)
            .bucket("reset")
            .auto_create(1)
            .history(recorder.clone())
            .role(RoleSpec::new(p.clone()).timing(fast()))
            .start()
            .await
            .unwrap();
        managers.push(m);
        recorders.push(recorder);
        // `a` first, so that it holds `p`.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A new bucket holds acquires until it is a TTL + heartbeat old (protocol Q6).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let holder = loop {
        if let Some(h) = managers.iter().position(|m| m.is_leader(&p)) {
            break h;
        }
        assert!(tokio::time::Instant::now() < deadline, "nobody holds p");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let first = managers[holder].leadership(&p).expect("term");
    let mut events = managers[holder].events();

    // The operator deletes the bucket and creates it again (a fault for the checker: L1
    // counts from its end; a new bucket holds acquires for a TTL + heartbeat, protocol Q6).
    let harness = |phase| {
        use std::io::Write as _;
        let record = Record::harness(
            mono_now_ns(),
            None,
            Event::Fault {
                what: "bucket_reset".into(),
                target: "server".into(),
                phase,
            },
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("harness.jsonl"))
            .expect("harness file");
        writeln!(f, "{}", record.to_line()).expect("harness record");
    };
    harness(Phase::Start);
    js.delete_key_value("reset").await.unwrap();
    let recreated = tokio::time::Instant::now();
    recreate(&js, "reset").await;
    harness(Phase::End);
    // The holder's next renewal (within a heartbeat) finds the key gone: its term ends at
    // once, long before its deadline (TTL 1 s x 0.9).
    let reason = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match events.recv().await {
                Ok(RoleEvent::Demoted { role, reason, .. }) if role == p => return reason,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("events closed: {e}"),
            }
        }
    })
    .await
    .expect("the holder's term did not end");
    let ended = recreated.elapsed();
    println!("bucket recreation: term ended after {ended:?} ({reason})");
    assert_eq!(reason, DemoteReason::BucketReset, "ended by {reason}");
    assert!(!first.is_valid());

    // `p` is held again in the new epoch; a role added now starts there too.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let again = loop {
        if let Some(l) = managers.iter().find_map(|m| m.leadership(&p))
            && l.token().epoch() > first.token().epoch()
        {
            break l;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "p not held in the new epoch within 20 s: {:?}",
            managers.iter().map(|m| m.status(&p)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for m in &managers {
        m.add_role(RoleSpec::new(late.clone()).timing(fast()))
            .expect("add late");
    }
    let handle = managers[0].role(&late).expect("late");
    let holder_of_late = loop {
        if let Some(l) = managers.iter().find_map(|m| m.leadership(&late)) {
            break l;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "late not held within 20 s ({:?})",
            handle.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        holder_of_late.token().epoch(),
        again.token().epoch(),
        "a role added after the reset took the old epoch"
    );
    for m in &managers {
        m.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    for r in &recorders {
        r.stop();
    }
    let loaded = load_paths(std::slice::from_ref(&dir)).expect("history loads");
    let report = check_loaded(&loaded);
    assert!(report.is_clean(), "{}", report.render_text());
}

/// An operator creates the deleted bucket `name` again — unless a manager with `auto_create`
/// was quicker (its watcher recreates a missing bucket): either way the bucket exists after.
async fn recreate(js: &jetstream::Context, name: &str) {
    let created = js
        .create_key_value(kv::Config {
            bucket: name.into(),
            history: 1,
            limit_markers: Some(Duration::from_secs(60)),
            ..Default::default()
        })
        .await;
    if let Err(e) = created {
        // "stream name already in use" (10058): the manager created it first.
        js.get_key_value(name)
            .await
            .unwrap_or_else(|_| panic!("recreate {name}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_max_age_shorter_than_the_ttl_is_refused() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let js = jetstream::new(client.clone());
    // An old-style bucket: no limit markers, one max_age for all keys.
    testkit::create_kv(
        &js,
        kv::Config {
            bucket: "short".into(),
            history: 1,
            max_age: Duration::from_secs(2),
            ..Default::default()
        },
    )
    .await;
    let timing = Timing {
        ttl: Duration::from_secs(3),
        heartbeat: Duration::from_millis(750),
        ..fast()
    };
    let result = RoleManager::builder(client, InstanceId::new("a").unwrap())
        .bucket("short")
        .role(RoleSpec::new(RoleName::new("r").unwrap()).timing(timing))
        .start()
        .await;
    match result {
        Err(Error::BucketMaxAge { max_age, .. }) => {
            assert_eq!(max_age, Duration::from_secs(2));
        }
        other => panic!("expected BucketMaxAge, got {other:?}"),
    }
}

/// A bucket with per-key TTLs (limit markers) **and** a `max_age`: the server removes every
/// entry `max_age` after it was written, whatever its `Nats-TTL`.
async fn per_key_bucket_with_max_age(js: &jetstream::Context, bucket: &str, max_age: Duration) {
    let store = testkit::create_kv(
        js,
        kv::Config {
            bucket: bucket.into(),
            history: 1,
            max_age,
            limit_markers: Some(Duration::from_secs(60)),
            ..Default::default()
        },
    )
    .await;
    let info = store.status().await.expect("bucket status").info.config;
    assert!(info.allow_message_ttl, "per-key TTLs on");
    assert_eq!(info.max_age, max_age);
}

fn timing_with_ttl(secs: u64) -> Timing {
    Timing {
        ttl: Duration::from_secs(secs),
        heartbeat: Duration::from_millis(500),
        ..fast()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_age_shorter_than_the_ttl_is_refused_in_per_key_mode_too() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let js = jetstream::new(client.clone());
    per_key_bucket_with_max_age(&js, "perkey", Duration::from_secs(2)).await;

    // At start.
    let result = RoleManager::builder(client.clone(), inst("a"))
        .bucket("perkey")
        .role(RoleSpec::new(role("r")).timing(timing_with_ttl(3)))
        .start()
        .await;
    match result {
        Err(Error::BucketMaxAge { max_age, role, .. }) => {
            assert_eq!(max_age, Duration::from_secs(2));
            assert_eq!(role.as_str(), "r");
        }
        other => panic!("expected BucketMaxAge, got {other:?}"),
    }

    // Protocol v2: even a TTL equal to max_age is refused (a role key is written once per
    // term, so max_age would remove a key held longer than it); an observer is accepted.
    let result = RoleManager::builder(client.clone(), inst("a"))
        .bucket("perkey")
        .role(RoleSpec::new(role("equal")).timing(timing_with_ttl(2)))
        .start()
        .await;
    assert!(
        matches!(result, Err(Error::BucketMaxAge { .. })),
        "any max_age is refused: {result:?}"
    );
    let manager = RoleManager::builder(client, inst("a"))
        .bucket("perkey")
        .role(
            RoleSpec::new(role("watched"))
                .timing(timing_with_ttl(3))
                .observe_only(),
        )
        .start()
        .await
        .expect("ttl = max_age and an observer are fine");
    match manager.add_role(RoleSpec::new(role("late")).timing(timing_with_ttl(3))) {
        Err(Error::BucketMaxAge { role, .. }) => assert_eq!(role.as_str(), "late"),
        other => panic!("expected BucketMaxAge, got {other:?}"),
    }
    assert!(!manager.roles().contains(&role("late")));
    manager.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_timing_that_breaks_a_rule_is_refused_by_start_and_add_role() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let bad = [
        (
            Timing {
                heartbeat: Duration::from_millis(400),
                ..fast()
            },
            "heartbeat",
        ),
        (
            Timing {
                deadline_margin: f64::NAN,
                ..fast()
            },
            "deadline_margin",
        ),
        (
            Timing {
                deadline_margin: 0.7,
                ..fast()
            },
            "deadline_margin",
        ),
        (
            Timing {
                operation_timeout: Duration::from_millis(900),
                ..fast()
            },
            "operation_timeout",
        ),
        (
            Timing {
                ttl: Duration::from_secs(31_557_600_000_000_000),
                ..fast()
            },
            "ttl",
        ),
    ];
    for (timing, field) in bad {
        // start() refuses before touching the bucket (it does not exist).
        let result = RoleManager::builder(client.clone(), inst("a"))
            .bucket("timing-missing")
            .role(RoleSpec::new(role("r")).timing(timing))
            .start()
            .await;
        match result {
            Err(Error::InvalidTiming { role, source }) => {
                assert_eq!(role.as_str(), "r");
                assert_eq!(source.field(), field, "{source}");
            }
            other => panic!("{timing:?}: expected InvalidTiming, got {other:?}"),
        }
    }
    let manager = RoleManager::builder(client, inst("a"))
        .bucket("timing")
        .auto_create(1)
        .start()
        .await
        .unwrap();
    for (timing, field) in bad {
        match manager.add_role(RoleSpec::new(role("r")).timing(timing)) {
            Err(Error::InvalidTiming { source, .. }) => assert_eq!(source.field(), field),
            other => panic!("{timing:?}: expected InvalidTiming, got {other:?}"),
        }
    }
    assert!(manager.roles().is_empty(), "no invalid role was added");
    let err = manager
        .add_role(RoleSpec::new(role("r")).timing(Timing {
            heartbeat: Duration::ZERO,
            ..fast()
        }))
        .unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidTiming {
            source: TimingError::HeartbeatZero,
            ..
        }
    ));
    manager.add_role(spec(&role("r"))).expect("valid timing");
    manager.shutdown(Duration::from_secs(5)).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// `nats-roles run` processes recording histories
// ---------------------------------------------------------------------------------------------

/// One `nats-roles run --history` process and its stdout lines.
struct Run {
    id: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Run {
    fn start(server: &NatsServer, dir: &Path, config: &Path, id: &str) -> Run {
        let mut cmd = Command::new(crate::BIN);
        cmd.args(["run", "--no-http", "--instance-id", id, "--server"])
            .arg(server.url())
            .arg("--config")
            .arg(config)
            .arg("--history")
            .arg(dir.join(format!("{id}.jsonl")))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for var in testkit::cli::ENV {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .env("RUST_LOG", "warn")
            .spawn()
            .expect("start nats-roles run");
        let lines = Arc::new(Mutex::new(Vec::new()));
        for out in [
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        ]
        .into_iter()
        .flatten()
        {
            let sink = lines.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(out).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    sink.lock().unwrap().push(line);
                }
            });
        }
        Run {
            id: id.to_owned(),
            child,
            lines,
        }
    }

    fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Whether its last promote/demote line for `role` is a promote.
    fn holds(&self, role: &str) -> bool {
        let p = format!("promoted role={role} ");
        let d = format!("demoted role={role} ");
        self.lines
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|l| l.starts_with(&p) || l.starts_with(&d))
            .is_some_and(|l| l.starts_with(&p))
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => status.expect("wait"),
            Err(_) => panic!(
                "{} still runs after {within:?}:\n{}",
                self.id,
                self.output()
            ),
        }
    }

    /// SIGTERM, then a clean exit.
    async fn terminate(mut self) {
        testkit::process::signal(self.pid(), testkit::process::SIGTERM);
        let status = self.wait_exit(Duration::from_secs(20)).await;
        assert!(
            status.success(),
            "{} exited with {status}:\n{}",
            self.id,
            self.output()
        );
    }
}

fn write_config(dir: &Path, bucket: &str, ttl_secs: u64) -> PathBuf {
    let config = dir.join("roles.yaml");
    std::fs::write(
        &config,
        format!(
            "bucket:\n  name: {bucket}\n\
             timing:\n  ttl: {ttl_secs}s\n  heartbeat: 500ms\n  operation_timeout: 500ms\n  \
             disconnect_grace: 1s\n\
             roles:\n  - name: r\n"
        ),
    )
    .expect("write config");
    config
}

fn trial(ttl_secs: u64) -> TrialInfo {
    TrialInfo {
        kind: "max_age_sigstop".into(),
        ttl_ms: ttl_secs * 1000,
        margin: 0.1,
        clock: 1.0,
        heartbeat_ms: Some(500),
        ..TrialInfo::default()
    }
}

/// `nats-roles run` against a per-key bucket with a `max_age` (2 s) exits at start naming it,
/// and never holds the role. (Protocol v1 refused only a `max_age` below the TTL; v2 writes a
/// role key once per term, and a run on such a bucket overlapped a successor — S4 — once the
/// server removed the held role's key at `max_age`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_a_per_key_bucket_with_a_max_age() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    per_key_bucket_with_max_age(&jetstream::new(client), "short", Duration::from_secs(2)).await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = write_config(tmp.path(), "short", 3);
    let mut run = Run::start(&server, tmp.path(), &config, "a");
    let status = run.wait_exit(Duration::from_secs(10)).await;
    let output = run.output();
    assert_eq!(status.code(), Some(1), "{output}");
    assert!(
        output.contains("bucket \"short\" has max_age 2s; role r cannot be campaigned for in it"),
        "{output}"
    );
    assert!(!output.contains("promoted "), "{output}");
    let loaded = load_paths(&[tmp.path().to_path_buf()]).expect("history loads");
    let report = check_loaded(&loaded);
    assert_eq!(report.stats.promotes, 0, "{}", report.render_text());
}

/// Two `run` processes on a per-key bucket without `max_age` (what protocol v2 needs); the
/// holder is stopped (SIGSTOP) past its TTL, the other one takes over once the holder's session
/// expired, the holder resumes. Its local deadline (TTL × 0.9 after its last acknowledged
/// session renewal) passes before the server expires the session, so the history checker
/// finds no overlap (S4) and no other violation. (With protocol v1 this ran on a bucket with
/// `max_age` = TTL; v2 refuses any `max_age`: `a_max_age_shorter_than_the_ttl_is_refused_in_per_key_mode_too`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_paused_past_its_ttl_never_overlaps_its_successor() {
    let report = paused_holder_trial(2).await;
    assert!(report.is_clean(), "{}", report.render_text());
    let failover = report
        .stats
        .failovers
        .iter()
        .find(|f| f.fault == "sigstop")
        .unwrap_or_else(|| panic!("no fail-over measured:\n{}", report.render_text()));
    let took = failover.duration_ms.expect("a successor");
    println!("ttl 2s: successor promoted {took:.0} ms after the SIGSTOP");
    assert!(took < 3000.0, "fail-over took {took} ms");
}

/// Runs the paused-holder scenario with role TTL `ttl_secs` on a per-key bucket without
/// `max_age` and returns the history checker's report.
async fn paused_holder_trial(ttl_secs: u64) -> Report {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    per_key_bucket_with_max_age(&jetstream::new(client), "paused", Duration::ZERO).await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let log = HarnessLog::create(dir, trial(ttl_secs));
    let config = write_config(dir, "paused", ttl_secs);
    let runs = [
        Run::start(&server, dir, &config, "a"),
        Run::start(&server, dir, &config, "b"),
    ];
    let holder = wait_holder(&runs, None).await;
    // A few renewals first, so that the lease has been rewritten since it was acquired.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let id = runs[holder].id.clone();
    log.fault("sigstop", &id, Phase::Start);
    testkit::process::signal(runs[holder].pid(), testkit::process::SIGSTOP);
    let next = wait_holder(&runs, Some(holder)).await;
    assert_ne!(next, holder);
    // Paused past the TTL: its deadline has lapsed when it resumes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    testkit::process::signal(runs[holder].pid(), testkit::process::SIGCONT);
    log.fault("sigcont", &id, Phase::End);
    let deadline = Instant::now() + Duration::from_secs(10);
    while runs[holder].holds("r") {
        assert!(
            Instant::now() < deadline,
            "{id} did not step down after SIGCONT:\n{}",
            runs[holder].output()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for run in runs {
        run.terminate().await;
    }
    let loaded = load_paths(&[dir.to_path_buf()]).expect("history loads");
    check_loaded(&loaded)
}

/// Index of the run that holds `r` (other than `not`), within 10 s.
async fn wait_holder(runs: &[Run], not: Option<usize>) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(i) = (0..runs.len()).find(|&i| Some(i) != not && runs[i].holds("r")) {
            return i;
        }
        assert!(
            Instant::now() < deadline,
            "nobody took r within 10 s:\n{}",
            runs.iter()
                .map(Run::output)
                .collect::<Vec<_>>()
                .join("\n-----\n")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Protocol Q10: a role key holding a version 1 lease (a v1 instance still runs on the bucket)
/// refuses the start with a typed error naming the role and both versions; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_lease_in_the_bucket_refuses_the_start() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let js = jetstream::new(client.clone());
    let store = testkit::create_kv(
        &js,
        kv::Config {
            bucket: "mixed".into(),
            history: 1,
            limit_markers: Some(Duration::from_secs(60)),
            ..Default::default()
        },
    )
    .await;
    let v1 = br#"{"v":1,"holder":"old-node","incarnation":"5b0e1c52-0000-4000-8000-0000000000aa","nonce":"5b0e1c52-0000-4000-8000-0000000000bb","ttl_ms":3000}"#;
    // As a version 1 instance writes it: with a per-key TTL (a v1-shaped value without one is
    // another client's, foreign: tests/server/foreign.rs).
    let _ = &store;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-TTL", "30");
    let revision = js
        .publish_with_headers("$KV.mixed.role.r2", headers, v1.to_vec().into())
        .await
        .expect("publish")
        .await
        .expect("put a v1 lease")
        .sequence;
    let result = RoleManager::builder(client, InstanceId::new("a").unwrap())
        .bucket("mixed")
        .role(RoleSpec::new(RoleName::new("r1").unwrap()).timing(fast()))
        .role(RoleSpec::new(RoleName::new("r2").unwrap()).timing(fast()))
        .start()
        .await;
    match result {
        Err(e @ Error::IncompatibleProtocol { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("role.r2") && text.contains("v1") && text.contains("v2"),
                "{text}"
            );
        }
        other => panic!("expected IncompatibleProtocol, got {:?}", other.map(|_| ())),
    }
    // Nothing was written: the v1 lease is the last entry of the bucket.
    let mut stream = js.get_stream("KV_mixed").await.expect("the stream");
    let last = stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence;
    assert_eq!(last, revision);
}
