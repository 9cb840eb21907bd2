//! Benchmark of `exec` roles (docs/exec.md) with real `nats-roles run` processes and a real
//! nats-server: how fast the next holder's child starts after a graceful hand-over, and by how
//! much a stopped holder's child is dead before the next holder is promoted.
//!
//! ```text
//! cargo build --release --bin nats-roles
//! cargo run --release --example exec_bench                 # 2 series × 20 trials, ≈ 2 min
//! cargo run --release --example exec_bench -- --trials 50
//! ```
//!
//! One role `bench`, TTL 2 s, heartbeat 500 ms; its command is a shell loop that exits on
//! SIGTERM. Every process records its election history (`--history`); all figures come from
//! those records (one `CLOCK_MONOTONIC` for every process of the host):
//!
//! * **hand-over** (SIGTERM of the holder): `child stop → next child start` is the time from the
//!   holder's child being gone (its watchdog's `child_stop`) to the next holder's child running
//!   (`child_start`); `signal → next child start` adds the holder's stop.
//! * **stopped holder** (SIGSTOP): `child killed → next promote` is the safety margin, the time
//!   from the watchdog's kill of the stopped holder's child (`child_stop`, `killed: deadline`)
//!   to the next holder's `promote` — it must be positive in every trial; `signal → next child
//!   start` is the fail-over.
//!
//! Each trial starts one fresh candidate that follows the holder; the candidate is the next
//! trial's holder. One warm-up trial per series is not counted.

use std::time::Duration;

use testkit::bench::{last_record, percentile_row, until};
use testkit::instances::Deployment;
use testkit::process::{SIGKILL, SIGSTOP, SIGTERM, signal};

const CHILD: &str = "trap 'exit 0' TERM; while :; do sleep 0.05; done";

#[derive(Default)]
struct Series {
    /// Graceful: child stop → next child start (ms).
    gap: Vec<f64>,
    /// Signal → next child start (ms).
    total: Vec<f64>,
    /// Stopped holder: child killed → next promote (ms; positive = safe).
    margin: Vec<f64>,
    /// Stopped holder: how the child ended.
    killed_at_deadline: usize,
}

fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

async fn series(server: &testkit::NatsServer, stop: bool, trials: usize) -> Series {
    let bucket = format!("exec-bench-{}", if stop { "stop" } else { "handover" });
    let mut d = Deployment::new(&server.url(), &bucket, &[], "");
    let yaml = format!(
        "bucket:\n  name: {bucket}\n  replicas: 1\n  auto_create: true\n\
         timing:\n  ttl: 2s\n  heartbeat: 500ms\nhttp:\n  enabled: true\n\
         roles:\n  - name: bench\n    exec:\n      command: [sh, -c, \"{CHILD}\"]\n"
    );
    std::fs::write(&d.config, yaml).expect("write config");
    d.arg("--history");
    d.arg("{dir}/{id}.jsonl");
    let dir = d.dir().to_path_buf();
    let file = |id: &str| dir.join(format!("{id}.jsonl"));
    let mut s = Series::default();
    let mut holder = d.start("n0").await;
    until(Duration::from_secs(10), "the first child", || {
        last_record(&file("n0"), "child_start")
    })
    .await;
    for trial in 0..=trials {
        let h_id = d.instances[holder].id.clone();
        let c_id = format!("n{}", trial + 1);
        let cand = d.start(&c_id).await;
        let follow = format!("holder role=bench holder={h_id}");
        until(Duration::from_secs(10), "the candidate follows", || {
            d.instances[cand]
                .stdout()
                .iter()
                .any(|l| l.starts_with(&follow))
                .then_some(())
        })
        .await;
        let t0 = nats_roles::tooling::history::mono_now_ns();
        signal(
            d.instances[holder].pid(),
            if stop { SIGSTOP } else { SIGTERM },
        );
        let (start_t, _) = until(Duration::from_secs(15), "the next child", || {
            last_record(&file(&c_id), "child_start")
        })
        .await;
        let (stop_t, stop_rec) = until(Duration::from_secs(5), "the holder's child_stop", || {
            last_record(&file(&h_id), "child_stop")
        })
        .await;
        // The recorder flushes every 50 ms; the watchdog writes at once.
        let (promote_t, _) = until(Duration::from_secs(5), "the candidate's promote", || {
            last_record(&file(&c_id), "promote")
        })
        .await;
        if trial > 0 {
            s.total.push(ms(i128::from(start_t) - i128::from(t0)));
            if stop {
                s.margin
                    .push(ms(i128::from(promote_t) - i128::from(stop_t)));
                s.killed_at_deadline += usize::from(stop_rec["killed"] == "deadline");
            } else {
                s.gap.push(ms(i128::from(start_t) - i128::from(stop_t)));
            }
        }
        if stop {
            signal(d.instances[holder].pid(), SIGKILL);
        }
        let _ = d.wait_exit(holder, Duration::from_secs(10)).await;
        holder = cand;
        eprintln!(
            "{} trial {trial}/{trials}",
            if stop { "stopped holder" } else { "hand-over" }
        );
    }
    d.terminate(holder);
    let _ = d.wait_exit(holder, Duration::from_secs(10)).await;
    s
}

#[tokio::main]
async fn main() {
    let trials = std::env::args()
        .skip_while(|a| a != "--trials")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let server = testkit::NatsServer::start().await;
    let handover = series(&server, false, trials).await;
    let stopped = series(&server, true, trials).await;
    println!("| series, ms | n | min | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "{}",
        percentile_row("hand-over: child stop → next child start", &handover.gap, 1)
    );
    println!(
        "{}",
        percentile_row("hand-over: SIGTERM → next child start", &handover.total, 1)
    );
    println!(
        "{}",
        percentile_row(
            "stopped holder: child killed → next promote",
            &stopped.margin,
            1
        )
    );
    println!(
        "{}",
        percentile_row(
            "stopped holder: SIGSTOP → next child start",
            &stopped.total,
            1
        )
    );
    println!(
        "\nstopped holder: {} of {} children killed at the deadline; smallest margin {:.1} ms",
        stopped.killed_at_deadline,
        stopped.margin.len(),
        stopped.margin.iter().copied().fold(f64::INFINITY, f64::min)
    );
    assert!(
        stopped.margin.iter().all(|m| *m > 0.0),
        "a stopped holder's child outlived the next promotion"
    );
}
