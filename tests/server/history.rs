//! The history recorder and checker end to end: real nats-server, `chaos_node` workload
//! processes, real signals. A SIGKILL of a holder must check clean; each negative control
//! (built with `--features negative-controls`) must be flagged.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nats_roles::tooling::history::{
    Event, Phase, Record, Report, TrialInfo, check_loaded, load_paths, mono_now_ns,
};
use testkit::NatsServer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Spawns a command with `RUST_LOG=warn`, stdout piped and killed on drop.
trait SpawnQuiet {
    fn spawn_quiet(&mut self, what: &str) -> Child;
}

impl SpawnQuiet for Command {
    fn spawn_quiet(&mut self, what: &str) -> Child {
        self.env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"))
    }
}

/// The compiled `chaos_node` example (cargo builds examples for integration tests).
fn chaos_node_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target directory");
    let path = dir.join("examples").join("chaos_node");
    assert!(
        path.exists(),
        "example binary {} is missing: run `cargo build --examples` first",
        path.display()
    );
    path
}

/// A running `chaos_node` and the lines it printed.
struct Node {
    id: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Node {
    async fn start(server: &NatsServer, dir: &Path, id: &str, extra: &[&str]) -> Node {
        let mut child = Command::new(chaos_node_bin())
            .args(["--id", id, "--nats", &server.url(), "--bucket", "hist"])
            .args(["--history", &dir.display().to_string()])
            .args(extra)
            .spawn_quiet("chaos_node");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().expect("stdout");
        let sink = lines.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(out).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().expect("lines").push(line);
            }
        });
        let node = Node {
            id: id.to_string(),
            child,
            lines,
        };
        node.wait_line("ready", Duration::from_secs(20)).await;
        node
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    fn printed(&self, needle: &str) -> bool {
        self.lines
            .lock()
            .expect("lines")
            .iter()
            .any(|l| l.contains(needle))
    }

    /// Whether this node holds `role` according to its last promote/demote line.
    fn holds(&self, role: &str) -> bool {
        let lines = self.lines.lock().expect("lines");
        let p = format!("promoted role={role} ");
        let d = format!("demoted role={role} ");
        lines
            .iter()
            .rev()
            .find(|l| l.starts_with(&p) || l.starts_with(&d))
            .is_some_and(|l| l.starts_with(&p))
    }

    async fn wait_line(&self, needle: &str, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while !self.printed(needle) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} did not print {needle:?} within {within:?}: {:?}",
                self.id,
                self.lines.lock().expect("lines")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn signal(&self, sig: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{sig}"), self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{sig} {}", self.id);
    }

    /// SIGTERM, then waits for a clean exit.
    async fn terminate(mut self) {
        self.signal("TERM");
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit after SIGTERM", self.id))
            .expect("wait");
        assert!(status.success(), "{} exited with {status}", self.id);
    }

    async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The harness's own history file.
struct Harness {
    path: PathBuf,
}

impl Harness {
    fn new(dir: &Path, trial: TrialInfo) -> Harness {
        let h = Harness {
            path: dir.join("harness.jsonl"),
        };
        h.write(None, Event::Trial(trial));
        h
    }

    fn write(&self, role: Option<&str>, event: Event) {
        use std::io::Write;
        let line = Record::harness(mono_now_ns(), role, event).to_line();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .expect("harness file");
        writeln!(f, "{line}").expect("write harness line");
    }

    fn fault(&self, what: &str, target: &str, phase: Phase) {
        self.write(
            None,
            Event::Fault {
                what: what.into(),
                target: target.into(),
                phase,
            },
        );
    }
}

fn trial(kind: &str, ttl_ms: u64) -> TrialInfo {
    TrialInfo {
        seed: 0,
        kind: kind.into(),
        ttl_ms,
        margin: 0.1,
        clock: 1.0,
        heartbeat_ms: Some(ttl_ms / 4),
        ..TrialInfo::default()
    }
}

