//! Roles with slots (protocol Q15) with real `nats-roles` processes against a real
//! nats-server: three `run` instances share a role with two slots (placement on) — two of
//! them hold one slot each, never one two; a SIGKILLed holder's slot goes to the third; the
//! histories are clean (S1–S7) — and `nats-roles exec --slots 2` is a counted semaphore: of
//! three concurrent commands at most two run at once.

use std::collections::BTreeMap;
use std::time::Duration;

use nats_roles::RoleName;
use nats_roles::tooling::inspect::Inspector;
use testkit::NatsServer;
use testkit::instances::Deployment;
use testkit::process::{SIGKILL, signal};
use tokio::time::Instant;

const LIMIT: Duration = Duration::from_secs(30);

async fn inspector(server: &NatsServer, bucket: &str) -> Inspector {
    let (client, errors) = nats_roles::connect(
        &nats_roles::config::NatsConfig {
            servers: vec![server.url()],
            ..Default::default()
        },
        "slots-test",
    )
    .await
    .expect("connect");
    Inspector::open(&client, bucket, &errors, Duration::from_secs(5))
        .await
        .expect("open the bucket")
}

/// Slot -> holder, as the bucket has it now.
async fn holders(i: &Inspector) -> BTreeMap<u32, String> {
    let mut m = BTreeMap::new();
    for k in 0..2 {
        let slot = RoleName::from_key_name(format!("indexer.{k}")).expect("slot");
        if let Some(h) = i
            .holder(&slot)
            .await
            .expect("read the holder")
            .and_then(|h| h.holder)
        {
            m.insert(k, h.to_string());
        }
    }
    m
}

