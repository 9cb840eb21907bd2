//! Benchmark across sites (docs/operations.md, "Across sites"): hand-over and crash fail-over
//! of instances at a far site — a leaf node with its own JetStream domain, linked to the hub
//! that holds the bucket through a TCP proxy adding a WAN delay — with real `nats-roles run`
//! processes and real nats-servers on loopback.
//!
//! ```text
//! cargo build --release --bin nats-roles --example sites_bench
//! target/release/examples/sites_bench --trials 10          # 3 delays × 2 modes, ≈ 3 min
//! ```
//!
//! Per series (added round trip 0, 50 or 150 ms between site A and the hub; TTL 2 s, heartbeat
//! 500 ms, operation timeout 1 s): the holder H and a fresh candidate C both run at site A,
//! C follows H; `t0`, then SIGTERM (hand-over) or SIGKILL (crash) of H; the sample is C's
//! `promote` record in its election history minus `t0` (one `CLOCK_MONOTONIC` on the host). C
//! is the next trial's holder. One warm-up trial per series is not counted.

use std::time::Duration;

use testkit::bench::{last_record, percentile_row, until};
use testkit::instances::Deployment;
use testkit::process::{SIGKILL, SIGTERM, signal};
use testkit::proxy::Mode;
use testkit::sites::{HUB_DOMAIN, Sites};

async fn series(sites: &Sites, one_way: Duration, crash: bool, trials: usize) -> Vec<f64> {
    sites.link_a.set_mode(if one_way.is_zero() {
        Mode::Pass
    } else {
        Mode::Delay(one_way)
    });
    let bucket = format!(
        "sites-bench-{}-{}",
        one_way.as_millis(),
        if crash { "crash" } else { "handover" }
    );
    let mut d = Deployment::new(&sites.hub.url(), &bucket, &[], "");
    let yaml = format!(
        "bucket:\n  name: {bucket}\n  replicas: 1\n  auto_create: true\n  domain: {HUB_DOMAIN}\n\
         timing:\n  ttl: 2s\n  heartbeat: 500ms\n  operation_timeout: 1s\n  disconnect_grace: 2s\n\
         http:\n  enabled: true\nroles:\n  - name: bench\n"
    );
    std::fs::write(&d.config, yaml).expect("write config");
    d.arg("--history");
    d.arg("{dir}/{id}.jsonl");
    let dir = d.dir().to_path_buf();
    let file = |id: &str| dir.join(format!("{id}.jsonl"));
    let far = sites.site_a.url();
    let mut holder = d.start_on("n0", &far).await;
    until(Duration::from_secs(15), "the first holder", || {
        last_record(&file("n0"), "promote")
    })
    .await;
    let mut samples = Vec::new();
    for trial in 0..=trials {
        let h_id = d.instances[holder].id.clone();
        let c_id = format!("n{}", trial + 1);
        let cand = d.start_on(&c_id, &far).await;
        let follow = format!("holder role=bench holder={h_id}");
        until(Duration::from_secs(15), "the candidate follows", || {
            d.instances[cand]
                .stdout()
                .iter()
                .any(|l| l.starts_with(&follow))
                .then_some(())
        })
        .await;
        // A random point of the heartbeat period.
        let jitter = Duration::from_millis(u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 2);
        tokio::time::sleep(jitter).await;
        let t0 = nats_roles::tooling::history::mono_now_ns();
        signal(
            d.instances[holder].pid(),
            if crash { SIGKILL } else { SIGTERM },
        );
        let promoted = until(Duration::from_secs(15), "the candidate's promote", || {
            last_record(&file(&c_id), "promote")
                .map(|(t, _)| t)
                .filter(|t| *t > t0)
        })
        .await;
        if trial > 0 {
            samples.push((promoted - t0) as f64 / 1e6);
        }
        let _ = d.wait_exit(holder, Duration::from_secs(10)).await;
        holder = cand;
        eprintln!(
            "rtt +{} ms {} trial {trial}/{trials}",
            one_way.as_millis() * 2,
            if crash { "crash" } else { "hand-over" }
        );
    }
    d.terminate(holder);
    let _ = d.wait_exit(holder, Duration::from_secs(10)).await;
    samples
}

#[tokio::main]
async fn main() {
    let trials = std::env::args()
        .skip_while(|a| a != "--trials")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    let sites = Sites::start().await;
    let mut rows = Vec::new();
    for one_way in [0, 25, 75].map(Duration::from_millis) {
        for crash in [false, true] {
            let samples = series(&sites, one_way, crash, trials).await;
            rows.push(percentile_row(
                &format!(
                    "{}, added round trip {} ms",
                    if crash {
                        "crash fail-over"
                    } else {
                        "hand-over"
                    },
                    one_way.as_millis() * 2
                ),
                &samples,
                0,
            ));
        }
    }
    println!("| far site (leaf with its own domain), ms | n | min | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
}
