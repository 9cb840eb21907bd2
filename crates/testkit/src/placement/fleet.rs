//! `nats-roles run` processes with placement on, their logs and histories.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Child;
use tokio::time::Instant;

use crate::faults::HarnessLog;
use crate::process::{SIGKILL, SIGTERM, signal};
use nats_roles::tooling::history::{Phase, TrialInfo};

use super::*;

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

    /// The HTTP port of the latest process `id` (from its `http url=` line; HTTP must be on),
    /// once its manager has started (`run` serves HTTP while it starts).
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
                if let Err(e) = crate::instances::wait_started(p, Duration::from_secs(10)).await {
                    panic!("{id}: {e}");
                }
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

    /// SIGTERM to every process of `ids` at once, then waits for each to exit cleanly.
    pub async fn sigterm_all(&mut self, ids: &[&str]) {
        for id in ids {
            let pid = self.proc(id).child.id().expect("running");
            signal(pid, SIGTERM);
        }
        for id in ids {
            let p = self.proc(id);
            let status = tokio::time::timeout(Duration::from_secs(15), p.child.wait())
                .await
                .expect("graceful stop within 15 s")
                .expect("wait");
            assert!(status.success(), "{id} exited with {status}");
        }
    }

    pub async fn sigkill(&mut self, id: &str) {
        self.harness.fault("sigkill", id, Phase::Start);
        let p = self.proc(id);
        let pid = p.child.id().expect("running");
        p.killed_at = Some(time::OffsetDateTime::now_utc());
        signal(pid, SIGKILL);
        let _ = p.child.wait().await;
    }

    /// Leadership intervals from every process's log: role -> [(process, term, from, to,
    /// graceful)], `graceful` when the term ended by a release (its `demoted` line is written
    /// before the release is sent) or the process was killed (at `to`).
    #[allow(clippy::type_complexity)]
    fn terms(&self) -> BTreeMap<String, Vec<(usize, u64, i128, i128, bool)>> {
        let mut out: BTreeMap<String, Vec<(usize, u64, i128, i128, bool)>> = BTreeMap::new();
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
                        let reason = v["fields"]["reason"].as_str().unwrap_or_default();
                        let graceful = matches!(
                            reason,
                            "shutdown" | "released" | "placement" | "move" | "unhealthy"
                        );
                        if let Some((t, from)) = open.remove(role) {
                            out.entry(role.to_owned())
                                .or_default()
                                .push((n, t, from, ts, graceful));
                        }
                    }
                    _ => {}
                }
            }
            for (role, (t, from)) in open {
                out.entry(role).or_default().push((n, t, from, end, true));
            }
        }
        out
    }

    /// Stops the processes `ids` with SIGTERM (each must exit cleanly), in order, then checks
    /// from the logs that no two processes led a role at once, except the roles `unholdable`
    /// (see [`assert_no_overlap_except`](Self::assert_no_overlap_except)).
    pub async fn stop_and_check(&mut self, ids: &[&str], unholdable: &[&str]) {
        for id in ids {
            self.sigterm(id).await;
        }
        self.assert_no_overlap_except(unholdable);
    }

    /// Asserts that no two processes held one role at the same time (from their own logs). In a
    /// run in which the roles `unholdable` cannot be held by anyone (the test denies it), the
    /// checker's liveness rule (L1, no holder while a candidate is alive) is expected to flag
    /// those roles and only those; every other rule and role is checked as usual.
    pub fn assert_no_overlap_except(&self, unholdable: &[&str]) {
        let mut checked = 0;
        for (role, mut iv) in self.terms() {
            iv.sort_by_key(|i| i.2);
            for w in iv.windows(2) {
                let (a, b) = (&w[0], &w[1]);
                // A term lost to a session expiry, a takeover or its deadline is logged when its
                // process hears of it, which a starved process does late: it stopped acting at
                // its deadline anyway, which the history check below judges (S4, S5) from the
                // deadlines. A released term's line is written before its release is sent, so
                // it always precedes the successor's promotion: checked here.
                assert!(
                    !a.4 || a.3 <= b.2,
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
        let loaded = nats_roles::tooling::history::load_paths(std::slice::from_ref(&dir))
            .unwrap_or_else(|e| panic!("load history {}: {e}", dir.display()));
        let mut report = nats_roles::tooling::history::check::check_loaded(&loaded);
        report.violations.retain(|v| {
            !(v.invariant == nats_roles::tooling::history::check::Invariant::L1
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
                nats_roles::tooling::history::render_html(&report),
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
