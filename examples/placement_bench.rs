//! Placement benchmark of the `nats-roles` binary (docs/placement.md): convergence time and
//! move counts when instances join, leave gracefully and crash, and the length of the
//! vacancies that voluntary hand-overs and crash fail-overs leave.
//!
//! ```text
//! cargo run --release --example placement_bench                 # 5 repeats, ≈ 4 min
//! cargo run --release --example placement_bench -- --repeats 2
//! ```
//!
//! Each repeat runs the two scenarios of `tests/processes/placement.rs` (shared code in
//! `testkit::placement`) with the release binary against its own nats-server: 60 roles on
//! 3 → 5 → 4 → 3 instances (TTL 2 s, stability window 1 s, leave delay 2 s, claim grace
//! 300 ms), then a priority takeover of 3 of 12 roles. The report (Markdown tables with
//! nearest-rank p50/p99 over every sample of every repeat) goes to stdout, progress to stderr.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "Placement convergence and hand-over latency of nats-roles processes")]
struct Args {
    /// How many times to run both scenarios.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// The nats-roles binary (default: NATS_ROLES_BIN, else target/release/nats-roles, built
    /// with `cargo build --release --bin nats-roles` first).
    #[arg(long, env = "NATS_ROLES_BIN")]
    bin: Option<PathBuf>,
    /// Do not run `cargo build --release --bin nats-roles`.
    #[arg(long)]
    no_build: bool,
    /// Only the operator scenarios of issue 14 (zones, capacity, rolling upgrade, storm),
    /// once each; skips the spreading and priority repeats.
    #[arg(long)]
    operator_only: bool,
    /// Skip the operator scenarios.
    #[arg(long)]
    no_operator: bool,
    /// Run only these operator scenarios (`zones`, `capacity`, `upgrade`, `storm`;
    /// repeatable). Default: all four.
    #[arg(long = "scenario", value_name = "NAME")]
    scenarios: Vec<String>,
}

/// Prints one operator scenario's steps as a Markdown table.
fn operator_table(title: &str, steps: &[testkit::placement::OperatorStep]) {
    println!("\n### {title}\n");
    println!(
        "| step | moves (minimum) | converged ms | vacancy per move p50 / p99 ms | plan predicted | notes |"
    );
    println!("|---|---|---|---|---|---|");
    for s in steps {
        let mut v = s.vacancies.clone();
        v.sort();
        println!(
            "| {} | {} ({}) | {} | {} / {} | {} | {} |",
            s.what,
            s.moves,
            s.minimum,
            ms(s.converged),
            ms(pct(&v, 50.0)),
            ms(pct(&v, 99.0)),
            match s.predicted {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            },
            s.note
        );
    }
}

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn row(name: &str, mut samples: Vec<Duration>) -> String {
    samples.sort();
    format!(
        "| {name} | {} | {} | {} | {} |",
        samples.len(),
        ms(pct(&samples, 50.0)),
        ms(pct(&samples, 99.0)),
        ms(samples.last().copied().unwrap_or_default())
    )
}

