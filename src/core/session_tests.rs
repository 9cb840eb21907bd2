//! Unit tests of [`SessionMachine`] (protocol Q1–Q4): each drives one machine by hand.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::session::{
    SessionAction, SessionKeyState, SessionLoss, SessionMachine, SessionWriteKind,
};
use super::{FailureKind, RetryPolicy, Timing, WriteOutcome};
use crate::names::InstanceId;
use crate::value::SessionValue;

fn solo() -> InstanceId {
    InstanceId::new("solo").expect("valid instance id")
}

fn machine() -> (SessionMachine, Instant) {
    let m = SessionMachine::new(
        solo(),
        Uuid::from_u64_pair(1, 1),
        Timing::default(),
        RetryPolicy::default(),
        7,
    );
    (m, Instant::now())
}

fn drain(m: &mut SessionMachine) -> Vec<SessionAction> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

/// The last write among `actions`: op, kind, expected revision, uuid carried.
fn write_of(actions: &[SessionAction]) -> Option<(u64, SessionWriteKind, u64, Option<Uuid>)> {
    actions.iter().rev().find_map(|a| match a {
        SessionAction::Write(w) => Some((
            w.op,
            w.kind,
            w.expected,
            w.value.as_ref().map(|v| v.session),
        )),
        _ => None,
    })
}

fn read_of(actions: &[SessionAction]) -> Option<u64> {
    actions.iter().rev().find_map(|a| match a {
        SessionAction::Read { op, .. } => Some(*op),
        _ => None,
    })
}

fn lost_of(actions: &[SessionAction]) -> Option<(Uuid, SessionLoss)> {
    actions.iter().find_map(|a| match a {
        SessionAction::Lost { uuid, reason } => Some((*uuid, *reason)),
        _ => None,
    })
}

/// A session value of `solo` with `uuid`, written by `incarnation`.
fn value(uuid: Uuid, incarnation: u64) -> SessionKeyState {
    value_at(9, uuid, incarnation)
}

fn value_at(revision: u64, uuid: Uuid, incarnation: u64) -> SessionKeyState {
    SessionKeyState::Value {
        revision,
        value: Some(SessionValue {
            v: crate::value::VALUE_VERSION,
            instance: solo(),
            incarnation: Uuid::from_u64_pair(incarnation, incarnation),
            session: uuid,
            ttl_ms: 3_000,
            heartbeat_ms: 750,
            released: Vec::new(),
        }),
    }
}

/// Starts `m` on a key read as `found`; the start is acknowledged at `rev`. Returns the uuid.
fn start_live(m: &mut SessionMachine, t0: Instant, found: SessionKeyState, rev: u64) -> Uuid {
    m.start(t0);
    let read = read_of(&drain(m)).expect("a read first");
    let expected = found.revision();
    m.handle_read(read, Ok(found), t0);
    let (op, kind, exp, uuid) = write_of(&drain(m)).expect("a start");
    assert_eq!((kind, exp), (SessionWriteKind::Start, expected));
    m.handle_write(op, WriteOutcome::Ok { revision: rev }, t0);
    let actions = drain(m);
    let up = actions.iter().find_map(|a| match a {
        SessionAction::Up {
            uuid,
            acked_sent_at,
            revision,
        } => Some((*uuid, *acked_sent_at, *revision)),
        _ => None,
    });
    let uuid = uuid.expect("the start carries a session");
    assert_eq!(up, Some((uuid, t0, rev)), "{actions:?}");
    uuid
}

/// Q3: a start reads the key, then writes a new session by CAS on the revision read (0 when
/// absent, a marker's or the previous process's session's revision otherwise).
#[test]
fn a_start_writes_over_the_revision_read() {
    for found in [
        SessionKeyState::Absent,
        SessionKeyState::Marker {
            revision: 4,
            expired: true,
        },
        value(Uuid::from_u64_pair(5, 5), 2),
    ] {
        let (mut m, t0) = machine();
        start_live(&mut m, t0, found, 10);
    }
}

