//! Warm hand-overs (docs/placement.md): on the holder's side, the wait of a held role for
//! the receiver the plan gives it to prepare it; on the receiver's side, the preparations it
//! starts and announces in its record.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use super::{Controller, PlacementAction};
use crate::names::{InstanceId, RoleName};
use crate::placement::membership::Membership;
use crate::placement::plan::Plan;

impl Controller {
    /// Whether the release of held `role` waits for the receiver `plan` gives it to prepare
    /// it: that receiver has not answered (neither ready nor failed) and `prepare_timeout` has
    /// not passed since a plan first gave it the role.
    pub(super) fn waits_for_prepare(&self, role: &RoleName, plan: &Plan, now: Instant) -> bool {
        let Some(to) = plan.preferred.get(role) else {
            return false;
        };
        self.awaiting
            .get(&(role.clone(), to.instance.clone()))
            .is_some_and(|since| now < *since + self.settings.config.prepare_timeout)
    }

    /// Receiver side of a warm hand-over: prepares the own roles the plan gives this instance
    /// while another live member still holds them; forgets preparations no longer needed.
    pub(super) fn receive_prepared(
        &mut self,
        plan: &Plan,
        holders: &BTreeMap<RoleName, InstanceId>,
        live: &BTreeSet<InstanceId>,
        actions: &mut Vec<PlacementAction>,
    ) {
        let me = &self.settings.instance;
        let wanted: BTreeSet<RoleName> = self
            .roles
            .iter()
            .filter(|(_, o)| o.role.prepares && o.role.campaign)
            .filter(|(r, _)| plan.preferred.get(*r).is_some_and(|p| &p.instance == me))
            .filter(|(r, _)| holders.get(*r).is_some_and(|h| h != me && live.contains(h)))
            .map(|(r, _)| r.clone())
            .collect();
        let before = (self.prepared.len(), self.prepare_failed.len());
        self.prepared.retain(|r| wanted.contains(r));
        self.prepare_failed.retain(|r| wanted.contains(r));
        self.preparing.retain(|r| wanted.contains(r));
        // Every role the plan gives here is prepared at once (each role runs its own
        // `on_prepare`): a receiver taking several roles is ready for all of them after one
        // preparation, not one after another.
        for r in &wanted {
            if !self.prepared.contains(r)
                && !self.prepare_failed.contains(r)
                && self.preparing.insert(r.clone())
            {
                actions.push(PlacementAction::Prepare(r.clone()));
            }
        }
        if (self.prepared.len(), self.prepare_failed.len()) != before {
            actions.push(PlacementAction::RecordChanged);
        }
    }
}

/// Starts the wait of every role `me` holds that `plan` gives to another live member that
/// prepares it (the receiver starts preparing it on the same plan), and forgets the waits
/// that are over: the role is no longer held by `me`, or its receiver answered, left or no
/// longer prepares it.
pub(super) fn track_awaiting(
    awaiting: &mut BTreeMap<(RoleName, InstanceId), Instant>,
    membership: &Membership,
    me: &InstanceId,
    (plan, holders, live): (
        &Plan,
        &BTreeMap<RoleName, InstanceId>,
        &BTreeSet<InstanceId>,
    ),
    now: Instant,
) {
    awaiting.retain(|(role, to), _| {
        holders.get(role) == Some(me) && live.contains(to) && prepares(membership, role, to)
    });
    for (role, holder) in holders {
        if holder == me
            && let Some(to) = plan.preferred.get(role).map(|p| &p.instance)
            && to != me
            && live.contains(to)
            && prepares(membership, role, to)
        {
            awaiting.entry((role.clone(), to.clone())).or_insert(now);
        }
    }
}

/// Whether `to`'s record says it prepares `role` and has not answered yet (neither ready nor
/// failed): a holder moving the role there waits for the answer (at most `prepare_timeout`).
fn prepares(membership: &Membership, role: &RoleName, to: &InstanceId) -> bool {
    membership.record(to).is_some_and(|r| {
        r.prepares.contains(role) && !r.prepared.contains(role) && !r.prepare_failed.contains(role)
    })
}
