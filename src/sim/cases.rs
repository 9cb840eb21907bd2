//! Regression tests of single machines: the machine bugs the simulation found.

use std::time::Duration;
use tokio::time::Instant;
use uuid::Uuid;

use crate::core::backoff::RetryPolicy;
use crate::core::machine::{Identity, RoleMachine, SessionUpdate};
use crate::core::types::{
    Action, FailureKind, KeyState, ReleaseReason, Timing, WriteKind, WriteOutcome,
};
use crate::names::InstanceId;
use crate::value::HolderValue;

use super::kv::EPOCH;

/// The session the lone candidate rests on.
const SESSION: Uuid = Uuid::from_u64_pair(9, 9);

/// A free role key (its last entry a delete marker): acquired at once. A key with no entry at
/// all waits a TTL + heartbeat first (`absent_read_after_a_known_revision_is_a_vacancy`).
const FREE: KeyState = KeyState::Vacant {
    revision: 1,
    expired: false,
};

/// The lone candidate's session is (re)written with a write sent and acknowledged at `at`.
pub(super) fn session_at(m: &mut RoleMachine, at: Instant) {
    let update = SessionUpdate::Live {
        uuid: SESSION,
        acked_sent_at: at,
    };
    m.handle_session(update, at);
}

/// A lone candidate with no campaign jitter and a live session, started at the returned
/// instant.
pub(super) fn lone() -> (RoleMachine, Instant) {
    let id = Identity {
        instance: InstanceId::new("solo").expect("valid instance id"),
        incarnation: Uuid::from_u64_pair(1, 1),
        priority: 0,
        meta: std::collections::BTreeMap::new(),
    };
    let timing = Timing {
        campaign_jitter: Duration::ZERO,
        ..Timing::default()
    };
    let mut m = RoleMachine::new(id, timing, RetryPolicy::default(), true, EPOCH, 7);
    let t0 = Instant::now();
    session_at(&mut m, t0);
    (m, t0)
}

/// Drains the actions; returns the op id of the last read or write.
pub(super) fn last_op(m: &mut RoleMachine) -> Option<u64> {
    let mut op = None;
    while let Some(a) = m.poll_action() {
        match a {
            Action::Write(w) => op = Some(w.op),
            Action::Read { op: o, .. } => op = Some(o),
            _ => {}
        }
    }
    op
}

/// A value nats-roles cannot read at `revision`: the role machine's own backstop (P5) applies
/// to it (a version 2 role value's vacancy is the session book's business).
pub(super) fn foreign(revision: u64) -> KeyState {
    KeyState::Held {
        revision,
        value: HolderValue::Foreign,
    }
}

/// L1: a read fails, the watcher then shows a holder, later backstop reads fail too: after
/// every input the timer must be in the future (a passed backoff once kept it in the past
/// until the backstop, and a failed backstop read kept it at the passed backstop instant).
#[test]
fn candidate_timer_is_never_in_the_past_after_failed_reads() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(
        read,
        Err(FailureKind::Unavailable),
        t0 + Duration::from_millis(1),
    );
    let mut now = t0 + Duration::from_millis(2);
    m.handle_observed(foreign(5), now);
    let mut reads = 0;
    for _ in 0..6 {
        let t = m.poll_timeout().expect("a timer");
        assert!(t > now, "timer {:?} before now: busy loop", now - t);
        now = t;
        m.handle_timeout(now);
        if let Some(op) = last_op(&mut m) {
            reads += 1;
            now += Duration::from_millis(1);
            m.handle_read(op, Err(FailureKind::Unavailable), now);
        }
    }
    assert!(reads >= 2, "the backstop read is retried");
}

/// L1: a release with a short cooldown while an acquire is in flight must not ask for a timer
/// that cannot do anything before the acquire's outcome arrives.
#[test]
fn cooldown_timer_waits_for_the_operation_in_flight() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(FREE), t0);
    let acquire = last_op(&mut m).expect("an acquire");
    m.handle_release(ReleaseReason::Requested, Duration::ZERO, t0);
    let t = m.poll_timeout();
    assert!(
        t.is_none_or(|t| t > t0),
        "timer at {t:?} while the acquire is in flight: busy loop"
    );
    m.handle_write(
        acquire,
        WriteOutcome::Conflict,
        t0 + Duration::from_millis(5),
    );
    assert!(
        m.poll_timeout().is_some() || m.has_pending(),
        "idle for ever after the cooldown"
    );
}

