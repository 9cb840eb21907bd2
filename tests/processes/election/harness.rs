//! The harness of the election tests: configuration files, the processes and their stdout
//! lines, the bucket as ground truth.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::time::Instant;

use testkit::NatsServer;

use crate::BIN;

/// The timing tests start 3 processes each; running two of them at once on a 2-core machine
/// would measure CPU contention, not the protocol. (Under nextest every test is its own
/// process, and this lock does not apply.)
pub(super) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------------------------------------
// Configuration files
// ---------------------------------------------------------------------------------------------

/// Lease timing of a test: TTL 1 s (heartbeat 250 ms) or 3 s (heartbeat 750 ms).
#[derive(Clone, Copy, Debug)]
pub(super) struct Timing {
    pub(super) ttl_secs: u64,
}

impl Timing {
    pub(super) const FAST: Timing = Timing { ttl_secs: 1 };
    pub(super) const DEFAULT: Timing = Timing { ttl_secs: 3 };

    pub(super) fn ttl(self) -> Duration {
        Duration::from_secs(self.ttl_secs)
    }

    pub(super) fn heartbeat(self) -> Duration {
        self.ttl() / 4
    }

    pub(super) fn yaml(self) -> String {
        // operation_timeout < ttl × 0.9 and disconnect_grace <= ttl (config validation).
        let (op_ms, grace_ms) = if self.ttl_secs == 1 {
            (500, 1000)
        } else {
            (1000, 2000)
        };
        format!(
            "timing:\n  ttl: {}s\n  heartbeat: {}ms\n  operation_timeout: {op_ms}ms\n  \
             disconnect_grace: {grace_ms}ms\n",
            self.ttl_secs,
            self.heartbeat().as_millis()
        )
    }
}

pub(super) fn shard_roles(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("shard-{i:02}")).collect()
}

/// Writes a `run` configuration (bucket auto-created, 1 replica) into `dir`.
pub(super) fn write_config(dir: &Path, bucket: &str, timing: Timing, roles: &[String]) -> PathBuf {
    let mut yaml = format!(
        "bucket:\n  name: {bucket}\n  replicas: 1\n  auto_create: true\n{}roles:\n",
        timing.yaml()
    );
    for role in roles {
        yaml.push_str(&format!("  - name: {role}\n"));
    }
    let path = dir.join(format!("{bucket}.yaml"));
    std::fs::write(&path, yaml).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// A bucket name no other test (or earlier run against a reused server) uses.
pub(super) fn unique_bucket(test: &str) -> String {
    format!("{test}-{}", uuid::Uuid::new_v4().simple())
}

// ---------------------------------------------------------------------------------------------
// Stdout lines
// ---------------------------------------------------------------------------------------------

/// A transition line printed by `nats-roles run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ev {
    Promoted {
        role: String,
        term: u64,
    },
    Demoted {
        role: String,
        term: u64,
        reason: String,
    },
    Holder {
        role: String,
        holder: String,
        term: u64,
    },
    Vacant {
        role: String,
    },
    Other(String),
}

pub(super) fn parse_line(line: &str) -> Ev {
    let mut words = line.split_whitespace();
    let kind = words.next().unwrap_or_default();
    let fields: HashMap<&str, &str> = words.filter_map(|w| w.split_once('=')).collect();
    let text = |k: &str| fields.get(k).map(|v| (*v).to_owned());
    let num = |k: &str| fields.get(k).and_then(|v| v.parse::<u64>().ok());
    let parsed = match kind {
        "promoted" => text("role")
            .zip(num("term"))
            .map(|(role, term)| Ev::Promoted { role, term }),
        "demoted" => match (text("role"), num("term"), text("reason")) {
            (Some(role), Some(term), Some(reason)) => Some(Ev::Demoted { role, term, reason }),
            _ => None,
        },
        "holder" => match (text("role"), text("holder"), num("term")) {
            (Some(role), Some(holder), Some(term)) => Some(Ev::Holder { role, holder, term }),
            _ => None,
        },
        "vacant" => text("role").map(|role| Ev::Vacant { role }),
        _ => None,
    };
    parsed.unwrap_or_else(|| Ev::Other(line.to_owned()))
}

