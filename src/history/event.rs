//! The history format: one [`Record`] per JSON line (see `docs/reliability.md`, "History
//! format").

use serde::{Deserialize, Serialize};

/// Who stamped a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A node process (an instance of the library), with its own monotonic clock.
    Node,
    /// The test harness, with the real monotonic clock.
    Harness,
}

/// One line of a history file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `CLOCK_MONOTONIC` in nanoseconds (scaled under `faketime` for nodes).
    pub mono_ns: u64,
    /// Who stamped it.
    pub src: Source,
    /// Instance id (`"harness"` for the harness).
    #[serde(default)]
    pub node: String,
    /// The role, for role events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The recording process's incarnation (a random id per [`HistoryRecorder`], also on the
    /// records of its `exec` children's watchdogs): two processes with one instance id are
    /// told apart by it. Absent in histories recorded before it existed (the checker then
    /// takes a node name for one process at a time, split at each `start`).
    ///
    /// [`HistoryRecorder`]: crate::history::HistoryRecorder
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inc: Option<String>,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
}

/// Which lease write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// Start a term.
    Acquire,
    /// Extend a term.
    Renew,
    /// CAS-delete the lease.
    Release,
}

/// Outcome of a lease write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpResult {
    /// Stored.
    Ok,
    /// Refused (conflict, retry, or a failure).
    Fail,
    /// No answer in time: it may be stored later.
    Unknown,
}

/// Start or end of a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The fault began.
    Start,
    /// The fault ended (healed).
    End,
}

/// The event of a [`Record`], tagged by `ev`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// The node process started recording.
    Start {
        /// Roles the node campaigns for (empty: unknown, treated as all).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        roles: Vec<String>,
        /// Clock rate the node runs at (from `FAKETIME`, 1.0 without).
        #[serde(default = "one")]
        clock_rate: f64,
        /// The unscaled monotonic clock at the same moment (raw syscall).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        real_mono_ns: Option<u64>,
    },
    /// Clean exit, after every role's demote.
    Stop,
    /// The recorder lost this many events (queue overflow).
    Dropped {
        /// Events lost.
        count: u64,
    },
    /// A lease write was sent.
    Invoke {
        /// Operation id (pairs with `complete`).
        op: u64,
        /// Which write.
        kind: OpKind,
        /// Expected revision (0 = absent).
        expected: u64,
    },
    /// A lease write completed.
    Complete {
        /// Operation id.
        op: u64,
        /// Which write.
        kind: OpKind,
        /// Outcome.
        result: OpResult,
        /// Stored revision (when ok).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revision: Option<u64>,
        /// Why it failed (when fail).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// From sending to the outcome, in microseconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        elapsed_us: Option<u64>,
    },
    /// A term began.
    Promote {
        /// Bucket epoch of the token.
        epoch: u64,
        /// Term number of the token.
        term: u64,
        /// Local deadline (node mono ns).
        deadline_ns: u64,
    },
    /// A renewal moved the deadline.
    Renew {
        /// Bucket epoch of the token.
        epoch: u64,
        /// Term number of the token.
        term: u64,
        /// New local deadline (node mono ns).
        deadline_ns: u64,
    },
    /// A term ended.
    Demote {
        /// Bucket epoch of the token.
        epoch: u64,
        /// Term number of the token.
        term: u64,
        /// Why (`DemoteReason::as_str`).
        reason: String,
        /// How long the term lasted, in milliseconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        held_ms: Option<u64>,
    },
    /// The workload is about to act as leader.
    Act {
        /// Bucket epoch of the token.
        epoch: u64,
        /// Term number of the token.
        term: u64,
        /// The workload's write id.
        write_id: u64,
    },
    /// An `exec` role's child process started (written by its watchdog process).
    ChildStart {
        /// Bucket epoch of the token.
        epoch: u64,
        /// Term number of the token.
        term: u64,
        /// The child's process id (its process group).
        pid: u32,
    },
    /// An `exec` role's child process and every process of its group are gone (written by its
    /// watchdog process once none is left).
    ChildStop {
        /// Bucket epoch of the token.
        epoch: u64,
        /// Term number of the token.
        term: u64,
        /// The child's process id.
        pid: u32,
        /// How it ended: `exit N` or `signal N`.
        status: String,
        /// Why the watchdog killed the group, when it did (`deadline`, `stop_timeout`, …).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        killed: Option<String>,
        /// The kill deadline the watchdog held when the group ended (`CLOCK_MONOTONIC` of the
        /// host, ns; the holder's deadline minus the watchdog's lead), when it had one: what a
        /// late stop is judged by when the checker reports it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kill_deadline_ns: Option<u64>,
    },
    /// A fenced write of role data completed.
    FencedWrite {
        /// Bucket epoch of the token.
        epoch: u64,
        /// Term number of the token.
        term: u64,
        /// The workload's write id.
        write_id: u64,
        /// Stored by the server.
        accepted: bool,
        /// Outcome unknown (may be stored).
        unknown: bool,
        /// Stored revision (when accepted).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revision: Option<u64>,
        /// Why it was not stored (when neither accepted nor unknown).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The data key (under `data.<role>.`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
    },
    /// The role's reported state changed (`init`, `candidate`, `follower`, `leader`, ...).
    State {
        /// Before.
        from: String,
        /// After.
        to: String,
        /// Why it left leadership, when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The role cannot campaign or renew because of this failure (it keeps retrying).
    Failed {
        /// The failure kind.
        error: String,
    },
    /// Parameters of the trial (harness, first line).
    Trial(TrialInfo),
    /// A fault began or ended (harness).
    Fault {
        /// What (`sigkill`, `sigstop`, `proxy_stall`, `heal`, …).
        what: String,
        /// Which node or server.
        #[serde(default)]
        target: String,
        /// Start or end.
        phase: Phase,
    },
    /// The harness sampled the KV.
    Observe {
        /// Holder seen (none = vacant).
        #[serde(default)]
        holder: Option<String>,
        /// Revision seen.
        #[serde(default)]
        revision: Option<u64>,
    },
    /// An event kind this checker does not know (ignored).
    #[serde(other)]
    Other,
}