/// Q4: renewals go out every heartbeat on the last revision; an acknowledged one moves
/// `acked_sent_at` to its send time (`Renewed`).
#[test]
fn renewals_every_heartbeat_move_the_acknowledged_send_time() {
    let (mut m, t0) = machine();
    let uuid = start_live(&mut m, t0, SessionKeyState::Absent, 5);
    let hb = Timing::default().heartbeat;
    let mut rev = 5;
    let mut now = t0;
    for _ in 0..3 {
        let t = m.poll_timeout().expect("a renew timer");
        assert_eq!(t, now + hb, "renewed every heartbeat");
        now = t;
        m.handle_timeout(now);
        let (op, kind, expected, carried) = write_of(&drain(&mut m)).expect("a renewal");
        assert_eq!(
            (kind, expected, carried),
            (SessionWriteKind::Renew, rev, Some(uuid))
        );
        rev += 3;
        let acked = now + Duration::from_millis(20);
        m.handle_write(op, WriteOutcome::Ok { revision: rev }, acked);
        let actions = drain(&mut m);
        assert!(
            actions.iter().any(|a| matches!(
                a,
                SessionAction::Renewed { uuid: u, acked_sent_at, revision }
                    if *u == uuid && *acked_sent_at == now && *revision == rev
            )),
            "{actions:?}"
        );
    }
}

/// A live session (revision 5) whose first renewal conflicted: the machine, its uuid, the op
/// of the re-read it sent at once, and the time.
fn renewal_conflicted() -> (SessionMachine, Uuid, u64, Instant) {
    let (mut m, t0) = machine();
    let uuid = start_live(&mut m, t0, SessionKeyState::Absent, 5);
    let t = m.poll_timeout().expect("renew timer");
    m.handle_timeout(t);
    let (op, ..) = write_of(&drain(&mut m)).expect("a renewal");
    m.handle_write(op, WriteOutcome::Conflict, t);
    let read = read_of(&drain(&mut m)).expect("a re-read at once");
    (m, uuid, read, t)
}

/// Q4: a renewal that conflicts is re-read: our own write (a late renewal, same uuid) is
/// continued on the revision read; a marker or another writer's session is a loss, reported
/// once, and a new session with a new uuid starts over it.
#[test]
fn a_renewal_conflict_is_re_read() {
    let (mut m, uuid, read, t) = renewal_conflicted();
    m.handle_read(read, Ok(value_at(7, uuid, 1)), t);
    let actions = drain(&mut m);
    assert!(lost_of(&actions).is_none(), "{actions:?}");
    let (_, kind, expected, _) = write_of(&actions).expect("renewed at once on the revision read");
    assert_eq!((kind, expected), (SessionWriteKind::Renew, 7));

    for (found, reason) in [
        (
            SessionKeyState::Marker {
                revision: 8,
                expired: true,
            },
            SessionLoss::Expired,
        ),
        (
            SessionKeyState::Marker {
                revision: 8,
                expired: false,
            },
            SessionLoss::Evicted,
        ),
        (
            value_at(8, Uuid::from_u64_pair(6, 6), 1),
            SessionLoss::Superseded,
        ),
    ] {
        let (mut m, uuid, read, t) = renewal_conflicted();
        m.handle_read(read, Ok(found.clone()), t);
        let actions = drain(&mut m);
        assert_eq!(
            lost_of(&actions),
            Some((uuid, reason)),
            "{found:?}: {actions:?}"
        );
        let (_, kind, expected, fresh) = write_of(&actions).expect("a new session at once");
        assert_eq!((kind, expected), (SessionWriteKind::Start, 8), "{found:?}");
        assert!(
            fresh.is_some_and(|f| f != uuid),
            "{found:?}: the new session needs a new uuid"
        );
    }
}

