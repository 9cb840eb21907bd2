//! Shared by the placement tests (`tests/processes/placement.rs`) and `examples/placement_bench.rs`: `nats-roles run`
//! processes with placement on, the bucket as ground truth (a KV watcher on `role.>`), and the
//! two scenarios (spreading over 3 → 5 → 4 → 3 instances; priority takeover) returning what
//! they measured. The callers decide what to assert or report.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures_util::StreamExt;
use tokio::process::Child;
use tokio::time::Instant;

use crate::faults::HarnessLog;
use crate::process::{SIGKILL, SIGTERM, signal};
use nats_roles::history::{Phase, TrialInfo};

pub const TTL: Duration = Duration::from_secs(2);
pub const STABILITY: Duration = Duration::from_secs(1);
pub const LEAVE_DELAY: Duration = Duration::from_secs(2);
pub const CLAIM_GRACE: Duration = Duration::from_millis(300);
pub fn roles(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("shard-{i:02}")).collect()
}

/// `names` without a priority each: placement spreads them.
pub fn without_priority(names: &[String]) -> Vec<(String, Option<i32>)> {
    names.iter().map(|r| (r.clone(), None)).collect()
}

/// A fresh temporary directory for a fleet's configs, logs and histories.
pub fn fleet_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("nats-roles-placement-")
        .tempdir()
        .unwrap_or_else(|e| panic!("temporary directory: {e}"))
}

