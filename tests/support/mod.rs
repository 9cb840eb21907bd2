//! Real `nats-server` processes for integration tests.
//!
//! Use it from a test file in `tests/` with `mod support;`. It provides:
//!
//! * [`NatsServer`]: one JetStream server on loopback, with its store in a temporary
//!   directory; it can be killed (SIGKILL), restarted on the same port with the same store,
//!   paused (SIGSTOP) and resumed (SIGCONT).
//! * [`NatsCluster`]: a JetStream cluster (normally 3 nodes, `n1`..`n3`) on loopback, with the
//!   same per-node controls.
//! * [`connect`]: an `async_nats` client with a short initial retry and fast reconnects.
//! * [`tcp`]: reading raw HTTP answers (up to an SSE `hello`, or until the server closes).
//!
//! The binary comes from [`nats_server_bin`]: `NATS_SERVER_BIN`, else
//! `.tools/bin/nats-server` (installed by `scripts/install-tools.sh`), else a recent enough
//! `nats-server` on `PATH`. Without one the tests panic: they never skip silently.
//!
//! Every server's stdout/stderr goes to `nats-server.log` in its temporary directory. A start
//! that does not become ready panics with the tail of that log, and a server dropped while
//! the test is panicking prints its log tail to stderr (shown with the failed test).
//!
//! Processes are killed (SIGKILL) and reaped on `Drop`, also while unwinding from a panic. They
//! share the test process's process group, so nextest's timeout handling and Ctrl-C reach
//! them too; only a SIGKILL of the test process alone leaves them running.

// Each file in tests/ is its own crate that compiles this module and uses only part of it:
// without this, every helper a given test file does not call would warn as dead code (and
// `clippy -D warnings` would fail).
#![allow(dead_code)]

pub mod faults;
pub mod proxy;
pub mod roles;
pub mod tcp;

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Oldest server accepted from `PATH`: per-message TTLs and KV limit markers need 2.11.
pub const MIN_SERVER_VERSION: (u32, u32) = (2, 11);

/// How long a single server may take to become ready (`/healthz` 200, client port open).
pub const SERVER_READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a cluster (or a node rejoining it) may take to become ready, including the
/// election of a JetStream meta leader (Raft election timeout is 4-9 s after a leader loss).
pub const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(20);

/// How long [`connect`] keeps retrying the initial connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

const POLL_INTERVAL: Duration = Duration::from_millis(25);
const HTTP_TIMEOUT: Duration = Duration::from_secs(2);
const LOG_TAIL_LINES: usize = 40;

// ---------------------------------------------------------------------------------------------
// Binary lookup
// ---------------------------------------------------------------------------------------------

/// Path of the `nats-server` binary to run.
///
/// In order: the env var `NATS_SERVER_BIN` (must exist), else
/// `<CARGO_MANIFEST_DIR>/.tools/bin/nats-server`, else `nats-server` on `PATH` if its
/// `--version` is at least [`MIN_SERVER_VERSION`]. Otherwise panics, telling to run
/// `scripts/install-tools.sh`. The choice is made once per test binary.
pub fn nats_server_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(find_nats_server_bin).clone()
}

fn find_nats_server_bin() -> PathBuf {
    const HINT: &str = "run `scripts/install-tools.sh` (installs nats-server 2.15.1 into \
                        .tools/bin/), or set NATS_SERVER_BIN to a nats-server >= 2.11";

    if let Some(value) = std::env::var_os("NATS_SERVER_BIN").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(value);
        match server_version(&path) {
            Some(v) if version_ok(v) => return path,
            Some((a, b, c)) => panic!(
                "NATS_SERVER_BIN={} is nats-server {a}.{b}.{c}, older than {}.{}; {HINT}",
                path.display(),
                MIN_SERVER_VERSION.0,
                MIN_SERVER_VERSION.1
            ),
            None => panic!(
                "NATS_SERVER_BIN={} does not run `--version`; {HINT}",
                path.display()
            ),
        }
    }

    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/nats-server");
    if local.exists() {
        match server_version(&local) {
            Some(v) if version_ok(v) => return local,
            other => panic!(
                "{} is unusable (version {other:?}); {HINT}",
                local.display()
            ),
        }
    }

    let on_path = PathBuf::from("nats-server");
    match server_version(&on_path) {
        Some(v) if version_ok(v) => on_path,
        Some((a, b, c)) => panic!(
            "nats-server on PATH is {a}.{b}.{c} (Debian ships 2.9), but >= {}.{} is needed \
             for per-message TTLs and KV limit markers; {HINT}",
            MIN_SERVER_VERSION.0, MIN_SERVER_VERSION.1
        ),
        None => panic!("no nats-server found; {HINT}"),
    }
}

