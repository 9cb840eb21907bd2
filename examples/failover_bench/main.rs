//! Fail-over benchmark of the `nats-roles` binary: how long a role is without a holder when
//! its holder process stops gracefully (SIGTERM, "hand-over") or dies (SIGKILL, "crash").
//!
//! ```text
//! cargo run --release --example failover_bench                  # 4 series × 50 trials
//! cargo run --release --example failover_bench -- --trials 20 --ttl-secs 1 --mode handover
//! ```
//!
//! The orchestrator starts its own nats-server (the test kit, `crates/testkit`, loopback,
//! one server, file store) and, per series (TTL × mode), a fresh bucket with one role `bench`.
//! The release binary `target/release/nats-roles` is built first (`--no-build` or
//! `NATS_ROLES_BIN` skip that).
//!
//! One trial:
//! 1. the holder H (an OS process running `nats-roles run`) holds the role;
//! 2. a fresh candidate process C starts and the orchestrator waits until C printed
//!    `holder role=bench holder=H` (C follows H);
//! 3. the orchestrator waits for H's next renewal (seen through its own KV watcher), then a
//!    uniformly random delay in `0..heartbeat`, so the signal lands at a random point of the
//!    heartbeat period;
//! 4. `t0` = monotonic now, then `kill(H, SIGTERM)` (hand-over) or `kill(H, SIGKILL)` (crash);
//! 5. the sample is the time until the orchestrator reads C's line `promoted role=bench`.
//!    Every child has a dedicated reader task that timestamps each stdout line as soon as it
//!    is read, so waiting for the line adds no latency.
//!
//! C, now the holder, is H of the next trial, so each trial starts exactly one process and
//! always has two separate processes (a holder that held the role before `t0`, and a
//! candidate). Two warm-up trials per series are not counted.
//!
//! Per trial the orchestrator also timestamps the KV changes it sees (delete marker, expiry
//! marker, the new term's put) and the holder's `demoted` line, which splits the total into
//! phases (printed below the main table).
//!
//! With `--roles N` every process takes part in N roles (`bench-00`..) and a sample is the time
//! until the candidate printed `promoted` for the last of them. Results and their analysis:
//! `docs/benchmarks.md`.

mod kv_log;
mod process;
mod report;
mod trial;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use tokio::time::Instant;

use crate::report::{report, write_csv};
use crate::trial::{Bench, Mode};

/// Trials per series that are run but not counted.
pub(crate) const WARMUP_TRIALS: usize = 2;

// ---------------------------------------------------------------------------------------------
// The measured data (defined here so that every module sees the fields)
// ---------------------------------------------------------------------------------------------

/// One measured trial. Durations are from `t0` (the signal) unless noted.
#[derive(Debug, Clone, Default)]
struct Sample {
    /// Until the candidate's `promoted` line was read: the measured value.
    total: Duration,
    /// Time since the holder's last renewal was seen, at `t0` (first role).
    since_renew: Duration,
    /// Crash: total − (TTL − time since the last renewal), in ms, the largest over the roles:
    /// what the expiry took beyond the lease itself.
    detection: Option<f64>,
    /// Until the holder's `demoted ... reason=shutdown` line was read (hand-over).
    demoted_line: Option<Duration>,
    /// Until the delete (hand-over) or expiry (crash) marker was seen by the orchestrator.
    marker: Option<Duration>,
    /// Until the new term's put was seen by the orchestrator.
    new_put: Option<Duration>,
    /// Hand-over: the holder's exit status was 0.
    clean_exit: bool,
}

struct Series {
    mode: Mode,
    ttl: Duration,
    roles: usize,
    samples: Vec<Sample>,
    errors: Vec<String>,
    /// Candidates that never printed the holder line they follow (start-up event race).
    missing_holder_lines: usize,
    /// Trials in which the candidate was demoted again right after its promotion.
    flaps: usize,
    /// Crash: roles taken over, and how many of them without an expiry marker (backstop).
    takeovers: usize,
    backstop_takeovers: usize,
    wall: Duration,
}

