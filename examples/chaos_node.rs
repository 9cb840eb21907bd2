//! The workload node of the chaos suite: one process embedding a [`RoleManager`] that records
//! its history (see `docs/reliability.md`) and, while holding a role, acts and writes fenced
//! role data every `--fenced-interval-ms`.
//!
//! ```sh
//! cargo run --example chaos_node -- --id n1 --nats 127.0.0.1:4222 --roles 3 --history /tmp/h
//! ```
//!
//! It prints `ready` once the manager runs, then `promoted role=… term=…` /
//! `demoted role=… term=… reason=…` lines. SIGTERM or SIGINT shut it down gracefully (every
//! held role released, `stop` recorded, exit 0); SIGKILL and SIGSTOP are what the chaos
//! harness uses to break it. Built with `--features negative-controls` it accepts
//! `--negative-control MODE` (test-only broken modes the checker must flag).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Parser;
use nats_roles::tooling::history::HistoryRecorder;
use nats_roles::{
    Demotion, FnCallbacks, InstanceId, Leadership, RoleEvent, RoleManager, RoleName, RoleSpec,
    Timing,
};

#[derive(Parser, Debug)]
#[command(about = "Chaos-suite workload node: a RoleManager recording its history")]
struct Args {
    /// Instance id (also the history file name).
    #[arg(long)]
    id: String,
    /// NATS server URL; repeat for several.
    #[arg(long = "nats", default_value = "127.0.0.1:4222")]
    nats: Vec<String>,
    /// The KV bucket (created with `--replicas` if missing).
    #[arg(long, default_value = "chaos")]
    bucket: String,
    /// Replicas of the bucket when it is created.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// Take part in roles r0..r{N-1} (ignored when --role is given).
    #[arg(long, default_value_t = 1)]
    roles: usize,
    /// Take part in this role; repeat for several.
    #[arg(long = "role")]
    role: Vec<String>,
    /// Lease TTL in milliseconds (whole seconds are sent to the server, rounded up).
    #[arg(long, default_value_t = 2000)]
    ttl_ms: u64,
    /// Renewal period in milliseconds (default TTL / 4).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// Deadline margin (fraction of the TTL kept in reserve).
    #[arg(long, default_value_t = 0.1)]
    margin: f64,
    /// Longest wait for one KV operation, in milliseconds (default TTL / 4).
    #[arg(long)]
    operation_timeout_ms: Option<u64>,
    /// Largest random delay before contending for a vacancy, in milliseconds.
    #[arg(long, default_value_t = 0)]
    campaign_jitter_ms: u64,
    /// Directory of the history (`<dir>/<id>.jsonl`, appended to).
    #[arg(long)]
    history: PathBuf,
    /// Period of the leader's act + fenced write, in milliseconds.
    #[arg(long, default_value_t = 100)]
    fenced_interval_ms: u64,
    /// Test-only broken mode: plain-put, drop-ttl, no-local-deadline, skip-demote.
    #[cfg(feature = "negative-controls")]
    #[arg(long)]
    negative_control: Option<nats_roles::testing::NegativeControl>,
}

fn line(s: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{s}");
    let _ = out.flush();
}

/// The leader's work: act (recorded) and write fenced role data every `interval` while the
/// term is valid. Runs to the end of the term on its own task, so writes in flight complete
/// and are recorded.
fn work(l: Leadership, recorder: HistoryRecorder, ids: Arc<AtomicU64>, interval: Duration) {
    tokio::spawn(async move {
        loop {
            let id = ids.fetch_add(1, Ordering::Relaxed) + 1;
            if !recorder.act(&l, id) {
                return;
            }
            let value = format!("{id} {}", l.term());
            let _ = l.fenced_put("w", value).await;
            tokio::select! {
                () = l.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
        }
    });
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let id = InstanceId::new(args.id.clone())?;
    let roles: Vec<RoleName> = if args.role.is_empty() {
        (0..args.roles)
            .map(|i| RoleName::new(format!("r{i}")))
            .collect::<Result<_, _>>()?
    } else {
        args.role
            .iter()
            .map(|r| RoleName::new(r.clone()))
            .collect::<Result<_, _>>()?
    };
    std::fs::create_dir_all(&args.history)?;
    let recorder = HistoryRecorder::in_dir(&args.history, &id)?;
    recorder.start(&roles);

    let ttl = Duration::from_millis(args.ttl_ms);
    let timing = Timing {
        ttl,
        heartbeat: Duration::from_millis(args.heartbeat_ms.unwrap_or(args.ttl_ms / 4)),
        deadline_margin: args.margin,
        operation_timeout: Duration::from_millis(
            args.operation_timeout_ms.unwrap_or(args.ttl_ms / 4),
        ),
        disconnect_grace: ttl.mul_f64(0.7),
        campaign_jitter: Duration::from_millis(args.campaign_jitter_ms),
    };
    let client = async_nats::ConnectOptions::new()
        .name(format!("chaos-node/{id}"))
        .retry_on_initial_connect()
        .reconnect_delay_callback(|attempts| {
            Duration::from_millis(50 * u64::try_from(attempts.min(10)).unwrap_or(10))
        })
        .connect(args.nats.as_slice())
        .await?;

    let ids = Arc::new(AtomicU64::new(0));
    let interval = Duration::from_millis(args.fenced_interval_ms);
    let mut builder = RoleManager::builder(client, id.clone())
        .bucket(args.bucket.clone())
        .auto_create(args.replicas)
        .history(recorder.clone());
    #[cfg(feature = "negative-controls")]
    if let Some(mode) = args.negative_control {
        builder = builder.negative_control(mode);
    }
    for role in &roles {
        let (rec, ids) = (recorder.clone(), ids.clone());
        let callbacks = FnCallbacks::new(
            move |l: Leadership| {
                work(l, rec.clone(), ids.clone(), interval);
                async {}
            },
            |_d: Demotion| async {},
        );
        builder = builder.role(
            RoleSpec::new(role.clone())
                .timing(timing)
                .callbacks(callbacks),
        );
    }
    let mut events = builder.events();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(RoleEvent::Promoted { role, term }) => {
                    line(&format!("promoted role={role} term={term}"));
                }
                Ok(RoleEvent::Demoted { role, term, reason }) => {
                    line(&format!("demoted role={role} term={term} reason={reason}"));
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    let manager = builder.start().await?;
    line("ready");

    wait_signal().await;
    let result = manager.shutdown(Duration::from_secs(10)).await;
    recorder.stop();
    line("stopped");
    result?;
    Ok(())
}

/// Completes on SIGINT or SIGTERM.
async fn wait_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
