//! Transitions broadcast by the manager (for logs, dashboards and observers).

use std::time::{Duration, SystemTime};

use crate::core::{DemoteReason, FailureKind, KeyState};
use crate::names::{InstanceId, RoleName};
use crate::token::FencingToken;

/// Who holds a role, as seen through the bucket watcher (any role in the bucket, including
/// roles this instance does not contend for).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The role.
    pub role: RoleName,
    /// The holder; `None` when the role is vacant or the value is foreign.
    pub holder: Option<InstanceId>,
    /// Whether the key holds a value nats-roles cannot read.
    pub foreign: bool,
    /// The holder's term.
    pub term: Option<u64>,
    /// Revision of the role key: the write that began the term (protocol v2 does not write
    /// the role key during a term; renewals go to the session key).
    pub revision: u64,
    /// The holder's priority.
    pub priority: i32,
    /// The holder's advertised metadata (host, HTTP address, ...).
    pub meta: std::collections::BTreeMap<String, String>,
    /// When this manager saw the current term begin (wall clock).
    pub since: SystemTime,
    /// The holder's fencing token for the current term (redacted in `Debug`/`Display`).
    pub token: Option<FencingToken>,
    /// Server time the holder was last heard of: its session's latest renewal (protocol v2:
    /// the session key is renewed every heartbeat, the role key written once per term). The
    /// manager's watcher and [`Inspector::holders`](crate::tooling::inspect::Inspector::holders)
    /// / [`Inspector::holder`](crate::tooling::inspect::Inspector::holder) set it from the
    /// session; until a session renewal is seen it is the role key's write (the acquire).
    pub renewed_at: Option<SystemTime>,
    /// When the holder says the term began (its wall clock; informational, protocol P2).
    pub acquired_at: Option<SystemTime>,
    /// The holder's lease TTL.
    pub ttl: Option<Duration>,
}

impl HolderInfo {
    /// The holder of `role` according to one state of its key; `None` when the key is vacant.
    /// `epoch` is the bucket epoch (for the token), `written_at` the server time of the entry.
    pub(crate) fn from_state(
        role: &RoleName,
        state: &KeyState,
        epoch: u64,
        written_at: Option<SystemTime>,
    ) -> Option<Self> {
        let KeyState::Held { revision, value } = state else {
            return None;
        };
        let lease = value.lease();
        let term = lease.map(|l| l.term.unwrap_or(*revision));
        Some(HolderInfo {
            role: role.clone(),
            holder: lease.map(|l| l.holder.clone()),
            foreign: lease.is_none(),
            term,
            revision: *revision,
            priority: lease.map_or(0, |l| l.priority),
            meta: lease.map(|l| l.meta.clone()).unwrap_or_default(),
            since: SystemTime::now(),
            token: lease
                .zip(term)
                .map(|(l, term)| FencingToken::new(epoch, term, l.nonce)),
            renewed_at: written_at,
            acquired_at: lease
                .and_then(|l| l.acquired_at.as_deref())
                .and_then(parse_rfc3339),
            ttl: lease.map(crate::value::LeaseValue::ttl),
        })
    }

    /// Whether `other` describes the same term of the same holder (a renewal of it).
    pub(crate) fn same_term(&self, other: &HolderInfo) -> bool {
        self.holder == other.holder && self.term == other.term && self.foreign == other.foreign
    }
}

/// Parses an RFC 3339 time as written into lease values.
pub(crate) fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(SystemTime::from)
}

/// One transition.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RoleEvent {
    /// This instance became the holder of `role`.
    Promoted {
        /// The role.
        role: RoleName,
        /// The new term.
        term: u64,
    },
    /// This instance stopped holding `role`.
    Demoted {
        /// The role.
        role: RoleName,
        /// The term that ended.
        term: u64,
        /// Why.
        reason: DemoteReason,
    },
    /// The holder of a role changed (seen by the watcher; any role in the bucket).
    HolderChanged(HolderInfo),
    /// Another live process uses this instance id.
    DuplicateInstance {
        /// The role where it was seen.
        role: RoleName,
    },
    /// A role cannot campaign or renew because of this failure (a server condition, a
    /// persistent failure); it keeps retrying and reports [`RoleEvent::Recovered`] when the
    /// server answers normally again.
    Failed {
        /// The role.
        role: RoleName,
        /// The error.
        kind: FailureKind,
    },
    /// The failure last reported for the role is over.
    Recovered {
        /// The role.
        role: RoleName,
    },
}
