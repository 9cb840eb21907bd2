//! The benchmarked processes: a `nats-roles run` child with a timestamping stdout reader, and
//! the POSIX signals that stop it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub(crate) const SIGKILL: i32 = 9;
pub(crate) const SIGTERM: i32 = 15;

unsafe extern "C" {
    /// POSIX `kill(2)`, from the C library std links anyway: no fork/exec of `kill(1)` between
    /// `t0` and the signal.
    fn kill(pid: i32, sig: i32) -> i32;
}

pub(crate) fn send_signal(pid: u32, sig: i32) -> Result<(), String> {
    let pid = i32::try_from(pid).map_err(|e| e.to_string())?;
    // SAFETY: kill(2) only reads its two integer arguments.
    let rc = unsafe { kill(pid, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "kill({pid}, {sig}): {}",
            std::io::Error::last_os_error()
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------------------

/// A `nats-roles run` process; SIGKILLed on drop.
pub(crate) struct Instance {
    pub(crate) id: String,
    pub(crate) pid: u32,
    pub(crate) child: Child,
    /// Stdout lines, timestamped by the reader task when read.
    pub(crate) lines: mpsc::UnboundedReceiver<(Instant, String)>,
}

impl Instance {
    pub(crate) fn spawn(
        bin: &Path,
        config: &Path,
        id: &str,
        url: &str,
        dir: &Path,
    ) -> Result<Instance, String> {
        let stderr =
            std::fs::File::create(dir.join(format!("{id}.stderr"))).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .arg("--config")
            .arg(config)
            .args(["--instance-id", id, "--server", url, "--auto-create"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true);
        for var in [
            "NATS_URL",
            "NATS_CREDS",
            "NATS_ROLES_INSTANCE_ID",
            "NATS_ROLES_BUCKET",
            "RUST_LOG",
        ] {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let pid = child.id().ok_or("child without pid")?;
        let stdout = child.stdout.take().ok_or("stdout not piped")?;
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                // Timestamp first: this is the moment the orchestrator "sees" the line.
                let at = Instant::now();
                if tx.send((at, line)).is_err() {
                    break;
                }
            }
        });
        Ok(Instance {
            id: id.to_owned(),
            pid,
            child,
            lines,
        })
    }

    /// Reads lines until each of `prefixes` started a line; returns their timestamps (in the
    /// order of `prefixes`).
    pub(crate) async fn wait_lines(
        &mut self,
        prefixes: &[String],
        timeout: Duration,
    ) -> Result<Vec<Instant>, String> {
        let deadline = Instant::now() + timeout;
        let mut found: Vec<Option<Instant>> = vec![None; prefixes.len()];
        while found.iter().any(Option::is_none) {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some((at, line))) => {
                    if let Some(i) = prefixes.iter().position(|p| line.starts_with(p.as_str())) {
                        found[i].get_or_insert(at);
                    }
                }
                Ok(None) => return Err(format!("{}: stdout closed", self.id)),
                Err(_) => {
                    let missing: Vec<&String> = prefixes
                        .iter()
                        .zip(&found)
                        .filter(|(_, f)| f.is_none())
                        .map(|(p, _)| p)
                        .collect();
                    return Err(format!(
                        "{}: no {missing:?} line within {timeout:?}",
                        self.id
                    ));
                }
            }
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// Lines already read by the reader task, without waiting.
    pub(crate) fn pending_lines(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok((_, line)) = self.lines.try_recv() {
            out.push(line);
        }
        out
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
