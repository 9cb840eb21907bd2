//! Metrics of the role processes (docs/observability.md): runs of `exec` commands by how they
//! ended, restarts, and the commands running now. Recorded with the meter `nats-roles run`
//! installs (Prometheus `GET /metrics`, OTLP), labelled `role`, `instance_id` and `bucket`.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter, UpDownCounter};

use super::child::Exit;

/// Counter: runs of a role's `exec` command by `outcome`.
pub(crate) const EXEC_RUNS: &str = "nats_roles_exec_runs_total";
/// Counter: restarts of a role's `exec` command (`on_exit: restart`).
pub(crate) const EXEC_RESTARTS: &str = "nats_roles_exec_restarts_total";
/// Up-down counter: `exec` commands running now (0 or 1 per role).
pub(crate) const EXEC_RUNNING: &str = "nats_roles_exec_running";

/// Every `outcome` of [`EXEC_RUNS`].
pub(crate) const OUTCOMES: [&str; 7] = [
    "exit_ok",
    "exit_error",
    "signal",
    "killed_deadline",
    "killed_stop_timeout",
    "killed_loss",
    "start_failed",
];

/// The instruments, with the labels of this instance.
#[derive(Clone)]
pub(crate) struct ExecMetrics {
    runs: Counter<u64>,
    restarts: Counter<u64>,
    running: UpDownCounter<i64>,
    base: Vec<KeyValue>,
}

impl std::fmt::Debug for ExecMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecMetrics").finish_non_exhaustive()
    }
}

impl ExecMetrics {
    /// The instruments of `meter`, labelled with `instance_id` and `bucket`.
    pub(crate) fn new(meter: &Meter, instance_id: &str, bucket: &str) -> Self {
        Self {
            runs: meter
                .u64_counter(EXEC_RUNS)
                .with_description("runs of a role's exec command, by how they ended")
                .build(),
            restarts: meter
                .u64_counter(EXEC_RESTARTS)
                .with_description("restarts of a role's exec command (on_exit: restart)")
                .build(),
            running: meter
                .i64_up_down_counter(EXEC_RUNNING)
                .with_description("exec commands running now")
                .build(),
            base: vec![
                KeyValue::new("instance_id", instance_id.to_owned()),
                KeyValue::new("bucket", bucket.to_owned()),
            ],
        }
    }

    fn labels(&self, role: &str) -> Vec<KeyValue> {
        let mut l = self.base.clone();
        l.push(KeyValue::new("role", role.to_owned()));
        l
    }

    /// Zero series for a role with an `exec` command (every outcome shows from the start).
    pub(crate) fn declare(&self, role: &str) {
        let labels = self.labels(role);
        for outcome in OUTCOMES {
            let mut l = labels.clone();
            l.push(KeyValue::new("outcome", outcome));
            self.runs.add(0, &l);
        }
        self.restarts.add(0, &labels);
        self.running.add(0, &labels);
    }

    /// The command started.
    pub(crate) fn started(&self, role: &str) {
        self.running.add(1, &self.labels(role));
    }

    /// A run ended (`was_running`: it had started).
    pub(crate) fn ended(&self, role: &str, exit: &Exit, was_running: bool) {
        let labels = self.labels(role);
        if was_running {
            self.running.add(-1, &labels);
        }
        let mut l = labels;
        l.push(KeyValue::new("outcome", outcome(exit)));
        self.runs.add(1, &l);
    }

    /// The command is restarted.
    pub(crate) fn restarted(&self, role: &str) {
        self.restarts.add(1, &self.labels(role));
    }
}

/// The `outcome` label of a run.
pub(crate) fn outcome(exit: &Exit) -> &'static str {
    match exit {
        Exit::Failed(_) => "start_failed",
        Exit::Ended {
            killed: Some(k), ..
        } if k == "deadline" => "killed_deadline",
        Exit::Ended {
            killed: Some(k), ..
        } if k == "stop_timeout" => "killed_stop_timeout",
        Exit::Ended {
            killed: Some(k), ..
        } if k.starts_with("loss:") => "killed_loss",
        Exit::Ended { code: 0, .. } => "exit_ok",
        Exit::Ended { status, .. } if status.starts_with("signal") => "signal",
        Exit::Ended { .. } => "exit_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_end_has_one_of_the_declared_outcomes() {
        let ended = |code, status: &str, killed: Option<&str>| Exit::Ended {
            code,
            status: status.to_owned(),
            killed: killed.map(str::to_owned),
        };
        for (exit, want) in [
            (ended(0, "exit 0", None), "exit_ok"),
            (ended(3, "exit 3", None), "exit_error"),
            (ended(143, "signal 15", None), "signal"),
            (ended(137, "signal 9", Some("deadline")), "killed_deadline"),
            (
                ended(137, "signal 9", Some("stop_timeout")),
                "killed_stop_timeout",
            ),
            (ended(137, "signal 9", Some("loss:evicted")), "killed_loss"),
            (Exit::Failed("no such file".into()), "start_failed"),
        ] {
            assert_eq!(outcome(&exit), want);
            assert!(OUTCOMES.contains(&want));
        }
    }
}
