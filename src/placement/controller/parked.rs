//! Parked roles: the roles this instance holds because their previous holder left,
//! published in its record so that placement moves them home first.

use std::collections::BTreeMap;

use tokio::time::Instant;

use super::{Controller, PlacementAction};
use crate::names::{InstanceId, RoleName};

impl Controller {
    /// Roles this instance took over because their holder left (draining, stopped, crashed —
    /// not a voluntary move from a live member) are parked for that holder: published, so
    /// that placement moves them home first when that member is back and needs roles. A role
    /// that holder had itself parked for this instance is home again, not parked: in a
    /// rolling restart it moves out and back, never a third time when its stand-in returns.
    ///
    /// Whether the previous holder left is judged on its record and session as they are now
    /// (present, live, neither draining nor unhealthy), not on whether the plan counts it yet:
    /// an instance that has just started counts nobody for the stability window, and would
    /// otherwise park every role it takes over from a live member in that window — a role that
    /// then moves to that member when it restarts in turn, a third move in a rolling restart.
    pub(super) fn track_parked(
        &mut self,
        holders: &BTreeMap<RoleName, InstanceId>,
        now: Instant,
        actions: &mut Vec<PlacementAction>,
    ) {
        let me = &self.settings.instance;
        let mut changed = false;
        for (role, holder) in holders {
            if holder == me
                && let Some(previous) = self.last_holder.get(role)
                && previous != me
            {
                let left = !self.membership.is_live(previous, now)
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
    use super::super::test_support::{SECOND, controller_of_a, id, role, world};
    use super::super::{Controller, Input};
    use crate::placement::member::test_record;
    use crate::placement::{MemberRecord, PlacementSettings};
    use tokio::time::Instant;

    /// A controller of `a` with the stability window `window`, members `a` and `b` (its
    /// record `b`), after a re-plan where `b` holds r1 and `a` r2.
    fn b_holds_r1(window: std::time::Duration, b: MemberRecord, t0: Instant) -> Controller {
        let config = PlacementSettings {
            enabled: true,
            stability_window: window,
            leave_delay: std::time::Duration::ZERO,
            ..PlacementSettings::default()
        };
        let mut c = controller_of_a(config, t0);
        let a = test_record("a", &[("r1", 0), ("r2", 0)], 3_600_000);
        for (revision, record) in [(1, a), (2, b)] {
            c.step(
                Input::MemberPut {
                    record: Box::new(record),
                    revision,
                },
                t0,
            );
        }
        c.step(Input::Replan(world(&[("r1", "b"), ("r2", "a")])), t0);
        c
    }

    fn record_of_b() -> MemberRecord {
        test_record("b", &[("r1", 0), ("r2", 0)], 3_600_000)
    }

    /// `a` takes r1 over from `b`, which left: parked for `b` — unless `b`'s record had r1
    /// parked for `a` (it comes home), also when that record is gone by the time `a` holds it.
    #[test]
    fn a_role_coming_home_is_not_parked_again() {
        for b_parked_it_for_a in [false, true] {
            let t0 = Instant::now();
            let mut b = record_of_b();
            if b_parked_it_for_a {
                b.parked = [(role("r1"), id("a"))].into();
            }
            let mut c = b_holds_r1(std::time::Duration::ZERO, b, t0);
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

    /// An instance that has just started counts no member for the stability window; a role
    /// it takes over from a member that is present, live and not draining in that window is
    /// no role that member left: not parked.
    #[test]
    fn a_role_taken_from_a_live_member_while_joining_is_not_parked() {
        let t0 = Instant::now();
        let mut c = b_holds_r1(5 * SECOND, record_of_b(), t0);
        c.step(
            Input::Replan(world(&[("r1", "a"), ("r2", "a")])),
            t0 + SECOND,
        );
        assert!(c.record_roles().parked.is_empty());
    }
}
