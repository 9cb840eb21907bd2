//! The state of protocol Q8 in one simulated process, apart from the code that drives it
//! (`follow.rs`, `members.rs`): whom it follows and polls, its own member record, and what its
//! member-key operations in flight were. A leaf: the process (`mod.rs`) holds these.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tokio::time::Instant;
use uuid::Uuid;

use crate::names::InstanceId;
use crate::sim::clock::Nanos;

/// Whom one process follows and polls.
#[derive(Debug, Default)]
pub(in crate::sim) struct Following {
    /// Instances whose session keys are followed (what the book was told last).
    pub(super) follows: BTreeSet<InstanceId>,
    /// The consumers of followed session keys: key → server time of the consumer's creation
    /// (`Nanos::MAX` while it is being created); entries stored before it reach the process
    /// only as the consumer's first delivery.
    pub(super) consumers: HashMap<usize, Nanos>,
    /// The second tier: member slot → what its reads found.
    pub(super) polls: BTreeMap<usize, Poll>,
    /// A re-evaluation is scheduled then (the book's `recheck_at`).
    pub(super) recheck: Option<Nanos>,
}

/// The second tier's reads of one member's session keys (as `manager::successor`).
#[derive(Debug, Default)]
pub(in crate::sim) struct Poll {
    /// When to read next; `None`: the member just entered the second tier (its first read is
    /// spread over a period).
    pub(super) next_at: Option<Instant>,
    /// Session key → the revision read last and when it was first read.
    pub(super) reads: HashMap<usize, (u64, Instant)>,
    /// A read in flight.
    pub(super) reading: bool,
}

/// The own record's state in one process.
#[derive(Debug, Default)]
pub(in crate::sim) struct OwnRecord {
    /// The last revision of the own member key this process knows (acknowledged writes, the
    /// watcher): every write's CAS.
    pub(super) rev: u64,
    /// The session the record written last lists.
    pub(super) session: Option<Uuid>,
    /// Rule 6: the record was deleted or replaced by another process at this moment; written
    /// again only after an acknowledged renewal sent after it.
    pub(super) blocked_since: Option<Instant>,
    /// The last write (rule 6: at most one rewrite per heartbeat).
    pub(super) last_write: Option<Instant>,
    /// A write failed without being stored: the next renewal writes again.
    pub(super) retry: bool,
    /// The next unchanged rewrite (server time).
    pub(super) next_refresh: Nanos,
}

/// What a member-key operation of a process was (its outcome's meaning).
#[derive(Debug, Clone)]
pub(in crate::sim) enum MemberOp {
    /// A write or delete of the own record.
    Own,
    /// Another process's delete of member `slot`'s record at `revision`: a successor's that
    /// saw its session end (Q8 rule 4), or the second tier's (rule 5).
    Delete {
        slot: usize,
        revision: u64,
        second_tier: bool,
    },
    /// A second-tier read of session key `key` listed with `uuid` in member `slot`'s record at
    /// revision `record`.
    Poll {
        slot: usize,
        uuid: Uuid,
        record: u64,
    },
}
