//! Fault injection for the chaos suite: workload-node processes (`examples/chaos_node`) that
//! can be killed, paused, resumed, restarted and run under `faketime`, the harness's own
//! history file, and resource sampling of node processes.
//!
//! * [`chaos_node_bin`] builds the example once per test binary (with the `negative-controls`
//!   feature) unless `CHAOS_NODE_BIN` names a prebuilt one.
//! * [`Node`] is one node process; it is SIGKILLed when dropped, also while a failed test
//!   unwinds.
//! * [`HarnessLog`] writes `harness.jsonl` (the `trial` line first, then `fault`/`observe`
//!   records stamped with the harness's real monotonic clock), in the format of
//!   `docs/reliability.md`.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nats_roles::tooling::history::{Event, Phase, Record, TrialInfo, mono_now_ns};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::process::{SIGCONT, set_stopped, signal};

// ---------------------------------------------------------------------------------------------
// Binaries and libraries
// ---------------------------------------------------------------------------------------------

/// Path of the `chaos_node` example built with `--all-features` (it needs
/// `negative-controls`).
///
/// `CHAOS_NODE_BIN` overrides it. Otherwise runs `cargo build --example chaos_node
/// --all-features` once per test binary, in the same target directory and profile as the test
/// itself: under `cargo nextest run --all-features` (scripts/test.sh) the library is already
/// built with that feature set, and cargo keeps artifacts per feature set, so other builds are
/// not disturbed. Panics with cargo's output if the build fails.
pub fn chaos_node_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(build_chaos_node).clone()
}

/// Whether `name` is one of the variables cargo sets for a package's build or test run
/// (not a setting of the user's, such as `CARGO_HOME` or `CARGO_PROFILE_*`).
fn is_package_variable(name: &str) -> bool {
    [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_BIN_EXE_",
        "CARGO_CRATE_",
        "CARGO_CFG_",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
        || matches!(
            name,
            "CARGO_TARGET_TMPDIR" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR" | "CARGO"
        )
}

fn build_chaos_node() -> PathBuf {
    if let Some(path) = crate::bins::path_from_env("CHAOS_NODE_BIN", "unset it to build one") {
        return path;
    }
    // The test executable is <target>/<profile>/deps/<name>-<hash>.
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile> directory of the test executable");
    let target_dir = profile_dir.parent().expect("target directory");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(crate::repo_root())
        .args(["build", "--quiet", "--example", "chaos_node"])
        .arg("--all-features")
        .arg("--target-dir")
        .arg(target_dir);
    // The variables cargo set for this test (the package's `CARGO_PKG_*`, `CARGO_MANIFEST_DIR`,
    // ...) are not the nested build's: build scripts that watch them (ring's) would see them
    // changed and rebuild the TLS stack (about 25 s, and as long again for the next build
    // outside the tests).
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if is_package_variable(&name) {
            cmd.env_remove(name.as_ref());
        }
    }
    if profile != "debug" {
        cmd.args([
            "--profile",
            if profile == "release" {
                "release"
            } else {
                profile
            },
        ]);
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo to build examples/chaos_node: {e}"));
    assert!(
        out.status.success(),
        "cargo build --example chaos_node --all-features failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let path = profile_dir.join("examples").join("chaos_node");
    assert!(path.exists(), "{} missing after the build", path.display());
    path
}

/// The multi-threaded libfaketime preload library (Debian package `faketime`, installed by
/// `scripts/install-tools.sh --faketime`). `FAKETIME_LIB` overrides the path. Panics when it
/// is missing: the clock test never skips silently.
pub fn libfaketime() -> PathBuf {
    if let Some(lib) = std::env::var_os("FAKETIME_LIB").filter(|v| !v.is_empty()) {
        return PathBuf::from(lib);
    }
    let candidates = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
        "/usr/local/lib/faketime/libfaketimeMT.so.1",
    ];
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime not found (looked in {candidates:?}): run \
                 `scripts/install-tools.sh --faketime` (Debian package faketime) or set FAKETIME_LIB"
            )
        })
}

// ---------------------------------------------------------------------------------------------
// Node processes
// ---------------------------------------------------------------------------------------------

