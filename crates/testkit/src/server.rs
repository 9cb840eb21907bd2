//! One `nats-server` process with JetStream on loopback: start, kill, restart, pause, resume.

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio::net::TcpStream;

use crate::bins::nats_server_bin;
use crate::http;
use crate::process::{SIGCONT, SIGHUP, SIGTERM, set_stopped, signal, tail};

/// How long a single server may take to become ready (`/healthz` 200, client port open).
pub const SERVER_READY_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(25);
pub(crate) const LOG_TAIL_LINES: usize = 40;

/// Why a start attempt did not produce a ready server.
#[derive(Debug)]
pub(crate) enum StartError {
    /// The process exited during start-up (e.g. port already in use); carries details.
    Exited(String),
    /// Not ready within the timeout; carries details.
    Timeout(String),
}

impl StartError {
    pub(crate) fn message(&self) -> &str {
        match self {
            StartError::Exited(m) | StartError::Timeout(m) => m,
        }
    }
}

/// Whether a server runs JetStream, and in which domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JetStream {
    /// JetStream in the default (local) domain.
    On,
    /// JetStream in this domain (`jetstream { domain: ... }`).
    Domain(String),
    /// No JetStream (a leaf node that only relays to its hub).
    Off,
}

/// One `nats-server` process with JetStream, listening on 127.0.0.1.
///
/// Its config file, JetStream store and log live in a temporary directory that is deleted
/// when this value is dropped (after the process is killed). The client and monitoring ports
/// stay the same across [`restart`](Self::restart), so reconnecting clients find it again.
pub struct NatsServer {
    pub(crate) name: String,
    bin: PathBuf,
    dir: TempDir,
    config_path: PathBuf,
    store_dir: PathBuf,
    log_path: PathBuf,
    /// Client port; 0 until learned on a first start with `port: -1`.
    port: u16,
    /// Monitoring (HTTP) port; 0 until learned.
    pub(crate) monitor_port: u16,
    /// `cluster { ... }` block for cluster nodes.
    cluster_block: Option<String>,
    /// Extra config appended verbatim.
    extra: String,
    /// Whether (and in which domain) it runs JetStream.
    jetstream: JetStream,
    ready_timeout: Duration,
    child: Option<Child>,
    paused: bool,
    starts: u32,
    /// The running process was started with ports `-1` (picked by the server): a config
    /// reload must keep saying so (nats-server cannot reload a changed port).
    running_on_picked_ports: bool,
}

impl NatsServer {
    /// Starts a standalone JetStream server on 127.0.0.1 with a fresh store; waits until
    /// `/healthz` answers 200 and the client port accepts connections (panics after 10 s with
    /// the server's log tail).
    pub async fn start() -> NatsServer {
        Self::start_with_config("").await
    }

    /// Like [`start`](Self::start), with `extra` appended verbatim to the config file, e.g.
    ///
    /// ```text
    /// authorization { users = [ { user: a, password: a }, { user: b, password: b,
    ///     permissions: { publish: { deny: ["$KV.roles.>"] } } } ] }
    /// ```
    ///
    /// `extra` must not set `listen`, `http`, `port` or `jetstream`: the harness owns those.
    /// The monitoring endpoint is not affected by `authorization`, so readiness still works.
    pub async fn start_with_config(extra: &str) -> NatsServer {
        Self::start_named("nats", JetStream::On, extra).await
    }

