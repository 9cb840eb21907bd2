//! Targeted moves (`nats-roles move`, protocol Q13) with real `nats-roles run` processes and
//! a real nats-server: the named instance — and nobody else — is the next holder, every
//! outcome has its exit code, placement keeps a moved role where the operator put it, and
//! the histories are clean.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use nats_roles::RoleName;
use nats_roles::tooling::inspect::{HolderUpdate, Inspector};
use testkit::NatsServer;
use testkit::cli::CliOutput;
use testkit::instances::Deployment;
use tokio::time::Instant;

const LIMIT: Duration = Duration::from_secs(30);

async fn inspector(server: &NatsServer, bucket: &str) -> Inspector {
    let (client, errors) = nats_roles::connect(
        &nats_roles::config::NatsConfig {
            servers: vec![server.url()],
            ..Default::default()
        },
        "moves-test",
    )
    .await
    .expect("connect");
    Inspector::open(&client, bucket, &errors, Duration::from_secs(5))
        .await
        .expect("open the bucket")
}

async fn holder(i: &Inspector, role: &str) -> Option<String> {
    i.holder(&RoleName::new(role).expect("role"))
        .await
        .expect("read the holder")
        .and_then(|h| h.holder.map(|h| h.to_string()))
}

async fn wait_holder(i: &Inspector, d: &Deployment, role: &str, want: &str) {
    let until = Instant::now() + LIMIT;
    while holder(i, role).await.as_deref() != Some(want) {
        assert!(
            Instant::now() < until,
            "{want} never held {role}\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn cli_move(server: &NatsServer, bucket: &str, args: &[&str]) -> CliOutput {
    let url = server.url();
    let mut all = vec!["move", "--server", &url, "--bucket", bucket];
    all.extend_from_slice(args);
    testkit::cli::run(&all, &[], LIMIT).await
}

async fn holders3(i: &Inspector) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for r in ["r1", "r2", "r3"] {
        if let Some(h) = holder(i, r).await {
            m.insert(r.to_owned(), h);
        }
    }
    m
}

/// `nats-roles history check` over the deployment's histories: clean.
async fn check_histories(d: &Deployment) {
    let dir = d.dir().display().to_string();
    let out = testkit::cli::run(&["history", "check", &dir], &[], LIMIT).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.text(), d.report());
    assert!(out.stdout.contains("CLEAN"), "{}", out.text());
}

/// Three instances campaign for one role (TTL 2 s): three moves in a row, each to another
/// instance. Each one exits 0 naming the new term; the role's key shows no holder but the
/// target after the request (no third instance slips in at the vacancy); the old holder
/// logs the demotion with reason `move`; the histories are clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_hands_the_role_to_the_named_instance_and_nobody_else() {
    let server = NatsServer::start().await;
    let bucket = "moves-basic";
    let mut d = Deployment::new(
        &server.url(),
        bucket,
        &["sched"],
        "timing:\n  ttl: 2s\n  heartbeat: 500ms\n",
    );
    d.arg("--history");
    d.arg("{dir}/{id}.jsonl");
    d.start("node-a").await;
    let i = inspector(&server, bucket).await;
    wait_holder(&i, &d, "sched", "node-a").await;
    d.start("node-b").await;
    d.start("node-c").await;
    let mut updates = i.watch().await.expect("watch");
    let mut from = "node-a";
    for to in ["node-c", "node-b", "node-a", "node-b"] {
        let out = cli_move(&server, bucket, &["sched", "--to", to]).await;
        assert_eq!(out.code, Some(0), "{}\n{}", out.text(), d.report());
        assert!(
            out.stdout.contains(&format!("moved sched to {to}: term ")),
            "{}",
            out.text()
        );
        assert_eq!(holder(&i, "sched").await.as_deref(), Some(to));
        // Every holder the key showed since the previous move: the target only.
        let mut seen = Vec::new();
        loop {
            let u: HolderUpdate = tokio::time::timeout(LIMIT, updates.next())
                .await
                .expect("an update")
                .expect("the watch goes on")
                .expect("an update");
            let h = u.holder.and_then(|h| h.holder).map(|h| h.to_string());
            seen.push(h.clone());
            if h.as_deref() == Some(to) {
                break;
            }
        }
        assert!(
            seen.iter().flatten().all(|h| h == to),
            "move {from} -> {to}: holders seen {seen:?}"
        );
        from = to;
    }
    // The holders logged the reason.
    let demoted_by_move = d
        .instances
        .iter()
        .flat_map(|n| n.stdout())
        .filter(|l| l.starts_with("demoted role=sched") && l.contains("reason=move"))
        .count();
    assert_eq!(demoted_by_move, 4, "{}", d.report());
    // Already there: nothing to do, exit 0.
    let out = cli_move(&server, bucket, &["sched", "--to", "node-b"]).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(
        out.stdout.contains("already held by node-b"),
        "{}",
        out.text()
    );
    for n in 0..d.instances.len() {
        d.terminate(n);
    }
    for n in 0..d.instances.len() {
        d.wait_exit(n, LIMIT).await;
    }
    check_histories(&d).await;
}