/// A start whose outcome is unknown is recognised by the read that follows: our uuid in the
/// key means it committed (the session is up, from its send time); otherwise the next start
/// carries a new uuid (the unknown one may still commit, and must never reappear later).
#[test]
fn an_unknown_start_is_recognised_by_a_read() {
    let (mut m, t0) = machine();
    m.start(t0);
    let read = read_of(&drain(&mut m)).expect("a read");
    m.handle_read(read, Ok(SessionKeyState::Absent), t0);
    let (op, _, _, uuid) = write_of(&drain(&mut m)).expect("a start");
    let uuid = uuid.expect("a uuid");
    let t1 = t0 + Duration::from_secs(1);
    m.handle_write(op, WriteOutcome::Unknown, t1);
    assert!(drain(&mut m).is_empty(), "a backoff first");
    let t2 = m.poll_timeout().expect("a retry");
    m.handle_timeout(t2);
    let read = read_of(&drain(&mut m)).expect("a read of the unknown start");
    m.handle_read(read, Ok(value_at(3, uuid, 1)), t2);
    let actions = drain(&mut m);
    assert!(actions.iter().any(|a| matches!(
        a,
        SessionAction::Up { uuid: u, acked_sent_at, revision: 3 } if *u == uuid && *acked_sent_at == t0
    )), "{actions:?}");

    let (mut m, t0) = machine();
    m.start(t0);
    let read = read_of(&drain(&mut m)).expect("a read");
    m.handle_read(read, Ok(SessionKeyState::Absent), t0);
    let (op, _, _, uuid) = write_of(&drain(&mut m)).expect("a start");
    m.handle_write(op, WriteOutcome::Unknown, t0);
    let t2 = m.poll_timeout().expect("a retry");
    m.handle_timeout(t2);
    let read = read_of(&drain(&mut m)).expect("a read");
    m.handle_read(read, Ok(SessionKeyState::Absent), t2);
    let (_, kind, _, again) = write_of(&drain(&mut m)).expect("the start again");
    assert_eq!(kind, SessionWriteKind::Start);
    assert_ne!(again, uuid, "the unknown start's uuid was reused");
}

/// Q4: without an acknowledged renewal the session ends at its deadline (send time of the
/// last acknowledged write + local lease).
#[test]
fn the_session_is_lost_at_its_deadline() {
    let (mut m, t0) = machine();
    let uuid = start_live(&mut m, t0, SessionKeyState::Absent, 5);
    let deadline = t0 + Timing::default().local_lease();
    let mut now = t0;
    while let Some(t) = m.poll_timeout() {
        if t >= deadline {
            assert_eq!(t, deadline, "a timer at the deadline");
            break;
        }
        now = t;
        m.handle_timeout(now);
        if let Some((op, ..)) = write_of(&drain(&mut m)) {
            m.handle_write(op, WriteOutcome::Failed(FailureKind::Unavailable), now);
        }
        drain(&mut m);
    }
    m.handle_timeout(deadline);
    let actions = drain(&mut m);
    assert_eq!(
        lost_of(&actions),
        Some((uuid, SessionLoss::DeadlineExpired)),
        "{actions:?}"
    );
    assert!(now < deadline);
}

/// Q6: another live process with this instance id writes the key after we wrote it: reported
/// once as a duplicate; this machine yields (reads, never writes over it: no ping-pong).
#[test]
fn a_duplicate_after_we_wrote_is_reported_and_not_fought() {
    let (mut m, t0) = machine();
    let uuid = start_live(&mut m, t0, SessionKeyState::Absent, 5);
    let other = Uuid::from_u64_pair(8, 8);
    let t1 = t0 + Duration::from_millis(100);
    m.handle_observed(value_at(6, other, 2), t1);
    let actions = drain(&mut m);
    assert_eq!(lost_of(&actions), Some((uuid, SessionLoss::Superseded)));
    assert!(actions.iter().any(|a| matches!(
        a,
        SessionAction::Duplicate { other_incarnation } if *other_incarnation == Uuid::from_u64_pair(2, 2)
    )), "{actions:?}");
    assert!(
        write_of(&actions).is_none(),
        "wrote over a live duplicate: {actions:?}"
    );
    // A live duplicate renews every heartbeat: never written over, however long.
    let hb = Timing::default().heartbeat;
    let mut now = t1;
    for k in 1..=40 {
        now += hb;
        m.handle_observed(value_at(6 + k, other, 2), now);
        let actions = drain(&mut m);
        assert!(
            write_of(&actions).is_none(),
            "wrote over a live duplicate: {actions:?}"
        );
        if let Some(read) = read_of(&actions) {
            m.handle_read(read, Ok(value_at(6 + k, other, 2)), now);
        }
        if let Some(t) = m.poll_timeout().filter(|t| *t <= now) {
            m.handle_timeout(t);
        }
    }
    assert!(write_of(&drain(&mut m)).is_none());
}

