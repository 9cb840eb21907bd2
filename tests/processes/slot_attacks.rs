//! Roles with slots (protocol Q15) attacked as an outsider would, with real `nats-roles`
//! processes, real `exec` children and a real nats-server, all at once (one bucket each):
//! the process group of an `exec --slots 2` holder stopped past its TTL; a `run` instance
//! whose exec role has slots stopped past its TTL, then a slot holder evicted; the bucket
//! reset (stream purged, stream deleted and recreated) while both slots are held by stopped
//! holders and fresh processes start right after it; another client's damaged values on a slot's
//! role key, on a holder's session key and on stray keys of the role; instances started with
//! another slot count than the bucket records (refused: `exec` exits 78, `run` fails its start).
//!
//! Each run is judged twice: from the children's own view (each appends a timestamped line
//! every 50 ms; a child's run is its first to its last line) — never two children on one slot,
//! never more than two children at once, never one instance with two — and by the history
//! checker over the recorded histories (S1–S7).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use testkit::NatsServer;
use testkit::instances::Deployment;
use testkit::process::{SIGCONT, SIGSTOP, SIGTERM, own_group, signal, signal_group};
use tokio::process::Child;
use tokio::time::Instant;

const LIMIT: Duration = Duration::from_secs(20);

/// How long a stopped holder stays stopped: past its TTL (2 s) and the successor's backstop.
const STOPPED: Duration = Duration::from_millis(3500);

/// How late past the holder's deadline a child killed by its watchdog at the kill deadline
/// may be recorded gone ([`Scene::assert_history_clean`]).
const S5_SLACK_MS: f64 = 100.0;

/// The S4 tolerance where another party's write ends a term (an eviction, a damaged value):
/// that race is milliseconds (the holder's child is killed when its watcher delivers the
/// write, the successor is promoted after its acquire; protocol Q12), as in
/// `exec_faults.rs`.
const LOSS_EPSILON_MS: u64 = 25;

/// The child: a line `<instance> <slot> <pid> <unix µs>` to `$TICKS` every 50 ms until killed
/// (or stopped gracefully). Bash builtins only (no `date` or `sleep` process per line: a dozen
/// children at once must not load the machine): the wait is a read with a timeout on a pipe
/// nobody writes to.
const CHILD: &str = r#"#!/bin/bash
trap 'exit 0' TERM
exec 3<> <(:)
while :; do
  echo "$NATS_ROLES_INSTANCE $NATS_ROLES_SLOT $$ ${EPOCHREALTIME/[.,]/}" >> "$TICKS"
  read -r -t 0.05 -u 3
done
"#;

/// One child's run as it saw it: its first and last line (Unix ns).
#[derive(Debug, Clone)]
struct Run {
    instance: String,
    slot: String,
    pid: u32,
    first: u64,
    last: u64,
}

/// A directory with the child script, its ticks and the histories.
struct Scene {
    dir: tempfile::TempDir,
    url: String,
    bucket: String,
}