/// Every way a move does not happen has its exit code and says why: a vacant role, a target
/// that is not running, a target that does not manage the role or only observes it, usage
/// errors; a target that accepts but never gets the role (stopped right after) times out
/// naming the holder. Nothing is left behind: a later move goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_that_cannot_happen_says_why_with_its_exit_code() {
    let server = NatsServer::start().await;
    let bucket = "moves-refused";
    let timing = "timing:\n  ttl: 2s\n  heartbeat: 500ms\n";
    let mut d = Deployment::new(&server.url(), bucket, &["sched", "spare"], timing);
    d.start("node-a").await;
    let i = inspector(&server, bucket).await;
    wait_holder(&i, &d, "sched", "node-a").await;
    wait_holder(&i, &d, "spare", "node-a").await;
    d.start("node-b").await;

    // node-o observes sched, node-x does not manage it; both campaign for `spare` with the
    // same TTL, so they have a live session of sched's TTL class.
    for (id, sched) in [
        ("node-o", "  - name: sched\n    campaign: false\n"),
        ("node-x", ""),
    ] {
        let config = d.dir().join(format!("{id}.yaml"));
        std::fs::write(
            &config,
            format!(
                "bucket:\n  name: {bucket}\n  replicas: 1\n  auto_create: true\n{timing}\
                 roles:\n  - name: spare\n{sched}"
            ),
        )
        .expect("write config");
        let mut cmd = testkit::cli::command(testkit::nats_roles_bin());
        cmd.arg("run")
            .arg("--config")
            .arg(&config)
            .args(["--instance-id", id, "--server", &server.url()])
            .args(["--http", "127.0.0.1:0"]);
        d.start_command(id, cmd).await;
    }

    let cases: [(&[&str], i32, &str); 7] = [
        (
            &["nobody-holds-this", "--to", "node-b"],
            3,
            "is not held by anyone",
        ),
        (&["sched", "--to", "ghost"], 3, "ghost has no live session"),
        (
            &["sched", "--to", "node-x"],
            3,
            "node-x refused (not_configured)",
        ),
        (
            &["sched", "--to", "node-o"],
            3,
            "node-o refused (not_a_candidate)",
        ),
        (&["sched", "--to", "bad id!"], 2, "not a valid instance id"),
        (&["sched"], 2, "--to"),
        (
            &["sched", "--to", "node-b", "--timeout", "0s"],
            2,
            "--timeout",
        ),
    ];
    for (args, code, says) in cases {
        let out = cli_move(&server, bucket, args).await;
        assert_eq!(out.code, Some(code), "{args:?}: {}", out.text());
        assert!(out.stderr.contains(says), "{args:?}: {}", out.text());
        assert_eq!(holder(&i, "sched").await.as_deref(), Some("node-a"));
    }
    // JSON output says the same.
    let out = cli_move(&server, bucket, &["sched", "--to", "node-x", "--json"]).await;
    assert_eq!(out.code, Some(3), "{}", out.text());
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(v["outcome"], "refused");
    assert_eq!(v["reason"], "not_configured");
    assert_eq!(v["moved"], false);

    // A refused move leaves nothing behind: the next one goes through.
    let out = cli_move(&server, bucket, &["sched", "--to", "node-b"]).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.text(), d.report());
    assert_eq!(holder(&i, "sched").await.as_deref(), Some("node-b"));
    // --cancel with nothing to cancel is fine; with a done record it ends the hold.
    let out = cli_move(&server, bucket, &["sched", "--cancel"]).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(
        out.stdout
            .contains("withdrew the move of sched to node-b (done"),
        "{}",
        out.text()
    );
    let out = cli_move(&server, bucket, &["sched", "--cancel"]).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains("nothing to withdraw"), "{}", out.text());
}

/// Placement on, three instances, three roles spread one each: a role moved onto a member that
/// already holds one stays there (placement would otherwise move it back at once to restore
/// the spread); the target's member record lists it as pinned. `--cancel` ends the hold and
/// placement spreads the roles again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_keeps_a_moved_role_on_its_target_until_the_hold_ends() {
    let server = NatsServer::start().await;
    let bucket = "moves-placement";
    let roles: Vec<(String, Option<i32>)> = ["r1", "r2", "r3"]
        .iter()
        .map(|r| ((*r).to_owned(), None))
        .collect();
    let mut d = Deployment::new(&server.url(), bucket, &[], "");
    let config = testkit::placement::write_config(d.dir(), "placement", bucket, &roles);
    std::fs::copy(&config, &d.config).expect("config");
    for id in ["node-a", "node-b", "node-c"] {
        d.start(id).await;
    }
    let i = inspector(&server, bucket).await;
    let spread = |m: &BTreeMap<String, String>| {
        m.len() == 3 && m.values().collect::<std::collections::BTreeSet<_>>().len() == 3
    };
    let until = Instant::now() + LIMIT;
    let before = loop {
        let m = holders3(&i).await;
        if spread(&m) {
            break m;
        }
        assert!(
            Instant::now() < until,
            "never spread: {m:?}\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Move r1 onto the holder of r2.
    let target = before["r2"].clone();
    let out = cli_move(&server, bucket, &["r1", "--to", &target, "--hold", "1h"]).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.text(), d.report());
    // Several stability windows and move intervals later it is still there.
    let watch_until = Instant::now() + testkit::placement::STABILITY * 6;
    while Instant::now() < watch_until {
        let m = holders3(&i).await;
        assert_eq!(
            m.get("r1"),
            Some(&target),
            "placement moved r1 away from where the operator put it: {m:?}\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let members = i.members().await.expect("members");
    let record = members
        .iter()
        .find(|m| m.instance.as_str() == target)
        .expect("the target's record");
    assert!(
        record.pinned.contains(&RoleName::new("r1").expect("role")),
        "{record:?}"
    );
    // The hold ends with --cancel: the roles spread again.
    let out = cli_move(&server, bucket, &["r1", "--cancel"]).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    let until = Instant::now() + LIMIT;
    loop {
        let m = holders3(&i).await;
        if spread(&m) {
            break;
        }
        assert!(
            Instant::now() < until,
            "the roles never spread again after --cancel: {m:?}\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
