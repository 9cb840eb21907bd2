//! What the placement controller tells its driver to do ([`PlacementAction`]), and what this
//! instance's membership record says about its roles ([`RecordRoles`], read after
//! [`PlacementAction::RecordChanged`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::names::{InstanceId, RoleName};
use crate::placement::plan::Preferred;

/// What the driver has to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlacementAction {
    /// Report how many counted members are live.
    LiveMembers(usize),
    /// The roles, pinned roles or declined roles of this instance's record changed: rewrite
    /// it ([`Controller::record_roles`](super::Controller::record_roles)).
    RecordChanged,
    /// The roles this instance will not take now changed (the record is rewritten too).
    Unavailable(BTreeSet<RoleName>),
    /// Tell a role runner how long to hold back campaigning for a vacancy, and where the role
    /// is wanted.
    HoldBack {
        /// The role.
        role: RoleName,
        /// The hold-back.
        delay: Duration,
        /// This instance is where the plan sends the vacancy: it claims without the herd's
        /// wait (protocol Q7; everybody else holds back for the claim grace anyway).
        first: bool,
        /// Where the plan wants it.
        preferred: Option<Preferred>,
    },
    /// Prepare a role this instance is about to receive by a voluntary move (its
    /// `on_prepare`, at most `prepare_timeout`), then report
    /// [`Input::Prepared`](super::Input::Prepared).
    Prepare(RoleName),
    /// Hand a held role over gracefully (a voluntary move).
    Release {
        /// The role.
        role: RoleName,
        /// To whom, and why.
        to: Preferred,
    },
    /// The members at their capacity (`max_roles`, `capacity`) changed: the herd ranking
    /// skips them.
    Full(BTreeSet<InstanceId>),
    /// The membership table or the plan changed
    /// ([`Controller::membership`](super::Controller::membership),
    /// [`Controller::plan`](super::Controller::plan)).
    ViewChanged,
}

/// What this instance's membership record says about its roles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordRoles {
    /// Roles it campaigns for, with their priorities.
    pub roles: BTreeMap<RoleName, i32>,
    /// Of those, the ones placement never moves.
    pub pinned: BTreeSet<RoleName>,
    /// Of those, the ones it will not take now.
    pub unavailable: BTreeSet<RoleName>,
    /// Of those, the costs that are not 1.
    pub costs: BTreeMap<RoleName, u32>,
    /// Of those, the ones it prepares before receiving them.
    pub prepares: BTreeSet<RoleName>,
    /// Of those, the ones it has prepared (ready to receive).
    pub prepared: BTreeSet<RoleName>,
    /// Of those, the ones whose preparation failed or timed out (not ready; hand them over
    /// without waiting).
    pub prepare_failed: BTreeSet<RoleName>,
    /// Roles it holds only because their previous holder left: role → that holder.
    pub parked: BTreeMap<RoleName, InstanceId>,
}
