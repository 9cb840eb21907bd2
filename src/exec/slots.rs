//! [`SlotCallbacks`]: the callbacks of a role with `slots` (protocol Q15) and `exec` or hooks:
//! one [`ProcessCallbacks`] per slot, picked by the slot the term names, so every slot's
//! children and hooks are its own (they run in their slot's callback order, P9).

use super::supervisor::{ProcessCallbacks, ProcessContext, RoleProcesses};
use crate::callbacks::{BoxFuture, Demotion, PrepareFuture, RoleCallbacks};
use crate::config::RoleConfig;
use crate::leadership::Leadership;
use crate::names::RoleName;

/// The processes of each slot of one role, by slot number.
pub(crate) struct SlotCallbacks(Vec<ProcessCallbacks>);

impl SlotCallbacks {
    /// The callbacks of `role`'s slots, or `None` when it declares no process.
    pub(crate) fn for_role(role: &RoleConfig, context: &ProcessContext) -> Option<Self> {
        let slots: Option<Vec<ProcessCallbacks>> = (0..role.slots)
            .map(|k| RoleProcesses::for_slot(role, k, context).map(ProcessCallbacks::new))
            .collect();
        slots.map(Self)
    }

    fn of(&self, role: &RoleName) -> Option<&ProcessCallbacks> {
        role.slot()
            .and_then(|k| usize::try_from(k).ok())
            .and_then(|k| self.0.get(k))
    }
}

impl RoleCallbacks for SlotCallbacks {
    fn on_promote(&self, l: Leadership) -> BoxFuture<'_> {
        match self.of(l.role()) {
            Some(p) => p.on_promote(l),
            None => Box::pin(async {}),
        }
    }

    fn on_demote(&self, d: Demotion) -> BoxFuture<'_> {
        match self.of(d.leadership.role()) {
            Some(p) => p.on_demote(d),
            None => Box::pin(async {}),
        }
    }

    fn prepares(&self) -> bool {
        self.0.first().is_some_and(RoleCallbacks::prepares)
    }

    fn on_prepare(&self, role: RoleName) -> PrepareFuture<'_> {
        match self.of(&role) {
            Some(p) => p.on_prepare(role),
            None => Box::pin(async { Ok(()) }),
        }
    }
}
