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

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use clap::{Parser, ValueEnum};
use futures_util::StreamExt;
use rand::Rng;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

const WARMUP_TRIALS: usize = 2;

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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    Handover,
    Crash,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Handover,
    Crash,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Handover => "hand-over (SIGTERM)",
            Mode::Crash => "crash (SIGKILL)",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Mode::Handover => "handover",
            Mode::Crash => "crash",
        }
    }

    fn signal(self) -> i32 {
        match self {
            Mode::Handover => SIGTERM,
            Mode::Crash => SIGKILL,
        }
    }

    /// The issue's target for p99.
    fn target(self, ttl: Duration) -> Duration {
        match self {
            Mode::Handover => Duration::from_millis(3),
            Mode::Crash => ttl + Duration::from_millis(25),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Signals
// ---------------------------------------------------------------------------------------------

const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;

unsafe extern "C" {
    /// POSIX `kill(2)`, from the C library std links anyway: no fork/exec of `kill(1)` between
    /// `t0` and the signal.
    fn kill(pid: i32, sig: i32) -> i32;
}

fn send_signal(pid: u32, sig: i32) -> Result<(), String> {
    let pid = i32::try_from(pid).map_err(|e| e.to_string())?;
    // SAFETY: kill(2) only reads its two integer arguments.
    let rc = unsafe { kill(pid, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "kill({pid}, {sig}): {}",
            std::io::Error::last_os_error()
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------------------

/// A `nats-roles run` process; SIGKILLed on drop.
struct Instance {
    id: String,
    pid: u32,
    child: Child,
    /// Stdout lines, timestamped by the reader task when read.
    lines: mpsc::UnboundedReceiver<(Instant, String)>,
}

impl Instance {
    fn spawn(
        bin: &Path,
        config: &Path,
        id: &str,
        url: &str,
        dir: &Path,
    ) -> Result<Instance, String> {
        let stderr =
            std::fs::File::create(dir.join(format!("{id}.stderr"))).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .arg("--config")
            .arg(config)
            .args(["--instance-id", id, "--server", url, "--auto-create"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true);
        for var in [
            "NATS_URL",
            "NATS_CREDS",
            "NATS_ROLES_INSTANCE_ID",
            "NATS_ROLES_BUCKET",
            "RUST_LOG",
        ] {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let pid = child.id().ok_or("child without pid")?;
        let stdout = child.stdout.take().ok_or("stdout not piped")?;
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                // Timestamp first: this is the moment the orchestrator "sees" the line.
                let at = Instant::now();
                if tx.send((at, line)).is_err() {
                    break;
                }
            }
        });
        Ok(Instance {
            id: id.to_owned(),
            pid,
            child,
            lines,
        })
    }

    /// Reads lines until each of `prefixes` started a line; returns their timestamps (in the
    /// order of `prefixes`).
    async fn wait_lines(
        &mut self,
        prefixes: &[String],
        timeout: Duration,
    ) -> Result<Vec<Instant>, String> {
        let deadline = Instant::now() + timeout;
        let mut found: Vec<Option<Instant>> = vec![None; prefixes.len()];
        while found.iter().any(Option::is_none) {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some((at, line))) => {
                    if let Some(i) = prefixes.iter().position(|p| line.starts_with(p.as_str())) {
                        found[i].get_or_insert(at);
                    }
                }
                Ok(None) => return Err(format!("{}: stdout closed", self.id)),
                Err(_) => {
                    let missing: Vec<&String> = prefixes
                        .iter()
                        .zip(&found)
                        .filter(|(_, f)| f.is_none())
                        .map(|(p, _)| p)
                        .collect();
                    return Err(format!(
                        "{}: no {missing:?} line within {timeout:?}",
                        self.id
                    ));
                }
            }
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// Lines already read by the reader task, without waiting.
    fn pending_lines(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok((_, line)) = self.lines.try_recv() {
            out.push(line);
        }
        out
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

// ---------------------------------------------------------------------------------------------
// KV observer
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct KvChange {
    at: Instant,
    key: String,
    op: kv::Operation,
    revision: u64,
    holder: Option<String>,
}

/// Records every change of the role keys, timestamped when the orchestrator's watcher gets it.
struct KvLog {
    changes: Arc<Mutex<Vec<KvChange>>>,
    /// Bumped on every change, to wait for the next renewal.
    tick: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl KvLog {
    async fn start(store: &kv::Store) -> Result<KvLog, String> {
        let mut watch = store
            .watch("role.>")
            .await
            .map_err(|e| format!("watch role.>: {e}"))?;
        let changes: Arc<Mutex<Vec<KvChange>>> = Arc::default();
        let (tick_tx, tick) = watch::channel(0u64);
        let log = changes.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(entry)) = watch.next().await {
                let at = Instant::now();
                let holder = serde_json::from_slice::<serde_json::Value>(&entry.value)
                    .ok()
                    .and_then(|v| v["holder"].as_str().map(str::to_owned));
                lock(&log).push(KvChange {
                    at,
                    key: entry.key.clone(),
                    op: entry.operation,
                    revision: entry.revision,
                    holder,
                });
                tick_tx.send_modify(|n| *n += 1);
            }
        });
        Ok(KvLog {
            changes,
            tick,
            task,
        })
    }

    fn since(&self, t: Instant) -> Vec<KvChange> {
        lock(&self.changes)
            .iter()
            .filter(|c| c.at >= t)
            .cloned()
            .collect()
    }

    /// The last put of `key` by `holder` seen at or before `t`.
    fn last_put_by(&self, holder: &str, key: &str, t: Instant) -> Option<KvChange> {
        lock(&self.changes)
            .iter()
            .rev()
            .find(|c| c.at <= t && c.key == key && c.is_put_by(holder))
            .cloned()
    }

    /// Waits for the next put of `key` by `holder` (a renewal) and returns when it was seen.
    async fn next_put_by(
        &mut self,
        holder: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<Instant, String> {
        let start = Instant::now();
        let deadline = start + timeout;
        loop {
            if let Some(c) = self
                .since(start)
                .into_iter()
                .find(|c| c.key == key && c.is_put_by(holder))
            {
                return Ok(c.at);
            }
            match tokio::time::timeout_at(deadline, self.tick.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err("KV watcher ended".into()),
                Err(_) => return Err(format!("no renewal by {holder} within {timeout:?}")),
            }
        }
    }
}

impl KvChange {
    fn is_put_by(&self, holder: &str) -> bool {
        self.op == kv::Operation::Put && self.holder.as_deref() == Some(holder)
    }
}

impl Drop for KvLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// Trials
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

struct Bench {
    bin: PathBuf,
    roles: Vec<String>,
    jitter: String,
    url: String,
    dir: tempfile::TempDir,
    client: async_nats::Client,
}

fn config_yaml(bucket: &str, ttl_secs: u64, jitter: &str, roles: &[String]) -> String {
    // heartbeat = TTL / 4; operation_timeout < 0.9 × TTL; disconnect_grace <= TTL.
    let heartbeat_ms = ttl_secs * 1000 / 4;
    let op_ms = if ttl_secs == 1 { 500 } else { 1000 };
    let grace_ms = (ttl_secs * 1000).min(2000);
    format!(
        "bucket:\n  name: {bucket}\n  replicas: 1\n  auto_create: true\n\
         timing:\n  ttl: {ttl_secs}s\n  heartbeat: {heartbeat_ms}ms\n  operation_timeout: {op_ms}ms\n  \
         disconnect_grace: {grace_ms}ms\n  campaign_jitter: {jitter}\n\
         roles:\n{}",
        roles
            .iter()
            .map(|r| format!("  - name: {r}\n"))
            .collect::<String>()
    )
}

impl Bench {
    async fn series(&self, mode: Mode, ttl_secs: u64, trials: usize) -> Series {
        let ttl = Duration::from_secs(ttl_secs);
        let started = Instant::now();
        let mut series = Series {
            mode,
            ttl,
            samples: Vec::new(),
            errors: Vec::new(),
            roles: self.roles.len(),
            missing_holder_lines: 0,
            flaps: 0,
            takeovers: 0,
            backstop_takeovers: 0,
            wall: Duration::ZERO,
        };
        if let Err(e) = self.run_series(mode, ttl_secs, trials, &mut series).await {
            series.errors.push(e);
        }
        series.wall = started.elapsed();
        series
    }

    async fn run_series(
        &self,
        mode: Mode,
        ttl_secs: u64,
        trials: usize,
        series: &mut Series,
    ) -> Result<(), String> {
        let ttl = Duration::from_secs(ttl_secs);
        let heartbeat = ttl / 4;
        let bucket = format!("bench-{}-{ttl_secs}s-{}", mode.short(), std::process::id());
        let config = self.dir.path().join(format!("{bucket}.yaml"));
        std::fs::write(
            &config,
            config_yaml(&bucket, ttl_secs, &self.jitter, &self.roles),
        )
        .map_err(|e| e.to_string())?;
        let dir = self.dir.path().join(&bucket);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut next_id = 0usize;
        let mut spawn = || {
            next_id += 1;
            Instance::spawn(
                &self.bin,
                &config,
                &format!("p{next_id:03}"),
                &self.url,
                &dir,
            )
        };

        let roles = &self.roles;
        let keys: Vec<String> = roles.iter().map(|r| format!("role.{r}")).collect();
        let lines = |what: &str, holder: Option<&str>| -> Vec<String> {
            roles
                .iter()
                .map(|r| match holder {
                    Some(h) => format!("{what} role={r} holder={h} "),
                    None => format!("{what} role={r} "),
                })
                .collect()
        };

        // The first holder creates the bucket and takes the roles.
        let mut holder = spawn()?;
        let printed = holder
            .wait_lines(&lines("promoted", None), Duration::from_secs(3))
            .await;
        let store = jetstream::new(self.client.clone())
            .get_key_value(&bucket)
            .await
            .map_err(|e| format!("open bucket {bucket}: {e}"))?;
        if let Err(e) = printed {
            // A promotion during start-up may not be printed (start-up event race): check the
            // leases themselves.
            for key in &keys {
                let entry = store.entry(key.as_str()).await.map_err(|e| e.to_string())?;
                let holder_id = entry
                    .and_then(|e| serde_json::from_slice::<serde_json::Value>(&e.value).ok())
                    .and_then(|v| v["holder"].as_str().map(str::to_owned));
                if holder_id.as_deref() != Some(holder.id.as_str()) {
                    return Err(e);
                }
            }
        }
        let mut kv = KvLog::start(&store).await?;

        let total_trials = WARMUP_TRIALS + trials;
        for n in 0..total_trials {
            let measured = n >= WARMUP_TRIALS;
            let mut cand = spawn()?;
            let following = lines("holder", Some(&holder.id));
            if let Err(e) = cand.wait_lines(&following, Duration::from_secs(2)).await {
                // The lines can be lost at start-up (the binary subscribes to events after the
                // watcher started); after 2 s the candidate has caught up anyway.
                if cand.child.try_wait().map_err(|e| e.to_string())?.is_some() {
                    return Err(format!("{} exited: {e}", cand.id));
                }
                series.missing_holder_lines += 1;
            }

            // A random point of the heartbeat period after a renewal (of the first role).
            let renewed = kv.next_put_by(&holder.id, &keys[0], heartbeat * 3).await?;
            let delay = Duration::from_nanos(
                rand::rng()
                    .random_range(0..u64::try_from(heartbeat.as_nanos()).unwrap_or(u64::MAX)),
            );
            tokio::time::sleep_until(renewed + delay).await;

            let t0 = Instant::now();
            send_signal(holder.pid, mode.signal())?;
            let since: Vec<Duration> = keys
                .iter()
                .map(|k| {
                    kv.last_put_by(&holder.id, k, t0)
                        .map_or(Duration::ZERO, |c| t0 - c.at)
                })
                .collect();

            let promoted = cand
                .wait_lines(&lines("promoted", None), ttl + Duration::from_secs(10))
                .await?;
            if promoted.iter().any(|at| *at < t0) {
                return Err(format!("{} promoted before the signal", cand.id));
            }
            let last = promoted.iter().max().copied().unwrap_or(t0);
            let mut sample = Sample {
                total: last - t0,
                since_renew: since[0],
                ..Sample::default()
            };
            if mode == Mode::Crash {
                sample.detection = promoted
                    .iter()
                    .zip(&since)
                    .map(|(at, s)| ms(*at - t0) - (ms(ttl) - ms(*s)))
                    .reduce(f64::max);
            }

            // The holder's own account (hand-over) and its exit.
            match mode {
                Mode::Handover => {
                    if let Ok(at) = holder
                        .wait_lines(&lines("demoted", None), Duration::from_secs(10))
                        .await
                    {
                        sample.demoted_line = at.iter().max().map(|at| *at - t0);
                    }
                    let status = tokio::time::timeout(Duration::from_secs(10), holder.child.wait())
                        .await
                        .map_err(|_| {
                            format!("{} did not exit within 10 s after SIGTERM", holder.id)
                        })?
                        .map_err(|e| e.to_string())?;
                    sample.clean_exit = status.success();
                    if !status.success() {
                        series
                            .errors
                            .push(format!("{} exited with {status} after SIGTERM", holder.id));
                    }
                }
                Mode::Crash => {
                    let _ = holder.child.wait().await;
                }
            }

            // Phases, from the orchestrator's KV watcher (give it a moment to deliver the put).
            let _ = kv
                .next_put_by(&cand.id, &keys[keys.len() - 1], Duration::from_millis(500))
                .await;
            let changes = kv.since(t0);
            let marker_op = match mode {
                Mode::Handover => kv::Operation::Delete,
                Mode::Crash => kv::Operation::Purge,
            };
            if roles.len() == 1 {
                sample.marker = changes
                    .iter()
                    .find(|c| c.op == marker_op)
                    .map(|c| c.at - t0);
                sample.new_put = changes
                    .iter()
                    .find(|c| c.is_put_by(&cand.id))
                    .map(|c| c.at - t0);
            }
            let unexpected: Vec<String> = changes
                .iter()
                .filter(|c| c.op != kv::Operation::Put && c.op != marker_op)
                .map(|c| format!("{} {:?}@{}", c.key, c.op, c.revision))
                .collect();
            if !unexpected.is_empty() {
                series
                    .errors
                    .push(format!("trial {n}: unexpected markers {unexpected:?}"));
            }
            // Crash: did the candidate take each role over on the server's expiry marker, or
            // on the old lease itself (its observed-expiry backstop, ttl + heartbeat)?
            if mode == Mode::Crash {
                for key in &keys {
                    let mine: Vec<&KvChange> = changes.iter().filter(|c| c.key == *key).collect();
                    let new_put = mine.iter().position(|c| c.is_put_by(&cand.id));
                    if let Some(i) = new_put {
                        series.takeovers += 1;
                        if !mine[..i].iter().any(|c| c.op == kv::Operation::Purge) {
                            series.backstop_takeovers += 1;
                        }
                    }
                }
            }
            // A demotion of the new holder right after its promotion (see docs/benchmarks.md).
            if cand
                .pending_lines()
                .iter()
                .any(|l| l.starts_with("demoted "))
            {
                series.flaps += 1;
            }

            eprintln!(
                "  {} ttl={ttl_secs}s {}{}/{}: {:>9.3} ms (since renew {:>6.1} ms)",
                mode.short(),
                if measured { "trial " } else { "warm-up " },
                if measured {
                    n - WARMUP_TRIALS + 1
                } else {
                    n + 1
                },
                if measured { trials } else { WARMUP_TRIALS },
                ms(sample.total),
                ms(sample.since_renew),
            );
            if measured {
                series.samples.push(sample);
            }
            holder = cand;
        }
        drop(kv);
        // Stop the last holder gracefully.
        let _ = send_signal(holder.pid, SIGTERM);
        let _ = tokio::time::timeout(Duration::from_secs(10), holder.child.wait()).await;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics and report
// ---------------------------------------------------------------------------------------------

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[derive(Debug, Clone, Copy)]
struct Stats {
    n: usize,
    min: f64,
    p50: f64,
    p95: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

/// Nearest-rank percentiles (with 50 samples p99 is the largest value).
fn stats(values: &[f64]) -> Option<Stats> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        let r = (p / 100.0 * v.len() as f64).ceil() as usize;
        v[r.clamp(1, v.len()) - 1]
    };
    Some(Stats {
        n: v.len(),
        min: v[0],
        p50: rank(50.0),
        p95: rank(95.0),
        p99: rank(99.0),
        max: v[v.len() - 1],
        mean: v.iter().sum::<f64>() / v.len() as f64,
    })
}

fn fmt_ms(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn report(series: &[Series]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### Fail-over latency (ms), signal -> candidate's `promoted` line read\n"
    );
    let _ = writeln!(
        out,
        "| series | n | min | p50 | mean | p95 | p99 | max | target (p99) | met |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for s in series {
        let totals: Vec<f64> = s.samples.iter().map(|x| ms(x.total)).collect();
        let label = s.label();
        match stats(&totals) {
            Some(st) => {
                let target = ms(s.mode.target(s.ttl));
                let met = if st.p99 <= target { "yes" } else { "**no**" };
                let _ = writeln!(
                    out,
                    "| {label} | {} | {} | {} | {} | {} | {} | {} | <= {} | {met} |",
                    st.n,
                    fmt_ms(st.min),
                    fmt_ms(st.p50),
                    fmt_ms(st.mean),
                    fmt_ms(st.p95),
                    fmt_ms(st.p99),
                    fmt_ms(st.max),
                    fmt_ms(target),
                );
            }
            None => {
                let _ = writeln!(out, "| {label} | 0 | - | - | - | - | - | - | - | - |");
            }
        }
    }

    let _ = writeln!(
        out,
        "\n### Where the time goes (ms, p50 / p99 over the trials)\n"
    );
    let _ = writeln!(out, "| series | phase | p50 | p99 | max |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    for s in series {
        let label = s.label();
        let mut phase = |name: &str, values: Vec<f64>| {
            if let Some(st) = stats(&values) {
                let _ = writeln!(
                    out,
                    "| {label} | {name} | {} | {} | {} |",
                    fmt_ms(st.p50),
                    fmt_ms(st.p99),
                    fmt_ms(st.max)
                );
            }
        };
        let pick = |f: &dyn Fn(&Sample) -> Option<f64>| {
            s.samples.iter().filter_map(f).collect::<Vec<f64>>()
        };
        match s.mode {
            Mode::Handover => {
                phase(
                    "signal -> holder's `demoted` line read",
                    pick(&|x| x.demoted_line.map(ms)),
                );
                phase("signal -> delete marker seen", pick(&|x| x.marker.map(ms)));
                phase(
                    "delete marker seen -> new term's put seen",
                    pick(&|x| Some(ms(x.new_put?.checked_sub(x.marker?)?))),
                );
                phase(
                    "new put seen -> candidate's `promoted` line read",
                    pick(&|x| Some(ms(x.total) - ms(x.new_put?))),
                );
            }
            Mode::Crash => {
                let ttl = ms(s.ttl);
                phase(
                    "time since last renewal at the kill",
                    pick(&|x| Some(ms(x.since_renew))),
                );
                phase(
                    "total − (TTL − since last renewal) = detection (largest over the roles)",
                    pick(&|x| x.detection),
                );
                phase(
                    "expiry marker seen − (last renewal seen + TTL)",
                    pick(&|x| Some(ms(x.marker?) - (ttl - ms(x.since_renew)))),
                );
                phase(
                    "expiry marker seen -> new term's put seen",
                    pick(&|x| Some(ms(x.new_put?) - ms(x.marker?))),
                );
                phase(
                    "new put seen -> candidate's `promoted` line read",
                    pick(&|x| Some(ms(x.total) - ms(x.new_put?))),
                );
            }
        }
    }
    let _ = writeln!(out);
    for s in series {
        let clean = s.samples.iter().filter(|x| x.clean_exit).count();
        let _ = write!(
            out,
            "- {}: {} trials in {:.0} s",
            s.label(),
            s.samples.len(),
            s.wall.as_secs_f64()
        );
        if s.mode == Mode::Crash {
            let _ = write!(
                out,
                ", {} of {} takeovers on the old lease (follower backstop) rather than on an \
                 expiry marker",
                s.backstop_takeovers, s.takeovers
            );
        }
        if s.flaps > 0 {
            let _ = write!(
                out,
                ", the new holder was demoted again right after its promotion in {} trial(s)",
                s.flaps
            );
        }
        if s.mode == Mode::Handover {
            let _ = write!(
                out,
                ", holder exited 0 in {clean}/{} trials",
                s.samples.len()
            );
        }
        if s.missing_holder_lines > 0 {
            let _ = write!(
                out,
                ", {} candidate(s) never printed their `holder` line (start-up event race)",
                s.missing_holder_lines
            );
        }
        if s.errors.is_empty() {
            let _ = writeln!(out, ", no errors");
        } else {
            let _ = writeln!(out, ", errors: {:?}", s.errors);
        }
    }
    out
}

fn write_csv(path: &Path, series: &[Series]) -> std::io::Result<()> {
    let mut out = String::from(
        "mode,ttl_s,roles,total_ms,since_renew_ms,detection_ms,demoted_line_ms,marker_ms,new_put_ms,clean_exit\n",
    );
    let opt = |d: Option<Duration>| d.map(|d| format!("{:.3}", ms(d))).unwrap_or_default();
    for s in series {
        for x in &s.samples {
            let _ = writeln!(
                out,
                "{},{},{},{:.3},{:.3},{},{},{},{},{}",
                s.mode.short(),
                s.ttl.as_secs(),
                s.roles,
                ms(x.total),
                ms(x.since_renew),
                x.detection.map(|d| format!("{d:.3}")).unwrap_or_default(),
                opt(x.demoted_line),
                opt(x.marker),
                opt(x.new_put),
                x.clean_exit
            );
        }
    }
    std::fs::write(path, out)
}

// ---------------------------------------------------------------------------------------------
// Environment and set-up
// ---------------------------------------------------------------------------------------------

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
    let server = testkit::NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let dir = tempfile::Builder::new()
        .prefix("failover-bench-")
        .tempdir()
        .expect("create a temporary directory");
    let bench = Bench {
        bin,
        roles,
        jitter: args.campaign_jitter.clone(),
        url: server.url(),
        dir,
        client,
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
