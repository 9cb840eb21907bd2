//! Placement inputs an operator trusts (docs/placement.md), with `nats-roles run` processes
//! against a real nats-server: zones and a role limit, the members view, what-if
//! (`nats-roles plan`), the operator's freeze (`nats-roles freeze` / `unfreeze`) and the storm
//! breaker. Ground truth is a KV watcher on `role.>` (the testkit's `Recorder`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use testkit::NatsServer;
use testkit::placement::{Fleet, Recorder};

use crate::BIN;

const TOKEN: &str = "zones-test-admin-token";

/// A config of `n` roles for one instance, with `instance` lines (zone, limits) added.
fn config(dir: &Path, name: &str, bucket: &str, n: usize, instance: &str) -> PathBuf {
    let names = testkit::placement::roles(n);
    let path = testkit::placement::write_config(
        dir,
        name,
        bucket,
        &testkit::placement::without_priority(&names),
    );
    testkit::placement::enable_admin_http(&path, TOKEN);
    let yaml = std::fs::read_to_string(&path).expect("read config");
    std::fs::write(&path, format!("instance:\n{instance}{yaml}")).expect("write config");
    path
}

/// Waits until all `n` roles are held and nothing changed for `quiet`; the holders then.
async fn settled(
    rec: &Recorder,
    n: usize,
    quiet: Duration,
    limit: Duration,
) -> BTreeMap<String, String> {
    let deadline = Instant::now() + limit;
    loop {
        let holders = rec.holders();
        let held: BTreeMap<String, String> = holders
            .iter()
            .filter_map(|(r, h)| Some((r.clone(), h.clone()?)))
            .collect();
        let last = rec.changes().last().map(|c| c.at);
        if held.len() == n && last.is_some_and(|t| t.elapsed() >= quiet) {
            return held;
        }
        assert!(
            Instant::now() < deadline,
            "not settled within {limit:?}: {holders:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn per(
    held: &BTreeMap<String, String>,
    group: impl Fn(&str) -> &'static str,
) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for h in held.values() {
        *out.entry(group(h)).or_default() += 1;
    }
    out
}

fn zone_of(id: &str) -> &'static str {
    match id {
        "node-a" | "node-b" => "z1",
        "node-c" | "node-e" => "z2",
        _ => "z3",
    }
}

async fn members(port: u16) -> Value {
    let (code, body) = testkit::http::request(port, "GET", "/api/members", &[], "")
        .await
        .expect("GET /api/members");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

async fn cli(args: &[&str], url: &str, bucket: &str) -> testkit::cli::CliOutput {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--server", url, "--bucket", bucket]);
    testkit::cli::run(&all, &[], Duration::from_secs(20)).await
}

/// 12 roles over zones z1 (two members), z2 (one) and z3 (one limited to 3 roles): zones
/// first (no zone above ⌈12/3⌉ + 1), the limit kept, the members view complete, `plan`
/// predicts a zone loss, losing z2 moves only z2's roles, a freeze stops the moves a join
/// would cause until `unfreeze`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zones_spread_first_a_limit_holds_and_a_freeze_stops_moves() {
    let server = NatsServer::start().await;
    let url = server.url();
    let dir = testkit::placement::fleet_dir();
    let bucket = testkit::placement::unique_bucket("zones");
    let n = 12;
    let z1 = config(dir.path(), "z1", &bucket, n, "  zone: z1\n");
    let z2 = config(dir.path(), "z2", &bucket, n, "  zone: z2\n");
    let z3 = config(dir.path(), "z3", &bucket, n, "  zone: z3\n  max_roles: 3\n");
    let mut fleet = Fleet::new(Path::new(BIN), &url, dir);
    for (id, cfg) in [
        ("node-a", &z1),
        ("node-b", &z1),
        ("node-c", &z2),
        ("node-d", &z3),
    ] {
        fleet.start(id, cfg);
    }
    let (rec, _watch) = Recorder::start(&url, &bucket).await;
    let held = settled(&rec, n, Duration::from_secs(2), Duration::from_secs(30)).await;
    let zones = per(&held, zone_of);
    eprintln!("held per zone: {zones:?}; holders {held:?}");
    for (z, k) in &zones {
        assert!(*k <= n.div_ceil(3) + 1, "zone {z} holds {k}: {held:?}");
    }
    let d = held.values().filter(|h| *h == "node-d").count();
    assert!(d <= 3, "node-d holds {d} over its max_roles 3: {held:?}");

    // The members view: every member with zone and limit, planned = held once settled.
    let port = fleet.http_port("node-a").await;
    let view = members(port).await;
    let list = view["members"].as_array().expect("members");
    assert_eq!(list.len(), 4, "{view}");
    for m in list {
        let id = m["id"].as_str().expect("id");
        assert_eq!(m["zone"].as_str(), Some(zone_of(id)), "{m}");
        assert_eq!(m["planned"], m["held"], "{id}: {view}");
    }
    assert_eq!(list[3]["max_roles"], 3, "{view}");
    assert!(view["frozen"].is_null(), "{view}");
    assert_eq!(
        view["disagreements"].as_array().map(Vec::len),
        Some(0),
        "{view}"
    );

    // What-if: losing node-c fills its roles, moves nothing else.
    let out = cli(&["plan", "--leave", "node-c", "--json"], &url, &bucket).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    let sim: Value = serde_json::from_str(&out.stdout).expect("JSON");
    let c_roles = held.values().filter(|h| *h == "node-c").count();
    assert_eq!(sim["moves"].as_array().map(Vec::len), Some(0), "{sim}");
    assert_eq!(
        sim["fills"].as_array().map(Vec::len),
        Some(c_roles),
        "{sim}"
    );
    let out = cli(&["plan", "--drain", "node-a"], &url, &bucket).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains("draining"), "{}", out.text());
    let out = cli(&["plan", "--leave", "nobody"], &url, &bucket).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    let out = cli(&["plan", "--join", "x:0"], &url, &bucket).await;
    assert_eq!(out.code, Some(2), "{}", out.text());

    // Losing zone z2 (a graceful stop) moves only node-c's roles.
    let t = Instant::now();
    fleet.sigterm("node-c").await;
    let after = settled(&rec, n, Duration::from_secs(2), Duration::from_secs(20)).await;
    for (role, h) in &held {
        if h != "node-c" {
            assert_eq!(
                after.get(role),
                Some(h),
                "{role} moved though z2 was lost: {after:?}"
            );
        }
    }
    assert!(
        after.values().filter(|h| *h == "node-d").count() <= 3,
        "{after:?}"
    );
    let moved = rec.moves_since(t).len();
    eprintln!("z2 lost: {moved} changes; holders {after:?}");

    // Freeze, then a new member in z2: nothing moves to it while frozen.
    let out = cli(&["freeze", "--reason", "maintenance window"], &url, &bucket).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let view = members(port).await;
        if view["frozen"]["cause"] == "operator" {
            assert_eq!(view["frozen"]["reason"], "maintenance window", "{view}");
            break;
        }
        assert!(Instant::now() < deadline, "not frozen: {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fleet.start("node-e", &z2);
    let t = Instant::now();
    // Stability window 1 s plus several re-plans and hand-over rounds: nothing may move.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let frozen_moves = rec.moves_since(t);
    assert!(
        frozen_moves.is_empty(),
        "moves while frozen: {frozen_moves:?}"
    );
    let out = cli(&["unfreeze"], &url, &bucket).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let e = rec
            .holders()
            .values()
            .filter(|h| h.as_deref() == Some("node-e"))
            .count();
        if e >= 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node-e got {e} roles after unfreeze: {:?}",
            rec.holders()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fleet
        .stop_and_check(&["node-a", "node-b", "node-d", "node-e"], &[])
        .await;
}

