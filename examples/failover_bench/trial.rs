//! One series of trials: the hand-over or crash of the holder process, timed from the signal to
//! the candidate's `promoted` line.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use rand::Rng;
use tokio::time::Instant;

use crate::kv_log::KvLog;
use crate::process::{Instance, SIGKILL, SIGTERM, send_signal};
use crate::report::ms;
use crate::{Sample, Series, WARMUP_TRIALS};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Handover,
    Crash,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Handover => "hand-over (SIGTERM)",
            Mode::Crash => "crash (SIGKILL)",
        }
    }

    pub(crate) fn short(self) -> &'static str {
        match self {
            Mode::Handover => "handover",
            Mode::Crash => "crash",
        }
    }

    pub(crate) fn signal(self) -> i32 {
        match self {
            Mode::Handover => SIGTERM,
            Mode::Crash => SIGKILL,
        }
    }

    /// The target for p99.
    pub(crate) fn target(self, ttl: Duration) -> Duration {
        match self {
            Mode::Handover => Duration::from_millis(3),
            Mode::Crash => ttl + Duration::from_millis(25),
        }
    }
}

pub(crate) struct Bench {
    pub(crate) bin: PathBuf,
    pub(crate) roles: Vec<String>,
    pub(crate) jitter: String,
    pub(crate) url: String,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) client: async_nats::Client,
    /// `bucket.domain` of the processes (`--far-site-rtt`: they run at a leaf node).
    pub(crate) domain: Option<String>,
}

pub(crate) fn config_yaml(bucket: &str, ttl_secs: u64, jitter: &str, roles: &[String]) -> String {
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
    pub(crate) async fn series(&self, mode: Mode, ttl_secs: u64, trials: usize) -> Series {
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

    pub(crate) async fn run_series(
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
        let mut yaml = config_yaml(&bucket, ttl_secs, &self.jitter, &self.roles);
        if let Some(domain) = &self.domain {
            yaml = yaml.replacen(
                "  auto_create: true\n",
                &format!("  auto_create: true\n  domain: {domain}\n"),
                1,
            );
        }
        std::fs::write(&config, yaml).map_err(|e| e.to_string())?;
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

            // A random point of the heartbeat period after a renewal (protocol v2: of the
            // holder's session; role keys are written only when a term starts or ends).
            let session = format!("session.{}.{}", holder.id, ttl.as_millis());
            let renewed = kv.next_put_by(&holder.id, &session, heartbeat * 3).await?;
            let delay = Duration::from_nanos(
                rand::rng()
                    .random_range(0..u64::try_from(heartbeat.as_nanos()).unwrap_or(u64::MAX)),
            );
            tokio::time::sleep_until(renewed + delay).await;

            let t0 = Instant::now();
            send_signal(holder.pid, mode.signal())?;
            // Every role's deadline counts from the last session renewal.
            let since: Vec<Duration> = keys
                .iter()
                .map(|_| {
                    kv.last_put_by(&holder.id, &session, t0)
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
                    .find(|c| c.key.starts_with("role.") && c.is_put_by(&cand.id))
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
            // Crash: did the candidate take each role over on the server's expiry marker of the
            // holder's session (protocol v2), or on its observed-expiry backstop?
            if mode == Mode::Crash {
                let expired = changes
                    .iter()
                    .find(|c| c.key == session && c.op == kv::Operation::Purge)
                    .map(|c| c.at);
                for key in &keys {
                    let new_put = changes
                        .iter()
                        .find(|c| c.key == *key && c.is_put_by(&cand.id));
                    if let Some(put) = new_put {
                        series.takeovers += 1;
                        if expired.is_none_or(|at| at > put.at) {
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