impl Series {
    fn label(&self) -> String {
        let roles = if self.roles == 1 {
            String::new()
        } else {
            format!(", {} roles", self.roles)
        };
        format!("{} TTL {}s{roles}", self.mode.name(), self.ttl.as_secs())
    }
}

#[derive(Parser, Debug)]
#[command(about = "Hand-over and crash fail-over latency of nats-roles processes")]
struct Args {
    /// Measured trials per series (plus 2 warm-up trials).
    #[arg(long, default_value_t = 50)]
    trials: usize,
    /// Lease TTLs in whole seconds, comma-separated (heartbeat = TTL / 4).
    #[arg(long, value_delimiter = ',', default_values_t = [1u64, 3])]
    ttl_secs: Vec<u64>,
    /// Roles per process (`bench`, or `bench-00`.. when more than one). With several roles a
    /// sample is the time until the candidate printed `promoted` for the last of them.
    #[arg(long, default_value_t = 1)]
    roles: usize,
    /// Which series to run.
    #[arg(long, value_enum, default_value_t = ModeArg::All)]
    mode: ModeArg,
    /// The nats-roles binary (default: NATS_ROLES_BIN, else target/release/nats-roles,
    /// built with `cargo build --release --bin nats-roles` first).
    #[arg(long, env = "NATS_ROLES_BIN")]
    bin: Option<PathBuf>,
    /// Do not run `cargo build --release --bin nats-roles`.
    #[arg(long)]
    no_build: bool,
    /// Also write every sample as CSV to this file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// `timing.campaign_jitter` of the processes (humantime, e.g. `1ms`, `0s`).
    #[arg(long, default_value = "0s")]
    campaign_jitter: String,
    /// Keep the configs and the processes' stderr logs (their directory is printed).
    #[arg(long)]
    keep_logs: bool,
    /// Run holder and candidates at a far site: a leaf node (its own JetStream domain)
    /// linked to the hub holding the bucket through a proxy adding this round trip, e.g.
    /// `50ms` (docs/operations.md, "Across sites").
    #[arg(long, value_parser = humantime::parse_duration)]
    far_site_rtt: Option<Duration>,
}

/// The servers of a run (kept alive until the end).
enum Servers {
    /// One server: processes and orchestrator on it.
    One(Box<testkit::NatsServer>),
    /// A hub and leaf sites: processes at site A, the orchestrator at the hub.
    FarSite(Box<testkit::sites::Sites>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    Handover,
    Crash,
    All,
}

fn command_output(cmd: &Path, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            text.trim().to_owned()
        })
        .unwrap_or_else(|e| format!("({e})"))
}

fn environment(bin: &Path) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    let nproc = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    format!(
        "- CPUs (nproc): {nproc} ({cpu})\n- kernel: Linux {kernel}\n- {} (`{}`), one server, file store, \
         loopback 127.0.0.1\n- {} (`{}`, release build)\n",
        command_output(&testkit::nats_server_bin(), &["--version"]),
        testkit::nats_server_bin().display(),
        command_output(bin, &["--version"]),
        bin.display(),
    )
}

