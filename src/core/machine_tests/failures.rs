//! P3: failures of the server's answers — retried with backoff, reported once, retried
//! slowly when persistent or when the fast retries are used up; never a state only a restart
//! leaves.

use super::*;

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
