//! What the placement controller is configured with ([`ControllerSettings`]) and what happens
//! to it ([`Input`]): the sessions and member records the watcher sees, the roles this
//! instance takes part in ([`OwnRole`]), the freeze record, the end of a preparation
//! ([`PrepareEnd`]), the roles targeted moves keep here, and the world a re-plan sees
//! ([`World`], [`RoleView`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::names::{InstanceId, RoleName};
use crate::placement::freeze::FreezeRecord;
use crate::placement::member::MemberRecord;
use crate::placement::settings::{PlacementSettings, Takeover};

/// What a controller is configured with.
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// This instance.
    pub instance: InstanceId,
    /// The placement knobs.
    pub config: PlacementSettings,
    /// Longest wait for one KV write.
    pub operation_timeout: Duration,
    /// Longest a voluntary move stays in flight (the drain timeout and two member TTLs).
    pub move_timeout: Duration,
    /// The storm breaker's window: members vanishing within it count together (the member
    /// TTL).
    pub storm_window: Duration,
}

/// A role this instance takes part in, as placement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnRole {
    /// Its priority here.
    pub priority: i32,
    /// Whether placement may hand it over.
    pub takeover: Takeover,
    /// Whether this instance campaigns for it (false: observer).
    pub campaign: bool,
    /// Its cost (`roles[].weight`, at least 1).
    pub cost: u32,
    /// Whether this instance prepares it before a voluntary move hands it here.
    pub prepares: bool,
}

/// A managed role as the manager sees it at a re-plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoleView {
    /// This instance holds it.
    pub leader: bool,
    /// This instance will not take it now (cooling down, or stopped on a permanent failure).
    pub declines: bool,
}

/// The world a re-plan sees.
#[derive(Debug, Clone, Default)]
pub struct World {
    /// Who holds which role (the watcher's view; vacant roles are absent).
    pub holders: BTreeMap<RoleName, InstanceId>,
    /// Every role the manager runs a task for now; a role not in here gets no action.
    pub roles: BTreeMap<RoleName, RoleView>,
    /// Whether this instance's health check passes.
    pub healthy: bool,
}

/// What happens to the controller.
#[derive(Debug, Clone)]
pub enum Input {
    /// The instances with a live session now (protocol Q9: a member is live while its session
    /// is), once the watcher delivered the bucket's state, then at every change.
    Sessions(BTreeSet<InstanceId>),
    /// A member record was written (the watcher saw it at `revision`).
    MemberPut {
        /// The record.
        record: Box<MemberRecord>,
        /// Its revision.
        revision: u64,
    },
    /// A member record was deleted (`expired`: it ran out of TTL).
    MemberGone {
        /// The member.
        id: InstanceId,
        /// Whether its TTL ran out (rather than a graceful delete).
        expired: bool,
        /// The revision of the deletion.
        revision: u64,
    },
    /// The bucket was recreated: revisions start again.
    BucketReset,
    /// This instance takes part in one more role (or again, with new settings).
    RoleAdded(RoleName, OwnRole),
    /// This instance no longer takes part in a role.
    RoleRemoved(RoleName),
    /// The operator's freeze record: set (`Some`) or deleted/unreadable (`None`).
    Freeze(Option<FreezeRecord>),
    /// This instance's preparation of a role ended, and how.
    Prepared(RoleName, PrepareEnd),
    /// The roles targeted moves keep on this instance now (protocol Q13): it never hands
    /// them over voluntarily and its record lists them as pinned.
    Kept(BTreeSet<RoleName>),
    /// Compute the plan and act on it.
    Replan(World),
}

/// How this instance's preparation of a role ended (warm hand-over, docs/placement.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrepareEnd {
    /// `on_prepare` succeeded: the record lists the role in `prepared`.
    Ready,
    /// `on_prepare` failed or ran out of `prepare_timeout`: the record lists the role in
    /// `prepare_failed`, so that the holder hands it over at once (a cold hand-over, as
    /// without a preparation) instead of waiting for a readiness that will not come.
    Failed,
    /// The preparation was abandoned: this instance was promoted meanwhile (the term has
    /// started and does not wait for a preparation). The record lists it nowhere.
    Abandoned,
}
