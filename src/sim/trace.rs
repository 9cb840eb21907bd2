//! What a run records: each role machine's inputs, actions and timers, the keys' logs, the
//! faults.

use std::time::Duration;

use tokio::time::Instant;

use crate::core::types::{Action, WriteOutcome};

use super::clock::{Clock, Nanos};
use super::kv::Entry;
use super::violation::Violation;

/// A compact record of an input, for checks and traces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Seen {
    Start,
    Timer,
    Observed(u64),
    Write(u64, WriteOutcome),
    Read(u64, Option<u64>),
    Validated(u64),
    Validate,
    Drained,
    Release,
    CampaignDelay,
    Stop,
    Connection(bool),
    /// A session update: live or lost.
    Session(bool),
    /// The holder at this revision is gone.
    HolderGone(u64),
    /// The bucket's age at the process start.
    BucketAge,
    /// A new bucket epoch.
    BucketReset(u64),
}

/// One step of a machine's history (server time `g`, the machine's clock `now`).
#[derive(Debug, Clone)]
pub(super) enum Rec {
    Input {
        g: Nanos,
        what: Seen,
    },
    Act {
        g: Nanos,
        now: Instant,
        action: Box<Action>,
    },
    /// After the actions of an input: the machine's timer and whether an operation is in flight.
    Idle {
        g: Nanos,
        now: Instant,
        timeout: Option<Instant>,
        pending: bool,
        stopped: bool,
        /// The machine has no live session (it waits for one: no timer needed).
        waiting: bool,
        /// The session's own deadline ends a held term in time (the driver arms no timer for
        /// the term's deadline: the session's loss comes as an input).
        covered: bool,
    },
    Crash {
        g: Nanos,
    },
    /// The driver hands the machine a renewal from the session's clock that arrived at server
    /// time `arrived` (the next `Renewed` action, if any, is that renewal's).
    Synced {
        g: Nanos,
        arrived: Nanos,
    },
    /// A renewal of the held term's session moved the deadline the application acts on (the
    /// session task does it in the renewal's own step, without the role machine: Q4).
    Extended {
        g: Nanos,
        deadline: Instant,
    },
    /// The machine may not acquire before server time `until` (a young bucket, Q6).
    Hold {
        g: Nanos,
        until: Nanos,
    },
}

/// The recorded history of one machine.
#[derive(Debug, Clone)]
pub(super) struct NodeTrace {
    pub(super) name: String,
    /// The process (instance incarnation) it runs in.
    pub(super) inst: usize,
    /// The role this machine campaigns for.
    pub(super) role: usize,
    pub(super) campaign: bool,
    pub(super) clock: Clock,
    pub(super) recs: Vec<Rec>,
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub(super) struct Trace {
    /// Every role machine of every process.
    pub(super) nodes: Vec<NodeTrace>,
    /// Number of roles: keys `0..roles` of `logs` are role keys, then the session keys, then
    /// the member keys (one per instance slot each).
    pub(super) roles: usize,
    /// Per role key: the base role when the key is a slot (Q15), for S7.
    pub(super) slot_bases: Vec<Option<String>>,
    /// Names of the session keys (key `roles + k` is `session_keys[k]`; key
    /// `roles + session_keys.len() + k` is slot `k`'s member key).
    pub(super) session_keys: Vec<String>,
    /// Every key's log, over every bucket epoch.
    pub(super) logs: Vec<Vec<Entry>>,
    pub(super) end: Nanos,
    /// Faults as applied (and when the lasting ones end): time and description.
    pub(super) faults: Vec<(Nanos, String)>,
    /// Problems of the run itself (livelock).
    pub(super) errors: Vec<Violation>,
    /// When buckets were created during the run (a fresh bucket at the start, resets).
    pub(super) created: Vec<Nanos>,
    /// How often the run reached some paths of the drivers (for the coverage test).
    pub(super) counts: std::collections::BTreeMap<&'static str, usize>,
    /// Targeted moves applied during the run.
    pub(super) moves: Vec<MoveApplied>,
}

impl Trace {
    /// The session keys' logs (by instance slot).
    pub(super) fn session_logs(&self) -> &[Vec<Entry>] {
        &self.logs[self.roles..self.roles + self.session_keys.len()]
    }

    /// The member keys' logs (by instance slot).
    pub(super) fn member_logs(&self) -> &[Vec<Entry>] {
        &self.logs[self.roles + self.session_keys.len()..]
    }
}

/// A targeted move (protocol Q13) as the world applied it.
#[derive(Debug, Clone, Copy)]
pub(super) struct MoveApplied {
    /// When.
    pub(super) at: Nanos,
    /// The role (key index).
    pub(super) role: usize,
    /// The holder's node and the target's node for the role.
    pub(super) from: usize,
    pub(super) to: usize,
    /// The term the move ends.
    pub(super) term: u64,
    /// The others' hold-back.
    pub(super) grace: Duration,
}
