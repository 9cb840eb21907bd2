//! Unit tests of single machines for the failure, release and adoption rules (P3, P4, P5,
//! P8) and the session rules of protocol version 2 (Q4, Q5, Q7): each drives one
//! [`RoleMachine`] by hand through one situation. The machines get a live session
//! ([`SessionUpdate::Live`]) before they are expected to acquire: no acquire is sent without.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::{
    Action, DemoteReason, FailureKind, Identity, KeyState, Notice, ReleaseReason, RetryPolicy,
    RoleMachine, ServerCode, SessionUpdate, Timing, WriteKind, WriteOutcome,
};
use crate::names::InstanceId;
use crate::value::{HolderValue, LeaseValue};

const EPOCH: u64 = 1;

/// A free role key: its last entry is a delete marker (a key with no entry at all is acquired
/// only after a TTL + heartbeat, see `an_absent_key_is_acquired_only_after_a_ttl`).
const FREE: KeyState = KeyState::Vacant {
    revision: 1,
    expired: false,
};
const PERSISTENT_RETRY: Duration = Duration::from_secs(10);

fn identity(incarnation: u64) -> Identity {
    Identity {
        instance: InstanceId::new("solo").expect("valid instance id"),
        incarnation: Uuid::from_u64_pair(incarnation, incarnation),
        priority: 0,
        meta: std::collections::BTreeMap::new(),
    }
}

/// The uuid of the session the test machines rest on.
const SESSION: Uuid = Uuid::from_u64_pair(42, 42);

/// A machine with a live session acknowledged at the returned instant.
fn machine_with(retry: RetryPolicy) -> (RoleMachine, Instant) {
    let mut m = RoleMachine::new(identity(1), Timing::default(), retry, true, EPOCH, 7);
    let t0 = Instant::now();
    session_at(&mut m, SESSION, t0);
    (m, t0)
}

/// The session `uuid` was (re)written with a write sent at `at`, acknowledged at `at`.
fn session_at(m: &mut RoleMachine, uuid: Uuid, at: Instant) {
    m.handle_session(
        SessionUpdate::Live {
            uuid,
            acked_sent_at: at,
        },
        at,
    );
}

fn machine() -> (RoleMachine, Instant) {
    machine_with(RetryPolicy::default())
}

/// The session `uuid` ended for `reason` (as the session driver maps its loss).
fn lose(m: &mut RoleMachine, uuid: Uuid, reason: DemoteReason, at: Instant) {
    m.handle_session(SessionUpdate::Lost { uuid, reason }, at);
}

/// Every action produced so far.
fn drain(m: &mut RoleMachine) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

/// The op id of the last read or write among `actions`.
fn op_of(actions: &[Action]) -> Option<u64> {
    actions.iter().rev().find_map(|a| match a {
        Action::Write(w) => Some(w.op),
        Action::Read { op, .. } => Some(*op),
        _ => None,
    })
}

fn write_of(actions: &[Action]) -> Option<(u64, WriteKind, u64)> {
    actions.iter().rev().find_map(|a| match a {
        Action::Write(w) => Some((w.op, w.kind, w.expected)),
        _ => None,
    })
}

fn lease(holder: &str, incarnation: u64, nonce: u64, term: Option<u64>) -> HolderValue {
    lease_with_nonce(holder, incarnation, Uuid::from_u64_pair(nonce, nonce), term)
}

fn lease_with_nonce(holder: &str, incarnation: u64, nonce: Uuid, term: Option<u64>) -> HolderValue {
    HolderValue::Lease(Box::new(LeaseValue {
        v: crate::value::VALUE_VERSION,
        holder: InstanceId::new(holder).expect("valid instance id"),
        incarnation: Uuid::from_u64_pair(incarnation, incarnation),
        session: uuid::Uuid::nil(),
        session_key: crate::value::session_key(
            &InstanceId::new(holder).expect("valid instance id"),
            3_000,
        ),
        nonce,
        term,
        priority: 0,
        ttl_ms: 3_000,
        meta: std::collections::BTreeMap::new(),
        acquired_at: None,
        renewed_at: None,
    }))
}

/// Starts `m` and answers its first read with `state`.
fn start_on(m: &mut RoleMachine, t0: Instant, state: KeyState) {
    m.start(t0);
    let read = op_of(&drain(m)).expect("a read");
    m.handle_read(read, Ok(state), t0);
}

/// Starts `m` on an absent key and returns the op id of its acquire.
fn start_and_acquire(m: &mut RoleMachine, t0: Instant) -> u64 {
    start_on(m, t0, FREE);
    let (op, kind, _) = write_of(&drain(m)).expect("an acquire");
    assert_eq!(kind, WriteKind::Acquire);
    op
}

/// Promotes `m` at revision `rev`; returns the time of promotion.
fn promote(m: &mut RoleMachine, t0: Instant, rev: u64) {
    let acquire = start_and_acquire(m, t0);
    m.handle_write(acquire, WriteOutcome::Ok { revision: rev }, t0);
    assert!(m.term().is_some(), "promoted");
    drain(m);
}

/// P3: a server condition that heals (full storage, lost quorum, an offline stream, a code
/// this version does not know) is retried with backoff and reported; once the server accepts
/// writes again the role is acquired: no state that only a restart leaves.
#[test]
fn transient_server_errors_are_retried_and_reported() {
    for code in [10047, 10077, 10023, 10008, 10118, 19_999] {
        let (mut m, t0) = machine();
        let acquire = start_and_acquire(&mut m, t0);
        let full = FailureKind::Server(ServerCode(code));
        m.handle_write(acquire, WriteOutcome::Failed(full), t0);
        let actions = drain(&mut m);
        assert!(
            actions.contains(&Action::Failed(full)),
            "{code}: not reported: {actions:?}"
        );
        assert!(!m.is_stopped(), "{code}: the role stopped");
        // Retries follow the backoff (2 s at most with the default policy), not the slow cadence.
        let mut now = t0;
        for attempt in 0..5 {
            let t = m.poll_timeout().expect("a retry timer");
            assert!(
                t - now <= Duration::from_millis(2_400),
                "{code}: retry {attempt} after {:?}",
                t - now
            );
            now = t;
            // The session is renewed meanwhile (an acquire needs a live session).
            session_at(&mut m, SESSION, now);
            m.handle_timeout(now);
            let actions = drain(&mut m);
            let (op, kind, _) = write_of(&actions).expect("the acquire again");
            assert_eq!(kind, WriteKind::Acquire);
            assert!(
                !actions.iter().any(|a| matches!(a, Action::Failed(_))),
                "{code}: reported once per condition"
            );
            if attempt < 4 {
                m.handle_write(op, WriteOutcome::Failed(full), now);
            } else {
                m.handle_write(op, WriteOutcome::Ok { revision: 9 }, now);
            }
        }
        let actions = drain(&mut m);
        assert!(actions.contains(&Action::Recovered), "{code}: {actions:?}");
        assert!(m.term().is_some(), "{code}: acquired once the server heals");
        assert_eq!(m.failure(), None);
    }
}