impl Scene {
    fn new(server: &NatsServer, bucket: &str) -> Scene {
        let dir = tempfile::Builder::new()
            .prefix("nats-roles-slot-attacks-")
            .tempdir()
            .expect("temp dir");
        let script = dir.path().join("child.sh");
        std::fs::write(&script, CHILD).expect("write the child");
        super::exec::make_executable(&script);
        Scene {
            dir,
            url: server.url(),
            bucket: bucket.to_owned(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn ticks(&self) -> PathBuf {
        self.path().join("ticks")
    }

    /// `nats-roles exec --role sem --slots 2 --ttl 2s` as instance `id` (its own process group,
    /// its history in the scene's directory) running the child.
    fn exec(&self, id: &str) -> Child {
        self.exec_slots(id, 2)
    }

    /// [`Scene::exec`] with `--slots slots`.
    fn exec_slots(&self, id: &str, slots: u32) -> Child {
        let mut cmd = testkit::cli::command(testkit::nats_roles_bin());
        cmd.args(["exec", "--role", "sem", "--slots", &slots.to_string()])
            .arg("--auto-create")
            .args(["-s", &self.url, "--bucket", &self.bucket, "--ttl", "2s"])
            .args(["--instance-id", id, "--history"])
            .arg(self.path().join(format!("{id}.jsonl")))
            .arg("--")
            .arg(self.path().join("child.sh"))
            .env("TICKS", self.ticks())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.stderr_path(id)).expect("stderr file"));
        own_group(&mut cmd);
        cmd.spawn().expect("spawn nats-roles exec")
    }

    fn stderr_path(&self, id: &str) -> PathBuf {
        self.path().join(format!("{id}.stderr"))
    }

    fn stderr(&self, id: &str) -> String {
        std::fs::read_to_string(self.stderr_path(id)).unwrap_or_default()
    }

    /// The children's runs, from their lines.
    fn runs(&self) -> Vec<Run> {
        let text = std::fs::read_to_string(self.ticks()).unwrap_or_default();
        let mut runs: BTreeMap<(String, String, u32), (u64, u64)> = BTreeMap::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [instance, slot, pid, t] = f[..] else {
                continue; // a line cut by a kill
            };
            let (Ok(pid), Ok(t)) = (pid.parse::<u32>(), t.parse::<u64>()) else {
                continue;
            };
            let t = t * 1000;
            let run = runs
                .entry((instance.to_owned(), slot.to_owned(), pid))
                .or_insert((t, t));
            run.0 = run.0.min(t);
            run.1 = run.1.max(t);
        }
        runs.into_iter()
            .map(|((instance, slot, pid), (first, last))| Run {
                instance,
                slot,
                pid,
                first,
                last,
            })
            .collect()
    }

    /// Slot -> instance of the children that wrote a line in the last 400 ms.
    fn holders(&self) -> BTreeMap<String, String> {
        let now = unix_ns();
        self.runs()
            .into_iter()
            .filter(|r| now.saturating_sub(r.last) < 400_000_000)
            .map(|r| (r.slot, r.instance))
            .collect()
    }

