//! Per-role status as published on each role's `watch` channel.

use std::time::SystemTime;

use crate::core::DemoteReason;
use crate::names::{InstanceId, RoleName};
use crate::status::RoleState;
use crate::store::TtlMode;
use crate::token::FencingToken;

/// A snapshot of this instance's view of one role.
///
/// The fencing token is kept in its redacted form in `Debug`; use
/// [`crate::Leadership::token`] to get it for a fenced resource.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RoleStatus {
    /// The role.
    pub role: RoleName,
    /// This instance's state for the role.
    pub state: RoleState,
    /// Whether this instance campaigns for the role (`false`: it only observes it,
    /// [`RoleSpec::observe_only`](super::RoleSpec::observe_only), `campaign: false`).
    pub campaign: bool,
    /// The current holder as last observed (this instance when leading).
    pub leader_id: Option<InstanceId>,
    /// Whether the key holds a value nats-roles cannot read (a foreign value).
    pub foreign_holder: bool,
    /// The current term, when a holder is known.
    pub term: Option<u64>,
    /// Latest revision of the role key known here.
    pub revision: u64,
    /// This instance's fencing token while leading.
    pub token: Option<FencingToken>,
    /// When this instance's current term began (wall clock, informational).
    pub held_since: Option<SystemTime>,
    /// Last successful acquire/renew of this instance's current term.
    pub last_heartbeat: Option<SystemTime>,
    /// Last promotion or demotion of this instance.
    pub last_transition: SystemTime,
    /// Why the last term of this instance ended.
    pub last_demote_reason: Option<DemoteReason>,
    /// Whether the NATS connection is up.
    pub connected: bool,
    /// How the server expires lease keys.
    pub ttl_mode: TtlMode,
    /// What keeps this role from campaigning or renewing right now (a server error code, a
    /// permission violation for the role's subject, a configuration error), in words with
    /// the server's code and description; `None` once the server answers normally again.
    /// The role keeps retrying meanwhile (never stopped for good).
    pub last_error: Option<String>,
    /// The failure behind [`last_error`](Self::last_error), typed.
    pub failure: Option<crate::core::FailureKind>,
    /// Whether another live process was seen using this instance id.
    pub duplicate_instance: bool,
    /// Where placement wants the role and why (`None` without placement, or when no live
    /// member campaigns for it).
    pub preferred: Option<crate::placement::Preferred>,
    /// Until when this instance stays away from the role: the end of the cooldown after a
    /// voluntary release with a cooldown, or of the one TTL after an eviction (`None` when not
    /// cooling down). Placement publishes it so no member hands the role to this instance
    /// meanwhile (docs/placement.md).
    pub cooldown_until: Option<tokio::time::Instant>,
    /// The protocol version of the lease in the role's key when it is one this instance does
    /// not speak and never takes over (protocol Q10; `last_error` says so in words). `None`
    /// once the key holds no such lease.
    pub incompatible_version: Option<u64>,
}

impl RoleStatus {
    pub(crate) fn new(role: RoleName, campaign: bool, ttl_mode: TtlMode) -> Self {
        Self {
            role,
            state: RoleState::Init,
            campaign,
            leader_id: None,
            foreign_holder: false,
            term: None,
            revision: 0,
            token: None,
            held_since: None,
            last_heartbeat: None,
            last_transition: SystemTime::now(),
            last_demote_reason: None,
            connected: false,
            ttl_mode,
            last_error: None,
            failure: None,
            duplicate_instance: false,
            preferred: None,
            cooldown_until: None,
            incompatible_version: None,
        }
    }

    /// Whether this instance holds the role.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.state == RoleState::Leader
    }
}

/// The status of a role as `rx` shows it — unless the role's runner is gone without a last
/// word (its publisher dropped while the status says it still takes part): its driver failed
/// and its terms were abandoned (fail-stop, docs/failure-semantics.md). Then the role is
/// reported stopped, with `abandoned` as the last demotion if it held the role, instead of
/// the runner's last status for ever (a `LEADER` that another instance has taken over).
pub(crate) fn current(rx: &tokio::sync::watch::Receiver<RoleStatus>) -> RoleStatus {
    let mut status = rx.borrow().clone();
    if rx.has_changed().is_err() && status.state != RoleState::Stopped {
        if status.state == RoleState::Leader {
            status.last_demote_reason = Some(DemoteReason::Abandoned);
        }
        status.state = RoleState::Stopped;
        status.token = None;
        status.held_since = None;
        status.last_error = Some(
            "the role's driver failed (a bug): the role is abandoned; restart the process to \
             campaign for it again"
                .to_owned(),
        );
    }
    status
}