async fn wait_holder<'a>(nodes: &'a [Node], role: &str, not: Option<&str>) -> &'a Node {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(n) = nodes
            .iter()
            .find(|n| n.holds(role) && Some(n.id.as_str()) != not)
        {
            return n;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nobody took {role} within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn check_dir(dir: &Path) -> Report {
    let loaded = load_paths(&[dir.to_path_buf()]).expect("history loads");
    check_loaded(&loaded)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_fails_over_and_the_history_checks_clean() {
    let server = NatsServer::start().await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let h = Harness::new(dir, trial("sigkill", 1000));
    let args = ["--roles", "2", "--ttl-ms", "1000"];
    let mut nodes = Vec::new();
    for id in ["n1", "n2", "n3"] {
        nodes.push(Node::start(&server, dir, id, &args).await);
    }
    let holder = wait_holder(&nodes, "r0", None).await.id.clone();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let i = nodes.iter().position(|n| n.id == holder).expect("holder");
    let victim = nodes.remove(i);
    h.fault("sigkill", &holder, Phase::Start);
    victim.signal("KILL");
    victim.kill().await;
    let next = wait_holder(&nodes, "r0", Some(&holder)).await.id.clone();
    assert_ne!(next, holder);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for n in nodes {
        n.terminate().await;
    }

    let report = check_dir(dir);
    assert!(report.is_clean(), "{}", report.render_text());
    assert!(report.stats.acts > 10 && report.stats.fenced_accepted > 10);
    let failover = report
        .stats
        .failovers
        .iter()
        .find(|f| f.role == "r0" && f.fault == "sigkill")
        .unwrap_or_else(|| panic!("no fail-over measured:\n{}", report.render_text()));
    assert_eq!(failover.holder, holder);
    assert_eq!(failover.next_holder.as_deref(), Some(next.as_str()));
    let d = failover.duration_ms.expect("a new holder");
    assert!(d > 0.0 && d < 3000.0, "fail-over took {d} ms");

    // The command agrees, and writes a timeline.
    let html = dir.join("timeline.html");
    let out = std::process::Command::new(crate::BIN)
        .args(["history", "check"])
        .arg(dir)
        .arg("--timeline")
        .arg(&html)
        .output()
        .expect("nats-roles history check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("CLEAN"), "{stdout}");
    let page = std::fs::read_to_string(&html).expect("timeline written");
    assert!(page.contains("<svg") && page.contains("role r0"));
    // Bad input: exit 2.
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "not json\n{}\n").expect("write");
    let out = std::process::Command::new(crate::BIN)
        .args(["history", "check"])
        .arg(&bad)
        .output()
        .expect("nats-roles history check");
    assert_eq!(out.status.code(), Some(2));
}

/// `nats-roles run --history FILE` records a history the checker accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_records_its_history() {
    let server = NatsServer::start().await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = tmp.path().join("roles.yaml");
    std::fs::write(
        &config,
        "bucket:\n  name: runhist\n  replicas: 1\n  auto_create: true\n\
         timing:\n  ttl: 1s\n  heartbeat: 250ms\n  operation_timeout: 200ms\n  disconnect_grace: 500ms\n\
         roles:\n  - name: a\n  - name: b\n",
    )
    .expect("write config");
    let history = tmp.path().join("run-1.jsonl");
    let mut child = Command::new(crate::BIN)
        .args([
            "run",
            "--no-http",
            "--instance-id",
            "run-1",
            "--server",
            &server.url(),
        ])
        .arg("--config")
        .arg(&config)
        .arg("--history")
        .arg(&history)
        .spawn_quiet("nats-roles run");
    let out = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(out).lines();
    let mut promoted = 0;
    tokio::time::timeout(Duration::from_secs(20), async {
        while promoted < 2 {
            let line = lines.next_line().await.expect("stdout").expect("a line");
            if line.starts_with("promoted ") {
                promoted += 1;
            }
        }
    })
    .await
    .expect("both roles promoted within 20 s");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().expect("running").to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exits after SIGTERM")
        .expect("wait");
    assert!(status.success(), "{status}");
    let loaded = load_paths(&[history]).expect("history loads");
    let report = check_loaded(&loaded);
    assert!(report.is_clean(), "{}", report.render_text());
    assert_eq!(report.stats.promotes, 2, "{}", report.render_text());
    assert_eq!(report.stats.demotes, 2, "{}", report.render_text());
    assert!(
        loaded
            .records
            .iter()
            .any(|r| matches!(r.event, Event::Renew { .. })),
        "renewals recorded"
    );
    assert!(matches!(
        loaded.records.last().map(|r| &r.event),
        Some(Event::Stop)
    ));
}

/// The command exits 1 on violations and prints them (text or JSON).
#[test]
fn the_command_exits_1_on_violations() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let t0 = 1_000_000_000_000u64;
    let ms = |m: u64| t0 + m * 1_000_000;
    let mut lines = vec![Record::harness(
        t0,
        None,
        Event::Trial(trial("synthetic", 1000)),
    )];
    // n1 and n2 both hold term-less overlapping terms of r0.
    for (node, term, from) in [("n1", 2, 10), ("n2", 5, 100)] {
        lines.push(Record::node(
            ms(from),
            node,
            Some("r0"),
            Event::Promote {
                epoch: 1,
                term,
                deadline_ns: ms(from + 900),
            },
        ));
    }
    let text: String = lines.iter().map(|r| r.to_line() + "\n").collect();
    std::fs::write(dir.join("all.jsonl"), text).expect("write");
    let run = |json: bool| {
        let mut cmd = std::process::Command::new(crate::BIN);
        cmd.args(["history", "check"]).arg(dir);
        if json {
            cmd.arg("--json");
        }
        cmd.output().expect("nats-roles history check")
    };
    let out = run(false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("S4 role=r0 nodes=n1,n2 terms=[2, 5]"),
        "{stdout}"
    );
    let out = run(true);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["violations"][0]["invariant"], "S4");
}

