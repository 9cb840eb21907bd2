//! P8, Q5 rule 5: releases — during an acquire, of an unknown acquire, on conflicts, refused
//! ones handed over through the session, a loss while a release drains — and a key found gone
//! below the term's revision.

use super::*;

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