fn version_ok((major, minor, _): (u32, u32, u32)) -> bool {
    (major, minor) >= MIN_SERVER_VERSION
}

/// Runs `<bin> --version` and parses `nats-server: v2.15.1` into `(2, 15, 1)`.
fn server_version(bin: &Path) -> Option<(u32, u32, u32)> {
    let out = Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // The first "v" directly followed by a digit ("server" has a "v" too).
    let start = text
        .char_indices()
        .find(|&(i, c)| c == 'v' && text[i + 1..].starts_with(|d: char| d.is_ascii_digit()))?
        .0
        + 1;
    let mut parts = text[start..]
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

// ---------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------

/// A currently free TCP port on 127.0.0.1 (bind port 0, read it, drop the listener).
///
/// Another process may take it before it is used; that race is accepted (cluster start-up
/// retries with new ports if a node fails to bind).
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `n` distinct free ports: all listeners are held until every port is picked.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| {
            TcpListener::bind("127.0.0.1:0")
                .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0 to pick a free port: {e}"))
        })
        .collect();
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .unwrap_or_else(|e| panic!("local_addr of a bound listener: {e}"))
                .port()
        })
        .collect()
}

/// Connects to `url` (several servers may be given comma-separated, e.g.
/// [`NatsCluster::seed_urls`]), retrying for up to [`CONNECT_TIMEOUT`] while the server is not
/// reachable yet.
///
/// The client reconnects quickly (50 ms steps, at most 500 ms apart) and forever, so a
/// [`NatsServer::restart`] is picked up within about half a second. Panics if no connection
/// could be made in time.
pub async fn connect(url: &str) -> async_nats::Client {
    connect_with(url, async_nats::ConnectOptions::new).await
}

/// Like [`connect`], with options built by `options` (called once per attempt), e.g.
/// `|| ConnectOptions::with_user_and_password("a".into(), "a".into())`. The harness sets a
/// 1 s connection timeout and the fast reconnect delay on top of them.
pub async fn connect_with(
    url: &str,
    options: impl Fn() -> async_nats::ConnectOptions,
) -> async_nats::Client {
    let urls: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        let attempt = options()
            .connection_timeout(Duration::from_secs(1))
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((50 * attempts as u64).min(500))
            });
        match attempt.connect(urls.as_slice()).await {
            Ok(client) => return client,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("cannot connect to {url} within {CONNECT_TIMEOUT:?}: {e}"),
        }
    }
}

/// Like [`connect`], also returning the client's connection events (`Connected`,
/// `Disconnected`, `ServerError` such as permission violations, ...) for event-based waits
/// with [`wait_event`]. The first `Connected` of the initial connection is in the channel too.
pub async fn connect_with_events(
    url: &str,
) -> (
    async_nats::Client,
    tokio::sync::mpsc::UnboundedReceiver<async_nats::Event>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let client = connect_with(url, move || {
        let tx = tx.clone();
        async_nats::ConnectOptions::new().event_callback(move |event| {
            let tx = tx.clone();
            async move {
                // The receiver may be gone when the test no longer listens: fine.
                let _ = tx.send(event);
            }
        })
    })
    .await;
    (client, rx)
}

/// Receives events until one matches `pred` and returns it; panics after `timeout` (listing
/// the events that did arrive) or if the channel closes.
pub async fn wait_event(
    events: &mut tokio::sync::mpsc::UnboundedReceiver<async_nats::Event>,
    timeout: Duration,
    pred: impl Fn(&async_nats::Event) -> bool,
) -> async_nats::Event {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(event)) if pred(&event) => return event,
            Ok(Some(event)) => seen.push(event.to_string()),
            Ok(None) => panic!("event channel closed; events seen: {seen:?}"),
            Err(_) => panic!("no matching event within {timeout:?}; events seen: {seen:?}"),
        }
    }
}

