//! The placement scenarios of issue 14 (zones, capacity, a rolling upgrade, a storm), for
//! `examples/placement_bench.rs`: each runs `nats-roles run` processes with placement on and
//! reports moves against the minimum, convergence time, vacancy per move, and whether
//! `nats-roles plan` predicted the moves actually made.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use super::*;

/// What one scenario step measured.
#[derive(Debug, Clone, Default)]
pub struct OperatorStep {
    pub what: String,
    /// Ownership changes after the change.
    pub moves: usize,
    /// Fewest ownership changes the change needs.
    pub minimum: usize,
    /// From the change to the last ownership change.
    pub converged: Duration,
    /// Vacancies (delete or expiry marker → next put) after the change.
    pub vacancies: Vec<Duration>,
    /// `nats-roles plan` before the change predicted exactly the holders after it
    /// (`None`: not checked for this step).
    pub predicted: Option<bool>,
    /// Free-form figures (e.g. "max per zone 11 of bound 11").
    pub note: String,
}

/// A config with `instance` lines prepended and `weights` (role → cost) added.
fn config_with(
    dir: &Path,
    name: &str,
    bucket: &str,
    roles: &[String],
    instance: &str,
    weights: &BTreeMap<String, u32>,
) -> PathBuf {
    let path = write_config(dir, name, bucket, &without_priority(roles));
    let mut yaml = std::fs::read_to_string(&path).expect("read config");
    for (role, w) in weights {
        yaml = yaml.replace(
            &format!("  - name: {role}\n"),
            &format!("  - name: {role}\n    weight: {w}\n"),
        );
    }
    std::fs::write(&path, format!("instance:\n{instance}{yaml}")).expect("write config");
    path
}