/// L1: stopping while an acquire's outcome is unknown reads the key; when that read fails the
/// retry needs a timer, or the stop never finishes on a quiet key.
#[test]
fn stopping_retries_its_read_on_a_timer() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(FREE), t0);
    let acquire = last_op(&mut m).expect("an acquire");
    m.handle_stop(t0);
    m.handle_write(acquire, WriteOutcome::Unknown, t0 + Duration::from_secs(1));
    let check = last_op(&mut m).expect("a read of the unknown acquire");
    m.handle_read(
        check,
        Err(FailureKind::Unavailable),
        t0 + Duration::from_secs(1),
    );
    let retry = m
        .poll_timeout()
        .expect("a stopping machine must retry its read on a timer");
    m.handle_timeout(retry);
    let again = last_op(&mut m).expect("the read again");
    m.handle_read(again, Ok(KeyState::Absent), retry);
    assert!(m.is_stopped());
}

/// S2: an acquire acknowledged only after its session's deadline (the process was paused) must
/// not promote a term that is already over; the machine re-acquires over its own put once a
/// new session is up.
#[test]
fn late_acknowledged_acquire_is_not_promoted() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(FREE), t0);
    let acquire = last_op(&mut m).expect("an acquire");
    let late = t0 + Timing::default().local_lease() + Duration::from_millis(1);
    m.handle_write(acquire, WriteOutcome::Ok { revision: 1 }, late);
    let actions: Vec<Action> = std::iter::from_fn(|| m.poll_action()).collect();
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Promote { .. })),
        "{actions:?}"
    );
    // The session's deadline passed too: a new session comes up, then the re-acquire.
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Write(_))),
        "an acquire on a session past its deadline: {actions:?}"
    );
    session_at(&mut m, late);
    let again = std::iter::from_fn(|| m.poll_action()).find_map(|a| match a {
        Action::Write(w) if w.kind == WriteKind::Acquire && w.expected == 1 => Some(w.op),
        _ => None,
    });
    let again = again.expect("a re-acquire over the own put");
    m.handle_write(again, WriteOutcome::Ok { revision: 2 }, late);
    assert!(
        std::iter::from_fn(|| m.poll_action()).any(
            |a| matches!(a, Action::Promote { revision: 2, ref term } if term.deadline > late)
        )
    );
}

/// P5: a candidate that sees the winner's put before its own acquire's conflict arrives keeps
/// that put: the observed-expiry backstop counts from the first sighting (the conflict once
/// reset it, and a re-read reset it again, delaying a no-TTL fail-over by a heartbeat).
#[test]
fn backstop_counts_from_the_first_sighting_after_a_lost_race() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(FREE), t0);
    let acquire = last_op(&mut m).expect("an acquire");
    let seen = t0 + Duration::from_millis(1);
    m.handle_observed(foreign(2), seen);
    m.handle_write(
        acquire,
        WriteOutcome::Conflict,
        seen + Duration::from_millis(1),
    );
    let timing = Timing::default();
    assert_eq!(
        m.poll_timeout(),
        Some(seen + timing.ttl + timing.heartbeat + crate::core::machine::BACKSTOP_GRACE)
    );
}