/// P3: a permission violation for the role's subject and a configuration error are persistent:
/// the role is reported and retried at the slow cadence — never stopped — so a permission
/// fixed by a server config reload brings it back.
#[test]
fn persistent_failures_are_retried_slowly_never_stop_the_role() {
    for kind in [
        FailureKind::PermissionDenied,
        FailureKind::PayloadTooLarge,
        FailureKind::Server(ServerCode(10054)),
    ] {
        let (mut m, t0) = machine();
        let acquire = start_and_acquire(&mut m, t0);
        m.handle_write(acquire, WriteOutcome::Failed(kind), t0);
        let actions = drain(&mut m);
        assert!(actions.contains(&Action::Failed(kind)), "{kind:?}");
        assert!(!actions.contains(&Action::Stopped), "{kind:?}: stopped");
        assert!(!m.is_stopped());
        assert_eq!(m.failure(), Some(kind));
        let t = m.poll_timeout().expect("a slow retry");
        assert!(
            t - t0 >= PERSISTENT_RETRY && t - t0 <= PERSISTENT_RETRY + PERSISTENT_RETRY / 5,
            "{kind:?}: retry after {:?}",
            t - t0
        );
        // Nothing happens before the slow retry, not even on news from the watcher.
        m.handle_observed(
            KeyState::Vacant {
                revision: 3,
                expired: false,
            },
            t0 + Duration::from_secs(1),
        );
        assert!(write_of(&drain(&mut m)).is_none());
        session_at(&mut m, SESSION, t);
        m.handle_timeout(t);
        let (op, kind_sent, expected) = write_of(&drain(&mut m)).expect("the retry");
        assert_eq!((kind_sent, expected), (WriteKind::Acquire, 3));
        m.handle_write(op, WriteOutcome::Ok { revision: 4 }, t);
        assert!(drain(&mut m).contains(&Action::Recovered));
        assert!(m.term().is_some(), "{kind:?}: acquired after the fix");
    }
}

/// Q4: a holder whose session is lost (its renewals refused until the session deadline, an
/// expiry, an eviction...) demotes at once with the reason the session driver maps the loss
/// to, does not campaign without a session, and comes back once a new session is up: its
/// old role value names the dead session, so it takes it back by CAS on its revision (a new
/// term on the new session).
#[test]
fn a_holder_whose_session_is_lost_demotes_and_comes_back_on_a_new_session() {
    for reason in [
        DemoteReason::DeadlineExpired,
        DemoteReason::Expired,
        DemoteReason::Superseded,
        DemoteReason::BucketReset,
    ] {
        let (mut m, t0) = machine();
        promote(&mut m, t0, 3);
        let t1 = t0 + Duration::from_millis(500);
        lose(&mut m, SESSION, reason, t1);
        let actions = drain(&mut m);
        assert!(
            actions.iter().any(|a| matches!(
                a,
                Action::Demote { reason: r, drain: false, .. } if *r == reason
            )),
            "{reason:?}: {actions:?}"
        );
        assert!(m.term().is_none(), "{reason:?}: still leading");
        assert!(!m.is_stopped());
        assert!(
            write_of(&actions).is_none(),
            "{reason:?}: acquired without a session: {actions:?}"
        );
        // A new session (new uuid): the role value of the old one is ours, taken back by CAS.
        let fresh = Uuid::from_u64_pair(43, 43);
        let t2 = t1 + Duration::from_millis(20);
        session_at(&mut m, fresh, t2);
        if let Some(t) = m.poll_timeout().filter(|t| *t > t2) {
            m.handle_timeout(t);
        }
        let (op, kind, expected) = write_of(&drain(&mut m)).expect("a re-acquire");
        assert_eq!((kind, expected), (WriteKind::Acquire, 3), "{reason:?}");
        m.handle_write(op, WriteOutcome::Ok { revision: 4 }, t2);
        let term = m.term().expect("a new term on the new session");
        assert_eq!(term.token.term(), 4);
        assert_eq!(term.deadline, t2 + Timing::default().local_lease());
    }
}

/// The loss of an eviction cools down for one TTL (as an eviction of the role key does): the
/// role goes to another instance rather than straight back.
#[test]
fn a_session_eviction_demotes_as_evicted_and_cools_down() {
    let (mut m, t0) = machine();
    promote(&mut m, t0, 3);
    lose(&mut m, SESSION, DemoteReason::Evicted, t0);
    let actions = drain(&mut m);
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::Demote {
            reason: DemoteReason::Evicted,
            ..
        }
    )));
    assert!(
        m.cooldown_until()
            .is_some_and(|u| u >= t0 + Timing::default().ttl)
    );
}

/// A loss of another session than the one the term rests on changes nothing; a live session
/// with another uuid than the term's ends the term (its session was replaced).
#[test]
fn only_the_term_s_own_session_ends_it() {
    let (mut m, t0) = machine();
    promote(&mut m, t0, 3);
    let other = Uuid::from_u64_pair(7, 7);
    lose(&mut m, other, DemoteReason::Expired, t0);
    assert!(m.term().is_some(), "another session's loss demoted");
    assert!(drain(&mut m).is_empty());
    session_at(&mut m, other, t0 + Duration::from_millis(1));
    assert!(m.term().is_none(), "a term on a replaced session goes on");
    assert!(
        drain(&mut m)
            .iter()
            .any(|a| matches!(a, Action::Demote { .. }))
    );
}

