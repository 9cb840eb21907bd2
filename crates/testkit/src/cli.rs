//! Running `nats-roles` commands (`validate`, `status`, `evict`, ...) to completion and
//! capturing what they print.

use std::ffi::OsStr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Command;

use crate::instances::ENV;

/// What a finished command printed, and how it ended.
pub struct CliOutput {
    /// Exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    /// Everything it wrote to stdout.
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
    /// How long it ran.
    pub took: Duration,
}

impl CliOutput {
    /// Exit code, run time, stdout and stderr, for searching and for failure messages.
    pub fn text(&self) -> String {
        format!(
            "exit {:?} after {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.took, self.stdout, self.stderr
        )
    }
}

/// A command for `program` that cannot be changed by the caller's environment (the variables of
/// [`ENV`] removed, `XDG_CONFIG_HOME` pointing where no NATS context is, so the developer's
/// selected `nats` context is not used), with stdin from /dev/null, killed when dropped.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    for var in ENV {
        cmd.env_remove(var);
    }
    cmd.env("XDG_CONFIG_HOME", no_config_home());
    cmd
}

/// A folder that does not exist (so it holds no `nats/context.txt`).
pub fn no_config_home() -> std::path::PathBuf {
    std::env::temp_dir().join("nats-roles-tests-no-config-home")
}

/// Runs `nats-roles args...` with stdin from /dev/null, without the environment variables of
/// [`ENV`] and with `env` set. Fails the test if it has not finished after `limit` or if its
/// output says it panicked.
pub async fn run(args: &[&str], env: &[(&str, &str)], limit: Duration) -> CliOutput {
    let mut cmd = command(crate::nats_roles_bin());
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let out = tokio::time::timeout(limit, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("nats-roles {args:?} did not finish within {limit:?}"))
        .unwrap_or_else(|e| panic!("run nats-roles {args:?}: {e}"));
    let out = CliOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    };
    assert!(
        !out.text().contains("panicked"),
        "nats-roles {args:?} panicked:\n{}",
        out.text()
    );
    out
}