/// Each negative control, provoked by the fault it cannot survive, is flagged; the same
/// scenario without it checks clean (so the checker flags the breakage, not the scenario).
#[cfg(feature = "negative-controls")]
mod negative {
    use super::*;
    use nats_roles::tooling::history::Invariant;

    /// Fails loudly when `chaos_node` was built without the feature.
    fn require_negative_controls() {
        let help = std::process::Command::new(chaos_node_bin())
            .arg("--help")
            .output()
            .expect("chaos_node --help");
        assert!(
            String::from_utf8_lossy(&help.stdout).contains("--negative-control"),
            "chaos_node was built without negative controls: run \
             `cargo build --examples --features negative-controls` first"
        );
    }

    async fn nodes(
        server: &NatsServer,
        dir: &Path,
        ids: std::ops::Range<usize>,
        mode: Option<&str>,
        ttl: u64,
    ) -> Vec<Node> {
        let ttl = ttl.to_string();
        let mut args = vec!["--roles", "1", "--ttl-ms", ttl.as_str()];
        if let Some(mode) = mode {
            args.extend(["--negative-control", mode]);
        }
        let mut v = Vec::new();
        for i in ids {
            v.push(Node::start(server, dir, &format!("n{i}"), &args).await);
        }
        v
    }

    async fn stop_all(nodes: Vec<Node>) {
        for n in nodes {
            n.terminate().await;
        }
    }

    /// Runs `scenario` without and with `mode`: clean without, flagged by one of `any_of` with.
    async fn control<F, Fut>(mode: &str, any_of: &[Invariant], scenario: F)
    where
        F: Fn(Option<&'static str>) -> Fut,
        Fut: std::future::Future<Output = Report>,
    {
        require_negative_controls();
        let baseline = scenario(None).await;
        assert!(
            baseline.is_clean(),
            "{mode} scenario without the flaw is not clean:\n{}",
            baseline.render_text()
        );
        let mode: &'static str = match mode {
            "plain-put" => "plain-put",
            "drop-ttl" => "drop-ttl",
            "no-local-deadline" => "no-local-deadline",
            "ignore-session" => "ignore-session",
            _ => "skip-demote",
        };
        let report = scenario(Some(mode)).await;
        let flagged: Vec<_> = report.violations.iter().map(|v| v.invariant).collect();
        println!("{mode}: flagged {flagged:?}");
        for (name, r) in [("baseline", &baseline), (mode, &report)] {
            for f in &r.stats.failovers {
                println!(
                    "{name}: fail-over after {} of {}: {:?} ms, {:?} ms after the lease ran out",
                    f.fault, f.holder, f.duration_ms, f.after_expiry_ms
                );
            }
        }
        assert!(
            any_of.iter().any(|i| report.has(*i)),
            "{mode} not flagged by any of {any_of:?}:\n{}",
            report.render_text()
        );
    }

    /// One scenario's world: a server, a directory with the harness's history, the running
    /// nodes.
    struct Scene {
        server: NatsServer,
        tmp: tempfile::TempDir,
        harness: Harness,
        nodes: Vec<Node>,
    }