/// Q4: a term's deadline is the session's: every acknowledged session renewal that moves it
/// is reported as `Renewed` (same term, same role revision); one that does not move it (an
/// older acknowledgement arriving late) is not.
#[test]
fn a_session_renewal_moves_the_term_s_deadline() {
    let (mut m, t0) = machine();
    promote(&mut m, t0, 3);
    let lease = Timing::default().local_lease();
    let first = m.term().expect("term").clone();
    assert_eq!(first.deadline, t0 + lease);
    let t1 = t0 + Duration::from_millis(750);
    session_at(&mut m, SESSION, t1);
    let actions = drain(&mut m);
    let renewed = actions.iter().find_map(|a| match a {
        Action::Renewed { term, revision } => Some((term.clone(), *revision)),
        _ => None,
    });
    let (term, revision) = renewed.expect("Renewed");
    assert_eq!(revision, 3, "the role key does not move during a term");
    assert_eq!(term.token, first.token);
    assert_eq!(term.deadline, t1 + lease);
    assert_eq!(m.term().expect("term").deadline, t1 + lease);
    assert!(m.poll_timeout().is_some_and(|t| t <= t1 + lease));
    // An older acknowledgement: no move, no report.
    session_at(&mut m, SESSION, t0 + Duration::from_millis(100));
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.term().expect("term").deadline, t1 + lease);
    // No renewal: demoted at the deadline.
    m.handle_timeout(t1 + lease);
    assert!(drain(&mut m).iter().any(|a| matches!(
        a,
        Action::Demote {
            reason: DemoteReason::DeadlineExpired,
            ..
        }
    )));
}

/// Q4: no acquire is sent without a live session; one comes as soon as the session is up, and
/// none after it was lost.
#[test]
fn no_acquire_without_a_live_session() {
    let mut m = RoleMachine::new(
        identity(1),
        Timing::default(),
        RetryPolicy::default(),
        true,
        EPOCH,
        7,
    );
    let t0 = Instant::now();
    start_on(&mut m, t0, FREE);
    assert!(
        write_of(&drain(&mut m)).is_none(),
        "acquired without a session"
    );
    session_at(&mut m, SESSION, t0);
    let (op, kind, expected) = write_of(&drain(&mut m)).expect("an acquire once the session is up");
    assert_eq!((kind, expected), (WriteKind::Acquire, 1));
    let value = drain(&mut m);
    assert!(value.is_empty());
    m.handle_write(op, WriteOutcome::Conflict, t0);
    lose(&mut m, SESSION, DemoteReason::Expired, t0);
    m.handle_observed(
        KeyState::Vacant {
            revision: 2,
            expired: false,
        },
        t0 + Duration::from_millis(1),
    );
    assert!(
        write_of(&drain(&mut m)).is_none(),
        "acquired after the session was lost"
    );
}

/// The acquire names the live session (Q2): its value carries the session's uuid and key.
#[test]
fn the_acquire_names_the_session() {
    let (mut m, t0) = machine();
    start_on(&mut m, t0, FREE);
    let value = drain(&mut m)
        .into_iter()
        .find_map(|a| match a {
            Action::Write(w) => w.value,
            _ => None,
        })
        .expect("an acquire with a value");
    assert_eq!(value.session, SESSION);
    let solo = InstanceId::new("solo").expect("valid instance id");
    assert_eq!(value.session_key, crate::value::session_key(&solo, 3_000));
    assert_eq!(value.v, crate::value::VALUE_VERSION);
}

/// Q6 (late acquire): an acquire acknowledged after the session it names was lost, or after
/// that session's deadline, starts no term; the put is treated as our own late write and
/// re-acquired on the live session by CAS on its revision.
#[test]
fn an_acquire_acknowledged_after_its_session_ended_is_not_promoted() {
    let lease = Timing::default().local_lease();
    for lost in [true, false] {
        let (mut m, t0) = machine();
        let acquire = start_and_acquire(&mut m, t0);
        let t1 = if lost {
            lose(
                &mut m,
                SESSION,
                DemoteReason::Expired,
                t0 + Duration::from_millis(5),
            );
            t0 + Duration::from_millis(10)
        } else {
            t0 + lease
        };
        m.handle_write(acquire, WriteOutcome::Ok { revision: 5 }, t1);
        let actions = drain(&mut m);
        assert!(
            !actions.iter().any(|a| matches!(a, Action::Promote { .. })),
            "lost={lost}: promoted: {actions:?}"
        );
        assert!(m.term().is_none());
        let fresh = Uuid::from_u64_pair(44, 44);
        session_at(&mut m, fresh, t1);
        let (op, kind, expected) = write_of(&drain(&mut m)).expect("a re-acquire");
        assert_eq!((kind, expected), (WriteKind::Acquire, 5), "lost={lost}");
        m.handle_write(op, WriteOutcome::Ok { revision: 6 }, t1);
        assert_eq!(m.term().expect("promoted").deadline, t1 + lease);
    }
}

/// Q5: a version 2 role value is never taken over by the role machine's own backstop; the
/// session book decides: once the holder's session is gone (`handle_holder_gone` with the role
/// value's revision) the role is vacant and taken over by CAS on that revision. A verdict for
/// another revision changes nothing.
#[test]
fn a_holder_whose_session_is_gone_is_taken_over_by_cas_on_its_revision() {
    let (mut m, t0) = machine();
    start_on(
        &mut m,
        t0,
        KeyState::Held {
            revision: 7,
            value: lease("other", 2, 2, None),
        },
    );
    assert!(write_of(&drain(&mut m)).is_none());
    assert_eq!(m.poll_timeout(), None, "no backstop timer for a v2 lease");
    m.handle_holder_gone(6, t0 + Duration::from_millis(1));
    assert!(
        write_of(&drain(&mut m)).is_none(),
        "a verdict for another revision"
    );
    let t1 = t0 + Duration::from_secs(1);
    m.handle_holder_gone(7, t1);
    let (op, kind, expected) = write_of(&drain(&mut m)).expect("a takeover");
    assert_eq!((kind, expected), (WriteKind::Acquire, 7));
    m.handle_write(op, WriteOutcome::Ok { revision: 9 }, t1);
    assert_eq!(m.term().expect("promoted").token.term(), 9);
}

