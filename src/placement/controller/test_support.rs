//! What the controller's tests share: instance ids and role names, a controller of `a` with
//! roles r1 and r2 and the members `a` and `b`, the world a re-plan sees, and the roles one
//! re-plan releases.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::{Controller, ControllerSettings, Input, OwnRole, PlacementAction, RoleView, World};
use crate::names::{InstanceId, RoleName};
use crate::placement::member::test_record;
use crate::placement::{MemberRecord, PlacementSettings, Preferred, PreferredReason, Takeover};

pub(super) const SECOND: Duration = Duration::from_secs(1);

pub(super) fn id(s: &str) -> InstanceId {
    InstanceId::new(s).expect("valid")
}

pub(super) fn role(s: &str) -> RoleName {
    RoleName::new(s).expect("valid")
}

/// A controller of `a` with `config` and roles r1 and r2 (voluntary, campaigned for); one
/// operation 1 s, a move in flight at most 10 s.
pub(super) fn controller_of_a(config: PlacementSettings, t0: Instant) -> Controller {
    let mut c = Controller::new(
        ControllerSettings {
            instance: id("a"),
            config,
            operation_timeout: SECOND,
            move_timeout: 10 * SECOND,
            storm_window: 3 * SECOND,
        },
        t0,
    );
    let own = OwnRole {
        priority: 0,
        takeover: Takeover::Voluntary,
        campaign: true,
        cost: 1,
        prepares: false,
    };
    for r in ["r1", "r2"] {
        assert_eq!(
            c.step(Input::RoleAdded(role(r), own), t0),
            [PlacementAction::RecordChanged]
        );
    }
    c
}

/// A controller of `a` with roles r1 and r2 (voluntary, campaigned for), members `a`
/// (draining if `draining`) and `b`; claim grace 1 s, one operation 1 s, a move in flight
/// at most 10 s, `budget` moves a minute, cooldown 30 s.
pub(super) fn controller(budget: u32, draining: bool, t0: Instant) -> Controller {
    let config = PlacementSettings {
        enabled: true,
        stability_window: Duration::ZERO,
        leave_delay: Duration::ZERO,
        claim_grace: SECOND,
        cooldown: 30 * SECOND,
        move_budget: budget,
        move_interval: 60 * SECOND,
        ..PlacementSettings::default()
    };
    let mut c = controller_of_a(config, t0);
    // Heartbeats every hour: nobody falls silent within a test.
    let hour = 3_600_000;
    let roles = [("r1", 0), ("r2", 0)];
    let a = MemberRecord {
        draining,
        ..test_record("a", &roles, hour)
    };
    for (revision, record) in [(1, a), (2, test_record("b", &roles, hour))] {
        assert_eq!(
            c.step(
                Input::MemberPut {
                    record: Box::new(record),
                    revision
                },
                t0
            ),
            [PlacementAction::ViewChanged]
        );
    }
    c
}

/// A world where `held` maps roles to holders; this instance's roles r1 and r2 are managed,
/// and it leads the ones it holds.
pub(super) fn world(held: &[(&str, &str)]) -> World {
    let holders: BTreeMap<RoleName, InstanceId> =
        held.iter().map(|(r, h)| (role(r), id(h))).collect();
    let roles = ["r1", "r2"]
        .into_iter()
        .map(|r| {
            let leader = holders.get(&role(r)) == Some(&id("a"));
            (
                role(r),
                RoleView {
                    leader,
                    declines: false,
                },
            )
        })
        .collect();
    World {
        holders,
        roles,
        healthy: true,
    }
}

/// The roles released by one re-plan.
pub(super) fn released(c: &mut Controller, w: &World, now: Instant) -> Vec<String> {
    c.step(Input::Replan(w.clone()), now)
        .into_iter()
        .filter_map(|a| match a {
            PlacementAction::Release { role, to } => {
                let draining = Preferred {
                    instance: id("b"),
                    reason: PreferredReason::Draining,
                };
                assert_eq!(to, draining);
                Some(role.to_string())
            }
            _ => None,
        })
        .collect()
}