/// One stdout line (or the end of a process's stdout), timestamped when it was read.
#[derive(Debug, Clone)]
pub(super) struct Out {
    /// Process number (index into `Procs::procs`).
    pub(super) proc: usize,
    /// Instance id of that process.
    pub(super) id: String,
    pub(super) at: Instant,
    /// `None`: stdout closed (the process exited).
    pub(super) ev: Option<Ev>,
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// One `nats-roles run` process; SIGKILLed when dropped.
pub(super) struct Proc {
    pub(super) id: String,
    pub(super) pid: u32,
    pub(super) child: Child,
    pub(super) stderr_path: PathBuf,
    pub(super) exit: Option<ExitStatus>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exit.is_none() {
            // Already exited is fine; kill_on_drop reaps it.
            let _ = self.child.start_kill();
        }
    }
}

/// Instances started from one configuration file, with the merged, timestamped stdout of all
/// of them.
pub(super) struct Procs {
    pub(super) url: String,
    pub(super) config: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) procs: Vec<Proc>,
    pub(super) tx: mpsc::UnboundedSender<Out>,
    pub(super) rx: mpsc::UnboundedReceiver<Out>,
    /// Every line received so far, in arrival order.
    pub(super) log: Vec<Out>,
    pub(super) raw: Arc<Mutex<Vec<String>>>,
}

impl Procs {
    pub(super) fn new(url: String, config: PathBuf, dir: &Path) -> Procs {
        let (tx, rx) = mpsc::unbounded_channel();
        Procs {
            url,
            config,
            dir: dir.to_owned(),
            procs: Vec::new(),
            tx,
            rx,
            log: Vec::new(),
            raw: Arc::default(),
        }
    }