/// A leader never treats its own term's revision as vacant (the book's verdict about its own
/// role value is the session machine's business).
#[test]
fn a_leader_ignores_holder_gone_for_its_own_term() {
    let (mut m, t0) = machine();
    promote(&mut m, t0, 3);
    m.handle_holder_gone(3, t0 + Duration::from_millis(1));
    assert!(m.term().is_some());
    assert!(write_of(&drain(&mut m)).is_none());
}

/// Q7: a herd delay holds the acquire for a vacancy back by that long after seeing it (only a
/// delay: the acquire still goes out), and zero claims at once.
#[test]
fn a_herd_delay_delays_the_acquire() {
    let delay = Duration::from_millis(8);
    let (mut m, t0) = machine();
    start_on(
        &mut m,
        t0,
        KeyState::Held {
            revision: 4,
            value: lease("other", 2, 2, None),
        },
    );
    drain(&mut m);
    m.handle_herd_delay(delay);
    let seen = t0 + Duration::from_millis(100);
    m.handle_observed(
        KeyState::Vacant {
            revision: 5,
            expired: false,
        },
        seen,
    );
    assert!(
        write_of(&drain(&mut m)).is_none(),
        "claimed before the herd delay"
    );
    let t = m.poll_timeout().expect("a timer for the delayed claim");
    assert!(t >= seen + delay, "{:?}", t - seen);
    m.handle_timeout(t);
    let (_, kind, expected) = write_of(&drain(&mut m)).expect("the claim after the delay");
    assert_eq!((kind, expected), (WriteKind::Acquire, 5));
    // Rank 0: at once.
    let (mut m, t0) = machine();
    m.handle_herd_delay(Duration::ZERO);
    start_on(&mut m, t0, FREE);
    assert!(write_of(&drain(&mut m)).is_some());
}

/// `retry.max_attempts` bounds the fast retries only: the role then reports `gave_up` and
/// keeps retrying at the slow cadence.
#[test]
fn giving_up_is_reported_and_retried_slowly() {
    let retry = RetryPolicy {
        max_attempts: 2,
        ..RetryPolicy::default()
    };
    let (mut m, t0) = machine_with(retry);
    m.start(t0);
    let mut now = t0;
    let mut op = op_of(&drain(&mut m)).expect("a read");
    for _ in 0..2 {
        m.handle_read(op, Err(FailureKind::Unavailable), now);
        let actions = drain(&mut m);
        if actions.contains(&Action::Failed(FailureKind::GaveUp)) {
            break;
        }
        now = m.poll_timeout().expect("a retry");
        m.handle_timeout(now);
        op = op_of(&drain(&mut m)).expect("the read again");
    }
    assert_eq!(m.failure(), Some(FailureKind::GaveUp));
    assert!(!m.is_stopped());
    let t = m.poll_timeout().expect("a slow retry");
    assert!(t - now >= PERSISTENT_RETRY, "{:?}", t - now);
    m.handle_timeout(t);
    let read = op_of(&drain(&mut m)).expect("retried");
    m.handle_read(read, Ok(KeyState::Absent), t);
    assert!(drain(&mut m).contains(&Action::Recovered));
}

/// P8: a health release that arrives while an acquire is in flight must not leave a lease no
/// one serves: the won lease is deleted at once.
#[test]
fn a_release_during_an_acquire_gives_the_won_lease_back_at_once() {
    let (mut m, t0) = machine();
    let acquire = start_and_acquire(&mut m, t0);
    m.handle_release(ReleaseReason::Unhealthy, Duration::from_secs(30), t0);
    let t1 = t0 + Duration::from_millis(2);
    m.handle_write(acquire, WriteOutcome::Ok { revision: 5 }, t1);
    let actions = drain(&mut m);
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Promote { .. })),
        "never promoted"
    );
    let (op, kind, expected) = write_of(&actions).expect("the delete of the won lease");
    assert_eq!((kind, expected), (WriteKind::Release, 5));
    // A delete of unknown outcome is retried (on a timer), still within the cooldown.
    m.handle_write(op, WriteOutcome::Unknown, t1);
    let t = m.poll_timeout().expect("retry timer");
    assert!(
        t < t0 + Duration::from_secs(30),
        "retried within the cooldown"
    );
    m.handle_timeout(t);
    let (op, kind, expected) = write_of(&drain(&mut m)).expect("the delete again");
    assert_eq!((kind, expected), (WriteKind::Release, 5));
    m.handle_write(op, WriteOutcome::Ok { revision: 6 }, t);
    assert!(
        write_of(&drain(&mut m)).is_none(),
        "nothing more during the cooldown"
    );
}

/// The same with an acquire of unknown outcome: the key is read, and if it turns out to be
/// ours it is deleted at once.
#[test]
fn a_release_during_an_unknown_acquire_finds_and_deletes_it() {
    let (mut m, t0) = machine();
    let acquire = start_and_acquire(&mut m, t0);
    m.handle_release(ReleaseReason::Unhealthy, Duration::from_secs(30), t0);
    let now = t0 + Duration::from_secs(1);
    m.handle_write(acquire, WriteOutcome::Unknown, now);
    let read = op_of(&drain(&mut m)).expect("a read of the unknown acquire at once");
    // The acquire committed: the key holds our instance, incarnation and the acquire's nonce.
    // (The nonce is not visible from outside; the machine recognises its own incarnation's
    // write as its late acquire only by nonce, so feed the lease the read would return.)
    let ours = m
        .unknown_acquire_nonce()
        .expect("the unknown acquire's nonce");
    let value = lease_with_nonce("solo", 1, ours, None);
    m.handle_read(read, Ok(KeyState::Held { revision: 5, value }), now);
    let (_, kind, expected) = write_of(&drain(&mut m)).expect("the delete");
    assert_eq!((kind, expected), (WriteKind::Release, 5));
}