/// Creates a KV bucket with `config` (panicking on failure) and waits up to 10 s until writes
/// from this client reach the bucket's stream.
///
/// Right after `create_key_value` of a replicated bucket, the first put fails with
/// `StreamNotFound` (no responders) about once in 50 runs: the stream's subject interest has not
/// reached the client's server yet. The probe publishes to a probe key with
/// `Nats-Expected-Last-Subject-Sequence: u64::MAX`, which the stream always rejects
/// (`WrongLastSequence`): it proves the route without storing anything.
pub async fn create_kv(
    js: &async_nats::jetstream::Context,
    config: async_nats::jetstream::kv::Config,
) -> async_nats::jetstream::kv::Store {
    use async_nats::jetstream::context::PublishErrorKind;

    let bucket = config.bucket.clone();
    let store = js
        .create_key_value(config)
        .await
        .unwrap_or_else(|e| panic!("create KV bucket {bucket}: {e}"));
    let prefix = store.put_prefix.as_ref().unwrap_or(&store.prefix);
    let subject = format!("{prefix}__harness_probe");
    let deadline = Instant::now() + SERVER_READY_TIMEOUT;
    loop {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            u64::MAX.to_string().as_str(),
        );
        let outcome = match js
            .publish_with_headers(subject.clone(), headers, "".into())
            .await
        {
            Ok(ack) => ack.await.map(|_| ()),
            Err(e) => Err(e),
        };
        match outcome {
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => return store,
            Ok(()) => panic!("probe write to {subject} was stored: expected a rejection"),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("KV bucket {bucket} not writable within 10 s: {e}"),
        }
    }
}

/// Minimal HTTP/1.0 GET against `127.0.0.1:<port><path>` (no HTTP client crate needed).
///
/// Returns the status code and the body. Fails on connection errors or after 2 s (e.g. the
/// server is paused).
pub async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let request = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        let req =
            format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        stream.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(HTTP_TIMEOUT, request)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "HTTP GET timed out"))??;
    let text = String::from_utf8_lossy(&raw);
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("bad HTTP response: {text:?}"),
        )
    };
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    // Status line: "HTTP/1.0 200 OK".
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(bad)?;
    Ok((status, body.to_owned()))
}

fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .stdin(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run `kill -{signal} {pid}`: {e}"));
    assert!(status.success(), "`kill -{signal} {pid}` failed: {status}");
}

fn tail(path: &Path, lines: usize) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

// ---------------------------------------------------------------------------------------------
// NatsServer
// ---------------------------------------------------------------------------------------------

/// Why a start attempt did not produce a ready server.
#[derive(Debug)]
enum StartError {
    /// The process exited during start-up (e.g. port already in use); carries details.
    Exited(String),
    /// Not ready within the timeout; carries details.
    Timeout(String),
}

impl StartError {
    fn message(&self) -> &str {
        match self {
            StartError::Exited(m) | StartError::Timeout(m) => m,
        }
    }
}