    /// Waits until the children's holders satisfy `ok`; returns them.
    async fn wait_holders(
        &self,
        what: &str,
        ok: impl Fn(&BTreeMap<String, String>) -> bool,
    ) -> BTreeMap<String, String> {
        let until = Instant::now() + LIMIT;
        loop {
            let h = self.holders();
            if ok(&h) {
                return h;
            }
            assert!(
                Instant::now() < until,
                "{}: {what}: holders {h:?}\n{:?}",
                self.bucket,
                self.runs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The children's own view: on each slot one child at a time, never more than two children
    /// at once, never one instance with two at once. Returns the runs.
    fn assert_children_safe(&self) -> Vec<Run> {
        let runs = self.runs();
        for r in &runs {
            eprintln!(
                "{}: child of {} on slot {} (pid {}): {:.3} s",
                self.bucket,
                r.instance,
                r.slot,
                r.pid,
                (r.last - r.first) as f64 / 1e9
            );
        }
        assert!(!runs.is_empty(), "{}: no child ran", self.bucket);
        for (i, a) in runs.iter().enumerate() {
            for b in &runs[i + 1..] {
                let overlap = a.first <= b.last && b.first <= a.last;
                assert!(
                    !(overlap && a.slot == b.slot),
                    "{}: two children on slot {} (pids {} and {}): {a:?} and {b:?}",
                    self.bucket,
                    a.slot,
                    a.pid,
                    b.pid
                );
                assert!(
                    !(overlap && a.instance == b.instance),
                    "{}: instance {} ran two children at once: {a:?} and {b:?}",
                    self.bucket,
                    a.instance
                );
            }
            let at_once = runs
                .iter()
                .filter(|b| b.first <= a.first && a.first <= b.last)
                .count();
            assert!(
                at_once <= 2,
                "{}: {at_once} children at once when {a:?} started: {runs:?}",
                self.bucket
            );
        }
        runs
    }

    /// `history check` over the scene's histories: clean — but for a child that a watchdog
    /// killed at its kill deadline (50 ms before the holder's deadline `d_A`) and that was
    /// recorded gone less than [`S5_SLACK_MS`] after `d_A`: on a saturated machine the kill
    /// and the reap of the group take longer than those 50 ms (measured up to 37 ms past
    /// `d_A` with four busy loops on two cores). Such a late stop is still far inside the
    /// TTL's margin (a successor is promoted only after the session expired on the server,
    /// at least `ttl × margin` = 200 ms after `d_A`), and an overlap with a successor is S4,
    /// which is never tolerated (beyond the trial's `epsilon_ms`).
    async fn assert_history_clean(&self) {
        let dir = self.path().display().to_string();
        let out = testkit::cli::run(&["history", "check", "--json", &dir], &[], LIMIT).await;
        let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
            panic!("{}: history check --json: {e}\n{}", self.bucket, out.text())
        });
        let violations = report["violations"].as_array().cloned().unwrap_or_default();
        let late_kill = |v: &serde_json::Value| {
            let message = v["message"].as_str().unwrap_or_default();
            v["invariant"] == "S5"
                && message.contains("(its watchdog held the kill deadline")
                && message
                    .split_once(" ran ")
                    .and_then(|(_, rest)| rest.split_once(" ms past the term's deadline"))
                    .and_then(|(ms, _)| ms.parse::<f64>().ok())
                    .is_some_and(|ms| ms < S5_SLACK_MS)
        };
        let (late, other): (Vec<_>, Vec<_>) = violations.iter().partition(|v| late_kill(v));
        assert!(
            other.is_empty() && out.code == Some(u8::from(!late.is_empty()).into()),
            "{}: {}",
            self.bucket,
            serde_json::to_string_pretty(&violations).unwrap_or_default()
        );
        for v in late {
            eprintln!("{}: tolerated: {}", self.bucket, v["message"]);
        }
        let stats = &report["stats"];
        eprintln!(
            "{}: histories judged: {} promotes, {} command runs",
            self.bucket, stats["promotes"], stats["child_runs"]
        );
    }

    /// The harness's `trial` line (TTL 2 s, heartbeat 500 ms): S4 tolerates `epsilon_ms`.
    fn write_trial(&self, epsilon_ms: u64) {
        let line = serde_json::json!({
            "mono_ns": testkit::process::mono_now_ns(), "src": "harness", "node": "harness",
            "ev": "trial", "seed": 0, "kind": self.bucket, "ttl_ms": 2000, "margin": 0.1,
            "clock": 1.0, "heartbeat_ms": 500, "epsilon_ms": epsilon_ms,
        });
        std::fs::write(self.path().join("harness.jsonl"), format!("{line}\n"))
            .expect("harness.jsonl");
    }
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn pid(child: &Child) -> u32 {
    child.id().expect("a running process")
}

/// Waits for `child` to exit; its exit code.
async fn exit_code(child: &mut Child, what: &str) -> Option<i32> {
    match tokio::time::timeout(LIMIT, child.wait()).await {
        Ok(Ok(status)) => status.code(),
        Ok(Err(e)) => panic!("{what}: wait: {e}"),
        Err(_) => panic!("{what} did not exit within {LIMIT:?}"),
    }
}

/// SIGTERM to each `exec` still running, then its exit: 0 (the child stops gracefully) — or 130
/// for one still waiting for a slot.
async fn stop_all(s: &Scene, execs: &mut BTreeMap<String, Child>) {
    for child in execs.values_mut() {
        if let (Ok(None), Some(p)) = (child.try_wait(), child.id()) {
            signal(p, SIGTERM);
        }
    }
    for (id, child) in execs.iter_mut() {
        let code = exit_code(child, id).await;
        assert!(
            matches!(code, Some(0 | 1 | 130)),
            "{}: {id} exited {code:?}: {}",
            s.bucket,
            s.stderr(id)
        );
    }
}

/// A stopped holder's end, as `exec` reports it: exit 1, the role lost while the command ran.
async fn assert_lost(s: &Scene, execs: &mut BTreeMap<String, Child>, id: &str) {
    let child = execs.get_mut(id).expect("the exec");
    let code = exit_code(child, id).await;
    let err = s.stderr(id);
    assert_eq!(code, Some(1), "{}: {id}: {err}", s.bucket);
    assert!(
        err.contains("lost role sem while the command ran"),
        "{}: {id}: {err}",
        s.bucket
    );
}

/// Three `exec --slots 2`; the process group of slot 0's holder is stopped past its TTL: the
/// waiting third takes slot 0 only after the stopped holder's child is gone (its watchdog, in
/// a session of its own, kills it at the deadline); resumed, the holder exits 1 (the role was
/// lost while the command ran), not 137.
async fn stopped_exec_holder(server: &NatsServer) {
    let s = Scene::new(server, "satk-stop");
    let mut execs: BTreeMap<String, Child> = ["x", "y", "z"]
        .into_iter()
        .map(|id| (id.to_owned(), s.exec(id)))
        .collect();
    let before = s.wait_holders("two holders", |h| h.len() == 2).await;
    let victim = before["0"].clone();
    let idle = ["x", "y", "z"]
        .into_iter()
        .find(|id| !before.values().any(|h| h == id))
        .expect("a waiting exec");
    let group = pid(&execs[&victim]);
    signal_group(group, SIGSTOP);
    let stopped = Instant::now();
    s.wait_holders("slot 0 taken by the waiting exec", |h| {
        h.get("0").map(String::as_str) == Some(idle)
    })
    .await;
    tokio::time::sleep(STOPPED.saturating_sub(stopped.elapsed())).await;
    signal_group(group, SIGCONT);
    assert_lost(&s, &mut execs, &victim).await;
    stop_all(&s, &mut execs).await;
    s.assert_children_safe();
    s.assert_history_clean().await;
}

/// Three `run` instances, role `sem` with two slots and an exec child: the group of slot 0's
/// holder is stopped past its TTL (the idle instance takes slot 0, the stopped one resumes
/// without it); then slot 1's holder is evicted twice (`nats-roles evict sem.1`): its child is
/// killed at once, the slot goes to an instance without one, never one instance on two.
async fn stopped_run_holder_and_evictions(server: &NatsServer) {
    let s = Scene::new(server, "satk-run");
    s.write_trial(LOSS_EPSILON_MS);
    let role = format!(
        "sem\n    slots: 2\n    exec:\n      command: [{}]\n      env: {{TICKS: {}}}",
        s.path().join("child.sh").display(),
        s.ticks().display()
    );
    let mut d = Deployment::new(
        &s.url,
        &s.bucket,
        &[&role],
        "timing:\n  ttl: 2s\n  heartbeat: 500ms\n",
    );
    d.arg("--history");
    d.arg(&format!("{}/{{id}}.jsonl", s.path().display()));
    d.own_process_groups();
    let ids = ["node-a", "node-b", "node-c"];
    for id in ids {
        d.spawn(id).await;
    }
    let index = |d: &Deployment, id: &str| {
        d.instances
            .iter()
            .position(|i| i.id == id)
            .expect("an instance")
    };
    let distinct = |h: &BTreeMap<String, String>| h.len() == 2 && h["0"] != h["1"];
    let before = s.wait_holders("two holders", distinct).await;
    let victim = index(&d, &before["0"]);
    signal_group(d.instances[victim].pid(), SIGSTOP);
    let stopped = Instant::now();
    let after = s
        .wait_holders("slot 0 taken by the idle instance", |h| {
            h.get("0").is_some_and(|x| !before.values().any(|b| b == x))
        })
        .await;
    tokio::time::sleep(STOPPED.saturating_sub(stopped.elapsed())).await;
    signal_group(d.instances[victim].pid(), SIGCONT);
    assert_eq!(after.get("1"), before.get("1"), "slot 1 changed hands");
    for _ in 0..2 {
        let held = s.wait_holders("two holders", distinct).await;
        let out = testkit::cli::run(
            &[
                "evict", "sem.1", "--yes", "-s", &s.url, "--bucket", &s.bucket,
            ],
            &[],
            LIMIT,
        )
        .await;
        assert_eq!(out.code, Some(0), "{}", out.text());
        s.wait_holders("slot 1 taken by another instance", |h| {
            distinct(h) && h["1"] != held["1"]
        })
        .await;
    }
    for i in 0..d.instances.len() {
        d.terminate(i);
    }
    for i in 0..d.instances.len() {
        d.wait_exit(i, LIMIT).await;
    }
    s.assert_children_safe();
    s.assert_history_clean().await;
}

/// Both slots held by `exec`s whose process groups are then stopped; the bucket is reset
/// under them (`purge`: the stream purged, no markers; else the stream deleted, and the fresh
/// processes recreate the bucket) and two fresh `exec`s start right after: they take the slots
/// only once the stopped holders' children are gone; resumed, the old holders exit 1.
async fn bucket_reset_under_stopped_holders(server: &NatsServer, purge: bool) {
    let s = Scene::new(server, if purge { "satk-purge" } else { "satk-delete" });
    let mut execs: BTreeMap<String, Child> = ["x", "y"]
        .into_iter()
        .map(|id| (id.to_owned(), s.exec(id)))
        .collect();
    s.wait_holders("both slots held", |h| h.len() == 2).await;
    let groups: Vec<u32> = execs.values().map(pid).collect();
    for g in &groups {
        signal_group(*g, SIGSTOP);
    }
    let stopped = Instant::now();
    let js = async_nats::jetstream::new(testkit::client::connect(&s.url).await);
    let stream = format!("KV_{}", s.bucket);
    if purge {
        js.get_stream(&stream)
            .await
            .expect("the bucket's stream")
            .purge()
            .await
            .expect("purge the stream");
    } else {
        js.delete_stream(&stream).await.expect("delete the stream");
    }
    for id in ["z", "w"] {
        execs.insert(id.to_owned(), s.exec(id));
    }
    s.wait_holders("both slots taken by the fresh execs", |h| {
        h.len() == 2 && h.values().all(|x| x == "z" || x == "w")
    })
    .await;
    tokio::time::sleep(STOPPED.saturating_sub(stopped.elapsed())).await;
    for g in &groups {
        signal_group(*g, SIGCONT);
    }
    for id in ["x", "y"] {
        assert_lost(&s, &mut execs, id).await;
    }
    stop_all(&s, &mut execs).await;
    s.assert_children_safe();
    s.assert_history_clean().await;
}

/// Another client writes damaged values: stray keys of the role (`role.sem.5`, `role.sem`,
/// `role.sem.00`) change nothing; garbage on slot `k`'s role key ends its holder's term (its
/// child killed at once, exit 1) and the waiting exec takes the slot over; garbage on the
/// other holder's session key ends that one's term too.
async fn damaged_values(server: &NatsServer) {
    let s = Scene::new(server, "satk-damaged");
    s.write_trial(LOSS_EPSILON_MS);
    let mut execs: BTreeMap<String, Child> = ["x", "y", "z"]
        .into_iter()
        .map(|id| (id.to_owned(), s.exec(id)))
        .collect();
    let before = s.wait_holders("two holders", |h| h.len() == 2).await;
    let js = async_nats::jetstream::new(testkit::client::connect(&s.url).await);
    let kv = js.get_key_value(&s.bucket).await.expect("the bucket");
    for key in ["role.sem.5", "role.sem", "role.sem.00"] {
        kv.put(key, "\u{fffd}garbage".into()).await.expect("put");
    }
    let (first, second) = (before["0"].clone(), before["1"].clone());
    kv.put("role.sem.0", b"\xff\xfe not a lease".to_vec().into())
        .await
        .expect("put");
    assert_lost(&s, &mut execs, &first).await;
    s.wait_holders("slot 0 taken over by the waiting exec", |h| {
        h.get("0").is_some_and(|x| *x != first && *x != second)
    })
    .await;
    kv.put(
        &format!("session.{second}.2000"),
        br#"{"v":2,"uuid":"forged"}"#.to_vec().into(),
    )
    .await
    .expect("put");
    assert_lost(&s, &mut execs, &second).await;
    stop_all(&s, &mut execs).await;
    s.assert_children_safe();
    s.assert_history_clean().await;
}

/// Two `exec --slots 2` hold both slots; then `exec --slots 3`, `exec --slots 4` and a `run`
/// instance whose role `sem` has `slots: 3` start: each is refused by the slot count record
/// the first exec wrote (`control.slots.sem`, protocol Q15) — `exec` exits 78 and `run` fails
/// its start, both naming the recorded count — and no third child ever runs.
async fn slot_count_mismatch(server: &NatsServer) {
    let s = Scene::new(server, "satk-count");
    let mut execs: BTreeMap<String, Child> = ["x", "y"]
        .into_iter()
        .map(|id| (id.to_owned(), s.exec(id)))
        .collect();
    s.wait_holders("both slots held", |h| h.len() == 2).await;
    let mut refused: Vec<(&str, Child)> =
        vec![("z", s.exec_slots("z", 3)), ("w", s.exec_slots("w", 4))];
    let role = format!(
        "sem\n    slots: 3\n    exec:\n      command: [{}]\n      env: {{TICKS: {}}}",
        s.path().join("child.sh").display(),
        s.ticks().display()
    );
    let mut d = Deployment::new(&s.url, &s.bucket, &[&role], "");
    d.spawn("node-r").await;
    for (id, child) in &mut refused {
        let code = exit_code(child, id).await;
        let err = s.stderr(id);
        assert_eq!(code, Some(78), "{}: {id}: {err}", s.bucket);
        assert!(
            err.contains("control.slots.sem records 2"),
            "{}: {id}: {err}",
            s.bucket
        );
    }
    let status = d.wait_exit(0, LIMIT).await;
    let err = d.instances[0].stderr();
    assert_eq!(status.code(), Some(1), "{}: run: {err}", s.bucket);
    assert!(
        err.contains("has 3 slot(s) here") && err.contains("records 2"),
        "{}: run: {err}",
        s.bucket
    );
    assert_eq!(s.holders().len(), 2, "{}: {:?}", s.bucket, s.runs());
    stop_all(&s, &mut execs).await;
    let runs = s.assert_children_safe();
    assert!(
        runs.iter().all(|r| r.instance == "x" || r.instance == "y"),
        "{}: a refused instance ran a child: {runs:?}",
        s.bucket
    );
    s.assert_history_clean().await;
}

/// All the attacks at once, each on its own bucket of one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_under_stops_evictions_bucket_resets_and_damaged_values() {
    let server = NatsServer::start().await;
    tokio::join!(
        stopped_exec_holder(&server),
        stopped_run_holder_and_evictions(&server),
        bucket_reset_under_stopped_holders(&server, true),
        bucket_reset_under_stopped_holders(&server, false),
        damaged_values(&server),
        slot_count_mismatch(&server),
    );
}

/// The children's view flags what it must: two children on one slot, three at once, one
/// instance with two (lines written by hand).
#[test]
fn the_children_s_view_flags_overlaps() {
    let flagged = |lines: &str| {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("ticks"), lines).expect("ticks");
        let s = Scene {
            dir,
            url: String::new(),
            bucket: "synthetic".into(),
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.assert_children_safe())).is_err()
    };
    assert!(!flagged(
        "x 0 1 10\nx 0 1 20\ny 0 2 30\ny 0 2 40\nz 1 3 15\n"
    ));
    assert!(flagged("x 0 1 10\nx 0 1 30\ny 0 2 20\ny 0 2 40\n"));
    assert!(flagged(
        "x 0 1 10\nx 0 1 30\ny 1 2 20\ny 1 2 40\nz 2 3 25\nz 2 3 50\n"
    ));
    assert!(flagged("x 0 1 10\nx 0 1 30\nx 1 2 20\nx 1 2 40\n"));
}
