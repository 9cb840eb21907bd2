//! `nats-roles run` instances as real OS processes, each serving its dashboard on a free
//! loopback port (`--http 127.0.0.1:0`, the URL read from its `http url=` stdout line).
//!
//! `run` serves HTTP from before it connects: while its manager is still starting (retrying a
//! server or cluster that is not ready), `/readyz` answers 503 with `"starting": true`.
//! [`Deployment::start`] waits until the manager has started; [`Deployment::spawn`] returns
//! as soon as the URL is printed (tests of the start-up itself).
//!
//! Processes are
//! killed (SIGKILL) when dropped, also while a failed test unwinds; [`Deployment::report`]
//! gives every process's stdout and stderr for failure messages.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::process::{SIGTERM, signal};

/// How long an instance may take to print its URL (or to start its manager after that), or to
/// exit after SIGTERM.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the `run` process serving HTTP on `port` has started its manager: `/readyz`
/// answers and its body does not say `"starting": true`. `None` while it cannot tell (no
/// answer yet).
pub async fn has_started(port: u16) -> Option<bool> {
    let (_, body) = crate::http::get(port, "/readyz").await.ok()?;
    let json: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(json["starting"] != serde_json::Value::Bool(true))
}

/// Waits until the `run` process serving HTTP on `port` has started its manager (see
/// [`has_started`]); after `timeout`, `Err` with the last `/readyz` answer.
pub async fn wait_started(port: u16, timeout: Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if has_started(port).await == Some(true) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let last = crate::http::get(port, "/readyz").await;
            return Err(format!(
                "the manager did not start within {timeout:?}; /readyz: {last:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One `nats-roles run` process.
pub struct Instance {
    /// Its instance id.
    pub id: String,
    /// Base URL of its dashboard and API (`http://127.0.0.1:PORT/`).
    pub url: String,
    /// Its HTTP port.
    pub port: u16,
    pid: u32,
    child: Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr_path: PathBuf,
}

impl Instance {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its stdout lines so far.
    pub fn stdout(&self) -> Vec<String> {
        self.stdout
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// A configuration file and the instances started with it.
pub struct Deployment {
    dir: tempfile::TempDir,
    /// The configuration file.
    pub config: PathBuf,
    /// NATS URL the instances use.
    pub nats_url: String,
    /// The bucket.
    pub bucket: String,
    /// The instances, in start order.
    pub instances: Vec<Instance>,
    env: Vec<(String, String)>,
    args: Vec<String>,
    own_groups: bool,
}

impl Deployment {
    /// A configuration for `roles` in a fresh `bucket` (auto-created), plus `extra` YAML.
    pub fn new(nats_url: &str, bucket: &str, roles: &[&str], extra: &str) -> Deployment {
        let dir = tempfile::Builder::new()
            .prefix("nats-roles-instances-")
            .tempdir()
            .unwrap_or_else(|e| panic!("temporary directory: {e}"));
        let mut yaml = format!(
            "bucket:\n  name: {bucket}\n  replicas: 1\n  auto_create: true\n{extra}roles:\n"
        );
        for role in roles {
            yaml.push_str(&format!("  - name: {role}\n"));
        }
        let config = dir.path().join("roles.yaml");
        std::fs::write(&config, yaml).unwrap_or_else(|e| panic!("write config: {e}"));
        Deployment {
            dir,
            config,
            nats_url: nats_url.to_owned(),
            bucket: bucket.to_owned(),
            instances: Vec::new(),
            env: Vec::new(),
            args: Vec::new(),
            own_groups: false,
        }
    }

    /// Sets an environment variable for instances started from now on.
    pub fn env(&mut self, name: &str, value: &str) {
        self.env.push((name.to_owned(), value.to_owned()));
    }

    /// Adds an argument of `run` for instances started from now on; `{id}` in it is replaced
    /// with the instance id, `{dir}` with the temporary directory.
    pub fn arg(&mut self, arg: &str) {
        self.args.push(arg.to_owned());
    }

    /// Instances started from now on run in a process group of their own (its id is the
    /// instance's pid), so that a test can signal the group (`kill -SIG -- -PGID`,
    /// [`crate::process::signal_group`]) without hitting the test process. They are killed
    /// (`PR_SET_PDEATHSIG`) when the thread that started them ends.
    pub fn own_process_groups(&mut self) {
        self.own_groups = true;
    }

    /// The temporary directory (config, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts instance `id`, waits for its dashboard URL and until its manager has started;
    /// returns its index.
    pub async fn start(&mut self, id: &str) -> usize {
        let url = self.nats_url.clone();
        self.start_on(id, &url).await
    }

    /// Starts instance `id` connected to the server at `nats_url` (another site's), waits for
    /// its dashboard URL and until its manager has started; returns its index.
    pub async fn start_on(&mut self, id: &str, nats_url: &str) -> usize {
        let n = self.spawn_on(id, nats_url).await;
        if let Err(e) = wait_started(self.instances[n].port, START_TIMEOUT).await {
            panic!("{id}: {e}\n{}", self.report());
        }
        n
    }

    /// Starts instance `id` and waits only for its dashboard URL (printed before it connects
    /// to NATS), not for its manager to start; returns its index.
    pub async fn spawn(&mut self, id: &str) -> usize {
        let url = self.nats_url.clone();
        self.spawn_on(id, &url).await
    }

    /// [`spawn`](Self::spawn) connected to the server(s) at `nats_url` (comma-separated).
    pub async fn spawn_on(&mut self, id: &str, nats_url: &str) -> usize {
        let bin = crate::nats_roles_bin();
        let mut cmd = crate::cli::command(&bin);
        cmd.arg("run")
            .arg("--config")
            .arg(&self.config)
            .args(["--instance-id", id, "--server", nats_url])
            .args(["--http", "127.0.0.1:0"])
            .args(self.args.iter().map(|a| {
                a.replace("{id}", id)
                    .replace("{dir}", &self.dir.path().to_string_lossy())
            }));
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if self.own_groups {
            crate::process::own_group(&mut cmd);
        }
        self.spawn_command(id, cmd).await
    }

    /// Starts instance `id` from `cmd`, a `nats-roles run` command line the caller built in
    /// full (a launcher in front of the binary, the configuration, the environment; it must
    /// serve HTTP so that it prints its `http url=` line), waits for that URL and until its
    /// manager has started; returns its index.
    pub async fn start_command(&mut self, id: &str, cmd: tokio::process::Command) -> usize {
        let n = self.spawn_command(id, cmd).await;
        if let Err(e) = wait_started(self.instances[n].port, START_TIMEOUT).await {
            panic!("{id}: {e}\n{}", self.report());
        }
        n
    }

    /// [`start_command`](Self::start_command) without waiting for the manager to start: returns
    /// as soon as the URL is printed. Its stdout is piped and read here, its stderr goes to a
    /// file in [`dir`](Self::dir); [`terminate`](Self::terminate) signals the process `cmd`
    /// started.
    pub async fn spawn_command(&mut self, id: &str, mut cmd: tokio::process::Command) -> usize {
        let n = self.instances.len();
        let stderr_path = self.dir.path().join(format!("{n}-{id}.stderr"));
        let stderr = std::fs::File::create(&stderr_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", stderr_path.display()));
        cmd.stdout(Stdio::piped()).stderr(Stdio::from(stderr));
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {:?}: {e}", cmd.as_std().get_program()));
        let pid = child.id().unwrap_or_else(|| panic!("{id} has no pid"));
        let out = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("stdout of {id} is piped"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (url_tx, url_rx) = tokio::sync::oneshot::channel();
        tokio::spawn({
            let lines = lines.clone();
            async move {
                let mut url_tx = Some(url_tx);
                let mut reader = BufReader::new(out).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    if let Some(url) = line.strip_prefix("http url=")
                        && let Some(tx) = url_tx.take()
                    {
                        let _ = tx.send(url.to_owned());
                    }
                    lines
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(line);
                }
            }
        });
        let url = match tokio::time::timeout(START_TIMEOUT, url_rx).await {
            Ok(Ok(url)) => url,
            _ => panic!(
                "{id} printed no `http url=` line within {START_TIMEOUT:?}; stderr:\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            ),
        };
        let port = url
            .trim_end_matches('/')
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {url}"));
        self.instances.push(Instance {
            id: id.to_owned(),
            url,
            port,
            pid,
            child,
            stdout: lines,
            stderr_path,
        });
        n
    }

    /// Sends SIGTERM to instance `i`.
    pub fn terminate(&self, i: usize) {
        signal(self.instances[i].pid, SIGTERM);
    }

    /// Instance `i`'s exit status if it has exited, `None` while it runs.
    pub fn try_exit(&mut self, i: usize) -> Option<ExitStatus> {
        match self.instances[i].child.try_wait() {
            Ok(status) => status,
            Err(e) => panic!("wait for instance {i}: {e}"),
        }
    }

    /// Waits for instance `i` to exit.
    pub async fn wait_exit(&mut self, i: usize, timeout: Duration) -> ExitStatus {
        let report = self.report();
        let child = &mut self.instances[i].child;
        match tokio::time::timeout(timeout, child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => panic!("wait for instance {i}: {e}"),
            Err(_) => panic!("instance {i} still running after {timeout:?}\n{report}"),
        }
    }

    /// Every instance's stdout and stderr, for failure messages.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for i in &self.instances {
            out.push_str(&format!(
                "----- {} stdout -----\n{}\n----- {} stderr -----\n{}\n",
                i.id,
                i.stdout().join("\n"),
                i.id,
                i.stderr()
            ));
        }
        out
    }
}