    impl Scene {
        /// A server and the nodes `ids` (with `mode`) of a trial `kind` with a `ttl_ms` lease.
        async fn start(
            kind: &str,
            ttl_ms: u64,
            ids: std::ops::Range<usize>,
            mode: Option<&str>,
        ) -> Scene {
            let server = NatsServer::start().await;
            let tmp = tempfile::tempdir().expect("tempdir");
            let harness = Harness::new(tmp.path(), trial(kind, ttl_ms));
            let nodes = nodes(&server, tmp.path(), ids, mode, ttl_ms).await;
            Scene {
                server,
                tmp,
                harness,
                nodes,
            }
        }

        /// The holder of `r0` (other than `not`), once there is one.
        async fn holder(&self, not: Option<&str>) -> String {
            wait_holder(&self.nodes, "r0", not).await.id.clone()
        }

        /// Takes the node `id` out of the running ones.
        fn take(&mut self, id: &str) -> Node {
            let i = self.nodes.iter().position(|n| n.id == id).expect("holder");
            self.nodes.remove(i)
        }

        /// Stops every node gracefully; the checker's report of the histories.
        async fn finish(self) -> Report {
            stop_all(self.nodes).await;
            let report = check_dir(self.tmp.path());
            drop(self.harness);
            report
        }
    }

    /// The holder stops gracefully while another candidate waits.
    async fn release(mode: Option<&'static str>) -> Report {
        let mut scene = Scene::start("release", 1000, 1..3, mode).await;
        let holder = scene.holder(None).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        scene.take(&holder).terminate().await;
        scene.holder(Some(&holder)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        scene.finish().await
    }

    /// The server pauses for 2.5 TTLs: renewals go unanswered and the deadline passes. A
    /// correct holder stops acting at its deadline.
    async fn server_pause(mode: Option<&'static str>) -> Report {
        let mut scene = Scene::start("server_pause", 1000, 1..2, mode).await;
        scene.holder(None).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        scene.harness.fault("server_pause", "nats", Phase::Start);
        scene.server.pause();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        scene.server.resume();
        scene.harness.fault("server_pause", "nats", Phase::End);
        tokio::time::sleep(Duration::from_millis(2500)).await;
        scene.finish().await
    }

    /// The holder is killed; the other node must take over when the key expires.
    async fn kill(mode: Option<&'static str>) -> Report {
        let mut scene = Scene::start("sigkill", 2000, 1..3, mode).await;
        let holder = scene.holder(None).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let victim = scene.take(&holder);
        scene.harness.fault("sigkill", &holder, Phase::Start);
        victim.signal("KILL");
        victim.kill().await;
        scene.holder(Some(&holder)).await;
        scene.finish().await
    }

    /// Four graceful hand-overs to a herd of five candidates.
    async fn herd(mode: Option<&'static str>) -> Report {
        let mut scene = Scene::start("herd", 1000, 1..6, mode).await;
        for round in 0..4 {
            let holder = scene.holder(None).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            scene.take(&holder).terminate().await;
            let more = nodes(
                &scene.server,
                scene.tmp.path(),
                6 + round..7 + round,
                mode,
                1000,
            );
            scene.nodes.extend(more.await);
        }
        scene.holder(None).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        scene.finish().await
    }

    /// Two instances, one role, nothing goes wrong for 1.5 s.
    async fn steady(mode: Option<&'static str>) -> Report {
        let scene = Scene::start("steady", 1000, 1..3, mode).await;
        scene.holder(None).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        scene.finish().await
    }

    /// Protocol v2 (Q5, Q11): taking a role over while its holder's session is alive leaves
    /// two holders acting at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ignore_session_is_flagged() {
        control("ignore-session", &[Invariant::S4, Invariant::S6], steady).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn skip_demote_is_flagged() {
        control("skip-demote", &[Invariant::S6, Invariant::S4], release).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_local_deadline_is_flagged() {
        control("no-local-deadline", &[Invariant::S5], server_pause).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drop_ttl_is_flagged() {
        control("drop-ttl", &[Invariant::L1], kill).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn plain_put_is_flagged() {
        control(
            "plain-put",
            &[Invariant::S2, Invariant::S3, Invariant::S4],
            herd,
        )
        .await;
    }
}
