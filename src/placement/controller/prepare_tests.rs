//! Warm hand-overs through the step function: the holder waits for a preparing receiver (or
//! the prepare timeout) and hands over at once after a failed preparation; the receiver
//! prepares once, announces it, and announces a failure as failed, never as ready.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::test_support::{SECOND, controller, id, released, role, world};
use super::{
    Controller, ControllerSettings, Input, OwnRole, PlacementAction, PrepareEnd, RoleView, World,
};
use crate::placement::member::test_record;
use crate::placement::{MemberRecord, PlacementSettings, Takeover};

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
    let (mut c, _) = receiver(t0);
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
    assert_eq!(prepares_asked(&c.step(Input::Replan(held_by("a")), t0)), 1);
    // Asked once only.
    assert_eq!(prepares_asked(&c.step(Input::Replan(held_by("a")), t0)), 0);
    assert!(c.record_roles().prepared.is_empty());
    assert_eq!(
        c.step(Input::Prepared(role("r1"), PrepareEnd::Ready), t0),
        [PlacementAction::RecordChanged]
    );
    assert_eq!(c.record_roles().prepared, [role("r1")].into());
    assert_eq!(c.record_roles().prepares, [role("r1")].into());
    // Received: the preparation is forgotten (the record no longer says it).
    let actions = c.step(Input::Replan(held_by("b")), t0);
    assert!(
        actions.contains(&PlacementAction::RecordChanged),
        "{actions:?}"
    );
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

fn prepares_asked(actions: &[PlacementAction]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, PlacementAction::Prepare(r) if *r == role("r1")))
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
        [PlacementAction::RecordChanged]
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
