//! Role groups (protocol Q14) with real `nats-roles run` processes (placement on) and a real
//! nats-server: a group's members are spread, instances configured with different counts
//! campaign each for their own members and show the disagreement without fighting,
//! `nats-roles scale` sets one count for all and the fleet converges (new members held,
//! removed ones released), `--reset` returns to the configured counts, a killed instance's
//! members are taken over, and the recorded histories are judged clean.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;
use testkit::NatsServer;
use testkit::cli::CliOutput;
use testkit::instances::Deployment;
use testkit::process::{SIGKILL, signal};
use tokio::time::Instant;

const LIMIT: Duration = Duration::from_secs(30);

async fn cli(server: &NatsServer, bucket: &str, args: &[&str]) -> CliOutput {
    let url = server.url();
    let mut all = args.to_vec();
    all.extend_from_slice(&["--server", &url, "--bucket", bucket]);
    testkit::cli::run(&all, &[], LIMIT).await
}

/// `status --json`: the group's members held now, index → holder.
async fn members(server: &NatsServer, bucket: &str) -> BTreeMap<u64, String> {
    let out = cli(server, bucket, &["status", "--json"]).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    let json: Value = serde_json::from_str(&out.stdout).expect("status --json");
    json["roles"]
        .as_array()
        .expect("roles")
        .iter()
        .filter(|r| r["group"] == "shard" && r["status"] == "held")
        .map(|r| {
            (
                r["index"].as_u64().expect("index"),
                r["holder"].as_str().expect("holder").to_owned(),
            )
        })
        .collect()
}

/// Waits until exactly the members `0 … count − 1` are held (and, when `spread` is given, by
/// that many instances at most `max` each).
async fn held_exactly(
    server: &NatsServer,
    bucket: &str,
    count: u64,
    spread: Option<(usize, usize)>,
    d: &Deployment,
) -> BTreeMap<u64, String> {
    let until = Instant::now() + LIMIT;
    loop {
        let held = members(server, bucket).await;
        let indexes: BTreeSet<u64> = held.keys().copied().collect();
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for h in held.values() {
            *per.entry(h.as_str()).or_default() += 1;
        }
        let spread_ok = spread
            .is_none_or(|(holders, max)| per.len() == holders && per.values().all(|n| *n <= max));
        if indexes == (0..count).collect() && spread_ok {
            return held;
        }
        assert!(
            Instant::now() < until,
            "want members 0..{count} held (spread {spread:?}), have {held:?}\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn config(d: &Deployment, name: &str, bucket: &str, count: u32) -> std::path::PathBuf {
    let path = testkit::placement::write_config(d.dir(), name, bucket, &[]);
    let mut yaml = std::fs::read_to_string(&path).expect("config");
    yaml = yaml
        .replace("roles:\n", "roles: []\n")
        .replace("http:\n  enabled: false\n", "");
    yaml.push_str(&format!("groups:\n  - name: shard\n    count: {count}\n"));
    std::fs::write(&path, yaml).expect("config");
    path
}

/// Three instances, placement on: node-a and node-b configured with 6 shards, node-c with 8.
/// Members 0–5 are spread over all three, 6 and 7 held by node-c alone (the only one
/// campaigning for them), and `status` shows the disagreement. `scale shard 9 --wait` makes
/// all three act on 9 and hold 0–8 spread 3/3/3; `scale shard 3 --wait` releases 3–8; `scale
/// --reset` brings the configured counts back (0–7 held, 6–7 by node-c). SIGKILL of node-c
/// hands its members 0–5 to the others (6 and 7 stay unheld: nobody else has them). Every
/// history is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_spread_scale_and_survive_a_kill() {
    let server = NatsServer::start().await;
    let bucket = "groups";
    let mut d = Deployment::new(&server.url(), bucket, &[], "");
    let six = config(&d, "six", bucket, 6);
    let eight = config(&d, "eight", bucket, 8);
    d.arg("--history");
    d.arg("{dir}/{id}.jsonl");
    d.config = six;
    d.start("node-a").await;
    d.start("node-b").await;
    d.config = eight;
    let c = d.start("node-c").await;

    let held = held_exactly(&server, bucket, 8, Some((3, 3)), &d).await;
    assert_eq!(held[&6], "node-c", "{held:?}");
    assert_eq!(held[&7], "node-c", "{held:?}");
    let status = cli(&server, bucket, &["status"]).await;
    assert!(
        status
            .stdout
            .contains("disagree: 6 (node-a, node-b) / 8 (node-c)"),
        "{}",
        status.text()
    );

    let out = cli(&server, bucket, &["scale", "shard", "9", "--wait"]).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.text(), d.report());
    assert!(
        out.stdout.contains("every instance acts on 9"),
        "{}",
        out.text()
    );
    held_exactly(&server, bucket, 9, Some((3, 3)), &d).await;
    let status = cli(&server, bucket, &["status"]).await;
    assert!(status.stdout.contains("record (9)"), "{}", status.text());
    assert!(!status.stdout.contains("disagree"), "{}", status.text());

    let out = cli(&server, bucket, &["scale", "shard", "3", "--wait"]).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.text(), d.report());
    held_exactly(&server, bucket, 3, None, &d).await;

    let out = cli(
        &server,
        bucket,
        &["scale", "shard", "--reset", "--wait", "--timeout", "3s"],
    )
    .await;
    // The instances disagree again once the record is gone: `--wait` times out saying so.
    assert_eq!(out.code, Some(4), "{}", out.text());
    assert!(out.stderr.contains("node-c 8"), "{}", out.text());
    let held = held_exactly(&server, bucket, 8, None, &d).await;
    assert_eq!(held[&7], "node-c", "{held:?}");

    // A group nobody runs: refused, nothing written.
    let out = cli(&server, bucket, &["scale", "nosuch", "2"]).await;
    assert_eq!(out.code, Some(3), "{}", out.text());
    let out = cli(&server, bucket, &["scale", "shard", "0"]).await;
    assert_eq!(out.code, Some(2), "{}", out.text());

    signal(d.instances[c].pid(), SIGKILL);
    let until = Instant::now() + LIMIT;
    loop {
        let held = members(&server, bucket).await;
        let survivors = held.values().all(|h| h != "node-c");
        if survivors && held.keys().copied().collect::<BTreeSet<_>>() == (0..6).collect() {
            break;
        }
        assert!(
            Instant::now() < until,
            "after the kill: {held:?}\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let dir = d.dir().display().to_string();
    let out = testkit::cli::run(&["history", "check", &dir], &[], LIMIT).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.text(), d.report());
}