/// `/proc/loadavg`'s 1, 5 and 15 minute averages (other work on the machine skews results).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn find_binary(args: &Args) -> Result<PathBuf, String> {
    if let Some(bin) = &args.bin {
        return if bin.exists() {
            Ok(bin.clone())
        } else {
            Err(format!("{} does not exist", bin.display()))
        };
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join("target/release/nats-roles");
    if !args.no_build {
        eprintln!("building: cargo build --release --bin nats-roles");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "--release", "--bin", "nats-roles"])
            .current_dir(root)
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !status.success() {
            return Err(format!(
                "cargo build --release --bin nats-roles failed: {status}"
            ));
        }
    }
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!(
            "{} is missing; build it with `cargo build --release --bin nats-roles`",
            bin.display()
        ))
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let bin = match find_binary(&args) {
        Ok(bin) => bin,
        Err(e) => {
            eprintln!("failover_bench: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let modes: Vec<Mode> = match args.mode {
        ModeArg::Handover => vec![Mode::Handover],
        ModeArg::Crash => vec![Mode::Crash],
        ModeArg::All => vec![Mode::Handover, Mode::Crash],
    };
    if args.ttl_secs.contains(&0) || args.roles == 0 || args.roles > 100 {
        eprintln!("failover_bench: --ttl-secs must be >= 1 and --roles 1..=100");
        return std::process::ExitCode::from(2);
    }
    let roles: Vec<String> = if args.roles == 1 {
        vec!["bench".to_owned()]
    } else {
        (0..args.roles).map(|i| format!("bench-{i:02}")).collect()
    };

    let env = environment(&bin);
    let load_start = loadavg();
    eprintln!("{env}");
    // Far site: the orchestrator watches at the hub, the processes run at site A's leaf.
    let setup = match args.far_site_rtt {
        Some(rtt) => {
            let sites = testkit::sites::Sites::start().await;
            if !rtt.is_zero() {
                sites.link_a.set_mode(testkit::proxy::Mode::Delay(rtt / 2));
            }
            Servers::FarSite(Box::new(sites))
        }
        None => Servers::One(Box::new(testkit::NatsServer::start().await)),
    };
    let (watch_url, process_url, domain) = match &setup {
        Servers::One(server) => (server.url(), server.url(), None),
        Servers::FarSite(sites) => (
            sites.hub.url(),
            sites.site_a.url(),
            Some(testkit::sites::HUB_DOMAIN.to_owned()),
        ),
    };
    let client = testkit::connect(&watch_url).await;
    let dir = tempfile::Builder::new()
        .prefix("failover-bench-")
        .tempdir()
        .expect("create a temporary directory");
    let bench = Bench {
        bin,
        roles,
        jitter: args.campaign_jitter.clone(),
        url: process_url,
        dir,
        client,
        domain,
    };

    let started = Instant::now();
    let mut all = Vec::new();
    for &ttl in &args.ttl_secs {
        for &mode in &modes {
            eprintln!(
                "series: {} TTL {ttl}s, {} trials (+{WARMUP_TRIALS} warm-up)",
                mode.name(),
                args.trials
            );
            all.push(bench.series(mode, ttl, args.trials).await);
        }
    }

    println!(
        "## Environment\n\n{env}- load average at start: {load_start}; at the end: {}\n",
        loadavg()
    );
    if let Some(rtt) = args.far_site_rtt {
        println!(
            "Far site: the processes run at a leaf node with its own JetStream domain, linked to \
             the hub holding the bucket (domain `hub`) through a proxy adding {rtt:?} of round \
             trip.\n"
        );
    }
    println!(
        "Settings: heartbeat = TTL/4, campaign_jitter {}, {} role(s) per process, {} measured \
         trials per series (+{WARMUP_TRIALS} warm-up), signal at a uniformly random point of the heartbeat period; \
         total run time {:.0} s.\n",
        args.campaign_jitter,
        args.roles,
        args.trials,
        started.elapsed().as_secs_f64()
    );
    println!("{}", report(&all));
    if args.keep_logs {
        let kept = bench.dir.keep();
        eprintln!("configs and stderr logs kept in {}", kept.display());
    }
    if let Some(path) = &args.csv {
        match write_csv(path, &all) {
            Ok(()) => eprintln!("samples written to {}", path.display()),
            Err(e) => eprintln!("cannot write {}: {e}", path.display()),
        }
    }
    if all
        .iter()
        .any(|s| !s.errors.is_empty() || s.samples.len() < args.trials)
    {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}