/// P8: a release that gets a conflict re-reads before declaring the term lost: a later put of
/// our own term (same nonce) is found and deleted at its revision, so a graceful stop still
/// hands over at once. (Version 2 writes no renewals to the role key, but the re-read rule is
/// kept: a conflict alone never proves the loss.)
#[test]
fn a_release_conflict_with_our_own_late_renewal_still_releases() {
    let (mut m, t0) = machine();
    promote(&mut m, t0, 3);
    let nonce = m.term().expect("term").nonce;
    m.handle_stop(t0);
    drain(&mut m);
    m.handle_drained(t0);
    let (op, kind, expected) = write_of(&drain(&mut m)).expect("the delete");
    assert_eq!((kind, expected), (WriteKind::Release, 3));
    m.handle_write(op, WriteOutcome::Conflict, t0);
    let actions = drain(&mut m);
    assert!(!m.is_stopped(), "not given up on a conflict");
    let read = op_of(&actions).expect("a re-read at once");
    assert!(m.poll_timeout().is_none_or(|t| t >= t0));
    // Our renewal of the same term committed late at revision 4.
    let mine = lease_with_nonce("solo", 1, nonce, Some(3));
    m.handle_read(
        read,
        Ok(KeyState::Held {
            revision: 4,
            value: mine,
        }),
        t0,
    );
    let (op, kind, expected) = write_of(&drain(&mut m)).expect("the delete again");
    assert_eq!((kind, expected), (WriteKind::Release, 4));
    m.handle_write(op, WriteOutcome::Ok { revision: 5 }, t0);
    drain(&mut m);
    assert!(m.is_stopped());
}

/// … and a conflict caused by another holder ends the term without deleting anything.
#[test]
fn a_release_conflict_with_another_holder_deletes_nothing() {
    let (mut m, t0) = machine();
    promote(&mut m, t0, 3);
    m.handle_stop(t0);
    drain(&mut m);
    m.handle_drained(t0);
    let (op, _, _) = write_of(&drain(&mut m)).expect("the delete");
    m.handle_write(op, WriteOutcome::Conflict, t0);
    let read = op_of(&drain(&mut m)).expect("a re-read");
    m.handle_read(
        read,
        Ok(KeyState::Held {
            revision: 4,
            value: lease("other", 2, 2, None),
        }),
        t0,
    );
    let actions = drain(&mut m);
    assert!(write_of(&actions).is_none(), "never delete after losing");
    assert!(m.is_stopped());
}

/// P4/P8: a holder whose release conflicts and whose re-read (from the stream leader) finds
/// no key or a lower revision — a recreated bucket — deletes nothing, ends the term at once
/// instead of retrying until its deadline, and asks for an epoch check. (Version 2 does not
/// renew the role key; the session machine finds a recreated bucket on its own renewals and
/// reports the loss as `BucketReset`, which demotes as such.)
#[test]
fn a_holder_that_finds_its_key_gone_below_its_revision_demotes_at_once() {
    for found in [
        KeyState::Absent,
        KeyState::Held {
            revision: 2,
            value: lease("other", 2, 2, None),
        },
    ] {
        let (mut m, t0) = machine();
        promote(&mut m, t0, 30);
        m.handle_stop(t0);
        drain(&mut m);
        m.handle_drained(t0);
        let (op, kind, _) = write_of(&drain(&mut m)).expect("the delete");
        assert_eq!(kind, WriteKind::Release);
        m.handle_write(op, WriteOutcome::Conflict, t0);
        let read = op_of(&drain(&mut m)).expect("a re-read");
        m.handle_read(read, Ok(found.clone()), t0);
        let actions = drain(&mut m);
        assert!(m.is_stopped(), "{found:?}: still releasing");
        assert!(
            write_of(&actions).is_none(),
            "{found:?}: deleted: {actions:?}"
        );
        assert!(
            actions
                .iter()
                .any(|a| matches!(a, Action::Notice(Notice::RevisionRegressed { .. }))),
            "{found:?}: no epoch check asked for"
        );
    }
    let (mut m, t0) = machine();
    promote(&mut m, t0, 30);
    lose(&mut m, SESSION, DemoteReason::BucketReset, t0);
    assert!(drain(&mut m).iter().any(|a| matches!(
        a,
        Action::Demote {
            reason: DemoteReason::BucketReset,
            ..
        }
    )));
}

/// P5: a lease naming this instance that was already in the key when the process first looked
/// is its predecessor's: adopted at once. One written after that is a live duplicate's: it is
/// reported, never adopted.
#[test]
fn only_a_lease_present_at_start_is_adopted() {
    let predecessor = lease("solo", 9, 9, Some(4));
    // Present at start: adopted.
    let (mut m, t0) = machine();
    start_on(
        &mut m,
        t0,
        KeyState::Held {
            revision: 4,
            value: predecessor,
        },
    );
    let (_, kind, expected) = write_of(&drain(&mut m)).expect("adoption");
    assert_eq!((kind, expected), (WriteKind::Acquire, 4));

    // Written after start (another process with our id took the role later): flagged.
    let (mut m, t0) = machine();
    start_on(
        &mut m,
        t0,
        KeyState::Held {
            revision: 2,
            value: lease("other", 2, 2, None),
        },
    );
    drain(&mut m);
    m.handle_observed(
        KeyState::Held {
            revision: 5,
            value: lease("solo", 9, 9, None),
        },
        t0 + Duration::from_millis(10),
    );
    let actions = drain(&mut m);
    assert!(
        write_of(&actions).is_none(),
        "a duplicate's lease was adopted: {actions:?}"
    );
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Notice(Notice::DuplicateInstance { .. }))),
        "{actions:?}"
    );
}

/// P5 with Q4: a predecessor's lease seen before this process's session is up is adopted
/// once the session is up, not reported as a duplicate's.
#[test]
fn adoption_waits_for_the_session() {
    let mut m = RoleMachine::new(
        identity(1),
        Timing::default(),
        RetryPolicy::default(),
        true,
        EPOCH,
        7,
    );
    let t0 = Instant::now();
    start_on(
        &mut m,
        t0,
        KeyState::Held {
            revision: 4,
            value: lease("solo", 9, 9, Some(4)),
        },
    );
    assert!(drain(&mut m).is_empty());
    session_at(&mut m, SESSION, t0 + Duration::from_millis(3));
    let actions = drain(&mut m);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Notice(Notice::DuplicateInstance { .. }))),
        "{actions:?}"
    );
    let (_, kind, expected) = write_of(&actions).expect("adoption");
    assert_eq!((kind, expected), (WriteKind::Acquire, 4));
}

