//! The controller's step function: hold-backs, the move budget, the move in flight, the
//! per-role cooldown, draining, declined roles, and vacancies going to members still joining.

use std::time::Duration;

use tokio::time::Instant;

use super::test_support::{SECOND, controller, controller_of_a, id, released, role, world};
use super::{Controller, Input, OwnRole, PlacementAction, World};
use crate::names::RoleName;
use crate::placement::member::test_record;
use crate::placement::{PlacementSettings, Takeover};

/// A draining controller that holds r1 and r2 and released r1 at `t0`, and the world where
/// it still holds both.
fn moving_r1() -> (Instant, Controller, World) {
    let t0 = Instant::now();
    let mut c = controller(10, true, t0);
    let both = world(&[("r1", "a"), ("r2", "a")]);
    assert_eq!(released(&mut c, &both, t0), ["r1"]);
    assert_eq!(c.in_flight(), Some(&role("r1")));
    (t0, c, both)
}

#[test]
fn a_draining_instance_hands_its_roles_over_one_at_a_time() {
    let (t0, mut c, both) = moving_r1();
    // One move in flight at a time.
    assert!(released(&mut c, &both, t0 + SECOND / 2).is_empty());
    // b took r1: the move is done, the next one starts.
    let moved = world(&[("r1", "b"), ("r2", "a")]);
    assert_eq!(released(&mut c, &moved, t0 + SECOND), ["r2"]);
}

#[test]
fn the_move_budget_limits_moves_per_interval() {
    let t0 = Instant::now();
    let mut c = controller(1, true, t0);
    assert_eq!(
        released(&mut c, &world(&[("r1", "a"), ("r2", "a")]), t0),
        ["r1"]
    );
    let moved = world(&[("r1", "b"), ("r2", "a")]);
    assert!(released(&mut c, &moved, t0 + SECOND).is_empty());
    assert_eq!(c.in_flight(), None, "the move is done");
    // Budget exhausted until the interval is over.
    assert!(released(&mut c, &moved, t0 + 59 * SECOND).is_empty());
    assert_eq!(released(&mut c, &moved, t0 + 60 * SECOND), ["r2"]);
}

#[test]
fn a_move_in_flight_times_out() {
    let (t0, mut c, both) = moving_r1();
    // Vacant: done once the claim grace and one operation passed.
    let vacant = world(&[("r2", "a")]);
    assert!(released(&mut c, &vacant, t0 + SECOND).is_empty());
    assert_eq!(c.in_flight(), Some(&role("r1")));
    assert_eq!(released(&mut c, &vacant, t0 + 2 * SECOND), ["r2"]);
    // Still held here (the release did not happen): done after the move timeout.
    assert!(released(&mut c, &both, t0 + 11 * SECOND).is_empty());
    assert_eq!(c.in_flight(), Some(&role("r2")));
    // The move of r2 timed out; both roles cool down now.
    assert!(released(&mut c, &both, t0 + 12 * SECOND).is_empty());
    assert_eq!(c.in_flight(), None);
}

#[test]
fn a_moved_role_cools_down() {
    let (t0, mut c, both) = moving_r1();
    assert!(released(&mut c, &both, t0 + 9 * SECOND).is_empty());
    // The move timed out; r2 goes next, r1 not within its cooldown.
    assert_eq!(released(&mut c, &both, t0 + 10 * SECOND), ["r2"]);
    assert!(released(&mut c, &both, t0 + 29 * SECOND).is_empty());
    assert_eq!(c.in_flight(), None);
    assert_eq!(released(&mut c, &both, t0 + 30 * SECOND), ["r1"]);
}

#[test]
fn no_release_while_unhealthy_or_not_counted() {
    let t0 = Instant::now();
    let mut c = controller(10, true, t0);
    let mut sick = world(&[("r1", "a"), ("r2", "a")]);
    sick.healthy = false;
    assert!(released(&mut c, &sick, t0).is_empty());
    // Once `a`'s record is gone it does not count in the plan: nothing is moved.
    c.step(
        Input::MemberGone {
            id: id("a"),
            expired: false,
            revision: 3,
        },
        t0,
    );
    assert!(released(&mut c, &world(&[("r1", "a"), ("r2", "a")]), t0).is_empty());
}

