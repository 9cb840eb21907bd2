//! The slot permit (Q15, S7): a machine without it sends no acquire; it claims the permit
//! while it holds a term, has an acquire in flight or one of unknown outcome.

use super::*;

/// Without the permit a candidate at a vacancy follows and reads but sends no acquire and
/// arms no timer that would spin; given back, the next step claims the vacancy.
#[test]
fn without_the_permit_a_candidate_sends_no_acquire() {
    let (mut m, t0) = machine();
    m.set_acquire_permit(false);
    start_on(&mut m, t0, FREE);
    assert!(
        write_of(&drain(&mut m)).is_none(),
        "acquired without the permit"
    );
    assert!(!m.claims_permit());
    assert!(!m.has_pending());
    // Time passes, the timers (the jitter) fire: still nothing, then no timer at all.
    let later = t0 + Duration::from_millis(500);
    m.handle_timeout(later);
    assert!(write_of(&drain(&mut m)).is_none());
    assert_eq!(m.poll_timeout(), None, "a timer without anything to do");
    // A new vacancy observed: still nothing.
    m.handle_observed(
        KeyState::Vacant {
            revision: 7,
            expired: true,
        },
        later,
    );
    assert!(write_of(&drain(&mut m)).is_none());
    // The permit given back: the driver's wake-up claims it (after the jitter's timer).
    m.set_acquire_permit(true);
    m.handle_timeout(later);
    if let Some(t) = m.poll_timeout() {
        m.handle_timeout(t);
    }
    let (_, kind, expected) = write_of(&drain(&mut m)).expect("the acquire with the permit");
    assert_eq!((kind, expected), (WriteKind::Acquire, 7));
    assert!(m.claims_permit(), "an acquire in flight claims the permit");
}

/// The claim lasts from the acquire's send through the term and its release, and ends when
/// the machine is back to a candidate with nothing in flight.
#[test]
fn the_permit_is_claimed_from_the_acquire_to_the_end_of_the_term() {
    let (mut m, t0) = machine();
    assert!(!m.claims_permit());
    let acquire = start_and_acquire(&mut m, t0);
    assert!(m.claims_permit(), "acquire in flight");
    m.handle_write(acquire, WriteOutcome::Ok { revision: 2 }, t0);
    assert!(m.term().is_some());
    assert!(m.claims_permit(), "leader");
    drain(&mut m);
    m.handle_release(ReleaseReason::Requested, Duration::from_secs(1), t0);
    assert!(m.claims_permit(), "releasing (draining)");
    drain(&mut m);
    m.handle_drained(t0);
    let (del, kind, _) = write_of(&drain(&mut m)).expect("the release's delete");
    assert_eq!(kind, WriteKind::Release);
    assert!(m.claims_permit(), "the delete in flight: still leading");
    m.handle_write(del, WriteOutcome::Ok { revision: 3 }, t0);
    drain(&mut m);
    assert!(!m.claims_permit(), "released: the permit is free");
}