    /// Starts `nats-roles run` as instance `id`; returns its process number.
    pub(super) fn start(&mut self, id: &str) -> usize {
        let n = self.procs.len();
        let stderr_path = self.dir.join(format!("{n}-{id}.stderr"));
        let stderr = std::fs::File::create(&stderr_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", stderr_path.display()));
        let mut cmd = testkit::cli::command(BIN);
        cmd.arg("run")
            .arg("--config")
            .arg(&self.config)
            .args(["--instance-id", id, "--server", &self.url, "--auto-create"])
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {BIN}: {e}"));
        let pid = child.id().expect("a just spawned child has a pid");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, raw, id_owned) = (self.tx.clone(), self.raw.clone(), id.to_owned());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let at = Instant::now();
                raw.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(format!("[{n}:{id_owned}] {line}"));
                let ev = Some(parse_line(&line));
                let _ = tx.send(Out {
                    proc: n,
                    id: id_owned.clone(),
                    at,
                    ev,
                });
            }
            let at = Instant::now();
            let _ = tx.send(Out {
                proc: n,
                id: id_owned,
                at,
                ev: None,
            });
        });
        self.procs.push(Proc {
            id: id.to_owned(),
            pid,
            child,
            stderr_path,
            exit: None,
        });
        n
    }

    pub(super) fn signal(&self, proc: usize, sig: i32) {
        testkit::process::signal(self.procs[proc].pid, sig);
    }

    /// Moves every line already received into the log.
    pub(super) fn drain(&mut self) {
        while let Ok(out) = self.rx.try_recv() {
            self.log.push(out);
        }
    }

    /// Waits up to `timeout` for one more line (then moves everything received into the log).
    pub(super) async fn recv_one(&mut self, timeout: Duration) {
        if let Ok(Some(out)) = tokio::time::timeout(timeout, self.rx.recv()).await {
            self.log.push(out);
        }
        self.drain();
    }

    /// Receives lines until `check(log)` returns `Some`; panics after `timeout` with `what`.
    pub(super) async fn wait_until<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        check: impl FnMut(&[Out]) -> Option<T>,
    ) -> T {
        match self.try_wait_until(timeout, check).await {
            Some(v) => v,
            None => panic!("timed out after {timeout:?} waiting for {what}"),
        }
    }

    /// Waits up to `timeout` until each of `roles` was promoted since `t0`; the promotions
    /// since `t0` (panics with `what` after the timeout).
    pub(super) async fn wait_promoted_since<V>(
        &mut self,
        what: &str,
        timeout: Duration,
        roles: &BTreeMap<String, V>,
        t0: Instant,
    ) -> BTreeMap<String, Vec<(usize, String, u64, Instant)>> {
        self.wait_until(what, timeout, |log| {
            let p = promotions(log, Some(t0));
            roles.keys().all(|r| p.contains_key(r)).then_some(p)
        })
        .await
    }

    /// Receives lines until `check(log)` returns `Some`, for at most `timeout`.
    pub(super) async fn try_wait_until<T>(
        &mut self,
        timeout: Duration,
        mut check: impl FnMut(&[Out]) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            self.drain();
            if let Some(v) = check(&self.log) {
                return Some(v);
            }
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(out)) => self.log.push(out),
                Ok(None) => unreachable!("Procs keeps a sender"),
                Err(_) => return None,
            }
        }
    }

    /// Waits for process `proc` to exit and for its stdout to be read to the end.
    pub(super) async fn wait_exit(&mut self, proc: usize, timeout: Duration) -> ExitStatus {
        let p = &mut self.procs[proc];
        let status = tokio::time::timeout(timeout, p.child.wait())
            .await
            .unwrap_or_else(|_| panic!("process {proc} ({}) still running after {timeout:?}", p.id))
            .unwrap_or_else(|e| panic!("wait for process {proc}: {e}"));
        p.exit = Some(status);
        self.wait_until(
            &format!("end of stdout of process {proc}"),
            timeout,
            |log| {
                log.iter()
                    .any(|o| o.proc == proc && o.ev.is_none())
                    .then_some(())
            },
        )
        .await;
        status
    }

    /// Promotions process `proc` logged on stderr: (process, role, term). The log is written
    /// by the role's runner in the manager, so it has every promotion even when stdout misses one.
    pub(super) fn logged_promotions(&self, proc: usize) -> Vec<(usize, String, u64)> {
        let text = std::fs::read_to_string(&self.procs[proc].stderr_path).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                // `... role{role=shard-00 instance=node-a}: ...::role_report: promoted term=1`
                let role = line.split("role{role=").nth(1)?.split([' ', '}']).next()?;
                let term = line.split(": promoted term=").nth(1)?.trim().parse().ok()?;
                Some((proc, role.to_owned(), term))
            })
            .collect()
    }

    /// Lines of one process, in order.
    pub(super) fn events_of(&self, proc: usize) -> Vec<Ev> {
        self.log
            .iter()
            .filter(|o| o.proc == proc)
            .filter_map(|o| o.ev.clone())
            .collect()
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let raw = self
            .raw
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        eprintln!("----- stdout of all nats-roles processes -----");
        for line in raw.iter() {
            eprintln!("{line}");
        }
        for (n, p) in self.procs.iter().enumerate() {
            let text = std::fs::read_to_string(&p.stderr_path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "----- last stderr lines of process {n} ({}, pid {}) -----",
                p.id, p.pid
            );
            for line in &lines[lines.len().saturating_sub(30)..] {
                eprintln!("{line}");
            }
        }
    }
}

/// Promotions in `log` (optionally only those at or after `since`): role -> [(proc, id, term, at)].
pub(super) fn promotions(
    log: &[Out],
    since: Option<Instant>,
) -> BTreeMap<String, Vec<(usize, String, u64, Instant)>> {
    let mut map: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for o in log {
        if since.is_some_and(|s| o.at < s) {
            continue;
        }
        if let Some(Ev::Promoted { role, term }) = &o.ev {
            map.entry(role.clone())
                .or_default()
                .push((o.proc, o.id.clone(), *term, o.at));
        }
    }
    map
}

/// The three instances of the fail-over tests.
pub(super) const THREE: [&str; 3] = ["node-a", "node-b", "node-c"];

/// One test's setup: a server and a directory with a config for `shard_roles(n)` in a fresh
/// bucket; kept alive for the test.
pub(super) struct Setup {
    server: NatsServer,
    _dir: tempfile::TempDir,
    bucket: String,
}