fn one() -> f64 {
    1.0
}

/// The `trial` line: parameters of one trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialInfo {
    /// The seed (printed on failure to reproduce).
    #[serde(default)]
    pub seed: u64,
    /// Kind of trial (fault schedule name).
    #[serde(default)]
    pub kind: String,
    /// Lease TTL of the nodes.
    #[serde(default)]
    pub ttl_ms: u64,
    /// Deadline margin of the nodes.
    #[serde(default)]
    pub margin: f64,
    /// Clock rate of faked nodes (1.0 = none).
    #[serde(default = "one")]
    pub clock: f64,
    /// Renewal period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_ms: Option<u64>,
    /// L1: longest vacancy after the last fault ended (default `ttl_ms + 1500`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l1_bound_ms: Option<u64>,
    /// L1: longest wait for a new holder after a crashed holder's lease ran out (default 750).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry_slack_ms: Option<u64>,
    /// S4: tolerated overlap (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epsilon_ms: Option<u64>,
    /// L3: start of the steady-state window (harness mono ns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_from_ns: Option<u64>,
    /// L3: end of the steady-state window (harness mono ns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_to_ns: Option<u64>,
}

impl Default for TrialInfo {
    /// Everything zero or absent, at clock rate 1.
    fn default() -> Self {
        Self {
            seed: 0,
            kind: String::new(),
            ttl_ms: 0,
            margin: 0.0,
            clock: 1.0,
            heartbeat_ms: None,
            l1_bound_ms: None,
            expiry_slack_ms: None,
            epsilon_ms: None,
            steady_from_ns: None,
            steady_to_ns: None,
        }
    }
}

impl Record {
    /// A node record.
    #[must_use]
    pub fn node(mono_ns: u64, node: &str, role: Option<&str>, event: Event) -> Self {
        Self {
            mono_ns,
            src: Source::Node,
            node: node.to_string(),
            role: role.map(str::to_string),
            inc: None,
            event,
        }
    }

    /// The record with the recording process's incarnation `inc`.
    #[must_use]
    pub fn with_inc(mut self, inc: Option<String>) -> Self {
        self.inc = inc;
        self
    }

    /// A harness record.
    #[must_use]
    #[cfg(feature = "tooling")]
    pub fn harness(mono_ns: u64, role: Option<&str>, event: Event) -> Self {
        Self {
            mono_ns,
            src: Source::Harness,
            node: "harness".to_string(),
            role: role.map(str::to_string),
            inc: None,
            event,
        }
    }

    /// The record as one JSON line (without the newline).
    #[must_use]
    pub fn to_line(&self) -> String {
        // Serialising these plain types cannot fail; an empty object keeps the file parseable.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_unknown_events_are_kept_as_other() {
        let r = Record::node(
            5,
            "n1",
            Some("r0"),
            Event::Complete {
                op: 3,
                kind: OpKind::Renew,
                result: OpResult::Ok,
                revision: Some(9),
                error: None,
                elapsed_us: None,
            },
        );
        let line = r.to_line();
        assert_eq!(
            line,
            r#"{"mono_ns":5,"src":"node","node":"n1","role":"r0","ev":"complete","op":3,"kind":"renew","result":"ok","revision":9}"#
        );
        let back: Record = serde_json::from_str(&line).expect("parses");
        assert_eq!(back, r);
        let other: Record = serde_json::from_str(
            r#"{"mono_ns":1,"src":"harness","node":"harness","ev":"future_thing","x":1}"#,
        )
        .expect("parses");
        assert_eq!(other.event, Event::Other);
        let trial: Record = serde_json::from_str(
            r#"{"mono_ns":1,"src":"harness","node":"harness","ev":"trial","seed":7,"kind":"kill","ttl_ms":2000,"margin":0.1,"clock":1.0}"#,
        )
        .expect("parses");
        assert!(matches!(
            trial.event,
            Event::Trial(TrialInfo {
                seed: 7,
                ttl_ms: 2000,
                ..
            })
        ));
    }
}