/// A lost acquire (conflict) frees the permit; one of unknown outcome keeps it until the key
/// shows it lost (another writer's value).
#[test]
fn an_acquire_of_unknown_outcome_claims_the_permit_until_resolved() {
    let (mut m, t0) = machine();
    let acquire = start_and_acquire(&mut m, t0);
    m.handle_write(acquire, WriteOutcome::Conflict, t0);
    assert!(!m.claims_permit(), "a lost acquire claims nothing");

    let (mut m, t0) = machine();
    let acquire = start_and_acquire(&mut m, t0);
    m.handle_write(acquire, WriteOutcome::Unknown, t0);
    drain(&mut m);
    assert!(!m.has_pending());
    assert!(m.claims_permit(), "unknown outcome: it may have won");
    // The key becomes vacant again: still unresolved (our put may have come and gone, or
    // may still come).
    m.handle_observed(
        KeyState::Vacant {
            revision: 5,
            expired: true,
        },
        t0,
    );
    assert!(m.claims_permit());
    drain(&mut m);
    // Another instance's value: ours lost (or was replaced unacted on).
    let mut m2 = {
        let (mut m, t0) = machine();
        let acquire = start_and_acquire(&mut m, t0);
        m.handle_write(acquire, WriteOutcome::Unknown, t0);
        drain(&mut m);
        m.handle_observed(
            KeyState::Held {
                revision: 9,
                value: lease("other", 2, 2, None),
            },
            t0,
        );
        m
    };
    drain(&mut m2);
    assert!(!m2.claims_permit(), "another writer's value resolves it");
    // Resolved for good: that writer's term ending (its session gone, a vacancy) does not
    // make ours claim again — found by the simulation's slots (S7): the slot took the permit
    // from a leading sibling and acquired a second slot.
    m2.handle_holder_gone(9, t0);
    drain(&mut m2);
    assert!(
        !m2.claims_permit(),
        "resolved: the holder's end does not unresolve it"
    );
    m2.handle_observed(
        KeyState::Vacant {
            revision: 10,
            expired: true,
        },
        t0,
    );
    drain(&mut m2);
    assert!(
        !m2.claims_permit(),
        "resolved: a later vacancy does not unresolve it"
    );
}

/// Another writer's value delivered while the acquire is in flight resolves its unknown
/// outcome too, for good (found by the simulation's slots, S7).
#[test]
fn a_value_seen_before_the_unknown_outcome_resolves_it() {
    let (mut m, t0) = machine();
    let acquire = start_and_acquire(&mut m, t0);
    m.handle_observed(
        KeyState::Held {
            revision: 9,
            value: lease("other", 2, 2, None),
        },
        t0,
    );
    m.handle_write(acquire, WriteOutcome::Unknown, t0);
    drain(&mut m);
    assert!(!m.claims_permit());
    m.handle_holder_gone(9, t0);
    drain(&mut m);
    assert!(!m.claims_permit(), "the holder's end does not unresolve it");
}

/// The driver never takes the permit from a claimant, but if it did, the term would go on:
/// the permit only gates acquires (the negative control `slot-no-permit` shows what S7
/// guards against). An observer never claims.
#[test]
fn the_permit_gates_only_acquires() {
    let (mut m, t0) = machine();
    promote(&mut m, t0, 2);
    m.set_acquire_permit(false);
    assert!(m.term().is_some());
    assert!(m.claims_permit());
    let mut observer = RoleMachine::new(
        identity(1),
        Timing::default(),
        RetryPolicy::default(),
        false,
        EPOCH,
        7,
    );
    observer.start(t0);
    assert!(!observer.claims_permit());
}

/// A value naming this instance's live session on a slot without the permit (nobody acts on
/// it) is handed over through the session, not taken over.
#[test]
fn a_value_naming_our_session_without_the_permit_is_handed_over() {
    let (mut m, t0) = machine();
    m.set_acquire_permit(false);
    let mut value = lease("solo", 9, 9, None);
    if let HolderValue::Lease(v) = &mut value {
        v.session = SESSION;
    }
    start_on(&mut m, t0, KeyState::Held { revision: 4, value });
    let actions = drain(&mut m);
    assert!(
        write_of(&actions).is_none(),
        "taken over without the permit"
    );
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::ReleaseTerm {
                revision: 4,
                session: SESSION
            }
        )),
        "{actions:?}"
    );
}

/// A placement hold-back (another instance preferred) marks the machine held back; a targeted
/// move's hold-back replaces it (zero for the move's target).
#[test]
fn a_hold_back_is_reported_for_the_driver_s_choice_of_slot() {
    let (mut m, t0) = machine();
    assert!(!m.held_back());
    m.handle_campaign_delay(Duration::from_secs(1), t0);
    assert!(m.held_back());
    m.handle_move_delay(Some(Duration::ZERO));
    assert!(!m.held_back(), "the move's target");
    m.handle_move_delay(None);
    assert!(m.held_back());
}
