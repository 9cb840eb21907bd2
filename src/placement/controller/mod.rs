//! The placement controller's bookkeeping as a pure step function (no I/O, no clock, like
//! `core::machine`): the membership table, the roles this instance takes part in, the move
//! budget, the voluntary move in flight, the per-role cooldowns and the stuck vacancies.
//!
//! The manager's driver (`manager::placement_tasks`) feeds it [`Input`]s with the time and carries
//! out the [`PlacementAction`]s it returns: hold-backs and hand-overs for the role runners, a
//! rewrite of the membership record, a new view for the API.
//!
//! Here: the controller's state and how each input changes it ([`Controller::step`]). Beside
//! it: `inputs.rs` (what it is configured with and what happens to it), `actions.rs` (what the
//! driver has to do), `replan.rs` (a re-plan: the plan, the freeze, the hold-backs and at most
//! one voluntary release), `prepare.rs` (warm hand-overs, on both sides), `parked.rs` (roles
//! held for a member that left), `timers.rs` (what the driver asks after every input: whether
//! re-plans are due on a timer, which member records are stale).

mod actions;
mod inputs;
mod parked;
mod prepare;
mod replan;
mod timers;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

pub use self::actions::{PlacementAction, RecordRoles};
pub use self::inputs::{ControllerSettings, Input, OwnRole, PrepareEnd, RoleView, World};
use super::freeze::{FreezeRecord, Frozen, StormBreaker};
use super::membership::{Membership, MembershipTiming};
use super::plan::{Plan, Preferred};
use super::plan_cache::PlanCache;
use super::settings::Takeover;
use crate::names::{InstanceId, RoleName};

#[derive(Debug)]
struct Own {
    role: OwnRole,
    /// Last hold-back and preference sent to the role runner.
    sent: Option<(Duration, Option<Preferred>)>,
}

/// The controller's state (see the module documentation).
#[derive(Debug)]
pub struct Controller {
    settings: ControllerSettings,
    membership: Membership,
    roles: BTreeMap<RoleName, Own>,
    /// Last voluntary move of each role (per-role cooldown).
    moved_at: BTreeMap<RoleName, Instant>,
    /// The voluntary move in flight: role, when it was asked for, and whether the role was
    /// seen vacant since.
    in_flight: Option<(RoleName, Instant, bool)>,
    /// Start of the current budget interval and moves made in it.
    budget: (Instant, u32),
    last: Plan,
    /// Roles this instance will not take now (published in its record).
    unavailable: BTreeSet<RoleName>,
    /// Planned roles without a holder, and since when (this instance's view).
    vacant_since: BTreeMap<RoleName, Instant>,
    /// The operator's freeze record, if any.
    operator_freeze: Option<FreezeRecord>,
    /// Freezes voluntary moves when many members vanish at once.
    breaker: StormBreaker,
    /// Why voluntary moves are frozen now, if they are.
    frozen: Option<Frozen>,
    /// Live members that hold as much as their limits allow.
    full: BTreeSet<InstanceId>,
    /// Roles this instance is preparing to receive.
    preparing: BTreeSet<RoleName>,
    /// Roles this instance has prepared (announced in its record).
    prepared: BTreeSet<RoleName>,
    /// Roles whose preparation failed or timed out here (announced in its record).
    prepare_failed: BTreeSet<RoleName>,
    /// Held roles the plan gives to a member that prepares them: (role, receiver) → since
    /// when. Each role's wait for its receiver counts from when a plan first gave it there,
    /// so roles moving to one receiver wait for it at the same time, not one after another.
    awaiting: BTreeMap<(RoleName, InstanceId), Instant>,
    /// The last holder seen of every role (kept through vacancies).
    last_holder: BTreeMap<RoleName, InstanceId>,
    /// Roles this instance holds because their previous holder left (published as `parked`).
    parked: BTreeMap<RoleName, InstanceId>,
    /// The member each role held elsewhere is parked for, as its holder's record last said
    /// (kept after that record is gone): a role taken over from a holder that had parked it
    /// for this instance comes home and is not parked again.
    parked_for: BTreeMap<RoleName, InstanceId>,
    /// Recent plans and their inputs (most re-plans see nothing new).
    plans: PlanCache,
    /// Roles targeted moves keep on this instance (Q13): pinned while they last.
    kept: BTreeSet<RoleName>,
    /// The last re-plan left roles held here that the plan gives to another live member.
    moves_left: bool,
}

