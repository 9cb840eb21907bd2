//! The controller's step function: hold-backs, the move budget, the move in flight, the
//! per-role cooldown and draining.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::placement::PreferredReason;
use crate::placement::member::test_record;

const SECOND: Duration = Duration::from_secs(1);

fn id(s: &str) -> InstanceId {
    InstanceId::new(s).expect("valid")
}

fn role(s: &str) -> RoleName {
    RoleName::new(s).expect("valid")
}

/// A controller of `a` with `config` and roles r1 and r2 (voluntary, campaigned for); one
/// operation 1 s, a move in flight at most 10 s.
fn controller_of_a(config: PlacementSettings, t0: Instant) -> Controller {
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
            [Action::RecordChanged]
        );
    }
    c
}

/// A controller of `a` with roles r1 and r2 (voluntary, campaigned for), members `a`
/// (draining if `draining`) and `b`; claim grace 1 s, one operation 1 s, a move in flight
/// at most 10 s, `budget` moves a minute, cooldown 30 s.
fn controller(budget: u32, draining: bool, t0: Instant) -> Controller {
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
            [Action::ViewChanged]
        );
    }
    c
}

/// A world where `held` maps roles to holders; this instance's roles r1 and r2 are managed,
/// and it leads the ones it holds.
fn world(held: &[(&str, &str)]) -> World {
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

/// The roles released by one re-plan.
fn released(c: &mut Controller, w: &World, now: Instant) -> Vec<String> {
    c.step(Input::Replan(w.clone()), now)
        .into_iter()
        .filter_map(|a| match a {
            Action::Release { role, to } => {
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
    let hold_backs = |actions: Vec<Action>| -> Vec<(RoleName, Duration)> {
        actions
            .into_iter()
            .filter_map(|a| match a {
                Action::HoldBack { role, delay, .. } => Some((role, delay)),
                _ => None,
            })
            .collect()
    };
    let first = c.step(Input::Replan(vacant.clone()), t0);
    assert_eq!(first[0], Action::LiveMembers(2));
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
    assert!(actions.contains(&Action::Unavailable([role("r2")].into())));
    assert_eq!(c.record_roles().unavailable, [role("r2")].into());
    assert!(
        !c.step(Input::Replan(w), t0)
            .iter()
            .any(|a| matches!(a, Action::Unavailable(_)))
    );
    c.step(Input::RoleRemoved(role("r2")), t0);
    assert!(c.record_roles().unavailable.is_empty());
    assert_eq!(c.record_roles().roles.len(), 1);
}

/// A record of `b` that prepares r1 and r2, has prepared `prepared` and failed `failed`.
fn preparing_b(prepared: &[&str], failed: &[&str]) -> MemberRecord {
    MemberRecord {
        prepares: [role("r1"), role("r2")].into(),
        prepared: prepared.iter().map(|r| role(r)).collect(),
        prepare_failed: failed.iter().map(|r| role(r)).collect(),
        ..test_record("b", &[("r1", 0), ("r2", 0)], 3_600_000)
    }
}

/// `c` sees `record` written at `revision`.
fn put(c: &mut Controller, record: MemberRecord, revision: u64, now: Instant) {
    c.step(
        Input::MemberPut {
            record: Box::new(record),
            revision,
        },
        now,
    );
}

/// Warm hand-over, holder side: a draining `a` waits for `b` (whose record says it prepares
/// r1 and r2) to report a role prepared, or for the prepare timeout since the plan gave `b`
/// the role, before releasing it.
#[test]
fn a_move_to_a_preparing_receiver_waits_for_ready_or_the_timeout() {
    let t0 = Instant::now();
    let mut c = controller(10, true, t0);
    let preparing = |prepared: &[&str]| preparing_b(prepared, &[]);
    put(&mut c, preparing(&[]), 3, t0);
    let both = world(&[("r1", "a"), ("r2", "a")]);
    // Not ready: nothing released yet.
    assert!(released(&mut c, &both, t0).is_empty());
    assert!(released(&mut c, &both, t0 + SECOND).is_empty());
    // b says r1 is ready: released at once.
    put(&mut c, preparing(&["r1"]), 4, t0 + SECOND);
    assert_eq!(released(&mut c, &both, t0 + SECOND), ["r1"]);
    // r2: b never reports it ready; released once the prepare timeout (5 s by default) since
    // the plan gave it to b (t0) passed — not 5 s after r1's move.
    let only_r2 = world(&[("r1", "b"), ("r2", "a")]);
    assert!(released(&mut c, &only_r2, t0 + 2 * SECOND).is_empty());
    assert!(released(&mut c, &only_r2, t0 + 4900 * Duration::from_millis(1)).is_empty());
    assert_eq!(released(&mut c, &only_r2, t0 + 5 * SECOND), ["r2"]);
}

/// Issue 26 item 11 (a): roles moving to one receiver that never gets ready wait for it at
/// the same time: r1 goes after one prepare timeout, r2 as soon as r1's move is done, not
/// after a second prepare timeout.
#[test]
fn roles_moving_to_a_silent_receiver_wait_one_prepare_timeout_together() {
    let t0 = Instant::now();
    let mut c = controller(10, true, t0);
    put(&mut c, preparing_b(&[], &[]), 3, t0);
    let both = world(&[("r1", "a"), ("r2", "a")]);
    assert!(released(&mut c, &both, t0).is_empty());
    let timeout = t0 + 5 * SECOND;
    assert!(released(&mut c, &both, timeout - SECOND / 10).is_empty());
    assert_eq!(released(&mut c, &both, timeout), ["r1"]);
    // b took r1 (100 ms later): the move is done; r2 waited its prepare timeout already.
    let only_r2 = world(&[("r1", "b"), ("r2", "a")]);
    assert_eq!(released(&mut c, &only_r2, timeout + SECOND / 10), ["r2"]);
}

/// (a) too: a role whose receiver is still preparing does not hold back one whose receiver is
/// ready: r2 (prepared) goes first, r1 once b is ready for it.
#[test]
fn a_ready_role_moves_while_another_waits_for_its_receiver() {
    let t0 = Instant::now();
    let mut c = controller(10, true, t0);
    put(&mut c, preparing_b(&["r2"], &[]), 3, t0);
    let both = world(&[("r1", "a"), ("r2", "a")]);
    assert_eq!(released(&mut c, &both, t0), ["r2"]);
    let only_r1 = world(&[("r1", "a"), ("r2", "b")]);
    assert!(released(&mut c, &only_r1, t0 + SECOND).is_empty());
    put(&mut c, preparing_b(&["r1"], &[]), 4, t0 + 2 * SECOND);
    assert_eq!(released(&mut c, &only_r1, t0 + 2 * SECOND), ["r1"]);
}

/// Issue 26 item 11 (c), holder side: a receiver whose preparation failed says so
/// (`prepare_failed`); the holder hands the role over at once instead of waiting out the
/// prepare timeout.
#[test]
fn a_failed_preparation_is_handed_over_at_once() {
    let t0 = Instant::now();
    let mut c = controller(10, true, t0);
    put(&mut c, preparing_b(&[], &[]), 3, t0);
    let both = world(&[("r1", "a"), ("r2", "a")]);
    assert!(released(&mut c, &both, t0).is_empty());
    put(&mut c, preparing_b(&[], &["r1"]), 4, t0 + SECOND);
    assert_eq!(released(&mut c, &both, t0 + SECOND), ["r1"]);
}

/// Warm hand-over, receiver side: the instance the plan gives a role held by another live
/// member prepares it once, announces it when done, and forgets it once it holds the role.
#[test]
fn a_receiver_prepares_once_and_announces_it() {
    let t0 = Instant::now();
    let mut c = Controller::new(
        ControllerSettings {
            instance: id("b"),
            config: PlacementSettings {
                enabled: true,
                stability_window: Duration::ZERO,
                leave_delay: Duration::ZERO,
                ..PlacementSettings::default()
            },
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
        prepares: true,
    };
    c.step(Input::RoleAdded(role("r1"), own), t0);
    let hour = 3_600_000;
    let a = MemberRecord {
        draining: true,
        ..test_record("a", &[("r1", 0)], hour)
    };
    for (revision, record) in [(1, a), (2, test_record("b", &[("r1", 0)], hour))] {
        c.step(
            Input::MemberPut {
                record: Box::new(record),
                revision,
            },
            t0,
        );
    }
    let held_by = |h: &str| World {
        holders: BTreeMap::from([(role("r1"), id(h))]),
        roles: BTreeMap::from([(
            role("r1"),
            RoleView {
                leader: h == "b",
                declines: false,
            },
        )]),
        healthy: true,
    };
    let prepare = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| matches!(a, Action::Prepare(r) if *r == role("r1")))
            .count()
    };
    assert_eq!(prepare(&c.step(Input::Replan(held_by("a")), t0)), 1);
    // Asked once only.
    assert_eq!(prepare(&c.step(Input::Replan(held_by("a")), t0)), 0);
    assert!(c.record_roles().prepared.is_empty());
    assert_eq!(
        c.step(Input::Prepared(role("r1"), PrepareEnd::Ready), t0),
        [Action::RecordChanged]
    );
    assert_eq!(c.record_roles().prepared, [role("r1")].into());
    assert_eq!(c.record_roles().prepares, [role("r1")].into());
    // Received: the preparation is forgotten (the record no longer says it).
    let actions = c.step(Input::Replan(held_by("b")), t0);
    assert!(actions.contains(&Action::RecordChanged), "{actions:?}");
    assert!(c.record_roles().prepared.is_empty());
}

/// A controller of `b` (prepares r1) where draining `a` holds r1: the plan gives it to `b`.
fn receiver(t0: Instant) -> (Controller, World) {
    let mut c = Controller::new(
        ControllerSettings {
            instance: id("b"),
            config: PlacementSettings {
                enabled: true,
                stability_window: Duration::ZERO,
                leave_delay: Duration::ZERO,
                ..PlacementSettings::default()
            },
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
        prepares: true,
    };
    c.step(Input::RoleAdded(role("r1"), own), t0);
    let hour = 3_600_000;
    let a = MemberRecord {
        draining: true,
        ..test_record("a", &[("r1", 0)], hour)
    };
    put(&mut c, a, 1, t0);
    put(&mut c, test_record("b", &[("r1", 0)], hour), 2, t0);
    let held_by_a = World {
        holders: BTreeMap::from([(role("r1"), id("a"))]),
        roles: BTreeMap::from([(role("r1"), RoleView::default())]),
        healthy: true,
    };
    (c, held_by_a)
}

fn prepares_asked(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Prepare(r) if *r == role("r1")))
        .count()
}

/// Issue 26 item 11 (c), receiver side: a failed (or timed out) preparation is announced as
/// failed, never as ready, and not asked for again while the plan still wants it.
#[test]
fn a_failed_preparation_is_announced_as_failed_not_ready() {
    let t0 = Instant::now();
    let (mut c, held_by_a) = receiver(t0);
    assert_eq!(
        prepares_asked(&c.step(Input::Replan(held_by_a.clone()), t0)),
        1
    );
    assert_eq!(
        c.step(Input::Prepared(role("r1"), PrepareEnd::Failed), t0),
        [Action::RecordChanged]
    );
    let record = c.record_roles();
    assert!(record.prepared.is_empty(), "{record:?}");
    assert_eq!(record.prepare_failed, [role("r1")].into());
    assert_eq!(prepares_asked(&c.step(Input::Replan(held_by_a), t0)), 0);
}

/// A preparation abandoned by a promotion changes nothing in the record.
#[test]
fn an_abandoned_preparation_is_announced_nowhere() {
    let t0 = Instant::now();
    let (mut c, held_by_a) = receiver(t0);
    assert_eq!(prepares_asked(&c.step(Input::Replan(held_by_a), t0)), 1);
    assert!(
        c.step(Input::Prepared(role("r1"), PrepareEnd::Abandoned), t0)
            .is_empty()
    );
    let record = c.record_roles();
    assert!(record.prepared.is_empty() && record.prepare_failed.is_empty());
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
            Action::HoldBack { delay, .. } => Some(delay),
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