/// How to run one workload node (flags of `examples/chaos_node`).
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Instance id (and history file name).
    pub id: String,
    /// Server URLs (a proxy's URL for network faults).
    pub urls: Vec<String>,
    /// User and password to connect with.
    pub user: Option<(String, String)>,
    /// KV bucket.
    pub bucket: String,
    /// Replicas if the node creates the bucket.
    pub replicas: usize,
    /// Roles it campaigns for.
    pub roles: Vec<String>,
    /// Lease TTL.
    pub ttl_ms: u64,
    /// Roles with another TTL (their own TTL class and session): `(role, ttl_ms)`.
    pub role_ttls: Vec<(String, u64)>,
    /// Deadline margin.
    pub margin: f64,
    /// Period of the leader's act + fenced write.
    pub fenced_interval_ms: u64,
    /// Negative-control mode (`plain-put`, `drop-ttl`, `no-local-deadline`, `skip-demote`,
    /// `ignore-session`, `renew-after-loss`).
    pub negative: Option<String>,
    /// Run under libfaketime at this clock rate.
    pub clock_rate: Option<f64>,
    /// History directory.
    pub history: PathBuf,
}

/// One `chaos_node` process (restartable); SIGKILLed on drop.
pub struct Node {
    /// How it runs.
    pub cfg: NodeConfig,
    child: Option<Child>,
    paused: bool,
    starts: u32,
    /// `ready` seen on stdout (per start).
    ready: watch::Receiver<bool>,
    /// Every stdout line of every start.
    lines: Arc<Mutex<Vec<String>>>,
    /// How many of `lines` came before the current start.
    start_line: usize,
}

impl Node {
    /// A node that is not started yet.
    pub fn new(cfg: NodeConfig) -> Node {
        Node {
            cfg,
            child: None,
            paused: false,
            starts: 0,
            ready: watch::channel(false).1,
            lines: Arc::default(),
            start_line: 0,
        }
    }

    /// Instance id.
    pub fn id(&self) -> &str {
        &self.cfg.id
    }

    /// PID of the running process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Whether a process is running (possibly paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether it is stopped by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Every stdout line so far.
    pub fn stdout(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The stdout lines of the current (or last) start only.
    pub fn current_stdout(&self) -> Vec<String> {
        let lines = self
            .lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        lines[self.start_line.min(lines.len())..].to_vec()
    }

    /// The term of `role` this process holds by its own account: the last `promoted role=…
    /// term=…` line of the current start, unless a `demoted` line for the role came after it.
    pub fn held_term(&self, role: &str) -> Option<u64> {
        let promoted = format!("promoted role={role} term=");
        let demoted = format!("demoted role={role} ");
        let lines = self.current_stdout();
        let last = lines
            .iter()
            .rev()
            .find(|l| l.starts_with(&promoted) || l.starts_with(&demoted))?;
        last.strip_prefix(&promoted)?.trim().parse().ok()
    }

    fn stderr_path(&self) -> PathBuf {
        self.cfg.history.join(format!("{}.stderr", self.cfg.id))
    }

    /// Last lines of the node's stderr (for failure messages).
    pub fn stderr_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(self.stderr_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Starts the process (does not wait for `ready`).
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "{}: already running", self.cfg.id);
        self.starts += 1;
        let c = &self.cfg;
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.stderr_path())
            .unwrap_or_else(|e| panic!("open {}: {e}", self.stderr_path().display()));
        let mut cmd = Command::new(chaos_node_bin());
        cmd.arg("--id").arg(&c.id).arg("--bucket").arg(&c.bucket);
        for url in &c.urls {
            cmd.arg("--nats").arg(url);
        }
        if let Some((user, password)) = &c.user {
            cmd.arg("--user").arg(user).arg("--password").arg(password);
        }
        for role in &c.roles {
            cmd.arg("--role").arg(role);
        }
        for (role, ttl_ms) in &c.role_ttls {
            cmd.arg("--role-ttl").arg(format!("{role}={ttl_ms}"));
        }
        cmd.arg("--replicas")
            .arg(c.replicas.to_string())
            .arg("--ttl-ms")
            .arg(c.ttl_ms.to_string())
            .arg("--margin")
            .arg(c.margin.to_string())
            .arg("--fenced-interval-ms")
            .arg(c.fenced_interval_ms.to_string())
            .arg("--history")
            .arg(&c.history);
        if let Some(mode) = &c.negative {
            cmd.arg("--negative-control").arg(mode);
        }
        if let Some(rate) = c.clock_rate {
            // "+0 x<rate>": start at the real time, run at <rate> (a bare "x<rate>" is
            // ignored by libfaketime 0.9.10). Monotonic clocks are scaled too.
            cmd.env("LD_PRELOAD", libfaketime())
                .env("FAKETIME", format!("+0 x{rate}"))
                .env("FAKETIME_DONT_RESET", "1");
        }
        for var in ["NATS_URL", "RUST_LOG", "FAKETIME_NO_CACHE"] {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start chaos_node {}: {e}", self.cfg.id));
        let (ready_tx, ready_rx) = watch::channel(false);
        self.ready = ready_rx;
        self.start_line = self
            .lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = self.lines.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if line == "ready" {
                    let _ = ready_tx.send(true);
                }
                lines
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(line);
            }
        });
        self.child = Some(child);
        self.paused = false;
    }

    /// Waits until the current process printed `ready`; panics after `timeout` with its
    /// stderr.
    pub async fn wait_ready(&mut self, timeout: Duration) {
        let mut ready = self.ready.clone();
        if tokio::time::timeout(timeout, ready.wait_for(|r| *r))
            .await
            .is_ok_and(|r| r.is_ok())
        {
            return;
        }
        let status = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten());
        panic!(
            "chaos_node {} not ready within {timeout:?} (exit: {status:?}); stderr:\n{}",
            self.cfg.id,
            self.stderr_tail(30)
        );
    }

    /// SIGKILL and reap. No-op if not running.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        self.paused = false;
    }

    /// SIGSTOP: the process keeps its sockets and answers nothing.
    pub fn pause(&mut self) {
        set_stopped(self.pid(), &self.cfg.id, true);
        self.paused = true;
    }

    /// SIGCONT.
    pub fn resume(&mut self) {
        set_stopped(self.pid(), &self.cfg.id, false);
        self.paused = false;
    }

    /// Sends `sig` (e.g. `libc::SIGTERM`, `libc::SIGUSR1`) without waiting for anything (reap
    /// a process told to exit with [`terminate`](Self::terminate) or
    /// [`exited`](Self::exited)). No-op if not running.
    pub fn send_signal(&self, sig: i32) {
        if let Some(pid) = self.pid() {
            signal(pid, sig);
        }
    }

    /// Graceful stop: SIGCONT if paused, SIGTERM, wait up to `timeout`, then SIGKILL.
    /// Returns the exit status (`None` if it had to be killed or was not running).
    pub async fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if let Some(pid) = child.id() {
            if self.paused {
                signal(pid, SIGCONT);
                self.paused = false;
            }
            // SAFETY: kill(2) with integer arguments; the child may have exited already.
            unsafe {
                libc::kill(i32::try_from(pid).unwrap_or(0), libc::SIGTERM);
            }
        }
        match tokio::time::timeout(timeout, child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                None
            }
        }
    }

    /// Whether the process has exited on its own (reaps it); `Some(status)` then.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }
}

