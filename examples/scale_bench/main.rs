//! Scale benchmark of the `nats-roles` binary: K `nats-roles run` processes with R roles each
//! against a real nats-server (one node, or the 3-node cluster with an R3 bucket). For every
//! cell it prints a Markdown table: time until every role is held; steady-state CPU and RSS of
//! each instance and of nats-server; server messages in/out per second (`/varz`); SIGKILL of the
//! busiest instance (per-role time until re-held: p50/p99/max, and how many within TTL + 100 ms);
//! SIGTERM of the next busiest (per-role hand-over p50/p99); and for the herd cell (100
//! candidates, one role) the acquire writes per vacancy from `/metrics`.
//!
//! ```text
//! cargo run --release --example scale_bench                       # every cell, ≈ 10 min
//! cargo run --release --example scale_bench -- 1x1000 10x1000     # some cells
//! SCALE_BENCH_CLUSTER=1 cargo run --release --example scale_bench # on the 3-node cluster
//! SCALE_BENCH_PLACEMENT=1 cargo run --release --example scale_bench # with placement
//! ```
//!
//! Cells: `1x1000`, `10x1000`, `3x60`, `herd` (100 × 1), or any `KxR` named on the command
//! line (K instances, R roles; `1x1 1x100 1x1000` for the sizing figures in docs/deploy.md;
//! `100x10000` for issue 27's largest cell: ≈ 10 min and ≈ 12 GiB of memory on a 2-core
//! machine). TTL 3 s, heartbeat 750 ms (the defaults). The nats-roles binary is built with `cargo build --release --bin nats-roles`
//! first (set `NATS_ROLES_NO_BUILD=1` to skip). Figures are in docs/benchmarks.md.

mod observe;
mod sample;

use std::time::{Duration, Instant};

use observe::Observer;
use sample::{counter_sum, cpu_and_rss, ms, pct, varz_msgs};

const TTL: Duration = Duration::from_secs(3);
const STEADY_WINDOW: Duration = Duration::from_secs(10);

/// One cell: `instances` processes, `roles` roles.
#[derive(Debug, Clone, Copy)]
struct Cell {
    name: &'static str,
    instances: usize,
    roles: usize,
}

const CELLS: [Cell; 4] = [
    Cell {
        name: "1x1000",
        instances: 1,
        roles: 1000,
    },
    Cell {
        name: "10x1000",
        instances: 10,
        roles: 1000,
    },
    Cell {
        name: "3x60",
        instances: 3,
        roles: 60,
    },
    Cell {
        name: "herd",
        instances: 100,
        roles: 1,
    },
];

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn build_binary() {
    if env_flag("NATS_ROLES_NO_BUILD") {
        return;
    }
    eprintln!("building: cargo build --release --bin nats-roles");
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "--release", "--bin", "nats-roles"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        eprintln!("cargo build --release --bin nats-roles failed: {status:?}");
        std::process::exit(1);
    }
}

/// The servers of one cell.
enum Servers {
    Single(Box<testkit::NatsServer>),
    Cluster(testkit::NatsCluster),
}

impl Servers {
    async fn start(cluster: bool) -> Servers {
        if cluster {
            Servers::Cluster(testkit::NatsCluster::start(3).await)
        } else {
            Servers::Single(Box::new(testkit::NatsServer::start().await))
        }
    }

    fn nodes(&self) -> Vec<&testkit::NatsServer> {
        match self {
            Servers::Single(s) => vec![s],
            Servers::Cluster(c) => (0..c.len()).map(|i| c.node(i)).collect(),
        }
    }

    fn url(&self) -> String {
        self.nodes()[0].url()
    }

    fn replicas(&self) -> usize {
        self.nodes().len()
    }
}

fn config_yaml(bucket: &str, replicas: usize, roles: usize, placement: bool) -> String {
    let mut yaml = format!(
        "bucket:\n  name: {bucket}\n  replicas: {replicas}\n  auto_create: true\n\
         timing:\n  ttl: {}ms\n  heartbeat: 750ms\n",
        TTL.as_millis()
    );
    if placement {
        yaml.push_str("placement:\n  enabled: true\n  stability_window: 2s\n");
    }
    yaml.push_str("roles:\n");
    for i in 0..roles {
        yaml.push_str(&format!("  - name: shard-{i:04}\n"));
    }
    yaml
}

/// Longest wait for placement to spread the roles before the steady window.
const CONVERGE_LIMIT: Duration = Duration::from_secs(240);
/// Quiet required after the spread (two stability windows of the bench's 2 s).
const QUIET_AFTER_SPREAD: Duration = Duration::from_secs(4);

