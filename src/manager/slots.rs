//! A role with slots (protocol Q15): [`RoleManager::add_role`] of a spec with
//! [`RoleSpec::slots`] above 1 adds one role per slot (`<name>.<k>`); their driver keeps the
//! slot permit (at most one slot per process, S7); [`RoleManager::slots_held`] says which
//! slots this instance holds.

use super::{RoleManager, RoleSpec};
use crate::error::Error;
use crate::leadership::Leadership;
use crate::names::RoleName;

impl RoleManager {
    /// Adds the slots of `spec` (its `slots` is not 1). Every check `add_role` makes that
    /// could refuse one slot and not another (names taken or stopping) is made for all of
    /// them first; the others (timing, the bucket's `max_age`) are the same for every slot
    /// and refuse the first. What remains is the manager's shutdown, which stops every role.
    pub(super) fn add_slots(&self, spec: RoleSpec) -> Result<(), Error> {
        let slots = spec.expand()?;
        {
            let roles = self.shared.managed.roles();
            if let Some(taken) = slots.iter().find(|s| roles.contains_key(&s.name)) {
                return Err(Error::RoleExists(taken.name.clone()));
            }
            let stopping = self.shared.managed.stopping();
            if let Some(busy) = slots.iter().find(|s| stopping.contains(&s.name)) {
                return Err(Error::RoleStopping(busy.name.clone()));
            }
        }
        for slot in slots {
            self.add_role(slot)?;
        }
        Ok(())
    }

    /// The managed slots of `role` when `role` names a role with slots (not a slot, and not
    /// a managed role itself).
    pub(super) fn slots_of(&self, role: &RoleName) -> Option<Vec<RoleName>> {
        if role.slot().is_some() {
            return None;
        }
        let roles = self.shared.managed.roles();
        if roles.contains_key(role) {
            return None;
        }
        let slots: Vec<RoleName> = roles
            .keys()
            .filter(|name| name.slot().is_some() && name.base_role() == *role)
            .cloned()
            .collect();
        (!slots.is_empty()).then_some(slots)
    }

    /// Removes every slot of a role (each released and stopped, together).
    pub(super) async fn remove_slots(&self, slots: Vec<RoleName>) -> Result<(), Error> {
        let removals = slots.iter().map(|s| Box::pin(self.remove_role(s)));
        for result in futures_util::future::join_all(removals).await {
            result?;
        }
        Ok(())
    }

    /// The slots of the role `role` (a role added with [`RoleSpec::slots`]) this instance
    /// holds now, as slot numbers: at most one (protocol Q15, S7), empty if none is held or
    /// the role has no slots here. A term is counted while it is valid, as
    /// [`RoleManager::is_leader`] counts it.
    #[must_use]
    pub fn slots_held(&self, role: &RoleName) -> Vec<u32> {
        let base = role.base_role();
        let mut held: Vec<u32> = self
            .shared
            .managed
            .roles()
            .iter()
            .filter(|(name, _)| name.slot().is_some() && name.base_role() == base)
            .filter(|(_, slot)| {
                slot.current
                    .borrow()
                    .as_ref()
                    .is_some_and(Leadership::is_valid)
            })
            .filter_map(|(name, _)| name.slot())
            .collect();
        held.sort_unstable();
        held
    }
}
