//! When a vacancy may be claimed: herd and placement hold-backs, a young bucket, an absent
//! key, a lease of a newer protocol (never), and acquires acknowledged below the bucket's
//! known revisions (P6, Q6, Q7, Q10).

use super::*;

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

/// Placement's target for a vacancy (everybody else holds back for the claim grace) claims at
/// once whatever its herd rank; without that the herd delay applies as before.
#[test]
fn placement_s_target_claims_without_the_herd_delay() {
    for first in [true, false] {
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
        m.handle_herd_delay(Duration::from_millis(30));
        m.handle_campaign_first(first);
        m.handle_campaign_delay(Duration::ZERO, t0);
        m.handle_observed(
            KeyState::Vacant {
                revision: 5,
                expired: true,
            },
            t0 + Duration::from_millis(100),
        );
        let claimed = write_of(&drain(&mut m)).is_some();
        assert_eq!(claimed, first, "first: {first}");
    }
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
    m.handle_bucket_reset(EPOCH + 1, None, Duration::ZERO, t0);
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
    m.handle_bucket_age(Some(age), Duration::ZERO, t0);
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
    m.handle_bucket_age(Some(Duration::from_secs(3600)), Duration::ZERO, t0);
    start_on(&mut m, t0, FREE);
    assert!(
        write_of(&drain(&mut m)).is_some(),
        "an old bucket held an acquire back"
    );
}

/// Q6 with mixed TTLs: after a reset the hold lasts the longest session TTL known in the old
/// bucket (a holder there acts until its own deadline), and a second reset soon after — when
/// that session is no longer known — does not shorten the hold already running.
#[test]
fn a_reset_holds_for_the_old_holders_ttl_and_a_second_reset_does_not_shorten_it() {
    let timing = Timing::default();
    let long = timing.ttl * 4;
    let (mut m, t0) = machine();
    m.handle_bucket_reset(EPOCH + 1, Some(Duration::ZERO), long, t0);
    let first = t0 + long + timing.heartbeat;
    let t1 = t0 + Duration::from_millis(500);
    m.handle_bucket_reset(EPOCH + 2, Some(Duration::ZERO), Duration::ZERO, t1);
    session_at(&mut m, SESSION, t1);
    start_on(&mut m, t1, FREE);
    assert!(
        write_of(&drain(&mut m)).is_none(),
        "acquired in a young bucket"
    );
    assert_eq!(
        m.poll_timeout(),
        Some(first),
        "the hold ends with the first reset's (the old holder's TTL), not the second's"
    );
    // After the second reset's own hold, still nothing.
    let t2 = t1 + timing.ttl + timing.heartbeat + Duration::from_millis(1);
    session_at(&mut m, SESSION, t2);
    m.handle_timeout(t2);
    assert!(
        write_of(&drain(&mut m)).is_none(),
        "acquired before the first reset's hold ended"
    );
    session_at(&mut m, SESSION, first);
    m.handle_timeout(first);
    let (_, kind, _) = write_of(&drain(&mut m)).expect("an acquire after the hold");
    assert_eq!(kind, WriteKind::Acquire);
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

/// A placement hold-back counts from when the role could first be taken: for an absent key
/// (a new bucket) after its TTL + heartbeat wait, not from when the key was read; and at such
/// a key it adds that wait once more (issue 28). Before issue
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
    // Issue 28: at a key with no entry the absent wait counts once more (the preferred member's
    // own wait may have started later), then the grace.
    let t2 = open + Duration::from_millis(510);
    session_at(&mut m, SESSION, t2);
    m.handle_timeout(t2);
    assert!(
        write_of(&drain(&mut m)).is_none(),
        "claimed before the preferred member's own absent wait could end"
    );
    let t3 = open + timing.ttl + timing.heartbeat + Duration::from_millis(510);
    session_at(&mut m, SESSION, t3);
    m.handle_timeout(t3);
    let (_, kind, _) = write_of(&drain(&mut m)).expect("an acquire after the hold-back");
    assert_eq!(kind, WriteKind::Acquire);
}