/// A follower that reads the key back as absent (purged without a marker it saw: `max_age`
/// expiry without limit markers, an aged-out marker, a recreated bucket) treats it as a vacancy
/// and acquires on revision 0, instead of ignoring the read and re-reading for ever.
#[test]
fn absent_read_after_a_known_revision_is_a_vacancy() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(foreign(5)), t0);
    // Nothing happens until the backstop; then a read.
    let t = m.poll_timeout().expect("the backstop timer");
    session_at(&mut m, t);
    m.handle_timeout(t);
    let read = last_op(&mut m).expect("a backstop read");
    m.handle_read(read, Ok(KeyState::Absent), t);
    // Absent (a stream purge leaves no marker): a vacancy once it stayed so for a TTL +
    // heartbeat (Q5 rule 1), not at once.
    assert!(last_op(&mut m).is_none(), "acquired an absent key at once");
    let timing = Timing::default();
    let until = m.poll_timeout().expect("a timer for the end of the hold");
    assert!(
        until >= t + timing.ttl + timing.heartbeat,
        "{:?}",
        until - t
    );
    session_at(&mut m, until);
    m.handle_timeout(until);
    let mut acquire = None;
    while let Some(a) = m.poll_action() {
        if let Action::Write(w) = a {
            acquire = Some(w);
        }
    }
    let acquire = acquire.expect("an acquire after an absent read");
    assert_eq!(acquire.kind, WriteKind::Acquire);
    assert_eq!(acquire.expected, 0);
}

/// A read older than what is known (a lagging replica) is not answered by an immediate new
/// read: the next one waits (no busy loop).
#[test]
fn stale_read_is_not_retried_at_once() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(foreign(9)), t0);
    let t = m.poll_timeout().expect("the backstop timer");
    m.handle_timeout(t);
    let read = last_op(&mut m).expect("a backstop read");
    m.handle_read(read, Ok(foreign(4)), t);
    assert!(last_op(&mut m).is_none(), "no new operation at once");
    let next = m.poll_timeout().expect("a retry timer");
    assert!(next > t, "retry timer in the past: busy loop");
}

/// An evicted holder (its lease deleted by someone else) does not win the role straight back:
/// it waits one TTL before campaigning again.
#[test]
fn evicted_holder_cools_down_for_one_ttl() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(FREE), t0);
    let acquire = last_op(&mut m).expect("an acquire");
    m.handle_write(acquire, WriteOutcome::Ok { revision: 3 }, t0);
    assert!(m.term().is_some(), "promoted");
    let now = t0 + Duration::from_millis(10);
    m.handle_observed(
        KeyState::Vacant {
            revision: 4,
            expired: false,
        },
        now,
    );
    assert!(m.term().is_none(), "demoted on eviction");
    assert!(
        last_op(&mut m).is_none(),
        "no acquire right after the eviction"
    );
    let t = m.poll_timeout().expect("a cooldown timer");
    assert!(
        t >= now + Timing::default().ttl,
        "cooldown shorter than one TTL"
    );
    session_at(&mut m, t);
    m.handle_timeout(t);
    assert!(
        last_op(&mut m).is_some(),
        "campaigns again after the cooldown"
    );
}

/// A read sent before the winner's put was observed may come back "absent": it must not
/// replace the newer observation (the follower would contend again, lose, and restart its
/// backstop a heartbeat later — found by `live_without_network_faults`).
#[test]
fn absent_read_older_than_an_observation_is_ignored() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    let seen = t0 + Duration::from_millis(3);
    m.handle_observed(foreign(1), seen);
    m.handle_read(read, Ok(KeyState::Absent), t0 + Duration::from_millis(4));
    assert!(last_op(&mut m).is_none(), "no acquire over a held key");
    let timing = Timing::default();
    assert_eq!(
        m.poll_timeout(),
        Some(seen + timing.ttl + timing.heartbeat + crate::core::machine::BACKSTOP_GRACE),
        "the backstop counts from the observation"
    );
}

/// A role value naming the lone candidate's live session, written by another client with
/// another incarnation at `revision`.
fn value_naming_our_session(revision: u64) -> KeyState {
    let mut v = crate::value::LeaseValue {
        v: crate::value::VALUE_VERSION,
        holder: InstanceId::new("solo").expect("valid instance id"),
        incarnation: Uuid::from_u64_pair(5, 5),
        session: SESSION,
        session_key: crate::value::session_key(
            &InstanceId::new("solo").expect("valid instance id"),
            u64::try_from(Timing::default().ttl.as_millis()).unwrap_or(0),
        ),
        nonce: Uuid::from_u64_pair(6, 6),
        term: None,
        priority: 0,
        ttl_ms: u64::try_from(Timing::default().ttl.as_millis()).unwrap_or(0),
        meta: std::collections::BTreeMap::new(),
        acquired_at: None,
        renewed_at: None,
    };
    v.term = None;
    KeyState::Held {
        revision,
        value: HolderValue::Lease(Box::new(v)),
    }
}