#[test]
fn vacancies_preferred_elsewhere_are_held_back_once() {
    let t0 = Instant::now();
    let mut c = controller(10, true, t0);
    let vacant = world(&[]);
    let hold_backs = |actions: Vec<PlacementAction>| -> Vec<(RoleName, Duration)> {
        actions
            .into_iter()
            .filter_map(|a| match a {
                PlacementAction::HoldBack { role, delay, .. } => Some((role, delay)),
                _ => None,
            })
            .collect()
    };
    let first = c.step(Input::Replan(vacant.clone()), t0);
    assert_eq!(first[0], PlacementAction::LiveMembers(2));
    assert_eq!(
        hold_backs(first),
        [(role("r1"), SECOND), (role("r2"), SECOND)]
    );
    assert!(hold_backs(c.step(Input::Replan(vacant.clone()), t0)).is_empty());
    // A role the manager no longer runs gets nothing.
    c.step(Input::RoleRemoved(role("r2")), t0);
    c.step(
        Input::RoleAdded(
            role("r2"),
            OwnRole {
                priority: 0,
                takeover: Takeover::Never,
                campaign: true,
                cost: 1,
                prepares: false,
            },
        ),
        t0,
    );
    let mut without = vacant;
    without.roles.remove(&role("r2"));
    assert!(hold_backs(c.step(Input::Replan(without), t0)).is_empty());
    assert_eq!(c.record_roles().pinned, [role("r2")].into());
}

#[test]
fn declined_roles_are_published() {
    let t0 = Instant::now();
    let mut c = controller(10, false, t0);
    let mut w = world(&[("r1", "b")]);
    if let Some(v) = w.roles.get_mut(&role("r2")) {
        v.declines = true;
    }
    let actions = c.step(Input::Replan(w.clone()), t0);
    assert!(actions.contains(&PlacementAction::Unavailable([role("r2")].into())));
    assert_eq!(c.record_roles().unavailable, [role("r2")].into());
    assert!(
        !c.step(Input::Replan(w), t0)
            .iter()
            .any(|a| matches!(a, PlacementAction::Unavailable(_)))
    );
    c.step(Input::RoleRemoved(role("r2")), t0);
    assert!(c.record_roles().unavailable.is_empty());
    assert_eq!(c.record_roles().roles.len(), 1);
}

/// Vacancies go where the plan with the members still within their stability window puts
/// them (a vacant role moves nothing): `a` alone counts in the stable plan, `b` joined a moment
/// ago; of the two vacant roles `a` holds one back for `b` instead of claiming both at once
/// (issue 27: a fleet starting together was first planned without its late starters, and the
/// first instance took nearly every role, to be moved within the move budget).
#[test]
fn vacancies_go_to_members_still_joining() {
    let t0 = Instant::now();
    let config = PlacementSettings {
        enabled: true,
        stability_window: 10 * SECOND,
        leave_delay: Duration::ZERO,
        claim_grace: SECOND,
        ..PlacementSettings::default()
    };
    let mut c = controller_of_a(config, t0);
    let hour = 3_600_000;
    let roles = [("r1", 0), ("r2", 0)];
    let put = |c: &mut Controller, who: &str, revision: u64, at: Instant| {
        c.step(
            Input::MemberPut {
                record: Box::new(test_record(who, &roles, hour)),
                revision,
            },
            at,
        );
    };
    put(&mut c, "a", 1, t0);
    let t1 = t0 + 10 * SECOND;
    c.step(Input::Replan(world(&[])), t1);
    let t2 = t1 + SECOND;
    put(&mut c, "b", 2, t2);
    let delays: Vec<Duration> = c
        .step(Input::Replan(world(&[])), t2 + SECOND)
        .into_iter()
        .filter_map(|a| match a {
            PlacementAction::HoldBack { delay, .. } => Some(delay),
            _ => None,
        })
        .collect();
    assert!(
        delays.contains(&SECOND),
        "a claims every vacancy although b joined: {delays:?}"
    );
    assert_eq!(
        c.membership().effective().len(),
        1,
        "b is not counted by the stable plan yet"
    );
}
