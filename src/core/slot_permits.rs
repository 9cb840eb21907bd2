//! The slot permit of each role with slots (protocol Q15, invariant S7): which slot of a role
//! on one process may send an acquire. The pure decision, shared by the manager's role driver
//! and the deterministic simulation: the driver asks [`SlotPermits::decide`] after every step
//! of a slot, before any other role steps, and applies the answer at once; a slot that sent
//! an acquire then claims the permit, so its siblings lose theirs before they step again.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use crate::core::machine::RoleMachine;
use crate::core::types::KeyState;
use crate::names::RoleName;
use crate::status::RoleState;
use crate::value::HolderValue;

/// Where one slot stands, as its driver sees it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotView {
    /// It claims the permit ([`RoleMachine::claims_permit`], or its term's end is still with
    /// the application): nobody else may have it.
    Claims,
    /// A candidate whose key is vacant (a marker, absent, or its holder's session gone): it
    /// would acquire with the permit.
    Vacant,
    /// [`SlotView::Vacant`], but placement (or a targeted move) prefers another instance for
    /// it: its claim is held back, so a vacant slot without a hold-back goes first.
    HeldBack,
    /// A candidate whose key holds a value its backstop may take over later (a foreign or
    /// version 1 value, or an unknown entry): worth the permit only when no slot is vacant.
    Stale,
    /// Anything else (held by another instance, cooling down, stopping, observing).
    Busy,
}

impl SlotView {
    /// Where a slot stands by its machine alone (the driver adds what the application still
    /// holds: a term's end not yet taken back claims too).
    pub(crate) fn of_machine(machine: &RoleMachine) -> Self {
        if machine.claims_permit() {
            return Self::Claims;
        }
        let state = machine.state();
        if !matches!(state, RoleState::Candidate | RoleState::Follower) || machine.is_stopped() {
            return Self::Busy;
        }
        match machine.observed() {
            Some(KeyState::Absent | KeyState::Vacant { .. }) if state == RoleState::Candidate => {
                if machine.held_back() {
                    Self::HeldBack
                } else {
                    Self::Vacant
                }
            }
            Some(KeyState::Unknown { .. }) => Self::Stale,
            Some(KeyState::Held { value, .. })
                if !matches!(value, HolderValue::Lease(_) | HolderValue::Newer { .. }) =>
            {
                Self::Stale
            }
            _ => Self::Busy,
        }
    }
}

/// The slots of each role one process runs, ordered by that instance's preference; `I`
/// names a slot's runner (the driver's role id, the simulation's node index).
#[derive(Debug)]
pub(crate) struct SlotPermits<I> {
    /// Per base role: its slots' runners and their rendezvous score (higher first).
    groups: HashMap<RoleName, Vec<(I, u64)>>,
    /// Slots aborted ([`SlotPermits::abandon`]): never removed, they claim for good.
    abandoned: HashSet<I>,
}

impl<I> Default for SlotPermits<I> {
    fn default() -> Self {
        Self {
            groups: HashMap::new(),
            abandoned: HashSet::new(),
        }
    }
}

impl<I: Copy + Eq + Hash + Ord> SlotPermits<I> {
    /// A slot runner joins its role's group (nothing for a role that is not a slot), with
    /// this instance's rendezvous score for the slot
    /// (`placement::hash::score(instance, k)`: every instance has its own order).
    pub(crate) fn add(&mut self, id: I, role: &RoleName, score: u64) {
        if role.slot().is_none() {
            return;
        }
        let group = self.groups.entry(role.base_role()).or_default();
        group.push((id, score));
        group.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    }

    /// A slot was aborted (its term is not released and may last until it expires): it
    /// stays in its group, and the driver counts a slot without a runner as claiming.
    pub(crate) fn abandon(&mut self, id: I) {
        self.abandoned.insert(id);
    }

    /// A slot runner left (stopped, and its `on_demote` returned). Nothing for an aborted
    /// slot.
    pub(crate) fn remove(&mut self, id: I, role: &RoleName) {
        if role.slot().is_none() || self.abandoned.contains(&id) {
            return;
        }
        let base = role.base_role();
        if let Some(group) = self.groups.get_mut(&base) {
            group.retain(|(member, _)| *member != id);
            if group.is_empty() {
                self.groups.remove(&base);
            }
        }
    }

