//! Q4, Q5: a term rests on its session — lost, evicted or ended sessions end it, renewals
//! move its deadline (also when handed over late), no acquire without a live session, and a
//! holder whose session is gone is taken over by CAS.

use super::*;

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
    let mut m = machine_without_session();
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
    // The clock applied renewals in time up to one sent at t0 + 2 × lease; the role runner wakes
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