/// P5: a duplicate's lease is reported as soon as it is seen, also before this process's
/// session is live — when the session book declares the value gone before the session is up
/// (its first write is above the value), a candidate step never meets it as held.
#[test]
fn a_duplicate_is_reported_before_the_session_is_live() {
    let mut m = RoleMachine::new(
        identity(1),
        Timing::default(),
        RetryPolicy::default(),
        true,
        EPOCH,
        7,
    );
    let t0 = Instant::now();
    start_on(
        &mut m,
        t0,
        KeyState::Held {
            revision: 2,
            value: lease("other", 2, 2, None),
        },
    );
    drain(&mut m);
    m.handle_observed(
        KeyState::Held {
            revision: 5,
            value: lease("solo", 9, 9, None),
        },
        t0 + Duration::from_millis(10),
    );
    m.handle_holder_gone(5, t0 + Duration::from_millis(11));
    let actions = drain(&mut m);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Notice(Notice::DuplicateInstance { .. }))),
        "{actions:?}"
    );
    assert!(write_of(&actions).is_none(), "{actions:?}");
    // Seen again (a read's answer): not reported twice.
    session_at(&mut m, SESSION, t0 + Duration::from_millis(20));
    let actions = drain(&mut m);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Notice(Notice::DuplicateInstance { .. }))),
        "{actions:?}"
    );
}

/// P6: a role added to a manager that has already seen revision 50 in the bucket (any key)
/// and whose acquire is acknowledged at revision 5 wrote into a recreated bucket the manager
/// has not noticed yet: never promoted with the old epoch; the driver is asked to check it.
#[test]
fn an_acquire_below_the_bucket_s_known_revisions_is_not_promoted() {
    let (mut m, t0) = machine();
    m.seed_high_water(50);
    let acquire = start_and_acquire(&mut m, t0);
    m.handle_write(acquire, WriteOutcome::Ok { revision: 5 }, t0);
    let actions = drain(&mut m);
    assert!(
        m.term().is_none(),
        "promoted below the bucket's high-water mark"
    );
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Notice(Notice::RevisionRegressed { .. }))),
        "{actions:?}"
    );
    // The machine may try again on what it knew (a conflict now: the key moved on).
    if let Some((op, _, _)) = write_of(&actions) {
        m.handle_write(op, WriteOutcome::Conflict, t0);
        assert!(m.term().is_none());
        drain(&mut m);
    }
    // After the reset to the new epoch the role is acquired there once the new bucket is a
    // TTL + heartbeat old (Q6: a holder in the old bucket acts until its deadline; its age
    // unknown here: counted from now), on a session of the new bucket.
    m.handle_bucket_reset(EPOCH + 1, None, t0);
    let actions = drain(&mut m);
    assert!(
        write_of(&actions).is_none(),
        "acquired at once after a bucket reset"
    );
    // The key is learned (a read), but nothing is acquired before the hold ends.
    let read = op_of(&actions).expect("a read of the new bucket's key");
    m.handle_read(read, Ok(KeyState::Absent), t0);
    assert!(write_of(&drain(&mut m)).is_none(), "acquired in the hold");
    let t1 = t0 + Timing::default().ttl + Timing::default().heartbeat;
    session_at(&mut m, Uuid::from_u64_pair(43, 43), t1);
    m.handle_timeout(t1);
    let actions = drain(&mut m);
    let (op, kind, _) = write_of(&actions).expect("an acquire");
    assert_eq!(kind, WriteKind::Acquire);
    m.handle_write(op, WriteOutcome::Ok { revision: 6 }, t1);
    let term = m.term().expect("promoted in the new epoch");
    assert_eq!(term.token.epoch(), EPOCH + 1);
}

/// P2 "Versioning", Q5, Q10: a value nats-roles cannot read is taken over once its revision
/// stayed unchanged for the backstop period, and so is a version 1 lease (a live v1 holder
/// renews its key every heartbeat: issue 24's one foreign put of a v1-shaped value must not
/// block the role for ever); a lease of a newer protocol version and a version 2 lease (whose
/// key does not change while its holder lives) never are by the role machine's backstop: the
/// role waits for the key to be deleted, or (v2) for the session book's verdict.
#[test]
fn a_newer_protocol_lease_is_never_taken_over_by_the_backstop() {
    let long = Duration::from_secs(3600);
    for (value, taken) in [
        (HolderValue::Foreign, true),
        (HolderValue::Newer { version: 3 }, false),
        (
            HolderValue::Older {
                version: 1,
                ttl_ms: 3000,
            },
            true,
        ),
        (lease("other", 2, 2, None), false),
    ] {
        let (mut m, t0) = machine();
        start_on(
            &mut m,
            t0,
            KeyState::Held {
                revision: 7,
                value: value.clone(),
            },
        );
        drain(&mut m);
        let mut now = t0;
        let mut acquired = None;
        while now < t0 + long {
            let Some(at) = m.poll_timeout() else { break };
            now = at.max(now + Duration::from_millis(1));
            session_at(&mut m, SESSION, now);
            m.handle_timeout(now);
            for a in drain(&mut m) {
                match a {
                    Action::Read { op, .. } => m.handle_read(
                        op,
                        Ok(KeyState::Held {
                            revision: 7,
                            value: value.clone(),
                        }),
                        now,
                    ),
                    Action::Write(w) if w.kind == WriteKind::Acquire => acquired = Some(w.expected),
                    _ => {}
                }
            }
            if acquired.is_some() {
                break;
            }
        }
        for a in drain(&mut m) {
            if let Action::Write(w) = a
                && w.kind == WriteKind::Acquire
            {
                acquired = Some(w.expected);
            }
        }
        if taken {
            assert_eq!(acquired, Some(7), "{value:?}: taken over on revision 7");
        } else {
            assert_eq!(acquired, None, "{value:?} was taken over");
        }
    }
}

