//! P5: restart adoption and duplicates — only a lease present at start is adopted (once the
//! session is up), one written later is a duplicate's (reported at once), and a value naming
//! our own session is taken over.

use super::*;

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
    let mut m = machine_without_session();
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
    let mut m = machine_without_session();
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
