//! Parked roles: the roles this instance holds because their previous holder left,
//! published in its record so that placement moves them home first.

use std::collections::{BTreeMap, BTreeSet};

use super::{Controller, PlacementAction};
use crate::names::{InstanceId, RoleName};

impl Controller {
    /// Roles this instance took over because their holder left (draining, stopped, crashed —
    /// not a voluntary move from a live member) are parked for that holder: published, so
    /// that placement moves them home first when that member is back and needs roles.
    pub(super) fn track_parked(
        &mut self,
        holders: &BTreeMap<RoleName, InstanceId>,
        live: &BTreeSet<InstanceId>,
        actions: &mut Vec<PlacementAction>,
    ) {
        let me = &self.settings.instance;
        let mut changed = false;
        for (role, holder) in holders {
            if holder == me
                && let Some(previous) = self.last_holder.get(role)
                && previous != me
            {
                let left = !live.contains(previous)
                    || self
                        .membership
                        .record(previous)
                        .is_none_or(|r| r.draining || !r.healthy);
                if left && self.parked.get(role) != Some(previous) {
                    self.parked.insert(role.clone(), previous.clone());
                    changed = true;
                }
            }
        }
        let before = self.parked.len();
        self.parked
            .retain(|role, _| holders.get(role).is_some_and(|h| h == me));
        changed |= self.parked.len() != before;
        for (role, holder) in holders {
            self.last_holder.insert(role.clone(), holder.clone());
        }
        if changed {
            actions.push(PlacementAction::RecordChanged);
        }
    }
}