// ---------------------------------------------------------------------------------------------
// The harness's history
// ---------------------------------------------------------------------------------------------

/// `<dir>/harness.jsonl`: the `trial` line first, then the harness's records. The whole file is
/// rewritten on every record (a few dozen per trial), so it is complete whenever a test fails
/// and the `trial` line can still be amended (e.g. the steady-state window) at the end.
pub struct HarnessLog {
    path: PathBuf,
    inner: Mutex<(Record, Vec<Record>)>,
}

impl HarnessLog {
    /// Creates `<dir>/harness.jsonl` with the `trial` line.
    pub fn create(dir: &Path, trial: TrialInfo) -> HarnessLog {
        let log = HarnessLog {
            path: dir.join("harness.jsonl"),
            inner: Mutex::new((
                Record::harness(mono_now_ns(), None, Event::Trial(trial)),
                Vec::new(),
            )),
        };
        log.flush();
        log
    }

    /// Amends the `trial` line.
    pub fn update_trial(&self, f: impl FnOnce(&mut TrialInfo)) {
        {
            let mut inner = self.lock();
            if let Event::Trial(info) = &mut inner.0.event {
                f(info);
            }
        }
        self.flush();
    }

    /// Records a fault `what` on `target` (a node id, `server`, a cluster node name).
    pub fn fault(&self, what: &str, target: &str, phase: Phase) {
        self.push(Record::harness(
            mono_now_ns(),
            None,
            Event::Fault {
                what: what.to_owned(),
                target: target.to_owned(),
                phase,
            },
        ));
    }

    /// Records what the harness saw in the KV for `role`.
    pub fn observe(&self, role: &str, holder: Option<String>, revision: Option<u64>) {
        self.push(Record::harness(
            mono_now_ns(),
            Some(role),
            Event::Observe { holder, revision },
        ));
    }

    fn push(&self, record: Record) {
        self.lock().1.push(record);
        self.flush();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Record, Vec<Record>)> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn flush(&self) {
        let text = {
            let inner = self.lock();
            let mut text = inner.0.to_line();
            text.push('\n');
            for r in &inner.1 {
                text.push_str(&r.to_line());
                text.push('\n');
            }
            text
        };
        std::fs::write(&self.path, text)
            .unwrap_or_else(|e| panic!("write {}: {e}", self.path.display()));
    }
}