/// Q6 (issue 24, item 3): no acquire in a bucket younger than the TTL + heartbeat, also for a
/// machine that never saw another bucket (a fresh process), and the hold survives watcher
/// news (an observation used to end any wait).
#[test]
fn no_acquire_in_a_young_bucket() {
    let timing = Timing::default();
    let (mut m, t0) = machine();
    let age = Duration::from_millis(200);
    m.handle_bucket_age(Some(age), t0);
    start_on(&mut m, t0, FREE);
    assert!(
        write_of(&drain(&mut m)).is_none(),
        "acquired in a young bucket"
    );
    let until = t0 + timing.ttl + timing.heartbeat - age;
    assert_eq!(
        m.poll_timeout(),
        Some(until),
        "a timer for the end of the hold"
    );
    // News from the watcher (a marker) does not end the hold.
    let t1 = t0 + Duration::from_secs(1);
    session_at(&mut m, SESSION, t1);
    m.handle_observed(
        KeyState::Vacant {
            revision: 7,
            expired: false,
        },
        t1,
    );
    assert!(write_of(&drain(&mut m)).is_none(), "the hold ended early");
    let t2 = until;
    session_at(&mut m, SESSION, t2);
    m.handle_timeout(t2);
    let (_, kind, expected) = write_of(&drain(&mut m)).expect("an acquire after the hold");
    assert_eq!((kind, expected), (WriteKind::Acquire, 7));
    // An old bucket holds nothing.
    let (mut m, t0) = machine();
    m.handle_bucket_age(Some(Duration::from_secs(3600)), t0);
    start_on(&mut m, t0, FREE);
    assert!(
        write_of(&drain(&mut m)).is_some(),
        "an old bucket held an acquire back"
    );
}

/// Q4 (issue 24, item 8): a role value naming this instance's live session that is not its
/// term — here with another incarnation, as another client writes it — is taken over with a
/// CAS on its revision, and no duplicate is reported.
#[test]
fn a_value_naming_our_session_is_taken_over_not_a_duplicate() {
    let (mut m, t0) = machine();
    let mut forged = lease("solo", 9, 9, None);
    if let HolderValue::Lease(v) = &mut forged {
        v.session = SESSION;
    }
    start_on(
        &mut m,
        t0,
        KeyState::Held {
            revision: 12,
            value: forged.clone(),
        },
    );
    let actions = drain(&mut m);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Notice(Notice::DuplicateInstance { .. }))),
        "{actions:?}"
    );
    let (_, kind, expected) = write_of(&actions).expect("a takeover");
    assert_eq!((kind, expected), (WriteKind::Acquire, 12));
    // The same value naming a session that is not ours (a predecessor's, or a duplicate's
    // written after we started) is not taken over by this rule.
    let (mut m, t0) = machine();
    start_on(
        &mut m,
        t0,
        KeyState::Held {
            revision: 10,
            value: lease("other", 2, 2, None),
        },
    );
    drain(&mut m);
    let mut other = lease("solo", 9, 9, None);
    if let HolderValue::Lease(v) = &mut other {
        v.session = Uuid::from_u64_pair(77, 77);
    }
    m.handle_observed(
        KeyState::Held {
            revision: 13,
            value: other,
        },
        t0,
    );
    let actions = drain(&mut m);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Notice(Notice::DuplicateInstance { .. }))),
        "{actions:?}"
    );
}

/// Q4 (issue 24, item 9): a release whose delete is refused (a permission revoked at run
/// time) or of unknown outcome hands the term over through the session once, after the
/// drain, and the delete is still retried.
#[test]
fn a_refused_release_is_handed_over_through_the_session() {
    for outcome in [
        WriteOutcome::Failed(FailureKind::PermissionDenied),
        WriteOutcome::Unknown,
        WriteOutcome::Failed(FailureKind::Server(ServerCode(10077))),
    ] {
        let (mut m, t0) = machine();
        promote(&mut m, t0, 3);
        m.handle_release(ReleaseReason::Requested, Duration::from_secs(5), t0);
        let actions = drain(&mut m);
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, Action::ReleaseTerm { .. })),
            "handed over before the drain: {actions:?}"
        );
        m.handle_drained(t0);
        let (op, kind, _) = write_of(&drain(&mut m)).expect("the delete");
        assert_eq!(kind, WriteKind::Release);
        m.handle_write(op, outcome, t0);
        let actions = drain(&mut m);
        let handed: Vec<_> = actions
            .iter()
            .filter_map(|a| match a {
                Action::ReleaseTerm { revision, session } => Some((*revision, *session)),
                _ => None,
            })
            .collect();
        assert_eq!(handed, vec![(3, SESSION)], "{outcome:?}: {actions:?}");
        // Retries do not hand it over again.
        let t1 = t0 + Duration::from_secs(11);
        session_at(&mut m, SESSION, t1);
        m.handle_timeout(t1);
        let actions = drain(&mut m);
        if let Some(op) = op_of(&actions) {
            m.handle_read(op, Err(FailureKind::Unavailable), t1);
        }
        assert!(
            !drain(&mut m)
                .iter()
                .any(|a| matches!(a, Action::ReleaseTerm { .. })),
            "{outcome:?}: handed over twice"
        );
    }
}

/// Q4 (issue 24, item 8): a value naming our live session seen while the role cools down (we
/// will not take it over now) is handed over through the session, so that it does not keep the
/// role from everyone for the cooldown.
#[test]
fn a_value_naming_our_session_during_a_cooldown_is_handed_over() {
    let (mut m, t0) = machine();
    promote(&mut m, t0, 3);
    m.handle_release(ReleaseReason::Requested, Duration::from_secs(30), t0);
    drain(&mut m);
    m.handle_drained(t0);
    let (op, _, _) = write_of(&drain(&mut m)).expect("the delete");
    m.handle_write(op, WriteOutcome::Ok { revision: 4 }, t0);
    drain(&mut m);
    assert!(m.cooldown_until().is_some(), "cooling down");
    let mut forged = lease("solo", 9, 9, None);
    if let HolderValue::Lease(v) = &mut forged {
        v.session = SESSION;
    }
    m.handle_observed(
        KeyState::Held {
            revision: 8,
            value: forged,
        },
        t0,
    );
    let actions = drain(&mut m);
    assert!(
        actions.contains(&Action::ReleaseTerm {
            revision: 8,
            session: SESSION
        }),
        "{actions:?}"
    );
    assert!(write_of(&actions).is_none(), "acquired during the cooldown");
}