/// Q4 (issue 24, item 7): a value of another incarnation of this instance that stays
/// unchanged for the backstop period (a restored backup, a tool's write without a TTL, a dead
/// duplicate) is not a live session: the machine stops yielding and starts its session over
/// it with a CAS on its revision; a refusal (it changed) means it lives: yield again.
#[test]
fn a_stale_value_of_another_incarnation_is_written_over_after_the_backstop_period() {
    let timing = Timing::default();
    let period = timing.ttl + timing.heartbeat + super::machine::BACKSTOP_GRACE;
    let (mut m, t0) = machine();
    start_live(&mut m, t0, SessionKeyState::Absent, 5);
    let other = Uuid::from_u64_pair(8, 8);
    let t1 = t0 + Duration::from_millis(100);
    m.handle_observed(value_at(6, other, 2), t1);
    let mut now = t1;
    // Until the period passed: slow re-reads showing the same value, no write.
    while now < t1 + period - Duration::from_millis(1) {
        let actions = drain(&mut m);
        assert!(write_of(&actions).is_none(), "wrote too early: {actions:?}");
        if let Some(read) = read_of(&actions) {
            m.handle_read(read, Ok(value_at(6, other, 2)), now);
            continue;
        }
        let t = m.poll_timeout().expect("a timer while yielding");
        assert!(t <= t1 + period, "no timer for the end of the period");
        now = t.max(now + Duration::from_millis(1));
        m.handle_timeout(now);
    }
    let at = t1 + period;
    m.handle_timeout(at);
    let (op, kind, expected, uuid) = write_of(&drain(&mut m)).expect("a start over it");
    assert_eq!((kind, expected), (SessionWriteKind::Start, 6));
    // Refused: it changed (it lives) -> read, yield again, no Up.
    m.handle_write(op, WriteOutcome::Conflict, at);
    let read = read_of(&drain(&mut m)).expect("a read after the refusal");
    m.handle_read(read, Ok(value_at(9, other, 2)), at);
    assert!(write_of(&drain(&mut m)).is_none(), "fought a live value");
    // Unchanged for another period: written over, and the session is up.
    let later = at + period;
    m.handle_timeout(later);
    let actions = drain(&mut m);
    let (op, kind, expected, uuid2) = write_of(&actions).expect("a start over it");
    assert_eq!((kind, expected), (SessionWriteKind::Start, 9));
    assert_ne!(uuid, None);
    m.handle_write(op, WriteOutcome::Ok { revision: 12 }, later);
    assert!(
        drain(&mut m)
            .iter()
            .any(|a| matches!(a, SessionAction::Up { uuid, .. } if Some(*uuid) == uuid2)),
        "the session is up"
    );
}

/// Q5 rule 5 (issue 24, items 8 and 9): a released term is listed in the session's value,
/// which is written at once; terms settled by a move of the role key leave the list; when the
/// list is full the session is replaced instead (every value naming it is vacant then).
#[test]
fn released_terms_are_listed_and_renewed_at_once() {
    let (mut m, t0) = machine();
    let uuid = start_live(&mut m, t0, SessionKeyState::Absent, 5);
    let role = |n: usize| crate::names::RoleName::new(format!("r{n}")).expect("valid role");
    let t1 = t0 + Duration::from_millis(10);
    m.handle_release_term(uuid, role(0), 3, t1);
    let actions = drain(&mut m);
    let released = actions.iter().rev().find_map(|a| match a {
        SessionAction::Write(w) => w.value.as_ref().map(|v| v.released.clone()),
        _ => None,
    });
    let released = released.expect("a renewal at once, not a heartbeat later");
    assert_eq!(released.len(), 1);
    assert_eq!((released[0].role.as_str(), released[0].revision), ("r0", 3));
    // Another session's uuid is ignored; a repeat adds nothing.
    m.handle_release_term(Uuid::from_u64_pair(99, 99), role(1), 4, t1);
    m.handle_release_term(uuid, role(0), 3, t1);
    assert_eq!(m.released().len(), 1);
    m.handle_role_moved(&role(0), 2);
    assert_eq!(m.released().len(), 1, "an older revision settles nothing");
    m.handle_role_moved(&role(0), 8);
    assert!(m.released().is_empty(), "taken over: settled");
    for n in 0..crate::value::MAX_RELEASED {
        m.handle_release_term(uuid, role(n), 10, t1);
    }
    assert!(lost_of(&drain(&mut m)).is_none());
    m.handle_release_term(uuid, role(999), 10, t1);
    assert_eq!(lost_of(&drain(&mut m)), Some((uuid, SessionLoss::Rotated)));
    assert!(m.released().is_empty(), "a new session lists nothing");
}