/// Waits until each of `instances` holds `share` roles ± 10 % and no holder changed for
/// [`QUIET_AFTER_SPREAD`]; returns when, or `None` after `limit`.
async fn wait_spread(
    observer: &Observer,
    instances: usize,
    share: usize,
    limit: Duration,
) -> Option<Instant> {
    let end = Instant::now() + limit;
    let slack = share.div_ceil(10);
    while Instant::now() < end {
        let load = by_load(observer);
        let spread =
            load.len() == instances && load.iter().all(|(_, r)| r.len().abs_diff(share) <= slack);
        let quiet = observer
            .changes_since(Instant::now() - QUIET_AFTER_SPREAD)
            .is_empty();
        if spread && quiet {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// Per-instance role counts, busiest first.
fn by_load(observer: &Observer) -> Vec<(String, Vec<String>)> {
    let mut per: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (role, holder) in observer.holders() {
        per.entry(holder).or_default().push(role);
    }
    let mut v: Vec<(String, Vec<String>)> = per.into_iter().collect();
    v.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    v
}

fn latency_row(what: &str, samples: &[Option<Duration>]) -> String {
    let missing = samples.iter().filter(|s| s.is_none()).count();
    let mut got: Vec<Duration> = samples.iter().flatten().copied().collect();
    got.sort();
    let within = got
        .iter()
        .filter(|d| **d <= TTL + Duration::from_millis(100))
        .count();
    format!(
        "| {what} | {} | {} | {} | {} | {within} | {missing} |",
        got.len(),
        ms(pct(&got, 50.0)),
        ms(pct(&got, 99.0)),
        ms(got.last().copied())
    )
}

async fn run_cell(cell: Cell, cluster: bool, placement: bool) {
    eprintln!(
        "cell {} (cluster: {cluster}, placement: {placement})",
        cell.name
    );
    let servers = Servers::start(cluster).await;
    let bucket = format!("scale_{}", cell.name);
    let mut dep = testkit::instances::Deployment::new(&servers.url(), &bucket, &[], "");
    std::fs::write(
        &dep.config,
        config_yaml(&bucket, servers.replicas(), cell.roles, placement),
    )
    .unwrap_or_else(|e| panic!("write config: {e}"));
    let client = testkit::connect(&servers.url()).await;

    let t0 = Instant::now();
    dep.start("node-00").await;
    let observer = Observer::start(&client, &bucket).await;
    for i in 1..cell.instances {
        dep.start(&format!("node-{i:02}")).await;
    }
    let started = t0.elapsed();
    let all_held = observer
        .wait_held(cell.roles, Duration::from_secs(120))
        .await
        .map(|t| t.duration_since(t0));
    let at_all_held: Vec<usize> = by_load(&observer).iter().map(|(_, r)| r.len()).collect();
    // With placement the roles spread after the start: wait until every instance holds its
    // share (± 10 %) and nothing moved for two stability windows, at most `CONVERGE_LIMIT`.
    let converged = if placement && cell.instances > 1 {
        let share = cell.roles / cell.instances;
        let t = wait_spread(&observer, cell.instances, share, CONVERGE_LIMIT).await;
        let counts: Vec<usize> = by_load(&observer).iter().map(|(_, r)| r.len()).collect();
        Some((t.map(|t| t.duration_since(t0)), counts))
    } else {
        observer
            .wait_quiet(Duration::from_secs(3), Duration::from_secs(60))
            .await;
        None
    };

    // Steady state: every process's start-up work done too (each reads its role keys once:
    // 10,000 reads per instance of the 100 x 10,000 cell), which the holder changes do not
    // show — wait until the server takes no more than the session renewals and some slack.
    let settled = settle(&servers.nodes(), cell.instances).await;
    let mut pids: Vec<u32> = dep.instances.iter().map(|i| i.pid()).collect();
    pids.extend(servers.nodes().iter().filter_map(|s| s.pid()));
    let msgs_before = varz_msgs(&servers.nodes()).await;
    let window_start = Instant::now();
    let usage = cpu_and_rss(&pids, STEADY_WINDOW).await;
    let msgs_after = varz_msgs(&servers.nodes()).await;
    let secs = window_start.elapsed().as_secs_f64();
    let churn = observer.changes_since(window_start).len();

    println!(
        "\n### {} — {} instance(s), {} role(s), {}, placement {}\n",
        cell.name,
        cell.instances,
        cell.roles,
        if cluster {
            "3-node cluster (R3)"
        } else {
            "one server (R1)"
        },
        if placement { "on" } else { "off" }
    );
    println!(
        "All held {} ms after the first start ({} ms to start every process); holder changes in the {:.0} s steady window: {churn}; start-up writes and reads over {:.1} s after that.\n",
        ms(all_held),
        started.as_millis(),
        secs,
        settled.as_secs_f64()
    );
    if let Some((at, counts)) = &converged {
        match at {
            Some(at) => println!(
                "Spread converged {:.1} s after the first start (every instance within ± 10 % of \
                 its share, then no holder change for {} s); roles per instance: {counts:?} \
                 (when all were first held: {at_all_held:?}).\n",
                at.as_secs_f64(),
                QUIET_AFTER_SPREAD.as_secs()
            ),
            None => println!(
                "Spread NOT converged within {} s; roles per instance: {counts:?} (when all \
                 were first held: {at_all_held:?}).\n",
                CONVERGE_LIMIT.as_secs()
            ),
        }
    }
    let (inst, srv) = usage.split_at(dep.instances.len());
    let cpu: Vec<f64> = inst.iter().map(|u| u.0).collect();
    let rss: Vec<f64> = inst.iter().map(|u| u.1).collect();
    let stat = |v: &[f64]| {
        let max = v.iter().copied().fold(f64::NAN, f64::max);
        let min = v.iter().copied().fold(f64::NAN, f64::min);
        format!("{min:.2} / {max:.2}")
    };
    println!("| steady state | value |\n|---|---|");
    println!("| instance CPU % of a core (min / max) | {} |", stat(&cpu));
    println!("| instance RSS MiB (min / max) | {} |", stat(&rss));
    println!(
        "| nats-server CPU % (sum of nodes) | {:.2} |",
        srv.iter().map(|u| u.0).sum::<f64>()
    );
    println!(
        "| nats-server RSS MiB (sum of nodes) | {:.1} |",
        srv.iter().map(|u| u.1).sum::<f64>()
    );
    println!(
        "| server in msg/s | {:.0} |",
        (msgs_after.0 - msgs_before.0) as f64 / secs
    );
    println!(
        "| server out msg/s | {:.0} |",
        (msgs_after.1 - msgs_before.1) as f64 / secs
    );

    if cell.name == "herd" {
        herd(&mut dep, &observer).await;
    } else if cell.instances >= 2 {
        failovers(&dep, &observer).await;
    }
}

/// Waits (at most [`SETTLE_LIMIT`]) until the servers' incoming messages over 3 s are no more
/// than three times the session renewals of `instances` (one per heartbeat; on a cluster each
/// also costs its replication, counted as ≈ 8 messages in) plus 10/s per server; returns how
/// long it waited.
async fn settle(servers: &[&testkit::NatsServer], instances: usize) -> Duration {
    let start = Instant::now();
    let per_renewal = if servers.len() > 1 { 8.0 } else { 1.0 };
    let bound = 3.0 * instances as f64 / 0.75 * per_renewal + 10.0 * servers.len() as f64;
    while start.elapsed() < SETTLE_LIMIT {
        let before = varz_msgs(servers).await.0;
        let t = Instant::now();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let rate = (varz_msgs(servers).await.0 - before) as f64 / t.elapsed().as_secs_f64();
        if rate <= bound {
            break;
        }
    }
    start.elapsed()
}

/// Longest wait for the start-up traffic to end before the steady window.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// SIGKILL of the busiest instance, then SIGTERM of the next busiest.
async fn failovers(dep: &testkit::instances::Deployment, observer: &Observer) {
    println!("\n| event | roles | p50 ms | p99 ms | max ms | within TTL+100 ms | not re-held |");
    println!("|---|---|---|---|---|---|---|");
    let index = |id: &str| dep.instances.iter().position(|i| i.id == id);
    let load = by_load(observer);
    let mut killed = None;
    if let Some((victim, roles)) = load.first()
        && let Some(i) = index(victim)
    {
        killed = Some(victim.clone());
        let t = Instant::now();
        testkit::process::signal(dep.instances[i].pid(), testkit::process::SIGKILL);
        let got = observer.retaken(roles, victim, t, TTL * 5).await;
        println!("{}", latency_row(&format!("SIGKILL {victim}"), &got));
        // Protocol v2: the roles become vacant when the session's expiry marker is written;
        // the same re-held times counted from when the bench saw that marker.
        if let Some(expired) = observer.session_end(victim, t, TTL * 3).await {
            let offset = expired.duration_since(t);
            let after: Vec<Option<Duration>> = got
                .iter()
                .map(|d| d.map(|d| d.saturating_sub(offset)))
                .collect();
            println!(
                "{}",
                latency_row(
                    &format!(
                        "… after {victim}'s session expiry marker ({:.0} ms after the kill)",
                        offset.as_secs_f64() * 1000.0
                    ),
                    &after
                )
            );
        }
    }
    observer
        .wait_quiet(Duration::from_secs(2), Duration::from_secs(30))
        .await;
    // The busiest live instance (roles the killed one still shows were not re-held).
    let load: Vec<_> = by_load(observer)
        .into_iter()
        .filter(|(id, _)| Some(id) != killed.as_ref())
        .collect();
    if let Some((victim, roles)) = load.first()
        && load.len() >= 2
        && let Some(i) = index(victim)
    {
        let t = Instant::now();
        dep.terminate(i);
        let got = observer.retaken(roles, victim, t, TTL * 5).await;
        println!("{}", latency_row(&format!("SIGTERM {victim}"), &got));
        // Where the hand-over time goes: the holder's own releases (its delete markers as the
        // bench's watcher saw them), then the successors' claims.
        let released = observer.vacated(roles, t);
        println!(
            "{}",
            latency_row(&format!("… {victim}'s own release markers"), &released)
        );
    }
}

/// Five graceful vacancies of the one role among 100 candidates.
async fn herd(dep: &mut testkit::instances::Deployment, observer: &Observer) {
    let role = "shard-0000".to_owned();
    let mut handovers = Vec::new();
    let mut attempts = Vec::new();
    for _ in 0..5 {
        let Some(holder) = observer.holders().get(&role).cloned() else {
            break;
        };
        let Some(i) = dep.instances.iter().position(|x| x.id == holder) else {
            break;
        };
        let before = acquire_attempts(dep, Some(i)).await;
        let t = Instant::now();
        dep.terminate(i);
        let got = observer
            .retaken(std::slice::from_ref(&role), &holder, t, TTL * 5)
            .await;
        handovers.extend(got);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = acquire_attempts(dep, Some(i)).await;
        attempts.push(after - before);
    }
    println!("\n| herd (100 candidates, 1 role) | value |\n|---|---|");
    let mut h: Vec<Duration> = handovers.iter().flatten().copied().collect();
    h.sort();
    println!(
        "| graceful hand-over p50 / p99 ms | {} / {} |",
        ms(pct(&h, 50.0)),
        ms(pct(&h, 99.0))
    );
    let mean = attempts.iter().sum::<f64>() / attempts.len().max(1) as f64;
    println!("| acquire writes per vacancy (mean; each) | {mean:.1}; {attempts:?} |");
}

/// The sum of every live instance's acquire-attempt counter, leaving out instance `skip`.
async fn acquire_attempts(dep: &testkit::instances::Deployment, skip: Option<usize>) -> f64 {
    let mut sum = 0.0;
    for (n, inst) in dep.instances.iter().enumerate() {
        if Some(n) == skip {
            continue;
        }
        if let Ok((200, body)) = testkit::http::get(inst.port, "/metrics").await {
            sum += counter_sum(&body, "nats_roles_election_acquire_attempts_total");
        }
    }
    sum
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    build_binary();
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let cluster = env_flag("SCALE_BENCH_CLUSTER");
    let placement = env_flag("SCALE_BENCH_PLACEMENT");
    println!("## Scale (release build, TTL 3 s, heartbeat 750 ms)");
    let cells: Vec<Cell> = if wanted.is_empty() {
        CELLS.to_vec()
    } else {
        let mut cells = Vec::new();
        for name in &wanted {
            match CELLS
                .iter()
                .find(|c| c.name == name)
                .copied()
                .or_else(|| parse_cell(name))
            {
                Some(cell) => cells.push(cell),
                None => {
                    eprintln!(
                        "unknown cell {name:?}: one of 1x1000, 10x1000, 3x60, herd, or KxR \
                         (K instances of 1 to 100, R roles of 1 to 10000)"
                    );
                    std::process::exit(2);
                }
            }
        }
        cells
    };
    for cell in cells {
        run_cell(cell, cluster, placement).await;
    }
}

/// A cell named `KxR`: K instances with R roles each (for sizing: `1x1 1x100 1x1000`).
fn parse_cell(name: &str) -> Option<Cell> {
    let (k, r) = name.split_once('x')?;
    let instances: usize = k.parse().ok().filter(|k| (1..=100).contains(k))?;
    let roles: usize = r.parse().ok().filter(|r| (1..=10_000).contains(r))?;
    Some(Cell {
        name: Box::leak(name.to_owned().into_boxed_str()),
        instances,
        roles,
    })
}
