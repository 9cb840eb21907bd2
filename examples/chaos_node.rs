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
//! held role released, `stop` recorded, exit 0); SIGUSR1 releases every role it holds
//! (`releasing role=…`) and keeps running, without campaigning for those roles for a minute;
//! SIGKILL and SIGSTOP are what the chaos harness uses to break it. Built with `--features negative-controls` it accepts
//! `--negative-control MODE` (test-only broken modes the checker must flag).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    /// User name to connect with (with `--password`).
    #[arg(long, requires = "password")]
    user: Option<String>,
    /// Password of `--user`.
    #[arg(long, requires = "user")]
    password: Option<String>,
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
    /// `NAME=MS`: role NAME gets a TTL of MS milliseconds (its own TTL class and session, with
    /// heartbeat and operation timeout MS / 4); repeat for several.
    #[arg(long = "role-ttl", value_parser = role_ttl)]
    role_ttl: Vec<(String, u64)>,
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
    /// Test-only broken mode: plain-put, drop-ttl, no-local-deadline, skip-demote,
    /// ignore-session, renew-after-loss.
    #[cfg(feature = "negative-controls")]
    #[arg(long)]
    negative_control: Option<nats_roles::testing::NegativeControl>,
}

/// Parses `NAME=MS` of `--role-ttl`.
fn role_ttl(s: &str) -> Result<(String, u64), String> {
    let (name, ms) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=MS"))?;
    let ms: u64 = ms.parse().map_err(|e| format!("{s:?}: {e}"))?;
    Ok((name.to_owned(), ms))
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

    let timing = |ttl_ms: u64, own: bool| {
        let ttl = Duration::from_millis(ttl_ms);
        let quarter =
            |set: Option<u64>| Duration::from_millis(set.filter(|_| own).unwrap_or(ttl_ms / 4));
        Timing {
            ttl,
            heartbeat: quarter(args.heartbeat_ms),
            deadline_margin: args.margin,
            operation_timeout: quarter(args.operation_timeout_ms),
            disconnect_grace: ttl.mul_f64(0.7),
            campaign_jitter: Duration::from_millis(args.campaign_jitter_ms),
        }
    };
    // The server's asynchronous errors (permission violations), so that a refused write is
    // reported at once instead of after a timeout, as `nats-roles run` does.
    let errors = nats_roles::manager::ServerErrors::default();
    let recorder_of_errors = errors.clone();
    let mut options = async_nats::ConnectOptions::new();
    if let (Some(user), Some(password)) = (args.user.clone(), args.password.clone()) {
        options = options.user_and_password(user, password);
    }
    let client = options
        .name(format!("chaos-node/{id}"))
        .event_callback(move |event| {
            let errors = recorder_of_errors.clone();
            async move {
                if let async_nats::Event::ServerError(err) = event {
                    errors.record(err.to_string());
                }
            }
        })
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
        .server_errors(errors)
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
        let role_timing = match args.role_ttl.iter().find(|(n, _)| n == role.as_str()) {
            Some((_, ms)) => timing(*ms, false),
            None => timing(args.ttl_ms, true),
        };
        builder = builder.role(
            RoleSpec::new(role.clone())
                .timing(role_timing)
                .callbacks(callbacks),
        );
    }
    let mut events = builder.events();
    let held: Arc<Mutex<BTreeSet<RoleName>>> = Arc::default();
    let holding = held.clone();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(RoleEvent::Promoted { role, term }) => {
                    line(&format!("promoted role={role} term={term}"));
                    lock(&holding).insert(role);
                }
                Ok(RoleEvent::Demoted { role, term, reason }) => {
                    line(&format!("demoted role={role} term={term} reason={reason}"));
                    lock(&holding).remove(&role);
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    let manager = builder.start().await?;
    line("ready");

    // SIGUSR1: release every held role (and do not campaign for it for a minute), staying up.
    let mut usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())?;
    let stop = wait_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = usr1.recv() => {
                let roles: Vec<RoleName> = lock(&held).iter().cloned().collect();
                for role in roles {
                    line(&format!("releasing role={role}"));
                    manager.release(&role, RELEASE_COOLDOWN)?;
                }
            }
        }
    }
    let result = manager.shutdown(Duration::from_secs(10)).await;
    recorder.stop();
    line("stopped");
    result?;
    Ok(())
}

/// How long a role released on SIGUSR1 is not campaigned for again.
const RELEASE_COOLDOWN: Duration = Duration::from_secs(60);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