    /// The permit of every slot of `role`'s group (empty for a role that is not a slot):
    /// a claimant keeps it and every other slot loses it; without a claimant only the most
    /// preferred vacant slot gets it (one nobody else is preferred for first, else one held
    /// back for another instance, else the most preferred stale one), so a process campaigns
    /// for one slot at a time, in its own order (rendezvous over `(instance, k)`).
    pub(crate) fn decide(&self, role: &RoleName, view: impl Fn(I) -> SlotView) -> Vec<(I, bool)> {
        if role.slot().is_none() {
            return Vec::new();
        }
        let Some(group) = self.groups.get(&role.base_role()) else {
            return Vec::new();
        };
        let views: Vec<(I, SlotView)> = group.iter().map(|(id, _)| (*id, view(*id))).collect();
        let chosen = views
            .iter()
            .find(|(_, v)| *v == SlotView::Claims)
            .or_else(|| views.iter().find(|(_, v)| *v == SlotView::Vacant))
            .or_else(|| views.iter().find(|(_, v)| *v == SlotView::HeldBack))
            .or_else(|| views.iter().find(|(_, v)| *v == SlotView::Stale))
            .map(|(id, _)| *id);
        views
            .iter()
            .map(|(id, _)| (*id, Some(*id) == chosen))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::InstanceId;

    type RoleId = u64;

    fn group(instance: &str) -> (SlotPermits<RoleId>, RoleName, Vec<RoleId>) {
        let base = RoleName::new("indexer").unwrap();
        let instance = InstanceId::new(instance).unwrap();
        let mut p = SlotPermits::default();
        for k in 0..3 {
            // A stable score per (instance, slot), as the drivers' rendezvous score.
            let mut h = std::hash::DefaultHasher::new();
            (instance.as_str(), k).hash(&mut h);
            let score = std::hash::Hasher::finish(&h);
            p.add(
                RoleId::from(k),
                &RoleName::for_slot(&base, k).unwrap(),
                score,
            );
        }
        let order = p.groups[&base].iter().map(|(id, _)| *id).collect();
        (p, RoleName::for_slot(&base, 0).unwrap(), order)
    }

    fn open(decision: &[(RoleId, bool)]) -> Vec<RoleId> {
        decision
            .iter()
            .filter(|(_, p)| *p)
            .map(|(id, _)| *id)
            .collect()
    }

    #[test]
    fn a_claimant_keeps_the_permit_and_closes_every_sibling() {
        let (p, role, order) = group("node-a");
        let last = order[2];
        let d = p.decide(&role, |id| {
            if id == last {
                SlotView::Claims
            } else {
                SlotView::Vacant
            }
        });
        assert_eq!(d.len(), 3);
        assert_eq!(open(&d), [last]);
    }

    #[test]
    fn without_a_claimant_only_the_preferred_vacant_slot_opens() {
        let (p, role, order) = group("node-a");
        assert_eq!(open(&p.decide(&role, |_| SlotView::Vacant)), [order[0]]);
        let d = p.decide(&role, |id| {
            if id == order[0] {
                SlotView::Busy
            } else {
                SlotView::Vacant
            }
        });
        assert_eq!(open(&d), [order[1]]);
        // A vacant slot before a stale one, whatever the order.
        let d = p.decide(&role, |id| {
            if id == order[2] {
                SlotView::Vacant
            } else {
                SlotView::Stale
            }
        });
        assert_eq!(open(&d), [order[2]]);
        // A slot placement holds back for another instance comes after a free one.
        let d = p.decide(&role, |id| {
            if id == order[0] {
                SlotView::HeldBack
            } else if id == order[1] {
                SlotView::Stale
            } else {
                SlotView::Vacant
            }
        });
        assert_eq!(open(&d), [order[2]]);
        let d = p.decide(&role, |id| {
            if id == order[0] {
                SlotView::Stale
            } else {
                SlotView::HeldBack
            }
        });
        assert_eq!(open(&d), [order[1]]);
        assert!(open(&p.decide(&role, |_| SlotView::Busy)).is_empty());
    }

    #[test]
    fn instances_prefer_different_slots() {
        let firsts: std::collections::HashSet<RoleId> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|i| group(i).2[0])
            .collect();
        assert!(firsts.len() > 1, "every instance starts on the same slot");
    }

    #[test]
    fn plain_roles_and_removed_slots_take_no_part() {
        let (mut p, role, order) = group("node-a");
        let plain = RoleName::new("plain").unwrap();
        assert!(p.decide(&plain, |_| SlotView::Claims).is_empty());
        p.remove(
            order[0],
            &RoleName::for_slot(&role, u32::try_from(order[0]).unwrap()).unwrap(),
        );
        assert_eq!(p.decide(&role, |_| SlotView::Vacant).len(), 2);
    }
}