/// Q12: a term whose release is draining (demoted already) and that is lost before its delete
/// went through reports the loss (its draining work must stop at once); a release that ends
/// with its own delete reports none.
#[test]
fn a_loss_during_a_release_is_reported_once() {
    let (mut m, t0) = machine();
    promote(&mut m, t0, 3);
    m.handle_stop(t0);
    drain(&mut m);
    lose(&mut m, SESSION, DemoteReason::Evicted, t0);
    let actions = drain(&mut m);
    let lost: Vec<_> = actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::LostDuringRelease {
                    reason: DemoteReason::Evicted,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(lost.len(), 1, "{actions:?}");
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Demote { .. })),
        "demoted twice: {actions:?}"
    );
    // A release ending with its own delete: no loss.
    let (mut m, t0) = machine();
    promote(&mut m, t0, 3);
    m.handle_stop(t0);
    drain(&mut m);
    m.handle_drained(t0);
    let (op, _, _) = write_of(&drain(&mut m)).expect("the delete");
    m.handle_write(op, WriteOutcome::Ok { revision: 4 }, t0);
    assert!(
        !drain(&mut m)
            .iter()
            .any(|a| matches!(a, Action::LostDuringRelease { .. })),
        "our own delete taken for a loss"
    );
    assert!(m.is_stopped());
}

/// Q5 rule 1, Q6 (a stream purge): a role key with no entry at all — never written, or every
/// entry of the stream removed without a marker — is acquired only once it was absent for a
/// TTL + heartbeat (a holder may still act on a term it won there); a marker is acquired at
/// once.
#[test]
fn an_absent_key_is_acquired_only_after_a_ttl() {
    let timing = Timing::default();
    let (mut m, t0) = machine();
    start_on(&mut m, t0, KeyState::Absent);
    assert!(
        write_of(&drain(&mut m)).is_none(),
        "acquired an absent key at once"
    );
    let until = t0 + timing.ttl + timing.heartbeat;
    assert!(
        m.poll_timeout().is_some_and(|t| t >= until),
        "{:?}",
        m.poll_timeout()
    );
    let t1 = until + Duration::from_millis(5);
    session_at(&mut m, SESSION, t1);
    m.handle_timeout(t1);
    let (_, kind, expected) = write_of(&drain(&mut m)).expect("an acquire after the hold");
    assert_eq!((kind, expected), (WriteKind::Acquire, 0));
    // A marker: at once.
    let (mut m, t0) = machine();
    start_on(&mut m, t0, FREE);
    assert!(
        write_of(&drain(&mut m)).is_some(),
        "a marker is a vacancy at once"
    );
}

/// Q4, one deadline per session: renewals handed over late from the session's clock move the
/// held term's deadline to the last one applied to it in time, even when the machine's own
/// (stale) deadline passed meanwhile; without such a renewal the stale deadline ends the term.
#[test]
fn renewals_handed_over_late_extend_the_term_the_clock_kept_alive() {
    let (mut m, t0) = machine();
    promote(&mut m, t0, 2);
    drain(&mut m);
    let lease = Timing::default().local_lease();
    let first = m.term().expect("a term").deadline;
    // The clock applied renewals in time up to one sent at t0 + 2 × lease; the role task wakes
    // at t0 + 2.5 × lease, well after the machine's own deadline.
    let sent = t0 + lease * 2;
    let now = t0 + lease * 5 / 2;
    assert!(now > first, "the machine's own deadline has passed");
    m.handle_session_renewed(SESSION, sent, Some(sent), now);
    let actions = drain(&mut m);
    assert!(
        actions.iter().any(|a| matches!(a, Action::Renewed { .. })),
        "{actions:?}"
    );
    assert!(!actions.iter().any(|a| matches!(a, Action::Demote { .. })));
    assert_eq!(m.term().expect("still held").deadline, sent + lease);
    // No renewal applied in time to the term (the chain stopped: `None`): the stale deadline
    // ends it, whatever the session's latest write.
    let later = sent + lease + Duration::from_millis(1);
    m.handle_session_renewed(SESSION, later, Some(sent), later);
    let actions = drain(&mut m);
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::Demote {
                reason: DemoteReason::DeadlineExpired,
                ..
            }
        )),
        "{actions:?}"
    );
}

/// A renewal of another session never moves the term's deadline.
#[test]
fn a_renewal_of_another_session_moves_nothing() {
    let (mut m, t0) = machine();
    promote(&mut m, t0, 2);
    drain(&mut m);
    let first = m.term().expect("a term").deadline;
    let other = Uuid::from_u64_pair(7, 7);
    let at = t0 + Duration::from_millis(500);
    m.handle_session_renewed(other, at, Some(at), at);
    assert_eq!(m.term().expect("still held").deadline, first);
    // And the held term's deadline is not a timer while its session ends it.
    assert_eq!(m.poll_timeout_with(true), None);
    assert_eq!(m.poll_timeout_with(false), Some(first));
}

/// A placement hold-back counts from when the role could first be taken: for an absent key
/// (a new bucket) after its TTL + heartbeat wait, not from when the key was read. Before issue
/// 27 the hold-back passed during that wait, every candidate claimed at its end, and the first
/// instance to start took nearly every role of a new bucket.
#[test]
fn a_hold_back_counts_from_when_an_absent_key_can_be_taken() {
    let timing = Timing::default();
    let (mut m, t0) = machine();
    m.handle_campaign_delay(Duration::from_millis(500), t0);
    start_on(&mut m, t0, KeyState::Absent);
    drain(&mut m);
    let open = t0 + timing.ttl + timing.heartbeat;
    let t1 = open + Duration::from_millis(5);
    session_at(&mut m, SESSION, t1);
    m.handle_timeout(t1);
    assert!(
        write_of(&drain(&mut m)).is_none(),
        "claimed at the end of the absent wait although another member is preferred"
    );
    assert!(
        m.poll_timeout()
            .is_some_and(|t| t >= open + Duration::from_millis(500)),
        "{:?}",
        m.poll_timeout()
    );
    let t2 = open + Duration::from_millis(510);
    session_at(&mut m, SESSION, t2);
    m.handle_timeout(t2);
    let (_, kind, _) = write_of(&drain(&mut m)).expect("an acquire after the hold-back");
    assert_eq!(kind, WriteKind::Acquire);
}