    /// A server named `name` (unique among servers that connect to each other), with
    /// JetStream as `jetstream` says, and `extra` appended to its config (leaf node blocks:
    /// see [`crate::sites`]).
    pub async fn start_named(name: &str, jetstream: JetStream, extra: &str) -> NatsServer {
        let dir = tempfile::Builder::new()
            .prefix("nats-roles-test-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let mut server = NatsServer::new(name, dir, 0, 0, None, extra, SERVER_READY_TIMEOUT);
        server.jetstream = jetstream;
        server.write_config(true);
        // First start: let the server pick its ports (no race), learn them from the ports file,
        // then pin them in the config so that restarts reuse them.
        if let Err(e) = server.spawn() {
            panic!("{}", e.message());
        }
        server.running_on_picked_ports = true;
        if let Err(e) = server.learn_ports().await {
            server.kill();
            panic!("{}", e.message());
        }
        server.write_config(false);
        if let Err(e) = server.wait_ready().await {
            server.kill();
            panic!("{}", e.message());
        }
        server
    }

    pub(crate) fn new(
        name: &str,
        dir: TempDir,
        port: u16,
        monitor_port: u16,
        cluster_block: Option<String>,
        extra: &str,
        ready_timeout: Duration,
    ) -> NatsServer {
        let root = dir.path().to_path_buf();
        let server = NatsServer {
            name: name.to_owned(),
            bin: nats_server_bin(),
            config_path: root.join("nats-server.conf"),
            store_dir: root.join("store"),
            log_path: root.join("nats-server.log"),
            dir,
            port,
            monitor_port,
            cluster_block,
            extra: extra.to_owned(),
            jetstream: JetStream::On,
            ready_timeout,
            child: None,
            paused: false,
            starts: 0,
            running_on_picked_ports: false,
        };
        server.write_config(port == 0);
        server
    }

    /// Writes the config file. With `pick_ports` the server chooses its ports (`-1`) and
    /// reports them in a ports file in the temporary directory.
    /// Replaces the `extra` part of the config and makes the running server reload it
    /// (SIGHUP), as an operator fixing permissions would. The reload is asynchronous: wait for
    /// its effect.
    pub fn reload_with(&mut self, extra: &str) {
        extra.clone_into(&mut self.extra);
        self.write_config(self.running_on_picked_ports);
        let pid = self.pid().expect("the server is running");
        signal(pid, SIGHUP);
    }

    fn write_config(&self, pick_ports: bool) {
        let mut conf = String::new();
        let port = |p: u16| {
            if pick_ports {
                "-1".to_owned()
            } else {
                p.to_string()
            }
        };
        let _ = writeln!(conf, "# written by nats-roles-testkit");
        let _ = writeln!(conf, "server_name: {}", self.name);
        let _ = writeln!(conf, "listen: \"127.0.0.1:{}\"", port(self.port));
        let _ = writeln!(conf, "http: \"127.0.0.1:{}\"", port(self.monitor_port));
        if pick_ports {
            let _ = writeln!(conf, "ports_file_dir: \"{}\"", self.dir.path().display());
        }
        match &self.jetstream {
            JetStream::On => {
                let _ = writeln!(
                    conf,
                    "jetstream {{\n  store_dir: \"{}\"\n}}",
                    self.store_dir.display()
                );
            }
            JetStream::Domain(domain) => {
                let _ = writeln!(
                    conf,
                    "jetstream {{\n  store_dir: \"{}\"\n  domain: {domain}\n}}",
                    self.store_dir.display()
                );
            }
            JetStream::Off => {}
        }
        if let Some(cluster) = &self.cluster_block {
            let _ = writeln!(conf, "{cluster}");
        }
        if !self.extra.is_empty() {
            let _ = writeln!(conf, "{}", self.extra);
        }
        fs::write(&self.config_path, conf)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", self.config_path.display()));
    }

    /// Spawns the process with stdout/stderr appended to the log file.
    pub(crate) fn spawn(&mut self) -> Result<(), StartError> {
        assert!(
            self.child.is_none(),
            "{}: spawn while still running",
            self.name
        );
        self.starts += 1;
        self.running_on_picked_ports = false;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.log_path.display()));
        let _ = writeln!(
            log,
            "===== testkit: start #{} of {} =====",
            self.starts, self.name
        );
        let stderr: File = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot clone log file handle: {e}"));
        let bin = &self.bin;
        let child = Command::new(bin)
            .arg("-c")
            .arg(&self.config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .spawn()
            .map_err(|e| StartError::Exited(format!("cannot spawn {}: {e}", bin.display())))?;
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// `Err(Exited)` if the process has exited (reaping it).
    pub(crate) fn check_alive(&mut self) -> Result<(), StartError> {
        let Some(child) = self.child.as_mut() else {
            return Err(StartError::Exited(format!("{} is not running", self.name)));
        };
        match child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                self.child = None;
                Err(StartError::Exited(
                    self.failure(&format!("exited during start-up ({status})")),
                ))
            }
            Err(e) => Err(StartError::Exited(
                self.failure(&format!("try_wait failed: {e}")),
            )),
        }
    }

    pub(crate) fn failure(&self, what: &str) -> String {
        format!(
            "nats-server {} ({}) {what}\n--- config {} ---\n{}\n--- last {LOG_TAIL_LINES} lines of {} ---\n{}",
            self.name,
            self.bin.display(),
            self.config_path.display(),
            fs::read_to_string(&self.config_path).unwrap_or_default(),
            self.log_path.display(),
            tail(&self.log_path, LOG_TAIL_LINES)
        )
    }

    /// Reads `nats-server_<pid>.ports` ({"nats":["nats://127.0.0.1:P"],"monitoring":[...]}).
    async fn learn_ports(&mut self) -> Result<(), StartError> {
        let pid = self.pid().unwrap_or(0);
        let ports_file = self.dir.path().join(format!("nats-server_{pid}.ports"));
        let deadline = Instant::now() + self.ready_timeout;
        loop {
            self.check_alive()?;
            if let Ok(text) = fs::read_to_string(&ports_file)
                && let Ok(json) = serde_json::from_str::<serde_json::Value>(&text)
            {
                let port_of = |key: &str| {
                    json[key][0]
                        .as_str()
                        .and_then(|u| u.rsplit(':').next())
                        .and_then(|p| p.parse::<u16>().ok())
                };
                if let (Some(port), Some(monitor)) = (port_of("nats"), port_of("monitoring")) {
                    self.port = port;
                    self.monitor_port = monitor;
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(StartError::Timeout(
                    self.failure(&format!("wrote no ports file {}", ports_file.display())),
                ));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Waits until `/healthz` is 200 and the client port accepts a TCP connection.
    async fn wait_ready(&mut self) -> Result<(), StartError> {
        let deadline = Instant::now() + self.ready_timeout;
        loop {
            self.check_alive()?;
            let last = match http::get(self.monitor_port, "/healthz").await {
                Ok((200, _)) => {
                    if TcpStream::connect(("127.0.0.1", self.port)).await.is_ok() {
                        return Ok(());
                    }
                    format!(
                        "healthz ok but client port {} refuses connections",
                        self.port
                    )
                }
                Ok((status, body)) => format!("/healthz {status}: {}", body.trim()),
                Err(e) => format!("/healthz: {e}"),
            };
            if Instant::now() >= deadline {
                return Err(StartError::Timeout(self.failure(&format!(
                    "not ready within {:?} (last: {last})",
                    self.ready_timeout
                ))));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Monitoring URL, `http://127.0.0.1:<monitor port>` (e.g. append `/jsz`).
    pub fn monitor_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.monitor_port)
    }

    /// Client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Monitoring (HTTP) port.
    pub fn monitor_port(&self) -> u16 {
        self.monitor_port
    }

    /// The `server_name` (`nats` for a standalone server, `n1`.. for cluster nodes).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// PID of the running process; `None` after [`kill`](Self::kill).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether a process is running (possibly paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the process is stopped by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// JetStream store directory (kept across restarts).
    pub fn store_dir(&self) -> &Path {
        &self.store_dir
    }

    /// The config file the server runs with.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The server's combined stdout/stderr log (appended across restarts).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Last `lines` lines of the server log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_path, lines)
    }

    /// GETs a monitoring endpoint such as `/jsz` or `/varz` and parses it as JSON.
    /// Panics if the server does not answer 200 with JSON (within 2 s).
    pub async fn monitor_json(&self, path: &str) -> serde_json::Value {
        match http::get(self.monitor_port, path).await {
            Ok((200, body)) => serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("{}{path}: not JSON ({e}): {body}", self.monitor_url())),
            Ok((status, body)) => panic!("{}{path}: HTTP {status}: {body}", self.monitor_url()),
            Err(e) => panic!("{}{path}: {e}", self.monitor_url()),
        }
    }

    /// Kills the process with SIGKILL (also when paused) and reaps it. No-op if not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // kill() only fails if the process was already reaped; wait() then returns at once.
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Graceful stop: SIGTERM (resuming a paused process first), waits up to 10 s for it to
    /// exit, then SIGKILLs it. No-op if not running.
    pub fn terminate(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        signal(child.id(), SIGTERM);
        if self.paused {
            signal(child.id(), SIGCONT);
            self.paused = false;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts the server again with the same config, ports and store (killing it first with
    /// SIGKILL if it is still running), and waits until it is ready. Panics with the log tail
    /// if it does not become ready in time (10 s standalone, 20 s for a cluster node, whose
    /// `/healthz` also requires it to be current with the JetStream meta leader).
    pub async fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.spawn() {
            panic!("restart: {}", e.message());
        }
        if let Err(e) = self.wait_ready().await {
            self.kill();
            panic!("restart: {}", e.message());
        }
    }

    /// Stops the process with SIGSTOP: it keeps its sockets but answers nothing.
    /// Panics if not running.
    pub fn pause(&mut self) {
        set_stopped(self.pid(), &self.name, true);
        self.paused = true;
    }

    /// Continues a paused process with SIGCONT. Panics if not running.
    pub fn resume(&mut self) {
        set_stopped(self.pid(), &self.name, false);
        self.paused = false;
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if std::thread::panicking() && self.starts > 0 {
            eprintln!(
                "--- nats-server {} (client {}, monitor {}): last {LOG_TAIL_LINES} lines of {} ---\n{}",
                self.name,
                self.port,
                self.monitor_port,
                self.log_path.display(),
                tail(&self.log_path, LOG_TAIL_LINES)
            );
        }
        self.kill();
    }
}