/// Two of five members SIGKILLed at once (40 % within one TTL): the storm breaker freezes
/// voluntary moves (the members view says why), the killed members' roles are still taken
/// over, and moves resume once membership was stable for the stability window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storm_breaker_freezes_moves_when_many_members_vanish_but_not_failover() {
    let server = NatsServer::start().await;
    let url = server.url();
    let dir = testkit::placement::fleet_dir();
    let bucket = testkit::placement::unique_bucket("storm");
    let n = 10;
    let cfg = config(dir.path(), "all", &bucket, n, "  zone: z1\n");
    let mut fleet = Fleet::new(Path::new(BIN), &url, dir);
    let ids = ["node-a", "node-b", "node-c", "node-d", "node-e"];
    for id in ids {
        fleet.start(id, &cfg);
    }
    let (rec, _watch) = Recorder::start(&url, &bucket).await;
    let before = settled(&rec, n, Duration::from_secs(2), Duration::from_secs(30)).await;
    let lost = before
        .values()
        .filter(|h| *h == "node-d" || *h == "node-e")
        .count();
    let port = fleet.http_port("node-a").await;
    let mut ports = Vec::new();
    for id in ["node-a", "node-b", "node-c"] {
        ports.push(fleet.http_port(id).await);
    }
    fleet.sigkill("node-d").await;
    fleet.sigkill("node-e").await;
    // Within ~2 heartbeats the two are silent: the breaker trips.
    let deadline = Instant::now() + Duration::from_secs(6);
    let storm = loop {
        let view = members(port).await;
        if view["frozen"]["cause"] == "storm" {
            break view;
        }
        assert!(Instant::now() < deadline, "no storm freeze: {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(storm["frozen"]["vanished"], 2, "{storm}");
    // Failover never freezes: every role is held again by the three survivors.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let h = rec.holders();
        let ok = h.len() == n
            && h.values().all(|x| {
                x.as_deref()
                    .is_some_and(|x| ["node-a", "node-b", "node-c"].contains(&x))
            });
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "roles not taken over while frozen: {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Each crash vacancy is measured once, by the survivor that took the role over.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut crashes = 0.0;
        for p in &ports {
            let (_, metrics) = testkit::http::request(*p, "GET", "/metrics", &[], "")
                .await
                .expect("GET /metrics");
            crashes += metrics
                .lines()
                .filter(|l| {
                    l.starts_with("nats_roles_role_vacancy_seconds_count{")
                        && l.contains(r#"cause="crash""#)
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>();
        }
        if crashes == lost as f64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{crashes} crash vacancies measured, {lost} roles lost"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Stable for the stability window (1 s): the freeze ends by itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let view = members(port).await;
        if view["frozen"].is_null() {
            break;
        }
        assert!(Instant::now() < deadline, "still frozen: {view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    fleet
        .stop_and_check(&["node-a", "node-b", "node-c"], &[])
        .await;
}