/// One `nats-server` process with JetStream, listening on 127.0.0.1.
///
/// Its config file, JetStream store and log live in a temporary directory that is deleted
/// when this value is dropped (after the process is killed). The client and monitoring ports
/// stay the same across [`restart`](Self::restart), so reconnecting clients find it again.
pub struct NatsServer {
    name: String,
    bin: PathBuf,
    dir: TempDir,
    config_path: PathBuf,
    store_dir: PathBuf,
    log_path: PathBuf,
    /// Client port; 0 until learned on a first start with `port: -1`.
    port: u16,
    /// Monitoring (HTTP) port; 0 until learned.
    monitor_port: u16,
    /// `cluster { ... }` block for cluster nodes.
    cluster_block: Option<String>,
    /// Extra config appended verbatim.
    extra: String,
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
        let dir = tempfile::Builder::new()
            .prefix("nats-roles-test-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let mut server = NatsServer::new("nats", dir, 0, 0, None, extra, SERVER_READY_TIMEOUT);
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

    fn new(
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
        faults::signal(pid, libc::SIGHUP);
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
        let _ = writeln!(conf, "# written by tests/support/mod.rs");
        let _ = writeln!(conf, "server_name: {}", self.name);
        let _ = writeln!(conf, "listen: \"127.0.0.1:{}\"", port(self.port));
        let _ = writeln!(conf, "http: \"127.0.0.1:{}\"", port(self.monitor_port));
        if pick_ports {
            let _ = writeln!(conf, "ports_file_dir: \"{}\"", self.dir.path().display());
        }
        let _ = writeln!(
            conf,
            "jetstream {{\n  store_dir: \"{}\"\n}}",
            self.store_dir.display()
        );
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
    fn spawn(&mut self) -> Result<(), StartError> {
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
            "===== tests/support: start #{} of {} =====",
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
    fn check_alive(&mut self) -> Result<(), StartError> {
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

    fn failure(&self, what: &str) -> String {
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
            let last = match http_get(self.monitor_port, "/healthz").await {
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
        match http_get(self.monitor_port, path).await {
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
        send_signal(child.id(), "TERM");
        if self.paused {
            send_signal(child.id(), "CONT");
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
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("pause: {} is not running", self.name));
        send_signal(pid, "STOP");
        self.paused = true;
    }

    /// Continues a paused process with SIGCONT. Panics if not running.
    pub fn resume(&mut self) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("resume: {} is not running", self.name));
        send_signal(pid, "CONT");
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

// ---------------------------------------------------------------------------------------------
// NatsCluster
// ---------------------------------------------------------------------------------------------

/// A JetStream cluster on 127.0.0.1: nodes `n1`..`nN`, cluster name `c`, each with its own
/// client, monitoring and cluster (route) port and store directory, and routes to all nodes.
///
/// Nodes are addressed by 0-based index: `node(0)` is `n1`.
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts `n` nodes (use 3) and waits until every node's `/healthz` is 200 and all agree
    /// on a JetStream meta leader (panics after 20 s with the log tails). Retries with new
    /// ports if a node fails to start (e.g. a picked port was taken meanwhile).
    pub async fn start(n: usize) -> NatsCluster {
        assert!(n >= 1, "a cluster needs at least one node");
        const ATTEMPTS: u32 = 3;
        let mut attempt = 1;
        loop {
            match Self::try_start(n).await {
                Ok(cluster) => return cluster,
                Err(StartError::Exited(msg)) if attempt < ATTEMPTS => {
                    eprintln!(
                        "tests/support: cluster start attempt {attempt} failed, retrying with new ports:\n{msg}"
                    );
                    attempt += 1;
                }
                Err(e) => panic!("cluster of {n} did not start: {}", e.message()),
            }
        }
    }

    async fn try_start(n: usize) -> Result<NatsCluster, StartError> {
        let ports = free_ports(3 * n);
        let (client, rest) = ports.split_at(n);
        let (monitor, route) = rest.split_at(n);
        let routes = route
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let name = format!("n{}", i + 1);
            let dir = tempfile::Builder::new()
                .prefix(&format!("nats-roles-test-{name}-"))
                .tempdir()
                .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
            let cluster_block = format!(
                "cluster {{\n  name: c\n  listen: \"127.0.0.1:{}\"\n  routes: [{routes}]\n}}",
                route[i]
            );
            nodes.push(NatsServer::new(
                &name,
                dir,
                client[i],
                monitor[i],
                Some(cluster_block),
                "",
                CLUSTER_READY_TIMEOUT,
            ));
        }
        let mut cluster = NatsCluster { nodes };
        for node in &mut cluster.nodes {
            node.spawn()?;
        }
        cluster.wait_ready_inner(CLUSTER_READY_TIMEOUT).await?;
        Ok(cluster)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Client URLs of all nodes, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(NatsServer::url).collect()
    }

    /// All client URLs comma-separated, for [`connect`] (the client fails over between them).
    pub fn seed_urls(&self) -> String {
        self.urls().join(",")
    }

    /// Client URL of node `i` (0-based).
    pub fn url(&self, i: usize) -> String {
        self.node(i).url()
    }

    /// Node `i` (0-based; `node(0)` is `n1`).
    pub fn node(&self, i: usize) -> &NatsServer {
        self.nodes
            .get(i)
            .unwrap_or_else(|| panic!("no node {i}: the cluster has {} nodes", self.nodes.len()))
    }

    /// Mutable access to node `i`, e.g. for [`NatsServer::terminate`].
    pub fn node_mut(&mut self, i: usize) -> &mut NatsServer {
        let len = self.nodes.len();
        self.nodes
            .get_mut(i)
            .unwrap_or_else(|| panic!("no node {i}: the cluster has {len} nodes"))
    }

    /// 0-based index of the node with `server_name` `name` (as reported by `/jsz` or stream
    /// info `cluster.leader`).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// SIGKILLs node `i` and reaps it.
    pub fn kill(&mut self, i: usize) {
        self.node_mut(i).kill();
    }

    /// Restarts node `i` with the same ports and store and waits until its `/healthz` is 200,
    /// which in a cluster means it is current with the meta leader (needs a quorum of running
    /// nodes), then until all running nodes agree on a live meta leader.
    pub async fn restart(&mut self, i: usize) {
        self.node_mut(i).restart().await;
        self.wait_ready().await;
    }

    /// Cold restart of the whole cluster: SIGKILLs every node still running, starts all of them
    /// together with their stores, and waits as in [`start`](Self::start) (a meta leader
    /// election takes ~6 s here).
    pub async fn restart_all(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        for node in &mut self.nodes {
            if let Err(e) = node.spawn() {
                panic!("restart_all: {}", e.message());
            }
        }
        self.wait_ready().await;
    }

    /// Starts the (killed) nodes `which` again together, with their ports and stores, without
    /// waiting for them: when they are a majority (quorum loss) no single one becomes ready
    /// before its peers are back. Wait with [`wait_ready`](Self::wait_ready) or for what the
    /// test needs (a stream leader).
    pub fn spawn_together(&mut self, which: &[usize]) {
        for &i in which {
            let node = &mut self.nodes[i];
            node.kill();
            if let Err(e) = node.spawn() {
                panic!("spawn_together: {}", e.message());
            }
        }
    }

    /// SIGSTOPs node `i`.
    pub fn pause(&mut self, i: usize) {
        self.node_mut(i).pause();
    }

    /// SIGCONTs node `i`.
    pub fn resume(&mut self, i: usize) {
        self.node_mut(i).resume();
    }

    /// Waits (up to 20 s, else panics with log tails) until every running, unpaused node
    /// answers `/healthz` 200 and all of them report the same JetStream meta leader
    /// (`/jsz` → `meta_cluster.leader`), which must itself be a running, unpaused node.
    /// Returns the leader's server name.
    ///
    /// The leader must be checked against the live nodes: after the leader is killed, the
    /// others keep reporting it in `/jsz` (and `/healthz` stays 200) for about a second, and
    /// go on reporting it until a new leader is elected (~4-5 s).
    pub async fn wait_ready(&mut self) -> String {
        match self.wait_ready_inner(CLUSTER_READY_TIMEOUT).await {
            Ok(leader) => leader,
            Err(e) => panic!("cluster not ready: {}", e.message()),
        }
    }

    async fn wait_ready_inner(&mut self, timeout: Duration) -> Result<String, StartError> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.check_ready().await {
                Ok(leader) => return Ok(leader),
                Err(StartError::Exited(m)) => return Err(StartError::Exited(m)),
                Err(StartError::Timeout(m)) => m,
            };
            if Instant::now() >= deadline {
                let mut msg = format!("not ready within {timeout:?} (last: {last})");
                for node in &self.nodes {
                    let _ = write!(msg, "\n{}", node.failure("log"));
                }
                return Err(StartError::Timeout(msg));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// One readiness probe: `Ok(leader)`, `Err(Timeout(reason))` for "not yet", or
    /// `Err(Exited)` if a node died.
    async fn check_ready(&mut self) -> Result<String, StartError> {
        for node in &mut self.nodes {
            if node.is_running() {
                node.check_alive()?;
            }
        }
        let live: Vec<&NatsServer> = self
            .nodes
            .iter()
            .filter(|n| n.is_running() && !n.is_paused())
            .collect();
        if live.is_empty() {
            return Err(StartError::Exited("no running, unpaused node".into()));
        }
        let mut leader: Option<String> = None;
        for node in &live {
            match http_get(node.monitor_port, "/healthz").await {
                Ok((200, _)) => {}
                Ok((status, body)) => {
                    return Err(StartError::Timeout(format!(
                        "{} /healthz {status}: {}",
                        node.name,
                        body.trim()
                    )));
                }
                Err(e) => return Err(StartError::Timeout(format!("{} /healthz: {e}", node.name))),
            }
            let jsz = match http_get(node.monitor_port, "/jsz").await {
                Ok((200, body)) => {
                    serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default()
                }
                Ok((status, _)) => {
                    return Err(StartError::Timeout(format!("{} /jsz {status}", node.name)));
                }
                Err(e) => return Err(StartError::Timeout(format!("{} /jsz: {e}", node.name))),
            };
            let Some(this) = jsz["meta_cluster"]["leader"]
                .as_str()
                .filter(|l| !l.is_empty())
            else {
                return Err(StartError::Timeout(format!(
                    "{} knows no meta leader",
                    node.name
                )));
            };
            if !live.iter().any(|n| n.name == this) {
                return Err(StartError::Timeout(format!(
                    "{} reports meta leader {this}, which is not running",
                    node.name
                )));
            }
            match &leader {
                None => leader = Some(this.to_owned()),
                Some(l) if l == this => {}
                Some(l) => {
                    return Err(StartError::Timeout(format!(
                        "nodes disagree on the meta leader ({l} vs {this} at {})",
                        node.name
                    )));
                }
            }
        }
        leader.ok_or_else(|| StartError::Timeout("no meta leader".into()))
    }
}
