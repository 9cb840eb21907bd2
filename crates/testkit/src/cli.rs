//! Running `nats-roles` commands (`validate`, `status`, `evict`, ...) to completion and
//! capturing what they print; [`command`]: a command of any program that the caller's
//! environment cannot change ([`ENV`], the variables the binary reads, removed).

use std::ffi::OsStr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Command;

/// Environment variables the binary reads: removed so the caller's environment cannot change
/// what a test runs (systemd's notification variables too: a test run under a service manager
/// must not notify it). (`XDG_CONFIG_HOME`, where NATS contexts are looked up, is set to a
/// folder without any by [`command`].)
pub const ENV: [&str; 31] = [
    "NATS_CONTEXT",
    "XDG_CONFIG_HOME",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "NATS_URL",
    "NATS_CREDS",
    "NATS_NKEY",
    "NATS_USER",
    "NATS_PASSWORD",
    "NATS_TOKEN",
    "NATS_CA",
    "NATS_CERT",
    "NATS_KEY",
    "NATS_ROLES_INSTANCE_ID",
    "NATS_ROLES_BUCKET",
    "NATS_ROLES_LOG_FORMAT",
    "NATS_ROLES_ADMIN_TOKEN",
    "NATS_ROLES_LOCAL_TOKEN",
    "NATS_ROLES_VERSION",
    "NATS_ROLES_ZONE",
    "RUST_LOG",
    "NO_COLOR",
    "TERM",
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
];

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