impl Setup {
    /// The setup, its roles and the processes (none started yet).
    pub(super) async fn new(bucket: &str, timing: Timing, n: usize) -> (Setup, Vec<String>, Procs) {
        let server = NatsServer::start().await;
        let dir = tempdir();
        let bucket = unique_bucket(bucket);
        let roles = shard_roles(n);
        let config = write_config(dir.path(), &bucket, timing, &roles);
        let procs = Procs::new(server.url(), config, dir.path());
        let setup = Setup {
            server,
            _dir: dir,
            bucket,
        };
        (setup, roles, procs)
    }

    /// The test's bucket, on a client of its own.
    pub(super) async fn store(&self) -> kv::Store {
        open_bucket(&self.server.url(), &self.bucket).await
    }
}

/// Starts `ids` (all at once) and waits until each of `roles` has been promoted somewhere,
/// exactly once. Returns role -> (process number, term).
///
/// Promotions are read from stdout. `nats-roles run` subscribes to its events only after
/// `RoleManager::start` returned, so a promotion that happens while the manager is still
/// starting is logged (stderr) but never printed (reported bug). Such promotions are taken
/// from the log instead, with a note, so that this known defect does not make every test
/// that starts processes flaky.
pub(super) async fn start_and_settle(
    procs: &mut Procs,
    ids: &[&str],
    roles: &[String],
    timeout: Duration,
) -> BTreeMap<String, (usize, u64)> {
    let first = procs.procs.len();
    for id in ids {
        procs.start(id);
    }
    let started = first..procs.procs.len();
    let deadline = Instant::now() + timeout;
    let mut covered_since: Option<Instant> = None;
    loop {
        let printed = promotions(&procs.log, None);
        if roles.iter().all(|r| printed.contains_key(r)) {
            break;
        }
        let logged = started
            .clone()
            .flat_map(|p| procs.logged_promotions(p))
            .collect::<Vec<_>>();
        let covered = roles
            .iter()
            .all(|r| printed.contains_key(r) || logged.iter().any(|(_, role, _)| role == r));
        // A logged promotion is printed right after it is logged: give the line 500 ms.
        match (covered, covered_since) {
            (true, None) => covered_since = Some(Instant::now()),
            (true, Some(t)) if t.elapsed() >= Duration::from_millis(500) => break,
            (false, _) => covered_since = None,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for every role to be promoted; printed: \
             {printed:?}; logged: {logged:?}"
        );
        procs.recv_one(Duration::from_millis(50)).await;
    }
    let printed = promotions(&procs.log, None);
    let logged: Vec<(usize, String, u64)> =
        started.flat_map(|p| procs.logged_promotions(p)).collect();
    let mut holders = BTreeMap::new();
    for role in roles {
        // Every promotion of the role, printed or only logged, as (process, term).
        let mut all: BTreeSet<(usize, u64)> = printed
            .get(role)
            .map(|l| l.iter().map(|(p, _, t, _)| (*p, *t)).collect())
            .unwrap_or_default();
        let from_log: BTreeSet<(usize, u64)> = logged
            .iter()
            .filter(|(_, r, _)| r == role)
            .map(|(p, _, t)| (*p, *t))
            .collect();
        for missing in from_log.difference(&all) {
            eprintln!(
                "note: role {role}: promotion to term {} by process {} logged but not printed \
                 (start-up event race)",
                missing.1, missing.0
            );
        }
        all.extend(from_log);
        assert_eq!(
            all.len(),
            1,
            "role {role} promoted more than once while settling: {all:?}"
        );
        let only = all.into_iter().next().expect("one promotion");
        holders.insert(role.clone(), only);
    }
    holders
}