/// Waits until all `n` roles are held and nothing changed for `quiet` (at most `limit`);
/// returns the time of the last change.
async fn settle(
    rec: &Recorder,
    n: usize,
    since: Instant,
    quiet: Duration,
    limit: Duration,
) -> Instant {
    let deadline = Instant::now() + limit;
    loop {
        let h = rec.holders();
        let held = h.values().filter(|x| x.is_some()).count();
        let moved = rec.moves_since(since).iter().map(|c| c.at).max();
        let vacated = rec
            .changes()
            .iter()
            .filter(|c| c.at >= since && c.holder.is_none())
            .map(|c| c.at)
            .max();
        let last = moved.max(vacated).unwrap_or(since);
        if held == n && last.elapsed() >= quiet {
            return last;
        }
        assert!(
            Instant::now() < deadline,
            "not settled within {limit:?}: {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn held(rec: &Recorder) -> BTreeMap<String, String> {
    rec.holders()
        .into_iter()
        .filter_map(|(r, h)| Some((r, h?)))
        .collect()
}

/// `nats-roles plan --json ARGS` against the bucket: the holders it predicts.
async fn predict(
    bin: &Path,
    url: &str,
    bucket: &str,
    now: &BTreeMap<String, String>,
    args: &[&str],
) -> BTreeMap<String, String> {
    let out = crate::cli::command(bin)
        .arg("plan")
        .args(args)
        .args(["--json", "--server", url, "--bucket", bucket])
        .output()
        .await
        .expect("run nats-roles plan");
    assert!(
        out.status.success(),
        "nats-roles plan failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sim: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
    let mut after = now.clone();
    for m in sim["moves"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(sim["fills"].as_array().into_iter().flatten())
    {
        if let (Some(r), Some(to)) = (m["role"].as_str(), m["to"].as_str()) {
            after.insert(r.to_owned(), to.to_owned());
        }
    }
    after
}

fn step(
    what: impl Into<String>,
    rec: &Recorder,
    t: Instant,
    last: Instant,
    minimum: usize,
) -> OperatorStep {
    OperatorStep {
        what: what.into(),
        moves: rec.moves_since(t).len(),
        minimum,
        converged: last.saturating_duration_since(t),
        vacancies: rec.gaps_since(t).into_iter().map(|g| g.2).collect(),
        predicted: None,
        note: String::new(),
    }
}

/// 36 roles on 6 instances in 3 zones (2 each): the zones' loads, then zone z3 stops
/// (graceful): only its roles move, to where `plan --leave` predicted.
pub async fn zone_scenario(bin: &Path, url: &str) -> Vec<OperatorStep> {
    let dir = fleet_dir();
    let bucket = unique_bucket("bench-zones");
    let names = roles(36);
    let cfg: Vec<PathBuf> = (1..=3)
        .map(|z| {
            config_with(
                dir.path(),
                &format!("z{z}"),
                &bucket,
                &names,
                &format!("  zone: z{z}\n"),
                &BTreeMap::new(),
            )
        })
        .collect();
    let mut fleet = Fleet::new(bin, url, dir);
    let ids = ["a1", "a2", "b1", "b2", "c1", "c2"];
    for (i, id) in ids.iter().enumerate() {
        fleet.start(id, &cfg[i / 2]);
    }
    let (rec, watch) = Recorder::start(url, &bucket).await;
    let t0 = Instant::now();
    let last = settle(
        &rec,
        36,
        t0,
        Duration::from_secs(2),
        Duration::from_secs(40),
    )
    .await;
    let before = held(&rec);
    let mut per_zone: BTreeMap<char, usize> = BTreeMap::new();
    for h in before.values() {
        *per_zone.entry(h.chars().next().unwrap_or('?')).or_default() += 1;
    }
    let mut first = step("start 6 instances in 3 zones", &rec, t0, last, 36);
    first.note = format!(
        "roles per zone {:?} (bound ⌈36/3⌉ + 1 = 13)",
        per_zone.values().collect::<Vec<_>>()
    );
    let predicted = predict(
        bin,
        url,
        &bucket,
        &before,
        &["--leave", "c1", "--leave", "c2"],
    )
    .await;
    let lost = before.values().filter(|h| h.starts_with('c')).count();
    let t = Instant::now();
    fleet.sigterm_all(&["c1", "c2"]).await;
    let last = settle(&rec, 36, t, Duration::from_secs(2), Duration::from_secs(30)).await;
    let after = held(&rec);
    let mut second = step("zone z3 stops (2 instances)", &rec, t, last, lost);
    second.predicted = Some(after == predicted);
    let others_moved = before
        .iter()
        .filter(|(r, h)| !h.starts_with('c') && after.get(*r) != Some(*h))
        .count();
    let differ: Vec<String> = after
        .iter()
        .filter(|(r, h)| predicted.get(*r) != Some(*h))
        .map(|(r, h)| {
            format!(
                "{r}: {h} not {}",
                predicted.get(r).map_or("-", String::as_str)
            )
        })
        .collect();
    second.note = format!(
        "roles of other zones moved: {others_moved}; not as predicted: {}",
        if differ.is_empty() {
            "none".to_owned()
        } else {
            differ.join(", ")
        }
    );
    fleet.stop_and_check(&ids[..4], &[]).await;
    watch.abort();
    vec![first, second]
}

/// 24 roles (every third costs 3) on 4 instances, one limited to `capacity: 6` units: the
/// limit holds at every moment; then a fifth instance joins (moves vs the plan's prediction).
pub async fn capacity_scenario(bin: &Path, url: &str) -> Vec<OperatorStep> {
    let dir = fleet_dir();
    let bucket = unique_bucket("bench-capacity");
    let names = roles(24);
    let weights: BTreeMap<String, u32> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 == 0)
        .map(|(_, r)| (r.clone(), 3))
        .collect();
    let free = config_with(
        dir.path(),
        "free",
        &bucket,
        &names,
        "  zone: z1\n",
        &weights,
    );
    let small = config_with(
        dir.path(),
        "small",
        &bucket,
        &names,
        "  zone: z1\n  capacity: 6\n",
        &weights,
    );
    let mut fleet = Fleet::new(bin, url, dir);
    fleet.start("small", &small);
    for id in ["n1", "n2", "n3"] {
        fleet.start(id, &free);
    }
    let (rec, watch) = Recorder::start(url, &bucket).await;
    let t0 = Instant::now();
    let last = settle(
        &rec,
        24,
        t0,
        Duration::from_secs(2),
        Duration::from_secs(40),
    )
    .await;
    let units = |h: &BTreeMap<String, String>, id: &str| -> u32 {
        h.iter()
            .filter(|(_, x)| *x == id)
            .map(|(r, _)| weights.get(r).copied().unwrap_or(1))
            .sum()
    };
    let last_start = last;
    let before = held(&rec);
    let mut first = step("start 4 instances (one capacity 6)", &rec, t0, last, 24);
    let per: Vec<u32> = ["small", "n1", "n2", "n3"]
        .iter()
        .map(|i| units(&before, i))
        .collect();
    first.note = format!("units per instance {per:?} (total 40; small ≤ 6)");
    let predicted = predict(bin, url, &bucket, &before, &["--join", "n4:1:z1"]).await;
    let minimum = before.len()
        - before
            .iter()
            .filter(|(r, h)| predicted.get(*r) == Some(*h))
            .count();
    let t = Instant::now();
    fleet.start("n4", &free);
    let last = settle(&rec, 24, t, Duration::from_secs(3), Duration::from_secs(30)).await;
    let after = held(&rec);
    let mut second = step("a fifth instance joins", &rec, t, last, minimum);
    second.predicted = Some(after == predicted);
    // The limit at every moment: replay the recorder's timeline.
    // (Before the others joined, `small` alone took every vacant role: availability first.)
    let mut now: BTreeMap<String, String> = BTreeMap::new();
    let mut worst = 0;
    for c in rec.changes() {
        match c.holder {
            Some(h) => now.insert(c.role.clone(), h),
            None => now.remove(&c.role),
        };
        if c.at >= last_start {
            worst = worst.max(units(&now, "small"));
        }
    }
    second.note = format!(
        "units per instance {:?}; small at most {worst} units after the start (capacity 6)",
        ["small", "n1", "n2", "n3", "n4"]
            .iter()
            .map(|i| units(&after, i))
            .collect::<Vec<_>>()
    );
    fleet
        .stop_and_check(&["small", "n1", "n2", "n3", "n4"], &[])
        .await;
    watch.abort();
    vec![first, second]
}

/// 40 roles on 10 instances at version 1.0.0, restarted one by one at 2.0.0 (each waits
/// until the roles settled): moves per role over the whole upgrade.
pub async fn rolling_upgrade_scenario(bin: &Path, url: &str) -> Vec<OperatorStep> {
    let dir = fleet_dir();
    let bucket = unique_bucket("bench-rollout");
    let names = roles(40);
    let v1 = config_with(
        dir.path(),
        "v1",
        &bucket,
        &names,
        "  version: 1.0.0\n",
        &BTreeMap::new(),
    );
    let v2 = config_with(
        dir.path(),
        "v2",
        &bucket,
        &names,
        "  version: 2.0.0\n",
        &BTreeMap::new(),
    );
    let mut fleet = Fleet::new(bin, url, dir);
    let ids: Vec<String> = (0..10).map(|i| format!("node-{i}")).collect();
    for id in &ids {
        fleet.start(id, &v1);
    }
    let (rec, watch) = Recorder::start(url, &bucket).await;
    let t0 = Instant::now();
    let last = settle(
        &rec,
        40,
        t0,
        Duration::from_secs(2),
        Duration::from_secs(60),
    )
    .await;
    let first = step("start 10 instances at 1.0.0", &rec, t0, last, 40);
    let t = Instant::now();
    for id in &ids {
        fleet.sigterm(id).await;
        fleet.start(id, &v2);
        settle(
            &rec,
            40,
            Instant::now(),
            Duration::from_secs(2),
            Duration::from_secs(30),
        )
        .await;
    }
    let last = Instant::now();
    let mut per_role: BTreeMap<String, usize> = BTreeMap::new();
    for m in rec.moves_since(t) {
        *per_role.entry(m.role.clone()).or_default() += 1;
    }
    let most = per_role.values().max().copied().unwrap_or(0);
    let mut hist: BTreeMap<usize, usize> = BTreeMap::new();
    for r in &names {
        *hist
            .entry(per_role.get(r).copied().unwrap_or(0))
            .or_default() += 1;
    }
    // Each role must move at least once (its holder restarts); minimum 40.
    let mut upgrade = step(
        "restart 10 instances one by one at 2.0.0",
        &rec,
        t,
        last,
        40,
    );
    upgrade.note = format!("moves per role: most {most}; roles by number of moves {hist:?}");
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    fleet.stop_and_check(&refs, &[]).await;
    watch.abort();
    vec![first, upgrade]
}

/// 40 roles on 10 instances; 4 are SIGKILLed at once (40 % within one TTL): the storm breaker
/// freezes voluntary moves; the lost roles are taken over anyway; moves resume after the
/// stability window.
pub async fn storm_scenario(bin: &Path, url: &str) -> Vec<OperatorStep> {
    let dir = fleet_dir();
    let bucket = unique_bucket("bench-storm");
    let names = roles(40);
    let cfg = config_with(
        dir.path(),
        "all",
        &bucket,
        &names,
        "  zone: z1\n",
        &BTreeMap::new(),
    );
    let mut fleet = Fleet::new(bin, url, dir);
    let ids: Vec<String> = (0..10).map(|i| format!("node-{i}")).collect();
    for id in &ids {
        fleet.start(id, &cfg);
    }
    let (rec, watch) = Recorder::start(url, &bucket).await;
    let t0 = Instant::now();
    settle(
        &rec,
        40,
        t0,
        Duration::from_secs(2),
        Duration::from_secs(60),
    )
    .await;
    let before = held(&rec);
    let killed = ["node-6", "node-7", "node-8", "node-9"];
    let lost = before
        .values()
        .filter(|h| killed.contains(&h.as_str()))
        .count();
    let predicted = predict(
        bin,
        url,
        &bucket,
        &before,
        &[
            "--leave", "node-6", "--leave", "node-7", "--leave", "node-8", "--leave", "node-9",
        ],
    )
    .await;
    let t = Instant::now();
    for id in killed {
        fleet.sigkill(id).await;
    }
    let last = settle(&rec, 40, t, Duration::from_secs(3), Duration::from_secs(30)).await;
    let mut s = step("SIGKILL 4 of 10 at once", &rec, t, last, lost);
    let now = held(&rec);
    s.predicted = Some(now == predicted);
    let differ: Vec<String> = now
        .iter()
        .filter(|(r, h)| predicted.get(*r) != Some(*h))
        .map(|(r, h)| {
            format!(
                "{r}: {h} not {}",
                predicted.get(r).map_or("-", String::as_str)
            )
        })
        .collect();
    let taken = rec
        .moves_since(t)
        .iter()
        .filter(|m| {
            before
                .get(&m.role)
                .is_some_and(|h| killed.contains(&h.as_str()))
        })
        .map(|m| m.at - t)
        .max()
        .unwrap_or_default();
    s.note = format!(
        "lost roles {lost}, all taken over {:.0} ms after the kill; moves of surviving holders' roles {}; not as predicted: {}",
        taken.as_secs_f64() * 1000.0,
        rec.moves_since(t)
            .iter()
            .filter(|m| before
                .get(&m.role)
                .is_some_and(|h| !killed.contains(&h.as_str())))
            .count(),
        if differ.is_empty() {
            "none".to_owned()
        } else {
            differ.join(", ")
        }
    );
    let refs: Vec<&str> = ids[..6].iter().map(String::as_str).collect();
    fleet.stop_and_check(&refs, &[]).await;
    watch.abort();
    vec![s]
}