/// A bucket name no other test uses: `<prefix>-<uuid>`.
pub fn unique_bucket(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// A `run` configuration with placement on: TTL 2 s, stability window 1 s, leave delay 2 s.
pub fn write_config(
    dir: &Path,
    name: &str,
    bucket: &str,
    roles: &[(String, Option<i32>)],
) -> PathBuf {
    write_config_pinned(dir, name, bucket, roles, &[])
}

/// [`write_config`] with `takeover: never` for the roles in `pinned`.
pub fn write_config_pinned(
    dir: &Path,
    name: &str,
    bucket: &str,
    roles: &[(String, Option<i32>)],
    pinned: &[&str],
) -> PathBuf {
    let mut yaml = format!(
        "bucket:\n  name: {bucket}\n  replicas: 1\n  auto_create: true\n\
         timing:\n  ttl: 2s\n  heartbeat: 500ms\n  operation_timeout: 1s\n  disconnect_grace: 2s\n\
         http:\n  enabled: false\n\
         placement:\n  enabled: true\n  stability_window: {}ms\n  leave_delay: {}ms\n  \
         claim_grace: {}ms\n  cooldown: 5s\n  move_budget: 100\n  move_interval: 1s\n\
         roles:\n",
        STABILITY.as_millis(),
        LEAVE_DELAY.as_millis(),
        CLAIM_GRACE.as_millis()
    );
    for (role, prio) in roles {
        yaml.push_str(&format!("  - name: {role}\n"));
        if let Some(p) = prio {
            yaml.push_str(&format!("    priority: {p}\n"));
        }
        if pinned.contains(&role.as_str()) {
            yaml.push_str("    takeover: never\n");
        }
    }
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// Turns on the HTTP API (port chosen by the OS) with `token` as admin token in the
/// configuration at `path`.
pub fn enable_admin_http(path: &Path, token: &str) {
    let yaml = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .replace(
            "http:\n  enabled: false\n",
            &format!("http:\n  listen: 127.0.0.1:0\n  admin_token: {token}\n"),
        );
    std::fs::write(path, yaml).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

pub struct Proc {
    id: String,
    child: Child,
    stderr: PathBuf,
    /// Wall-clock time of a SIGKILL: the process cannot act after it.
    killed_at: Option<time::OffsetDateTime>,
}

pub struct Fleet {
    pub bin: PathBuf,
    pub url: String,
    pub dir: tempfile::TempDir,
    pub procs: Vec<Proc>,
    /// The harness's part of the election history (`<dir>/history/harness.jsonl`); every
    /// process records its own part with `run --history` beside it.
    harness: HarnessLog,
}

impl Fleet {
    /// A fleet of `bin` processes against `url`, with logs and history under `dir`.
    pub fn new(bin: &Path, url: &str, dir: tempfile::TempDir) -> Fleet {
        let history = dir.path().join("history");
        std::fs::create_dir_all(&history)
            .unwrap_or_else(|e| panic!("create {}: {e}", history.display()));
        let trial = TrialInfo {
            kind: "placement".into(),
            ttl_ms: u64::try_from(TTL.as_millis()).expect("TTL fits in u64"),
            margin: 0.1,
            heartbeat_ms: Some(500),
            // 20-30 roles per process expire in nats-server's batches (up to ~500 ms apart),
            // and a vacancy preferred elsewhere waits out the claim grace first.
            expiry_slack_ms: Some(1_500),
            ..TrialInfo::default()
        };
        Fleet {
            bin: bin.to_owned(),
            url: url.to_owned(),
            harness: HarnessLog::create(&history, trial),
            dir,
            procs: Vec::new(),
        }
    }

    pub fn start(&mut self, id: &str, config: &Path) {
        let n = self.procs.len();
        let stderr = self.dir.path().join(format!("{n}-{id}.stderr"));
        let stdout = self.dir.path().join(format!("{n}-{id}.stdout"));
        let file = |p: &Path| std::fs::File::create(p).unwrap_or_else(|e| panic!("create: {e}"));
        let mut cmd = crate::cli::command(&self.bin);
        cmd.arg("run")
            .arg("--config")
            .arg(config)
            .args([
                "--instance-id",
                id,
                "--server",
                &self.url,
                "--log-format",
                "json",
            ])
            .arg("--history")
            .arg(self.dir.path().join("history").join(format!("{id}.jsonl")))
            .stdout(Stdio::from(file(&stdout)))
            .stderr(Stdio::from(file(&stderr)));
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.bin.display()));
        self.procs.push(Proc {
            id: id.to_owned(),
            child,
            stderr,
            killed_at: None,
        });
    }

    fn proc(&mut self, id: &str) -> &mut Proc {
        self.procs
            .iter_mut()
            .rev()
            .find(|p| p.id == id)
            .unwrap_or_else(|| panic!("no process {id}"))
    }

    /// The HTTP port of the latest process `id` (from its `http url=` line; HTTP must be on).
    pub async fn http_port(&self, id: &str) -> u16 {
        let n = self
            .procs
            .iter()
            .rposition(|p| p.id == id)
            .unwrap_or_else(|| panic!("no process {id}"));
        let stdout = self.dir.path().join(format!("{n}-{id}.stdout"));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&stdout).unwrap_or_default();
            if let Some(p) = text
                .lines()
                .find_map(|l| l.strip_prefix("http url=http://127.0.0.1:"))
                .and_then(|rest| rest.trim_end_matches('/').parse().ok())
            {
                return p;
            }
            assert!(Instant::now() < deadline, "no http url line: {text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn sigterm(&mut self, id: &str) {
        let p = self.proc(id);
        let pid = p.child.id().expect("running");
        signal(pid, SIGTERM);
        let status = tokio::time::timeout(Duration::from_secs(15), p.child.wait())
            .await
            .expect("graceful stop within 15 s")
            .expect("wait");
        assert!(status.success(), "{id} exited with {status}");
    }

    pub async fn sigkill(&mut self, id: &str) {
        self.harness.fault("sigkill", id, Phase::Start);
        let p = self.proc(id);
        let pid = p.child.id().expect("running");
        p.killed_at = Some(time::OffsetDateTime::now_utc());
        signal(pid, SIGKILL);
        let _ = p.child.wait().await;
    }

    /// Leadership intervals from every process's log: role -> [(process, term, from, to)].
    fn terms(&self) -> BTreeMap<String, Vec<(usize, u64, i128, i128)>> {
        let mut out: BTreeMap<String, Vec<(usize, u64, i128, i128)>> = BTreeMap::new();
        for (n, p) in self.procs.iter().enumerate() {
            let text = std::fs::read_to_string(&p.stderr).unwrap_or_default();
            let end = p.killed_at.map_or(i128::MAX, |t| t.unix_timestamp_nanos());
            let mut open: BTreeMap<String, (u64, i128)> = BTreeMap::new();
            for line in text.lines() {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                let msg = v["fields"]["message"].as_str().unwrap_or_default();
                let (Some(role), Some(term), Some(ts)) = (
                    v["span"]["role"].as_str(),
                    v["fields"]["term"].as_u64(),
                    v["timestamp"].as_str(),
                ) else {
                    continue;
                };
                let ts =
                    time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339)
                        .expect("RFC 3339 log timestamp")
                        .unix_timestamp_nanos();
                match msg {
                    "promoted" => {
                        open.insert(role.to_owned(), (term, ts));
                    }
                    "demoted" => {
                        if let Some((t, from)) = open.remove(role) {
                            out.entry(role.to_owned())
                                .or_default()
                                .push((n, t, from, ts));
                        }
                    }
                    _ => {}
                }
            }
            for (role, (t, from)) in open {
                out.entry(role).or_default().push((n, t, from, end));
            }
        }
        out
    }

    /// Stops the processes `ids` with SIGTERM (each must exit cleanly), in order.
    pub async fn stop_all(&mut self, ids: &[&str]) {
        for id in ids {
            self.sigterm(id).await;
        }
    }

    /// Asserts that no two processes held one role at the same time (from their own logs).
    pub fn assert_no_overlap(&self) {
        self.assert_no_overlap_except(&[]);
    }

    /// [`Fleet::assert_no_overlap`] for a run in which the roles `unholdable` cannot be held by
    /// anyone (the test denies it): the checker's liveness rule (L1, no holder while a
    /// candidate is alive) is expected to flag those roles and only those; every other rule
    /// and role is checked as usual.
    pub fn assert_no_overlap_except(&self, unholdable: &[&str]) {
        let mut checked = 0;
        for (role, mut iv) in self.terms() {
            iv.sort_by_key(|i| i.2);
            for w in iv.windows(2) {
                let (a, b) = (&w[0], &w[1]);
                assert!(
                    a.3 <= b.2,
                    "role {role}: {} (term {}) still leader when {} (term {}) was promoted \
                     ({} µs overlap)",
                    self.procs[a.0].id,
                    a.1,
                    self.procs[b.0].id,
                    b.1,
                    (a.3 - b.2) / 1000
                );
                assert!(
                    b.1 > a.1,
                    "role {role}: terms not increasing: {a:?} then {b:?}"
                );
                checked += 1;
            }
        }
        assert!(checked > 0, "no hand-over found in the logs");
        self.assert_history_clean_except(unholdable);
    }

    /// Checks the recorded election history (every process's `--history` file and the
    /// harness's faults) with the project's checker: one holder per term and revision, tokens
    /// only growing, no overlapping terms, acting only before the local deadline, every
    /// promote matched by a demote. On a violation the report and an HTML timeline are written
    /// beside the history and the test fails with the report.
    pub fn assert_history_clean(&self) {
        self.assert_history_clean_except(&[]);
    }

    /// [`Fleet::assert_history_clean`], tolerating L1 (liveness) violations of the roles
    /// `unholdable`, which the test makes impossible to hold.
    pub fn assert_history_clean_except(&self, unholdable: &[&str]) {
        let dir = self.dir.path().join("history");
        let loaded = nats_roles::history::load_paths(std::slice::from_ref(&dir))
            .unwrap_or_else(|e| panic!("load history {}: {e}", dir.display()));
        let mut report = nats_roles::history::check::check_loaded(&loaded);
        report.violations.retain(|v| {
            !(v.invariant == nats_roles::history::check::Invariant::L1
                && v.role.as_deref().is_some_and(|r| unholdable.contains(&r)))
        });
        if !report.is_clean() {
            // The fleet's directory is deleted with it: keep a copy of the history.
            let kept = std::env::temp_dir().join(format!(
                "nats-roles-placement-history-{}",
                uuid::Uuid::new_v4().simple()
            ));
            let _ = std::fs::create_dir_all(&kept);
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let _ = std::fs::copy(entry.path(), kept.join(entry.file_name()));
            }
            let _ = std::fs::write(
                kept.join("timeline.html"),
                nats_roles::history::render_html(&report),
            );
            panic!(
                "history check failed (history and timeline kept in {}):\n{}",
                kept.display(),
                report.render_text()
            );
        }
        assert!(
            report.stats.promotes > 0 && report.stats.demotes > 0,
            "the history recorded no terms: {}",
            report.render_text()
        );
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for (n, p) in self.procs.iter().enumerate() {
            let text = std::fs::read_to_string(&p.stderr).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!("----- last stderr lines of process {n} ({}) -----", p.id);
            for line in &lines[lines.len().saturating_sub(15)..] {
                eprintln!("{line}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The bucket as ground truth
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct Change {
    /// When the test's watcher saw it.
    pub at: Instant,
    pub role: String,
    /// `None`: a delete or expiry marker.
    pub holder: Option<String>,
    pub expired: bool,
}

#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<Change>>>);

impl Recorder {
    pub async fn start(url: &str, bucket: &str) -> (Recorder, tokio::task::JoinHandle<()>) {
        Recorder::start_on(crate::connect(url).await, bucket).await
    }

    /// [`Recorder::start`] on a connected client (e.g. one with credentials).
    pub async fn start_on(
        client: async_nats::Client,
        bucket: &str,
    ) -> (Recorder, tokio::task::JoinHandle<()>) {
        let js = jetstream::new(client);
        let store = loop {
            // The first instance creates the bucket.
            if let Ok(s) = js.get_key_value(bucket).await {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let mut watch = store
            .watch_with_history("role.>")
            .await
            .expect("watch role keys");
        let rec = Recorder::default();
        let log = rec.0.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(e)) = watch.next().await {
                let at = Instant::now();
                let role = e.key.trim_start_matches("role.").to_owned();
                let (holder, expired) = match e.operation {
                    kv::Operation::Put => {
                        let v: serde_json::Value =
                            serde_json::from_slice(&e.value).unwrap_or_default();
                        (v["holder"].as_str().map(str::to_owned), false)
                    }
                    kv::Operation::Delete => (None, false),
                    kv::Operation::Purge => (None, true),
                };
                log.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(Change {
                        at,
                        role,
                        holder,
                        expired,
                    });
            }
        });
        (rec, task)
    }

    pub fn changes(&self) -> Vec<Change> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Holder of every role at the end of the log (`None`: vacant).
    pub fn holders(&self) -> BTreeMap<String, Option<String>> {
        let mut h = BTreeMap::new();
        for c in self.changes() {
            h.insert(c.role, c.holder);
        }
        h
    }

    /// Ownership changes since `since`: puts whose holder differs from the role's last holder,
    /// and markers.
    pub fn moves_since(&self, since: Instant) -> Vec<Change> {
        let mut last: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut out = Vec::new();
        for c in self.changes() {
            let prev = last.insert(c.role.clone(), c.holder.clone());
            if c.at < since {
                continue;
            }
            let owner_changed = match (&c.holder, prev.as_ref().and_then(Option::as_ref)) {
                (Some(h), Some(p)) => h != p,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if owner_changed {
                out.push(c);
            }
        }
        out
    }

    /// Any change of ownership at all (new holder, delete, expiry) since `since`.
    pub fn churn_since(&self, since: Instant) -> usize {
        let mut last: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut n = 0;
        for c in self.changes() {
            let prev = last.insert(c.role.clone(), c.holder.clone());
            if c.at >= since && prev.as_ref() != Some(&c.holder) {
                n += 1;
            }
        }
        n
    }

    /// Vacancies since `since`: (marker was an expiry, time until the next put).
    pub fn gaps_since(&self, since: Instant) -> Vec<(String, bool, Duration)> {
        let mut open: BTreeMap<String, (Instant, bool)> = BTreeMap::new();
        let mut out = Vec::new();
        for c in self.changes() {
            if c.at < since {
                continue;
            }
            match &c.holder {
                None => {
                    open.insert(c.role.clone(), (c.at, c.expired));
                }
                Some(_) => {
                    if let Some((at, expired)) = open.remove(&c.role) {
                        out.push((c.role.clone(), expired, c.at - at));
                    }
                }
            }
        }
        for (role, (at, expired)) in open {
            out.push((role, expired, Instant::now() - at));
        }
        out
    }
}

/// Roles per live instance; panics on a role held by someone not in `live` or vacant.
pub fn loads(
    holders: &BTreeMap<String, Option<String>>,
    live: &[&str],
) -> Option<BTreeMap<String, usize>> {
    let mut per: BTreeMap<String, usize> = live.iter().map(|i| ((*i).to_owned(), 0)).collect();
    for h in holders.values() {
        let h = h.as_ref()?;
        *per.get_mut(h)? += 1;
    }
    Some(per)
}

pub fn spread(l: &BTreeMap<String, usize>) -> usize {
    l.values().max().copied().unwrap_or(0) - l.values().min().copied().unwrap_or(0)
}

/// Waits until every one of `n_roles` roles is held by a member of `live`, the spread is
/// at most 1 and nothing changed for `quiet`. Returns the time of the last ownership change
/// (convergence), or panics after `timeout`.
pub async fn converge(
    rec: &Recorder,
    n_roles: usize,
    live: &[&str],
    since: Instant,
    quiet: Duration,
    timeout: Duration,
) -> Instant {
    let deadline = Instant::now() + timeout;
    loop {
        let holders = rec.holders();
        // Ownership changes only (renewals are puts by the same holder).
        let moved = rec.moves_since(since).iter().map(|c| c.at).max();
        let vacated = rec
            .changes()
            .iter()
            .filter(|c| c.at >= since && c.holder.is_none())
            .map(|c| c.at)
            .max();
        let last = moved.max(vacated).unwrap_or(since);
        let ok = holders.len() == n_roles && loads(&holders, live).is_some_and(|l| spread(&l) <= 1);
        if ok && last.elapsed() >= quiet {
            return last;
        }
        assert!(
            Instant::now() < deadline,
            "no convergence within {timeout:?} on {live:?}: loads {:?}",
            loads(&holders, live).map_or_else(
                || format!("(not all held by live: {holders:?})"),
                |l| format!("{l:?}")
            )
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn counts(holders: &BTreeMap<String, Option<String>>) -> BTreeMap<String, usize> {
    let mut c = BTreeMap::new();
    for h in holders.values().flatten() {
        *c.entry(h.clone()).or_default() += 1;
    }
    c
}

/// Fewest moves to reach spread <= 1 on `live` from `before` (roles of instances not in
/// `live` must all move).
pub fn minimum_moves(before: &BTreeMap<String, Option<String>>, live: &[&str]) -> usize {
    let c = counts(before);
    let total = before.len();
    let (q, extra) = (total / live.len(), total % live.len());
    let mut held: Vec<usize> = live
        .iter()
        .map(|i| c.get(*i).copied().unwrap_or(0))
        .collect();
    held.sort_unstable_by(|a, b| b.cmp(a));
    let over: usize = held
        .iter()
        .enumerate()
        .map(|(i, h)| h.saturating_sub(q + usize::from(i < extra)))
        .sum();
    let orphans = before
        .values()
        .filter(|h| h.as_ref().is_none_or(|h| !live.contains(&h.as_str())))
        .count();
    over + orphans
}

/// One membership change and what it cost.
#[derive(Debug, Clone)]
pub struct Step {
    pub what: &'static str,
    /// Ownership changes after the change.
    pub moves: usize,
    /// Fewest ownership changes that reach spread <= 1 on the new membership.
    pub minimum: usize,
    /// From the change to the last ownership change (spread <= 1 from then on).
    pub converged: Duration,
}

/// What the spreading scenario measured.
#[derive(Debug)]
pub struct SpreadReport {
    pub steps: Vec<Step>,
    /// Vacancies of voluntary hand-overs (joins, graceful leave): delete marker to next put.
    pub voluntary_gaps: Vec<(String, Duration)>,
    /// Vacancies after the crash: expiry marker to next put.
    pub crash_gaps: Vec<(String, bool, Duration)>,
    /// From the SIGKILL to the last of the crashed instance's roles taken over.
    pub crash_takeover: Duration,
    /// Ownership changes during 10 TTLs of steady state.
    pub steady_churn: usize,
}

/// 60 roles: 3 instances, two join (5), one leaves gracefully (4), one is SIGKILLed (3), then
/// 10 TTLs of steady state. Leadership overlap is checked from the logs before returning.
pub async fn spread_scenario(bin: &Path, url: &str) -> SpreadReport {
    let dir = fleet_dir();
    let bucket = unique_bucket("place");
    let all = roles(60);
    let role_cfg = without_priority(&all);
    let config = write_config(dir.path(), "all", &bucket, &role_cfg);
    let mut fleet = Fleet::new(bin, url, dir);
    let mut steps: Vec<Step> = Vec::new();
    let step = |what: &'static str,
                before: &BTreeMap<String, Option<String>>,
                t: Instant,
                live: &[&str],
                last: Instant,
                rec: &Recorder| {
        let s = Step {
            what,
            moves: rec.moves_since(t).len(),
            minimum: minimum_moves(before, live),
            converged: last.saturating_duration_since(t),
        };
        eprintln!(
            "{what}: {} moves (minimum {}), converged after {:?}",
            s.moves, s.minimum, s.converged
        );
        s
    };

    let t0 = Instant::now();
    let abc = ["node-a", "node-b", "node-c"];
    for id in abc {
        fleet.start(id, &config);
    }
    let (rec, watch) = Recorder::start(url, &bucket).await;
    converge(
        &rec,
        60,
        &abc,
        t0,
        Duration::from_secs(1),
        Duration::from_secs(20),
    )
    .await;

    // Two join at once: 20 each -> 12 each.
    let mut live: Vec<&str> = abc.to_vec();
    let before = rec.holders();
    let t = Instant::now();
    fleet.start("node-d", &config);
    fleet.start("node-e", &config);
    live.extend(["node-d", "node-e"]);
    let bound = TTL * 3 + STABILITY * 3;
    let last = converge(&rec, 60, &live, t, Duration::from_secs(1), bound).await;
    steps.push(step("join 3->5", &before, t, &live, last, &rec));
    let voluntary_from = t;

    // A graceful leave: 12 each -> 15 each.
    let before = rec.holders();
    let t = Instant::now();
    fleet.sigterm("node-b").await;
    live.retain(|i| *i != "node-b");
    let bound = TTL * 3 + Duration::from_secs(2);
    let last = converge(&rec, 60, &live, t, Duration::from_secs(1), bound).await;
    steps.push(step("graceful leave 5->4", &before, t, &live, last, &rec));
    let voluntary_gaps = rec
        .gaps_since(voluntary_from)
        .into_iter()
        .filter(|(_, expired, _)| !expired)
        .map(|(r, _, g)| (r, g))
        .collect();

    // A crash: 15 each -> 20 each.
    let before = rec.holders();
    let t = Instant::now();
    fleet.sigkill("node-d").await;
    live.retain(|i| *i != "node-d");
    let bound = TTL * 3 + LEAVE_DELAY * 2;
    let last = converge(&rec, 60, &live, t, Duration::from_secs(1), bound).await;
    steps.push(step("SIGKILL 4->3", &before, t, &live, last, &rec));
    let crash_gaps = rec.gaps_since(t);
    let crash_takeover = rec
        .moves_since(t)
        .iter()
        .map(|c| c.at - t)
        .max()
        .unwrap_or_default();

    // Steady state: 10 TTLs.
    let steady_from = Instant::now();
    tokio::time::sleep(TTL * 10).await;
    let steady_churn = rec.churn_since(steady_from);

    fleet.stop_all(&["node-a", "node-c", "node-e"]).await;
    fleet.assert_no_overlap();
    watch.abort();
    SpreadReport {
        steps,
        voluntary_gaps,
        crash_gaps,
        crash_takeover,
        steady_churn,
    }
}

/// What the priority scenario measured.
#[derive(Debug)]
pub struct PriorityReport {
    /// Roles node-p prefers (priority 10; one of each earlier holder).
    pub wanted: BTreeSet<String>,
    /// The wanted roles that may move (not `takeover: never`).
    pub movable: BTreeSet<String>,
    /// Roles whose owner changed after node-p started.
    pub moved_in: BTreeSet<String>,
    /// From node-p's start to the first move.
    pub first_move: Duration,
    /// From node-p's start until it held every preferred role.
    pub all_moved: Duration,
    /// Vacancies of the moves to node-p: (role, was an expiry, length).
    pub gaps_in: Vec<(String, bool, Duration)>,
    /// Roles whose owner changed after node-p stopped.
    pub moved_back: BTreeSet<String>,
    /// Vacancies of the moves back.
    pub gaps_back: Vec<(String, bool, Duration)>,
    /// From node-p's SIGTERM to the last ownership change.
    pub back_after: Duration,
}

/// 12 roles on 3 instances; node-p starts with priority 10 for one role of each holder, then
/// stops gracefully. With `pin_first`, the holders mark `shard-00` `takeover: never` and
/// node-p wants it too. Leadership overlap is checked from the logs before returning.
pub async fn priority_scenario(bin: &Path, url: &str, pin_first: bool) -> PriorityReport {
    let dir = fleet_dir();
    let bucket = unique_bucket("prio");
    let all = roles(12);
    let role_cfg = without_priority(&all);
    let pinned: &[&str] = if pin_first { &["shard-00"] } else { &[] };
    let config = write_config_pinned(dir.path(), "all", &bucket, &role_cfg, pinned);
    let mut fleet = Fleet::new(bin, url, dir);
    let abc = ["node-a", "node-b", "node-c"];
    let t0 = Instant::now();
    for id in abc {
        fleet.start(id, &config);
    }
    let (rec, watch) = Recorder::start(url, &bucket).await;
    converge(
        &rec,
        12,
        &abc,
        t0,
        Duration::from_secs(1),
        Duration::from_secs(20),
    )
    .await;

    let holders = rec.holders();
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    let pinned_holder = holders.get("shard-00").cloned().flatten();
    for id in abc {
        let role = if pin_first && pinned_holder.as_deref() == Some(id) {
            "shard-00".to_owned()
        } else {
            holders
                .iter()
                .find(|(_, h)| h.as_deref() == Some(id))
                .map(|(r, _)| r.clone())
                .expect("every instance holds roles")
        };
        wanted.insert(role);
    }
    // The roles node-p can get: a pinned role stays where it is.
    let movable: BTreeSet<String> = wanted
        .iter()
        .filter(|r| !pinned.contains(&r.as_str()))
        .cloned()
        .collect();
    let prio_cfg: Vec<(String, Option<i32>)> =
        wanted.iter().map(|r| (r.clone(), Some(10))).collect();
    let p_config = write_config(fleet.dir.path(), "prio", &bucket, &prio_cfg);
    let t = Instant::now();
    fleet.start("node-p", &p_config);
    let deadline = Instant::now() + Duration::from_secs(15);
    let all_moved = loop {
        let h = rec.holders();
        if movable
            .iter()
            .all(|r| h.get(r).and_then(Option::as_deref) == Some("node-p"))
        {
            break t.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "node-p did not get {movable:?}: {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Anything else that would move does so within a TTL.
    tokio::time::sleep(TTL).await;
    let moved_in: BTreeSet<String> = rec.moves_since(t).into_iter().map(|c| c.role).collect();
    let first_move = rec
        .moves_since(t)
        .iter()
        .map(|c| c.at - t)
        .min()
        .unwrap_or_default();
    let gaps_in = rec.gaps_since(t);

    let t = Instant::now();
    fleet.sigterm("node-p").await;
    let last = converge(
        &rec,
        12,
        &abc,
        t,
        Duration::from_secs(1),
        Duration::from_secs(10),
    )
    .await;
    let moved_back: BTreeSet<String> = rec.moves_since(t).into_iter().map(|c| c.role).collect();
    let gaps_back = rec.gaps_since(t);
    fleet.stop_all(&abc).await;
    fleet.assert_no_overlap();
    watch.abort();
    PriorityReport {
        wanted,
        movable,
        moved_in,
        first_move,
        all_moved,
        gaps_in,
        moved_back,
        gaps_back,
        back_after: last.saturating_duration_since(t),
    }
}
