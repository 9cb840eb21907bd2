//! The move record (`control.move.<role>`, protocol Q13): its format, its states and the
//! target's reasons to refuse. Its bytes are read and written by `codec::control`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::names::{InstanceId, RoleName};

/// Key prefix of move records: `control.move.<role>`.
pub const MOVE_PREFIX: &str = "control.move.";

/// Version of the move record written by this crate.
pub const MOVE_VERSION: u32 = 1;

/// Where a move stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MoveState {
    /// Written by the requester: the target has not answered yet.
    Requested,
    /// The target will take the role: the holder releases it, the others hold back.
    Accepted,
    /// The target will not take it ([`MoveRecord::reason`] says why).
    Refused,
    /// The target holds the role (at [`MoveRecord::term`]); placement keeps it there until
    /// the record expires.
    Done,
}

impl MoveState {
    /// The state's name in the record.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Accepted => "accepted",
            Self::Refused => "refused",
            Self::Done => "done",
        }
    }
}

/// Why a target refused a move (the first that holds, in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MoveRefusal {
    /// The target does not manage the role (not in its configuration).
    NotConfigured,
    /// The target only observes the role (`campaign: false`).
    NotACandidate,
    /// The target is draining or stopping.
    Draining,
    /// The target cools down after a release or an eviction, or its campaign stopped on a
    /// failure.
    Unavailable,
    /// The target would exceed its placement `capacity`.
    AtCapacity,
    /// The target would exceed its placement `max_roles`.
    MaxRoles,
    /// The target has no live session of the role's TTL class.
    NoSession,
    /// The target already holds the role.
    AlreadyHolder,
}

impl MoveRefusal {
    /// The reason's name in the record and in the CLI's output.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotConfigured => "not_configured",
            Self::NotACandidate => "not_a_candidate",
            Self::Draining => "draining",
            Self::Unavailable => "unavailable",
            Self::AtCapacity => "at_capacity",
            Self::MaxRoles => "max_roles",
            Self::NoSession => "no_session",
            Self::AlreadyHolder => "already_holder",
        }
    }

    /// The reason in words.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::NotConfigured => "the target does not manage the role (not in its configuration)",
            Self::NotACandidate => "the target only observes the role (campaign: false)",
            Self::Draining => "the target is draining or stopping",
            Self::Unavailable => {
                "the target cools down after a release or an eviction, or its campaign failed"
            }
            Self::AtCapacity => "the target is at its placement capacity",
            Self::MaxRoles => "the target holds its placement max_roles",
            Self::NoSession => "the target has no live session for the role's TTL",
            Self::AlreadyHolder => "the target already holds the role",
        }
    }
}

impl std::fmt::Display for MoveRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One move record (docs/protocol.md Q13). Every write of it is a CAS with a per-key TTL, so
/// it always ends by itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRecord {
    /// Format version ([`MOVE_VERSION`]).
    pub v: u32,
    /// The request's id (random; names the request in logs and outputs).
    pub id: Uuid,
    /// The role (must match the key).
    pub role: RoleName,
    /// The target instance.
    pub to: InstanceId,
    /// The holder when the request was made.
    pub from: InstanceId,
    /// The term the move ends (the revision of the holder's acquire); once `done`, the
    /// target's term.
    pub term: u64,
    /// Where the move stands.
    pub state: MoveState,
    /// The target's session (uuid) for the role's TTL class, once accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Uuid>,
    /// Why the target refused, once refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<MoveRefusal>,
    /// How long the others hold back at the vacancy (ms; at most the role's TTL).
    pub grace_ms: u64,
    /// How long placement keeps the role on the target once moved (ms; 0: not at all).
    pub hold_ms: u64,
    /// How long the request waits (ms): the record's TTL until it is done.
    pub timeout_ms: u64,
    /// Who asked (`user@host`, an instance id), informational.
    #[serde(default)]
    pub by: String,
    /// When (RFC 3339), informational.
    #[serde(default)]
    pub at: String,
}

impl MoveRecord {
    /// Longest record accepted from the bucket, in bytes (anything longer is foreign).
    pub const MAX_LEN: usize = 4096;

    /// The key of `role`'s move record.
    #[must_use]
    pub fn key(role: &RoleName) -> String {
        format!("{MOVE_PREFIX}{role}")
    }

    /// The hold-back at the vacancy, limited to the role's TTL `ttl` (a record asking for
    /// more holds back for the TTL: no record delays anyone longer than a crash would).
    #[must_use]
    pub fn grace(&self, ttl: Duration) -> Duration {
        Duration::from_millis(self.grace_ms).min(ttl)
    }
}

#[cfg(test)]
impl MoveRecord {
    /// A record of the move of `scheduler` from node-a to node-b (term 41) in `state` (tests).
    pub(crate) fn sample(state: MoveState) -> Self {
        MoveRecord {
            v: MOVE_VERSION,
            id: Uuid::nil(),
            role: RoleName::new("scheduler").unwrap(),
            to: InstanceId::new("node-b").unwrap(),
            from: InstanceId::new("node-a").unwrap(),
            term: 41,
            state,
            session: (state == MoveState::Accepted).then(Uuid::new_v4),
            reason: None,
            grace_ms: 1000,
            hold_ms: 600_000,
            timeout_ms: 10_000,
            by: "alice@ops-1".into(),
            at: "2026-11-26T17:02:03.004Z".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grace_never_exceeds_the_ttl() {
        let mut r = MoveRecord::sample(MoveState::Accepted);
        r.grace_ms = u64::MAX;
        assert_eq!(r.grace(Duration::from_secs(3)), Duration::from_secs(3));
        r.grace_ms = 500;
        assert_eq!(r.grace(Duration::from_secs(3)), Duration::from_millis(500));
    }
}
