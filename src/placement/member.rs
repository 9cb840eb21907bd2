//! The membership record under `member.<instance>` (protocol P10, Q9); its bytes are read and
//! written by `codec::member`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::names::{InstanceId, RoleName};

/// Key prefix of membership records.
pub const MEMBER_PREFIX: &str = "member.";

/// Version of the membership record written by this crate.
pub const MEMBER_VERSION: u32 = 2;

/// The earlier format (heartbeated with a per-key TTL, live while rewritten), still read.
pub const MEMBER_VERSION_HEARTBEATED: u32 = 1;

/// What one instance says about itself: its placement inputs (with placement) and its live
/// sessions (every instance, protocol Q8 rule 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// Format version; readers ignore other versions.
    pub v: u32,
    /// The instance id (also the key's last token).
    pub instance: InstanceId,
    /// Random id of the process start.
    pub incarnation: Uuid,
    /// Capacity: this instance's share of the roles is proportional to its weight (>= 1).
    pub weight: u32,
    /// Default priority of the instance.
    pub priority: i32,
    /// Every role this instance campaigns for, with its effective priority.
    pub roles: BTreeMap<RoleName, i32>,
    /// Roles it never hands over voluntarily (`takeover: never`): while it holds one, the
    /// role is planned where it is.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub pinned: BTreeSet<RoleName>,
    /// Roles of `roles` it will not take now: it cools down after a release with a cooldown
    /// or an eviction, or it cannot acquire them (a failure). The plan treats them as roles it
    /// does not campaign for. A flag per role, no deadline (clocks differ between machines):
    /// the record is rewritten when this set changes. Older readers ignore the field.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub unavailable: BTreeSet<RoleName>,
    /// Moving its roles away; preferred for nothing.
    #[serde(default)]
    pub draining: bool,
    /// Whether its health check passes; an unhealthy member is preferred for nothing.
    #[serde(default = "yes")]
    pub healthy: bool,
    /// HTTP address of its dashboard/API, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// Wall-clock start time (RFC 3339); informational only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Its zone (`instance.zone`): placement spreads roles across zones first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Units of role cost it holds at most (`instance.capacity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    /// Roles it holds at most (`instance.max_roles`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_roles: Option<u32>,
    /// Its software version (`instance.version`): nothing moves onto a member older than the
    /// newest live version. A value that does not parse is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The cost (`roles[].weight`) of each of its roles that does not cost 1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub costs: BTreeMap<RoleName, u32>,
    /// Roles it prepares before a voluntary move hands them here (warm hand-over): a holder
    /// waits for them to appear in `prepared`.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub prepares: BTreeSet<RoleName>,
    /// Roles it has prepared and is ready to receive.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub prepared: BTreeSet<RoleName>,
    /// Roles whose preparation failed or ran out of `prepare_timeout`: not ready, and a holder
    /// does not wait for them (it hands them over at once, cold).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub prepare_failed: BTreeSet<RoleName>,
    /// Roles it holds only because their previous holder left (stopped, drained or crashed):
    /// role → that holder ("home"). When the home member is back, placement moves the role
    /// home first when the member needs roles, so a restarted member gets its own roles back
    /// and a rolling restart moves each role out and back at most.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parked: BTreeMap<RoleName, InstanceId>,
    /// This instance's placement knobs in short (`PlacementSettings::digest`), so that
    /// members configured differently can be shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<String>,
    /// Whether an operator froze this instance's voluntary moves in its configuration or API.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub frozen: bool,
    /// Heartbeat period of the record in milliseconds (readers use it to notice a silent
    /// member before its key expires).
    pub heartbeat_ms: u64,
    /// The instance's live sessions (protocol Q8 rule 1): TTL class in milliseconds → the
    /// uuid of its session of that class. Left out while empty; a record without it (an older
    /// writer) says nothing about sessions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sessions: BTreeMap<u64, Uuid>,
    /// Whether the instance takes part in placement. `false` marks a *presence record*
    /// (protocol Q8 rule 1): an instance without placement says only that it is present and
    /// which sessions it has (no roles); placement readers ignore it. Left out while `true`,
    /// so older readers see a placement record as before.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub placement: bool,
    /// The role groups the instance takes part in, with the count it acts on (protocol Q14):
    /// members that disagree about a count are shown (`GET /api/members`, `nats-roles
    /// status`). Left out while empty; older readers ignore it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<RoleName, u32>,
}

fn yes() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_true(value: &bool) -> bool {
    *value
}

impl MemberRecord {
    /// The key of this record.
    #[must_use]
    pub fn key(&self) -> String {
        format!("{MEMBER_PREFIX}{}", self.instance)
    }
}

/// A valid record of `id` for tests: weight 1, priority 0, healthy, `roles` with their
/// priorities, heartbeats every `heartbeat_ms`.
#[cfg(test)]
pub(crate) fn test_record(id: &str, roles: &[(&str, i32)], heartbeat_ms: u64) -> MemberRecord {
    MemberRecord {
        v: MEMBER_VERSION,
        instance: InstanceId::new(id).expect("valid"),
        incarnation: Uuid::nil(),
        weight: 1,
        priority: 0,
        roles: roles
            .iter()
            .map(|(r, p)| (RoleName::new(*r).expect("valid"), *p))
            .collect(),
        pinned: BTreeSet::new(),
        unavailable: BTreeSet::new(),
        draining: false,
        healthy: true,
        http: None,
        started_at: None,
        zone: None,
        capacity: None,
        max_roles: None,
        version: None,
        costs: BTreeMap::new(),
        settings: None,
        parked: BTreeMap::new(),
        prepares: BTreeSet::new(),
        prepared: BTreeSet::new(),
        prepare_failed: BTreeSet::new(),
        frozen: false,
        heartbeat_ms,
        sessions: BTreeMap::new(),
        placement: true,
        groups: BTreeMap::new(),
    }
}