/// The `ReleaseTerm` actions among the machine's next actions.
fn handed_over(m: &mut RoleMachine) -> Vec<(u64, Uuid)> {
    std::iter::from_fn(|| m.poll_action())
        .filter_map(|a| match a {
            Action::ReleaseTerm { revision, session } => Some((revision, session)),
            _ => None,
        })
        .collect()
}

/// Q4 (issue 24 item 8, found by `live_with_foreign_role_values_and_refused_releases`): a role
/// value naming our live session that appears while the machine cools down after a release
/// is not served by anyone: it is handed over through the session at once (Q5 rule 5), not
/// left pinned until the cooldown ends.
#[test]
fn a_value_naming_our_session_is_handed_over_during_a_cooldown() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(FREE), t0);
    let acquire = last_op(&mut m).expect("an acquire");
    m.handle_write(acquire, WriteOutcome::Ok { revision: 3 }, t0);
    m.handle_release(ReleaseReason::Requested, Duration::from_secs(30), t0);
    m.handle_drained(t0);
    let delete = last_op(&mut m).expect("the release");
    m.handle_write(delete, WriteOutcome::Ok { revision: 4 }, t0);
    assert!(m.cooldown_until().is_some(), "cooling down");
    let t1 = t0 + Duration::from_millis(5);
    session_at(&mut m, t1);
    m.handle_observed(value_naming_our_session(5), t1);
    assert_eq!(handed_over(&mut m), vec![(5, SESSION)]);
}

/// Q4 (issue 24 items 8 and 9): a value naming our live session that the machine cannot take
/// over because its role-key writes are refused (a permission revoked) is handed over through
/// the session, not retried at the slow cadence while the role stays unheld. Never while an
/// acquire of ours is in flight: the value seen may be its own put (it becomes our term).
#[test]
fn a_value_naming_our_session_is_handed_over_when_role_writes_are_refused() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(value_naming_our_session(5)), t0);
    let takeover = last_op(&mut m).expect("a takeover of the value");
    let denied = WriteOutcome::Failed(FailureKind::PermissionDenied);
    m.handle_write(takeover, denied, t0);
    assert_eq!(handed_over(&mut m), vec![(5, SESSION)]);

    // Refused before, then an acquire whose own put is seen before its acknowledgement.
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(FREE), t0);
    let acquire = last_op(&mut m).expect("an acquire");
    m.handle_write(acquire, denied, t0);
    let t1 = m.poll_timeout().expect("a slow retry");
    session_at(&mut m, t1);
    m.handle_timeout(t1);
    let mut put = None;
    while let Some(a) = m.poll_action() {
        if let Action::Write(w) = a {
            put = Some(w);
        }
    }
    let put = put.expect("the acquire again");
    let value = put.value.expect("a role value");
    let own = KeyState::Held {
        revision: 7,
        value: HolderValue::Lease(Box::new(value)),
    };
    m.handle_observed(own, t1);
    assert!(
        handed_over(&mut m).is_empty(),
        "our own acquire handed over"
    );
    m.handle_write(put.op, WriteOutcome::Ok { revision: 7 }, t1);
    assert!(m.term().is_some(), "promoted");
}

/// The lone session machine of `solo` (TTL class of [`Timing::default`]).
fn session_machine() -> crate::core::SessionMachine {
    crate::core::SessionMachine::new(
        InstanceId::new("solo").expect("valid instance id"),
        Uuid::from_u64_pair(1, 1),
        Timing::default(),
        RetryPolicy::default(),
        3,
    )
}

/// Session actions drained.
fn session_actions(m: &mut crate::core::SessionMachine) -> Vec<crate::core::SessionAction> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