impl Controller {
    /// A controller that knows no member and no role yet; its first budget interval starts
    /// at `now`.
    #[must_use]
    pub fn new(settings: ControllerSettings, now: Instant) -> Self {
        let breaker = StormBreaker::new(settings.storm_window, settings.config.stability_window);
        let timing = MembershipTiming {
            stability_window: settings.config.stability_window,
            leave_delay: settings.config.leave_delay,
        };
        Self {
            settings,
            membership: Membership::new(timing),
            roles: BTreeMap::new(),
            moved_at: BTreeMap::new(),
            in_flight: None,
            budget: (now, 0),
            last: Plan::default(),
            unavailable: BTreeSet::new(),
            vacant_since: BTreeMap::new(),
            operator_freeze: None,
            breaker,
            frozen: None,
            full: BTreeSet::new(),
            preparing: BTreeSet::new(),
            prepared: BTreeSet::new(),
            prepare_failed: BTreeSet::new(),
            awaiting: BTreeMap::new(),
            last_holder: BTreeMap::new(),
            parked: BTreeMap::new(),
            parked_for: BTreeMap::new(),
            plans: PlanCache::default(),
            kept: BTreeSet::new(),
            moves_left: false,
        }
    }

    /// Why voluntary moves are frozen, as of the last re-plan.
    #[must_use]
    pub fn frozen(&self) -> Option<&Frozen> {
        self.frozen.as_ref()
    }

    /// The membership table.
    #[must_use]
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// The plan as last computed.
    #[must_use]
    pub fn plan(&self) -> &Plan {
        &self.last
    }

    /// The voluntary move in flight, if any.
    #[cfg(test)]
    #[must_use]
    pub fn in_flight(&self) -> Option<&RoleName> {
        self.in_flight.as_ref().map(|(r, _, _)| r)
    }

    /// What this instance's record says about its roles now.
    #[must_use]
    pub fn record_roles(&self) -> RecordRoles {
        let campaigned = || self.roles.iter().filter(|(_, o)| o.role.campaign);
        RecordRoles {
            roles: campaigned()
                .map(|(n, o)| (n.clone(), o.role.priority))
                .collect(),
            pinned: campaigned()
                .filter(|(n, o)| o.role.takeover == Takeover::Never || self.kept.contains(*n))
                .map(|(n, _)| n.clone())
                .collect(),
            prepares: campaigned()
                .filter(|(_, o)| o.role.prepares)
                .map(|(n, _)| n.clone())
                .collect(),
            prepared: self.prepared.clone(),
            prepare_failed: self.prepare_failed.clone(),
            parked: self.parked.clone(),
            costs: campaigned()
                .filter(|(_, o)| o.role.cost != 1)
                .map(|(n, o)| (n.clone(), o.role.cost.max(1)))
                .collect(),
            unavailable: self
                .unavailable
                .iter()
                .filter(|r| self.roles.contains_key(*r))
                .cloned()
                .collect(),
        }
    }

    /// Applies one input at `now`; returns what the driver has to do, in order.
    pub fn step(&mut self, input: Input, now: Instant) -> Vec<PlacementAction> {
        match input {
            Input::MemberPut { record, revision } => {
                self.membership.observe_put(*record, revision, now);
                vec![PlacementAction::ViewChanged]
            }
            Input::MemberGone {
                id,
                expired,
                revision,
            } => {
                self.membership.observe_gone(&id, expired, revision, now);
                vec![PlacementAction::ViewChanged]
            }
            Input::BucketReset => {
                self.membership.bucket_reset();
                vec![PlacementAction::ViewChanged]
            }
            Input::Sessions(live) => {
                self.membership.set_sessions(live, now);
                vec![PlacementAction::ViewChanged]
            }
            Input::RoleAdded(role, own) => {
                self.roles.insert(
                    role,
                    Own {
                        role: own,
                        sent: None,
                    },
                );
                vec![PlacementAction::RecordChanged]
            }
            Input::RoleRemoved(role) => {
                self.roles.remove(&role);
                self.moved_at.remove(&role);
                vec![PlacementAction::RecordChanged]
            }
            Input::Freeze(record) => {
                self.operator_freeze = record;
                Vec::new()
            }
            Input::Prepared(role, end) => {
                if !self.preparing.remove(&role) {
                    return Vec::new();
                }
                match end {
                    PrepareEnd::Ready => self.prepared.insert(role),
                    PrepareEnd::Failed => self.prepare_failed.insert(role),
                    PrepareEnd::Abandoned => return Vec::new(),
                };
                vec![PlacementAction::RecordChanged]
            }
            Input::Kept(kept) => {
                if kept == self.kept {
                    return Vec::new();
                }
                self.kept = kept;
                vec![PlacementAction::RecordChanged]
            }
            Input::Replan(world) => self.replan(&world, now),
        }
    }
}

#[cfg(test)]
mod prepare_tests;
#[cfg(test)]
mod replan_tests;
#[cfg(test)]
mod test_support;
