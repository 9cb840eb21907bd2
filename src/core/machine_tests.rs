//! Unit tests of single machines for the failure, release and adoption rules (P3, P4, P5,
//! P8): each drives one [`RoleMachine`] by hand through one situation.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::{
    Action, DemoteReason, FailureKind, Identity, KeyState, Notice, ReleaseReason, RetryPolicy,
    RoleMachine, ServerCode, Timing, WriteKind, WriteOutcome,
};
use crate::names::InstanceId;
use crate::value::{HolderValue, LeaseValue};

const EPOCH: u64 = 1;
const PERSISTENT_RETRY: Duration = Duration::from_secs(10);

fn identity(incarnation: u64) -> Identity {
    Identity {
        instance: InstanceId::new("solo").expect("valid instance id"),
        incarnation: Uuid::from_u64_pair(incarnation, incarnation),
        priority: 0,
        meta: std::collections::BTreeMap::new(),
    }
}

fn machine_with(retry: RetryPolicy) -> (RoleMachine, Instant) {
    let m = RoleMachine::new(identity(1), Timing::default(), retry, true, EPOCH, 7);
    (m, Instant::now())
}

fn machine() -> (RoleMachine, Instant) {
    machine_with(RetryPolicy::default())
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
    start_on(m, t0, KeyState::Absent);
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
        m.handle_timeout(t);
        let (op, kind_sent, expected) = write_of(&drain(&mut m)).expect("the retry");
        assert_eq!((kind_sent, expected), (WriteKind::Acquire, 3));
        m.handle_write(op, WriteOutcome::Ok { revision: 4 }, t);
        assert!(drain(&mut m).contains(&Action::Recovered));
        assert!(m.term().is_some(), "{kind:?}: acquired after the fix");
    }
}

/// A holder whose renewal is refused for good demotes at once (it cannot keep its term), and
/// campaigns again at the slow cadence.
#[test]
fn a_holder_refused_for_good_demotes_and_comes_back() {
    let (mut m, t0) = machine();
    promote(&mut m, t0, 3);
    let renew_at = m.poll_timeout().expect("renew timer");
    m.handle_timeout(renew_at);
    let (op, kind, _) = write_of(&drain(&mut m)).expect("a renewal");
    assert_eq!(kind, WriteKind::Renew);
    m.handle_write(
        op,
        WriteOutcome::Failed(FailureKind::PermissionDenied),
        renew_at,
    );
    let actions = drain(&mut m);
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::Demote {
            reason: DemoteReason::Failed(FailureKind::PermissionDenied),
            ..
        }
    )));
    assert!(!m.is_stopped());
    assert!(m.poll_timeout().is_some(), "retries later");
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

/// P8: a release that gets a conflict re-reads before declaring the term lost: our own late
/// renewal is found and deleted at its revision, so a graceful stop still hands over at once.
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

/// P4: a holder whose renewal conflicts and whose re-read (from the stream leader) finds no
/// key or a lower revision — a recreated bucket — demotes at once instead of retrying until
/// its deadline, and asks for an epoch check.
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
        let at = m.poll_timeout().expect("renew timer");
        m.handle_timeout(at);
        let (op, _, _) = write_of(&drain(&mut m)).expect("a renewal");
        m.handle_write(op, WriteOutcome::Conflict, at);
        let read = op_of(&drain(&mut m)).expect("a re-read");
        m.handle_read(read, Ok(found.clone()), at);
        let actions = drain(&mut m);
        assert!(m.term().is_none(), "{found:?}: still leading");
        assert!(
            actions.iter().any(|a| matches!(
                a,
                Action::Demote {
                    reason: DemoteReason::BucketReset,
                    ..
                }
            )),
            "{found:?}: {actions:?}"
        );
        assert!(
            actions
                .iter()
                .any(|a| matches!(a, Action::Notice(Notice::RevisionRegressed { .. }))),
            "{found:?}: no epoch check asked for"
        );
    }
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
    // After the reset to the new epoch the role is acquired there.
    m.handle_bucket_reset(EPOCH + 1, t0);
    let read = op_of(&drain(&mut m)).expect("a read in the new bucket");
    m.handle_read(read, Ok(KeyState::Absent), t0);
    let (op, kind, _) = write_of(&drain(&mut m)).expect("an acquire");
    assert_eq!(kind, WriteKind::Acquire);
    m.handle_write(op, WriteOutcome::Ok { revision: 6 }, t0);
    let term = m.term().expect("promoted in the new epoch");
    assert_eq!(term.token.epoch(), EPOCH + 1);
}

/// P2 "Versioning": a value nats-roles cannot read is taken over once its revision stayed
/// unchanged for the backstop period, but a lease of a newer protocol version (a version 2
/// session lease does not change while its holder lives) never is: the role waits for the key
/// to be deleted or to expire.
#[test]
fn a_newer_protocol_lease_is_never_taken_over_by_the_backstop() {
    let long = Duration::from_secs(3600);
    for (value, taken) in [
        (HolderValue::Foreign, true),
        (HolderValue::Newer { version: 2 }, false),
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
