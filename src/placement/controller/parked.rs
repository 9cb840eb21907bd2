//! Parked roles: the roles this instance holds because their previous holder left,
//! published in its record so that placement moves them home first.

use std::collections::{BTreeMap, BTreeSet};

use super::{Controller, PlacementAction};
use crate::names::{InstanceId, RoleName};

impl Controller {
    /// Roles this instance took over because their holder left (draining, stopped, crashed —
    /// not a voluntary move from a live member) are parked for that holder: published, so
    /// that placement moves them home first when that member is back and needs roles. A role
    /// that holder had itself parked for this instance is home again, not parked: in a
    /// rolling restart it moves out and back, never a third time when its stand-in returns.
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
                let home = self.parked_for.get(role) == Some(me);
                if left && !home && self.parked.get(role) != Some(previous) {
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
            if holder == me {
                self.parked_for.remove(role);
            } else if let Some(record) = self.membership.record(holder) {
                match record.parked.get(role) {
                    Some(home) => {
                        self.parked_for.insert(role.clone(), home.clone());
                    }
                    None => {
                        self.parked_for.remove(role);
                    }
                }
            }
        }
        if changed {
            actions.push(PlacementAction::RecordChanged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Input;
    use super::super::test_support::{SECOND, controller_of_a, id, role, world};
    use crate::placement::PlacementSettings;
    use crate::placement::member::test_record;
    use tokio::time::Instant;

    /// `a` takes r1 over from `b`, which left: parked for `b` — unless `b`'s record had r1
    /// parked for `a` (it comes home), also when that record is gone by the time `a` holds it.
    #[test]
    fn a_role_coming_home_is_not_parked_again() {
        for b_parked_it_for_a in [false, true] {
            let t0 = Instant::now();
            let config = PlacementSettings {
                enabled: true,
                stability_window: std::time::Duration::ZERO,
                leave_delay: std::time::Duration::ZERO,
                ..PlacementSettings::default()
            };
            let mut c = controller_of_a(config, t0);
            let hour = 3_600_000;
            let roles = [("r1", 0), ("r2", 0)];
            let mut b = test_record("b", &roles, hour);
            if b_parked_it_for_a {
                b.parked = [(role("r1"), id("a"))].into();
            }
            for (revision, record) in [(1, test_record("a", &roles, hour)), (2, b)] {
                c.step(
                    Input::MemberPut {
                        record: Box::new(record),
                        revision,
                    },
                    t0,
                );
            }
            c.step(Input::Replan(world(&[("r1", "b"), ("r2", "a")])), t0);
            c.step(
                Input::MemberGone {
                    id: id("b"),
                    expired: false,
                    revision: 3,
                },
                t0 + SECOND,
            );
            c.step(
                Input::Replan(world(&[("r1", "a"), ("r2", "a")])),
                t0 + SECOND,
            );
            let parked = c.record_roles().parked;
            if b_parked_it_for_a {
                assert!(parked.is_empty(), "home again: {parked:?}");
            } else {
                assert_eq!(parked, [(role("r1"), id("b"))].into());
            }
        }
    }
}