/// Q4 (releases): stopping ends the session with a delete marker on its revision, then
/// `Stopped`.
#[test]
fn a_stop_deletes_the_session_at_its_revision() {
    let (mut m, t0) = machine();
    let uuid = start_live(&mut m, t0, SessionKeyState::Absent, 5);
    m.handle_stop(t0);
    let actions = drain(&mut m);
    assert_eq!(lost_of(&actions), Some((uuid, SessionLoss::Ended)));
    let (op, kind, expected, carried) = write_of(&actions).expect("the delete");
    assert_eq!((kind, expected, carried), (SessionWriteKind::End, 5, None));
    m.handle_write(op, WriteOutcome::Ok { revision: 6 }, t0);
    assert!(
        drain(&mut m)
            .iter()
            .any(|a| matches!(a, SessionAction::Stopped))
    );
    assert!(m.is_stopped());
}

/// P3: a persistent refusal of the start is reported once and retried at the slow cadence.
#[test]
fn persistent_failures_are_retried_slowly() {
    let (mut m, t0) = machine();
    m.start(t0);
    let read = read_of(&drain(&mut m)).expect("a read");
    m.handle_read(read, Ok(SessionKeyState::Absent), t0);
    let (op, ..) = write_of(&drain(&mut m)).expect("a start");
    m.handle_write(op, WriteOutcome::Failed(FailureKind::PermissionDenied), t0);
    let actions = drain(&mut m);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, SessionAction::Failed(FailureKind::PermissionDenied)))
    );
    let slow = RetryPolicy::default().persistent_interval;
    let t = m.poll_timeout().expect("a slow retry");
    assert!(t - t0 >= slow && t - t0 <= slow + slow / 5, "{:?}", t - t0);
    m.handle_timeout(t);
    let (op, kind, ..) = write_of(&drain(&mut m)).expect("the start again");
    assert_eq!(kind, SessionWriteKind::Start);
    m.handle_write(op, WriteOutcome::Ok { revision: 2 }, t);
    assert!(
        drain(&mut m)
            .iter()
            .any(|a| matches!(a, SessionAction::Recovered))
    );
}

/// Q5 rule 5 is no hole: a value carrying our session's uuid that this process never wrote
/// (another client copied it, e.g. with a forged list of released terms) ends the session at
/// once, as any other foreign write to the key does (forceful, Q6) — never taken as our own.
#[test]
fn a_forged_copy_of_our_session_value_ends_the_session() {
    let (mut m, t0) = machine();
    let uuid = start_live(&mut m, t0, SessionKeyState::Absent, 5);
    // Our own value seen before its acknowledgement: still ours.
    let t1 = t0 + Timing::default().heartbeat;
    m.handle_timeout(t1);
    let (op, kind, _, _) = write_of(&drain(&mut m)).expect("a renewal");
    assert_eq!(kind, SessionWriteKind::Renew);
    let mut own = value_at(7, uuid, 1);
    m.handle_observed(own.clone(), t1);
    assert!(
        lost_of(&drain(&mut m)).is_none(),
        "our own renewal taken as foreign"
    );
    m.handle_write(op, WriteOutcome::Ok { revision: 7 }, t1);
    drain(&mut m);
    // The same bytes with a released term we never listed: a forgery.
    if let SessionKeyState::Value {
        revision,
        value: Some(v),
    } = &mut own
    {
        *revision = 9;
        v.released.push(crate::value::ReleasedTerm {
            role: crate::names::RoleName::new("r").expect("valid role"),
            revision: 3,
        });
    }
    m.handle_observed(own, t1);
    assert_eq!(
        lost_of(&drain(&mut m)),
        Some((uuid, SessionLoss::Superseded))
    );
}