/// The lease of `role` as stored in the KV: (holder, term, revision, incarnation).
pub(super) async fn kv_lease(store: &kv::Store, role: &str) -> Option<(String, u64, u64, String)> {
    let entry = store
        .entry(format!("role.{role}"))
        .await
        .unwrap_or_else(|e| panic!("read role.{role}: {e}"))?;
    if entry.operation != kv::Operation::Put {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&entry.value)
        .unwrap_or_else(|e| panic!("role.{role} is not JSON ({e}): {:?}", entry.value));
    let holder = v["holder"].as_str().expect("lease has a holder").to_owned();
    let term = v["term"].as_u64().unwrap_or(entry.revision);
    let incarnation = v["incarnation"].as_str().unwrap_or_default().to_owned();
    Some((holder, term, entry.revision, incarnation))
}

pub(super) async fn open_bucket(url: &str, bucket: &str) -> kv::Store {
    let client = testkit::connect(url).await;
    jetstream::new(client)
        .get_key_value(bucket)
        .await
        .unwrap_or_else(|e| panic!("open bucket {bucket}: {e}"))
}

/// Records every change of the role keys (from its start on), timestamped on arrival.
pub(super) struct KvRecorder {
    pub(super) changes: Arc<Mutex<Vec<(Instant, kv::Entry)>>>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl KvRecorder {
    pub(super) async fn start(store: &kv::Store) -> KvRecorder {
        // With history: in protocol v2 a role key does not change during a term, so only the
        // last value of each key (delivered first) shows the current leases.
        let mut watch = store
            .watch_with_history("role.>")
            .await
            .expect("watch role keys");
        let changes: Arc<Mutex<Vec<(Instant, kv::Entry)>>> = Arc::default();
        let log = changes.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(entry)) = watch.next().await {
                let at = Instant::now();
                log.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((at, entry));
            }
        });
        KvRecorder { changes, task }
    }

    /// The changes of `role.<role>` so far.
    pub(super) fn history(&self, role: &str) -> Vec<kv::Entry> {
        let key = format!("role.{role}");
        self.changes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(_, e)| e.key == key)
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// The puts of `role.<role>` so far: (seen at, revision, holder, incarnation).
    pub(super) fn puts(&self, role: &str) -> Vec<(Instant, u64, String, String)> {
        let key = format!("role.{role}");
        self.changes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(_, e)| e.key == key && e.operation == kv::Operation::Put)
            .map(|(at, e)| {
                let v: serde_json::Value = serde_json::from_slice(&e.value).unwrap_or_default();
                let text = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
                (*at, e.revision, text("holder"), text("incarnation"))
            })
            .collect()
    }

    /// `history` as one line per change: revision, operation, holder, time since `t0`.
    pub(super) fn describe(&self, role: &str, t0: Instant) -> String {
        let key = format!("role.{role}");
        let changes = self
            .changes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::new();
        for (at, e) in changes.iter().filter(|(_, e)| e.key == key) {
            let holder = serde_json::from_slice::<serde_json::Value>(&e.value)
                .ok()
                .and_then(|v| v["holder"].as_str().map(str::to_owned))
                .unwrap_or_default();
            let since = if *at >= t0 {
                format!("+{:?}", at.duration_since(t0))
            } else {
                format!("-{:?}", t0.duration_since(*at))
            };
            out.push_str(&format!(
                "\n    rev {} {:?} {holder} at t0{since}",
                e.revision, e.operation
            ));
        }
        out
    }
}

impl Drop for KvRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Roles held by process `proc` according to `holders`.
pub(super) fn held_by(
    holders: &BTreeMap<String, (usize, u64)>,
    proc: usize,
) -> BTreeMap<String, u64> {
    holders
        .iter()
        .filter(|(_, (p, _))| *p == proc)
        .map(|(r, (_, t))| (r.clone(), *t))
        .collect()
}

/// The process holding the most roles.
pub(super) fn busiest(holders: &BTreeMap<String, (usize, u64)>) -> usize {
    let mut count: BTreeMap<usize, usize> = BTreeMap::new();
    for (p, _) in holders.values() {
        *count.entry(*p).or_default() += 1;
    }
    count
        .into_iter()
        .max_by_key(|(p, c)| (*c, std::cmp::Reverse(*p)))
        .expect("some holder")
        .0
}

pub(super) fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("nats-roles-processes-")
        .tempdir()
        .expect("create a temporary directory")
}