fn binary(args: &Args) -> PathBuf {
    if let Some(bin) = &args.bin {
        return bin.clone();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if !args.no_build {
        eprintln!("building: cargo build --release --bin nats-roles");
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--release", "--bin", "nats-roles"])
            .current_dir(&root)
            .status();
        match status {
            Ok(s) if s.success() => {}
            other => {
                eprintln!("cargo build --release --bin nats-roles failed: {other:?}");
                std::process::exit(1);
            }
        }
    }
    root.join("target/release/nats-roles")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let bin = binary(&args);
    if !bin.exists() {
        eprintln!(
            "{} is missing; build it with `cargo build --release --bin nats-roles`",
            bin.display()
        );
        std::process::exit(1);
    }
    if !args.no_operator {
        println!("## Placement: operator scenarios (release build)\n");
        println!(
            "TTL 2 s (heartbeat 500 ms), stability window 1 s, leave delay 2 s, claim grace 300 ms; \
             \"plan predicted\": `nats-roles plan` run before the change gave exactly the holders after it.\n"
        );
        let server = testkit::NatsServer::start().await;
        let url = server.url();
        let on = |name: &str| args.scenarios.is_empty() || args.scenarios.iter().any(|s| s == name);
        if on("zones") {
            eprintln!("zones");
            operator_table(
                "Zones",
                &testkit::placement::zone_scenario(&bin, &url).await,
            );
        }
        if on("capacity") {
            eprintln!("capacity");
            operator_table(
                "Role cost and capacity",
                &testkit::placement::capacity_scenario(&bin, &url).await,
            );
        }
        if on("upgrade") {
            eprintln!("rolling upgrade");
            operator_table(
                "Rolling upgrade",
                &testkit::placement::rolling_upgrade_scenario(&bin, &url).await,
            );
        }
        if on("storm") {
            eprintln!("storm");
            operator_table(
                "Storm breaker",
                &testkit::placement::storm_scenario(&bin, &url).await,
            );
        }
        println!();
    }
    if args.operator_only {
        return;
    }
    let mut converge: std::collections::BTreeMap<&'static str, Vec<Duration>> = Default::default();
    let mut moves: std::collections::BTreeMap<&'static str, Vec<(usize, usize)>> =
        Default::default();
    let (mut voluntary, mut crash_gap, mut crash_all, mut churn) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut prio_first, mut prio_all, mut prio_back, mut prio_gaps) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut prio_exact = 0;
    for i in 0..args.repeats {
        eprintln!("repeat {}/{}", i + 1, args.repeats);
        let server = testkit::NatsServer::start().await;
        let r =
            testkit::placement::spread_scenario(&bin, &server.url(), testkit::placement::TTL * 10)
                .await;
        for s in &r.steps {
            converge.entry(s.what).or_default().push(s.converged);
            moves.entry(s.what).or_default().push((s.moves, s.minimum));
        }
        voluntary.extend(r.voluntary_gaps.iter().map(|g| g.1));
        crash_gap.extend(r.crash_gaps.iter().map(|g| g.2));
        crash_all.push(r.crash_takeover);
        churn.push(r.steady_churn);
        let p = testkit::placement::priority_scenario(&bin, &server.url(), false).await;
        prio_first.push(p.first_move);
        prio_all.push(p.all_moved);
        prio_back.push(p.back_after);
        prio_gaps.extend(p.gaps_in.iter().chain(&p.gaps_back).map(|g| g.2));
        if p.moved_in == p.wanted && p.moved_back == p.wanted {
            prio_exact += 1;
        }
    }

    println!("## Placement ({} repeats, release build)\n", args.repeats);
    println!(
        "60 roles, TTL 2 s (heartbeat 500 ms), stability window 1 s, leave delay 2 s, claim grace 300 ms.\n"
    );
    println!("| change | moves per repeat (minimum) | convergence p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|");
    for (what, c) in &converge {
        let mut c = c.clone();
        c.sort();
        let m: Vec<String> = moves[what]
            .iter()
            .map(|(m, min)| format!("{m} ({min})"))
            .collect();
        println!(
            "| {what} | {} | {} | {} | {} |",
            m.join(", "),
            ms(pct(&c, 50.0)),
            ms(pct(&c, 99.0)),
            ms(c.last().copied().unwrap_or_default())
        );
    }
    println!("\n| vacancy | samples | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|");
    println!(
        "{}",
        row("voluntary hand-over (delete marker → next put)", voluntary)
    );
    println!("{}", row("crash (expiry marker → next put)", crash_gap));
    println!(
        "{}",
        row("crash (SIGKILL → last role taken over)", crash_all)
    );
    println!(
        "\nSteady state (10 × TTL after convergence): ownership changes per repeat {churn:?}.\n"
    );
    println!("Priority takeover (12 roles on 3 instances; node-p prefers 3):\n");
    println!("| measure | samples | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|");
    println!("{}", row("node-p start → first move", prio_first));
    println!("{}", row("node-p start → holds all 3", prio_all));
    println!("{}", row("node-p SIGTERM → last move back", prio_back));
    println!("{}", row("vacancy per hand-over (in and back)", prio_gaps));
    println!(
        "\nExactly the preferred roles moved (in and back) in {prio_exact} of {} repeats.",
        args.repeats
    );
}