/// Starts the session machine over an absent key, acknowledged at `rev`: the uuid.
fn session_live(m: &mut crate::core::SessionMachine, t0: Instant, rev: u64) -> Uuid {
    use crate::core::SessionAction;
    m.start(t0);
    let read = session_actions(m)
        .into_iter()
        .find_map(|a| match a {
            SessionAction::Read { op, .. } => Some(op),
            _ => None,
        })
        .expect("a read");
    m.handle_read(read, Ok(crate::core::SessionKeyState::Absent), t0);
    let (op, uuid) = session_actions(m)
        .into_iter()
        .find_map(|a| match a {
            SessionAction::Write(w) => Some((w.op, w.value.map(|v| v.session))),
            _ => None,
        })
        .expect("a start");
    m.handle_write(op, WriteOutcome::Ok { revision: rev }, t0);
    session_actions(m);
    uuid.expect("a session")
}

/// Q4 (issue 24 item 6, found by `live_after_aged_out_markers`): a process paused past its
/// session's deadline whose first input after the pause is a watcher entry it already knows
/// (a replay) loses the session — and must start a new one. The loss ended in an early return
/// that skipped the next step: no read, no timer, the session never came back.
#[test]
fn a_session_lost_on_a_known_watcher_entry_starts_again() {
    use crate::core::{SessionAction, SessionKeyState, SessionLoss};
    let mut m = session_machine();
    let t0 = Instant::now();
    let uuid = session_live(&mut m, t0, 5);
    let late = t0 + Timing::default().local_lease() + Duration::from_millis(1);
    let replay = SessionKeyState::Marker {
        revision: 5,
        expired: false,
    };
    m.handle_observed(replay, late);
    let actions = session_actions(&mut m);
    assert!(
        actions.iter().any(|a| matches!(
            a,
            SessionAction::Lost { uuid: u, reason: SessionLoss::DeadlineExpired } if *u == uuid
        )),
        "{actions:?}"
    );
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, SessionAction::Read { .. } | SessionAction::Write(_)))
            || m.poll_timeout().is_some(),
        "the session never starts again: {actions:?}"
    );
}

/// P1/Q4 (issue 24 item 3): after a session was lost to a recreated bucket (its key read back
/// below our revision) and a new one started there, the watcher's entries of the new bucket
/// are not ignored as old: an eviction in the new bucket ends the session at once (Q6(b)).
#[test]
fn after_a_bucket_reset_the_new_buckets_entries_are_not_ignored() {
    use crate::core::{SessionAction, SessionKeyState, SessionLoss};
    let mut m = session_machine();
    let t0 = Instant::now();
    session_live(&mut m, t0, 900);
    let t1 = m.poll_timeout().expect("a renewal timer");
    m.handle_timeout(t1);
    let renew = session_actions(&mut m)
        .into_iter()
        .find_map(|a| match a {
            SessionAction::Write(w) => Some(w.op),
            _ => None,
        })
        .expect("a renewal");
    m.handle_write(renew, WriteOutcome::Conflict, t1);
    let read = session_actions(&mut m)
        .into_iter()
        .find_map(|a| match a {
            SessionAction::Read { op, .. } => Some(op),
            _ => None,
        })
        .expect("a re-read");
    m.handle_read(read, Ok(SessionKeyState::Absent), t1);
    let actions = session_actions(&mut m);
    assert!(
        actions.iter().any(|a| matches!(
            a,
            SessionAction::Lost {
                reason: SessionLoss::BucketReset,
                ..
            }
        )),
        "{actions:?}"
    );
    let (op, uuid) = actions
        .iter()
        .find_map(|a| match a {
            SessionAction::Write(w) => Some((w.op, w.value.as_ref().map(|v| v.session))),
            _ => None,
        })
        .expect("a new session in the new bucket");
    m.handle_write(op, WriteOutcome::Ok { revision: 2 }, t1);
    session_actions(&mut m);
    let evicted = SessionKeyState::Marker {
        revision: 3,
        expired: false,
    };
    m.handle_observed(evicted, t1 + Duration::from_millis(1));
    let actions = session_actions(&mut m);
    assert!(
        actions.iter().any(|a| matches!(
            a,
            SessionAction::Lost { uuid: u, reason: SessionLoss::Evicted } if Some(*u) == uuid
        )),
        "the eviction in the new bucket was ignored: {actions:?}"
    );
}