/// Polls the bucket for `period`: no instance is ever the holder of both slots.
async fn never_one_instance_on_two(i: &Inspector, d: &Deployment, period: Duration) {
    let end = Instant::now() + period;
    while Instant::now() < end {
        let h = holders(i).await;
        assert!(
            h.len() < 2 || h[&0] != h[&1],
            "one instance holds both slots: {h:?}\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn wait_holders(
    i: &Inspector,
    d: &Deployment,
    what: &str,
    ok: impl Fn(&BTreeMap<u32, String>) -> bool,
) -> BTreeMap<u32, String> {
    let until = Instant::now() + LIMIT;
    loop {
        let h = holders(i).await;
        if ok(&h) {
            return h;
        }
        assert!(
            Instant::now() < until,
            "{what}: holders {h:?}\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Three instances, `slots: 2`, placement on: the first alone holds one slot only (the
/// other stays vacant); with all three, both slots are held by two distinct instances and
/// never one instance on both; `status --json` lists each slot with its role and holder; the
/// SIGKILL of a holder hands its slot to the instance without one; the histories (the killed
/// one's included) are clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_share_two_slots_and_a_killed_holder_s_slot_moves() {
    let server = NatsServer::start().await;
    let bucket = "slots-run";
    let mut d = Deployment::new(
        &server.url(),
        bucket,
        // `Deployment` writes `- name: <role>`: the slots are the entry's next line.
        &["indexer\n    slots: 2"],
        "timing:\n  ttl: 2s\n  heartbeat: 500ms\n\
         placement:\n  enabled: true\n  stability_window: 1s\n  claim_grace: 1s\n",
    );
    d.arg("--history");
    d.arg("{dir}/{id}.jsonl");
    // node-a alone first: it holds one slot, and the other stays vacant (placement prefers
    // it for both, and nobody else campaigns).
    d.start("node-a").await;
    let i = inspector(&server, bucket).await;
    wait_holders(&i, &d, "node-a on a slot", |h| !h.is_empty()).await;
    never_one_instance_on_two(&i, &d, Duration::from_secs(2)).await;
    assert_eq!(holders(&i).await.len(), 1, "{}", d.report());
    for id in ["node-b", "node-c"] {
        d.start(id).await;
    }
    let both = |h: &BTreeMap<u32, String>| h.len() == 2 && h[&0] != h[&1];
    wait_holders(&i, &d, "two instances on the two slots", both).await;
    never_one_instance_on_two(&i, &d, Duration::from_secs(3)).await;
    let before = wait_holders(&i, &d, "still two instances", both).await;

    // `status --json`: one entry per slot, with the role, the slot and the holder.
    let url = server.url();
    let out = testkit::cli::run(
        &["status", "--json", "-s", &url, "--bucket", bucket],
        &[],
        LIMIT,
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("status JSON");
    let roles = json["roles"].as_array().expect("roles");
    let mut listed: Vec<(String, u64, String)> = roles
        .iter()
        .map(|r| {
            (
                r["role"].as_str().unwrap_or_default().to_owned(),
                r["slot"].as_u64().expect("a slot"),
                r["holder"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    listed.sort();
    assert_eq!(listed.len(), 2, "{}", out.stdout);
    assert!(listed.iter().all(|(r, ..)| r == "indexer"), "{listed:?}");
    assert_eq!(
        listed.iter().map(|(_, k, _)| *k).collect::<Vec<_>>(),
        [0, 1],
        "{listed:?}"
    );
    // The slot count the bucket records (control.slots.indexer, Q15), on each slot.
    assert!(
        roles.iter().all(|r| r["slots"].as_u64() == Some(2)),
        "{}",
        out.stdout
    );
    let text = testkit::cli::run(&["status", "-s", &url, "--bucket", bucket], &[], LIMIT).await;
    assert!(text.stdout.contains("indexer[0]"), "{}", text.text());
    assert!(
        text.stdout
            .contains("role indexer: 2 slots (recorded in control.slots.indexer)"),
        "{}",
        text.text()
    );
    // The HTTP API names a slot as its role: `/api/roles/indexer.0`.
    let port = d.instances[0].port;
    let (code, body) = testkit::http::get(port, "/api/roles/indexer.0")
        .await
        .expect("GET /api/roles/indexer.0");
    assert_eq!(code, 200, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        (view["role"].as_str(), view["slot"].as_u64()),
        (Some("indexer"), Some(0))
    );
    let (code, body) = testkit::http::get(port, "/api/roles/indexer.00")
        .await
        .expect("GET /api/roles/indexer.00");
    assert_eq!(code, 400, "{body}");

    // SIGKILL the holder of slot 0: the instance holding no slot takes it.
    let victim = before[&0].clone();
    let idle = ["node-a", "node-b", "node-c"]
        .into_iter()
        .find(|id| !before.values().any(|h| h == id))
        .expect("an instance without a slot");
    let n = d
        .instances
        .iter()
        .position(|x| x.id == victim)
        .expect("the victim");
    signal(d.instances[n].pid(), SIGKILL);
    let after = wait_holders(&i, &d, "the freed slot taken by the idle instance", |h| {
        h.get(&0).map(String::as_str) == Some(idle)
    })
    .await;
    assert_eq!(after[&1], before[&1], "slot 1 changed hands: {after:?}");
    never_one_instance_on_two(&i, &d, Duration::from_millis(1500)).await;
    d.wait_exit(n, LIMIT).await;
    for k in 0..d.instances.len() {
        if k != n {
            d.terminate(k);
        }
    }
    for k in 0..d.instances.len() {
        if k != n {
            d.wait_exit(k, LIMIT).await;
        }
    }
    let dir = d.dir().display().to_string();
    let out = testkit::cli::run(&["history", "check", &dir], &[], LIMIT).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.text(), d.report());
    assert!(out.stdout.contains("CLEAN"), "{}", out.text());
}

/// `nats-roles exec --role sem --slots 2`: three concurrent commands all run, at most two at
/// once (each counts the markers of the running commands after writing its own), and two do
/// run together; each exits with its command's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_with_two_slots_runs_at_most_two_commands_at_once() {
    let server = NatsServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let url = server.url();
    let one = |name: &'static str| {
        let url = url.clone();
        let dir = dir.path().to_path_buf();
        async move {
            let script = format!(
                "touch {d}/running.{name}; n=$(ls {d} | grep -c '^running\\.'); \
                 echo \"$n $NATS_ROLES_ROLE $NATS_ROLES_SLOT\" >> {d}/counts.{name}; sleep 3; \
                 rm {d}/running.{name}; exit 3",
                d = dir.display()
            );
            testkit::cli::run(
                &[
                    "exec",
                    "--role",
                    "sem",
                    "--slots",
                    "2",
                    "-s",
                    &url,
                    "--bucket",
                    "slots-sem",
                    "--auto-create",
                    "--ttl",
                    "2s",
                    "--instance-id",
                    name,
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
                &[],
                Duration::from_secs(60),
            )
            .await
        }
    };
    let (x, y, z) = tokio::join!(one("x"), one("y"), one("z"));
    for out in [&x, &y, &z] {
        assert_eq!(out.code, Some(3), "{}", out.text());
    }
    let mut counts = Vec::new();
    for name in ["x", "y", "z"] {
        let line = std::fs::read_to_string(dir.path().join(format!("counts.{name}")))
            .unwrap_or_else(|e| panic!("{name} never ran its command: {e}"));
        assert_eq!(
            line.lines().count(),
            1,
            "{name} ran its command more than once (on two slots): {line:?}"
        );
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 3, "{line:?}");
        assert_eq!(fields[1], "sem", "NATS_ROLES_ROLE: {line:?}");
        assert!(["0", "1"].contains(&fields[2]), "NATS_ROLES_SLOT: {line:?}");
        counts.push(fields[0].parse::<u32>().expect("a count"));
    }
    let most = counts.iter().copied().max().unwrap_or_default();
    assert_eq!(
        most, 2,
        "commands running at once, as each saw it: {counts:?}"
    );
}

/// `exec --slots 2 --no-wait` while two other `exec`s hold both slots: it gives up at once
/// (75, the command never runs) and says that every slot is held; the two run theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_no_wait_gives_up_only_when_every_slot_is_held() {
    let server = NatsServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let url = server.url();
    let exec = |name: &str, extra: &[&str], script: String| {
        let mut args: Vec<String> = [
            "exec",
            "--role",
            "sem",
            "--slots",
            "2",
            "-s",
            &url,
            "--bucket",
            "slots-no-wait",
            "--auto-create",
            "--ttl",
            "2s",
            "--instance-id",
            name,
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        args.extend(["--".into(), "sh".into(), "-c".into(), script]);
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            testkit::cli::run(&args, &[], Duration::from_secs(60)).await
        }
    };
    let d = dir.path().display().to_string();
    let holder = |name: &'static str| {
        exec(
            name,
            &[],
            format!("touch {d}/running.{name}; sleep 5; rm {d}/running.{name}"),
        )
    };
    let late = async {
        let until = Instant::now() + LIMIT;
        while std::fs::read_dir(dir.path()).map_or(0, Iterator::count) < 2 {
            assert!(Instant::now() < until, "the two holders never both ran");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let out = exec("z", &["--no-wait"], format!("touch {d}/ran.z")).await;
        let still = std::fs::read_dir(dir.path()).map_or(0, Iterator::count);
        (out, still)
    };
    let (x, y, (z, still)) = tokio::join!(holder("x"), holder("y"), late);
    assert_eq!(x.code, Some(0), "{}", x.text());
    assert_eq!(y.code, Some(0), "{}", y.text());
    assert_eq!(z.code, Some(75), "{}", z.text());
    assert_eq!(still, 2, "the holders were still running when z gave up");
    assert!(!dir.path().join("ran.z").exists(), "z ran its command");
    assert!(
        z.stderr.contains("all 2 slots of role sem are held"),
        "{}",
        z.text()
    );
}

/// Placement does not plan a second slot of a role on a member holding one: an instance of a
/// higher priority (which placement prefers for every slot while it holds none) takes one
/// slot by a voluntary move, the other goes back to another instance, the slots stay put, and
/// the plan prefers each slot's holder (without the rule it prefers node-a for both: its
/// member record lists the slot it cannot take as unavailable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preferred_instance_takes_one_slot_and_the_slots_stay_put() {
    let server = NatsServer::start().await;
    let bucket = "slots-priority";
    let placement = "timing:\n  ttl: 2s\n  heartbeat: 500ms\n\
         placement:\n  enabled: true\n  stability_window: 1s\n  claim_grace: 1s\n  \
         cooldown: 1s\n  move_interval: 500ms\n";
    let mut d = Deployment::new(&server.url(), bucket, &["indexer\n    slots: 2"], placement);
    d.start("node-b").await;
    d.start("node-c").await;
    let i = inspector(&server, bucket).await;
    let both = |h: &BTreeMap<u32, String>| h.len() == 2 && h[&0] != h[&1];
    wait_holders(&i, &d, "node-b and node-c on the slots", both).await;
    let config = d.dir().join("node-a.yaml");
    std::fs::write(
        &config,
        format!(
            "bucket:\n  name: {bucket}\n  replicas: 1\n  auto_create: true\n\
             instance:\n  priority: 10\n{placement}roles:\n  - name: indexer\n    slots: 2\n"
        ),
    )
    .expect("write config");
    let mut cmd = testkit::cli::command(testkit::nats_roles_bin());
    cmd.arg("run")
        .arg("--config")
        .arg(&config)
        .args(["--instance-id", "node-a", "--server", &server.url()])
        .args(["--http", "127.0.0.1:0"]);
    d.start_command("node-a", cmd).await;
    let with_a = |h: &BTreeMap<u32, String>| both(h) && h.values().any(|x| x == "node-a");
    // Settled: node-a on one slot, another instance on the other, and the plan (from the
    // member records, as `status` computes it) prefers each slot's holder — not node-a for
    // both, which is what it prefers without the rule (never settles then).
    let until = Instant::now() + LIMIT;
    let settled = loop {
        let h = holders(&i).await;
        let preferred = plan(&server, bucket).await;
        let want: BTreeMap<u32, String> = h.clone();
        if with_a(&h) && preferred == want {
            break h;
        }
        assert!(
            Instant::now() < until,
            "not settled: holders {h:?}, plan {preferred:?}\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Then no change of hands for 5 s (10 move intervals), and the same plan.
    let end = Instant::now() + Duration::from_secs(5);
    let mut changes = Vec::new();
    let mut last = settled.clone();
    while Instant::now() < end {
        let now = holders(&i).await;
        if now != last {
            changes.push(now.clone());
            last = now;
        }
        assert!(
            last.len() < 2 || last[&0] != last[&1],
            "one instance holds both slots: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        changes.is_empty(),
        "the slots changed hands after settling at {settled:?}: {changes:?}\n{}",
        d.report()
    );
    assert_eq!(plan(&server, bucket).await, settled, "the plan moved");
}

/// Slot -> preferred member, as `nats-roles status --json` plans it from the member records.
async fn plan(server: &NatsServer, bucket: &str) -> BTreeMap<u32, String> {
    let url = server.url();
    let out = testkit::cli::run(
        &["status", "--json", "-s", &url, "--bucket", bucket],
        &[],
        LIMIT,
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("status JSON");
    json["roles"]
        .as_array()
        .expect("roles")
        .iter()
        .filter_map(|r| {
            let slot = u32::try_from(r["slot"].as_u64()?).ok()?;
            Some((slot, r["preferred"].as_str()?.to_owned()))
        })
        .collect()
}
