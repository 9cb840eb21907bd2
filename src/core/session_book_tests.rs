//! Unit tests of [`SessionBook`] (protocol Q5) and [`Herd`] (Q7).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::session::SessionKeyState;
use super::session_book::{Herd, Reap, SessionBook, Verdict};
use super::types::WriteOutcome;
use crate::names::{InstanceId, RoleName};
use crate::value::SessionValue;

const KEY: &str = "session.a.3000";
const TTL: Duration = Duration::from_secs(3);
const HEARTBEAT: Duration = Duration::from_millis(750);

fn a() -> InstanceId {
    InstanceId::new("a").expect("valid instance id")
}

fn role() -> RoleName {
    RoleName::new("r").expect("valid role name")
}

fn uuid(n: u64) -> Uuid {
    Uuid::from_u64_pair(n, n)
}

fn session(revision: u64, u: Uuid) -> SessionKeyState {
    SessionKeyState::Value {
        revision,
        value: Some(SessionValue {
            v: crate::value::VALUE_VERSION,
            instance: a(),
            incarnation: uuid(1),
            session: u,
            ttl_ms: 3_000,
            heartbeat_ms: 750,
            released: Vec::new(),
        }),
    }
}

/// [`session`] listing the term at `revision` of [`role`] as released (rule 5).
fn releasing(revision: u64, u: Uuid, released: u64) -> SessionKeyState {
    let mut s = session(revision, u);
    if let SessionKeyState::Value { value: Some(v), .. } = &mut s {
        v.released.push(crate::value::ReleasedTerm {
            role: role(),
            revision: released,
        });
    }
    s
}

fn reap(expected: u64) -> Reap {
    Reap {
        key: KEY.to_string(),
        expected,
    }
}

const PERIOD: Duration = Duration::from_millis(3_000 + 750 + 500);

fn marker(revision: u64) -> SessionKeyState {
    SessionKeyState::Marker {
        revision,
        expired: true,
    }
}

fn book() -> (SessionBook, Instant) {
    (SessionBook::new(TTL, HEARTBEAT), Instant::now())
}

/// `role()` at `revision` names session `u` of instance `a`.
fn holder(b: &mut SessionBook, u: Uuid, revision: u64, now: Instant) -> Verdict {
    b.role(&role(), Some((KEY, u, a())), revision, now)
}

/// Rule 2: a marker or another uuid above `s_u` (the revision `u` was first seen at) makes the
/// session gone, for the role values resting on it.
#[test]
fn a_marker_or_another_uuid_above_the_first_sighting_is_gone() {
    for next in [marker(20), session(20, uuid(3))] {
        let (mut b, t0) = book();
        assert!(b.observe(KEY, session(10, uuid(2)), t0).is_empty());
        assert_eq!(holder(&mut b, uuid(2), 12, t0), Verdict::Live);
        assert!(
            b.observe(KEY, session(15, uuid(2)), t0).is_empty(),
            "a renewal"
        );
        assert_eq!(
            b.observe(KEY, next.clone(), t0),
            vec![(role(), 12)],
            "{next:?}"
        );
        // Reported once.
        assert!(b.observe(KEY, marker(30), t0).is_empty());
    }
}

/// Plain absence never makes a session gone (a lagging replica shows it too), and entries not
/// newer than what is known are ignored.
#[test]
fn absence_and_old_entries_are_never_gone() {
    let (mut b, t0) = book();
    b.observe(KEY, session(10, uuid(2)), t0);
    assert_eq!(holder(&mut b, uuid(2), 12, t0), Verdict::Live);
    assert!(b.observe(KEY, SessionKeyState::Absent, t0).is_empty());
    assert!(b.observe(KEY, marker(9), t0).is_empty());
    assert!(
        b.leader_read(KEY, SessionKeyState::Absent, t0).is_empty(),
        "a read of absence is no vacancy by itself"
    );
    assert_eq!(holder(&mut b, uuid(2), 12, t0), Verdict::Live);
}

/// A role value whose uuid was never seen: only entries above the role value's revision count
/// (the holder wrote its session before the role value).
#[test]
fn an_unseen_uuid_counts_only_entries_above_the_role_revision() {
    let (mut b, t0) = book();
    b.observe(KEY, session(10, uuid(3)), t0);
    assert_eq!(holder(&mut b, uuid(2), 12, t0), Verdict::Unknown);
    assert!(
        b.observe(KEY, marker(11), t0).is_empty(),
        "below the role revision"
    );
    assert_eq!(holder(&mut b, uuid(2), 12, t0), Verdict::Unknown);
    assert_eq!(b.observe(KEY, marker(13), t0), vec![(role(), 12)]);
}

/// Rule 4: a session some role rests on that stayed at one revision is reaped (a CAS on that
/// revision) only after the backstop period, at most once per period; the reap's marker makes
/// the roles resting on it gone (rule 2).
#[test]
fn the_backstop_reaps_once_per_period() {
    let (mut b, t0) = book();
    b.observe(KEY, session(10, uuid(2)), t0);
    holder(&mut b, uuid(2), 12, t0);
    assert!(
        b.due_reaps(t0 + PERIOD - Duration::from_millis(1))
            .is_empty()
    );
    let t1 = t0 + PERIOD;
    assert_eq!(b.due_reaps(t1), vec![reap(10)]);
    assert!(
        b.due_reaps(t1 + Duration::from_millis(300)).is_empty(),
        "twice at once"
    );
    let done = b.reap_done(&reap(10), WriteOutcome::Ok { revision: 20 }, t1);
    assert_eq!(done.gone, vec![(role(), 12)]);
    assert!(!done.read);
    assert!(
        b.due_reaps(t1 + PERIOD * 3).is_empty(),
        "nothing left to reap"
    );
}

/// Rule 4: a refused reap (the key moved) asks for a leader read; a newer entry is learned
/// and the period starts again from it; the next reap waits a period.
#[test]
fn a_refused_reap_learns_the_key_and_waits_a_period() {
    let (mut b, t0) = book();
    b.observe(KEY, session(10, uuid(2)), t0);
    holder(&mut b, uuid(2), 12, t0);
    let t1 = t0 + PERIOD;
    assert_eq!(b.due_reaps(t1), vec![reap(10)]);
    let done = b.reap_done(&reap(10), WriteOutcome::Conflict, t1);
    assert!(done.read && done.gone.is_empty());
    assert!(b.leader_read(KEY, session(14, uuid(2)), t1).is_empty());
    assert_eq!(holder(&mut b, uuid(2), 12, t1), Verdict::Live);
    assert!(
        b.due_reaps(t1 + PERIOD - Duration::from_millis(1))
            .is_empty()
    );
    assert_eq!(b.due_reaps(t1 + PERIOD), vec![reap(14)]);
    // An unknown outcome: nothing learned, the next attempt a period later.
    let t2 = t1 + PERIOD;
    let done = b.reap_done(&reap(14), WriteOutcome::Unknown, t2);
    assert!(!done.read && done.gone.is_empty());
    assert!(b.due_reaps(t2 + Duration::from_millis(500)).is_empty());
    assert_eq!(b.due_reaps(t2 + PERIOD), vec![reap(14)]);
}

/// Item 6 (issue 24): a follower that missed the expiry marker (it aged out while the follower
/// was paused) still believes the session; the reap on its revision is refused, the leader
/// read shows no entry at all, and the next reap — on 0, at once — settles it.
#[test]
fn a_session_whose_marker_aged_out_is_reaped_on_absence() {
    let (mut b, t0) = book();
    b.observe(KEY, session(10, uuid(2)), t0);
    holder(&mut b, uuid(2), 12, t0);
    let t1 = t0 + PERIOD * 20;
    assert_eq!(b.due_reaps(t1), vec![reap(10)]);
    assert!(b.reap_done(&reap(10), WriteOutcome::Conflict, t1).read);
    assert!(b.leader_read(KEY, SessionKeyState::Absent, t1).is_empty());
    assert_eq!(
        holder(&mut b, uuid(2), 12, t1),
        Verdict::Live,
        "absence alone"
    );
    assert_eq!(b.due_reaps(t1), vec![reap(0)], "a reap on 0 at once");
    let done = b.reap_done(&reap(0), WriteOutcome::Ok { revision: 40 }, t1);
    assert_eq!(done.gone, vec![(role(), 12)]);
}

/// Item 10 (issue 24): a session marker below the role value's revision (an acquire that
/// committed after its session expired, seen by a candidate that never saw the session's
/// uuid): not gone by rule 2, but reaped after the period — and the reap's marker is above the
/// role value.
#[test]
fn a_marker_below_the_role_value_is_reaped_after_the_period() {
    let (mut b, t0) = book();
    b.observe(KEY, marker(2), t0);
    assert_eq!(holder(&mut b, uuid(2), 3, t0), Verdict::Unknown);
    assert!(
        b.due_reaps(t0 + PERIOD - Duration::from_millis(1))
            .is_empty()
    );
    assert_eq!(b.due_reaps(t0 + PERIOD), vec![reap(2)]);
    let done = b.reap_done(&reap(2), WriteOutcome::Ok { revision: 9 }, t0 + PERIOD);
    assert_eq!(done.gone, vec![(role(), 3)]);
}

/// Rule 4 never counts from before the role value was seen: a key known unchanged for long
/// makes a new role value naming it wait a whole period.
#[test]
fn the_period_counts_from_the_role_value() {
    let (mut b, t0) = book();
    b.observe(KEY, marker(2), t0);
    let t1 = t0 + PERIOD * 10;
    assert_eq!(holder(&mut b, uuid(2), 30, t1), Verdict::Unknown);
    assert!(
        b.due_reaps(t1 + PERIOD - Duration::from_millis(1))
            .is_empty()
    );
    assert_eq!(b.due_reaps(t1 + PERIOD), vec![reap(2)]);
}

/// A key never seen at all (no entry delivered, e.g. a foreign value without a TTL that was
/// never renewed, or a lost watcher event) is reaped on 0 after the period; a refusal learns it.
#[test]
fn an_unseen_key_is_reaped_on_zero() {
    let (mut b, t0) = book();
    assert_eq!(holder(&mut b, uuid(2), 12, t0), Verdict::Unknown);
    assert_eq!(b.due_reaps(t0 + PERIOD), vec![reap(0)]);
    let done = b.reap_done(&reap(0), WriteOutcome::Conflict, t0 + PERIOD);
    assert!(done.read);
    assert!(
        b.leader_read(KEY, session(10, uuid(2)), t0 + PERIOD)
            .is_empty()
    );
    assert_eq!(holder(&mut b, uuid(2), 12, t0 + PERIOD), Verdict::Live);
}

/// Rule 5: the session's current value (the same uuid) lists the term as released: gone at
/// once; another term of the same session stays live.
#[test]
fn a_released_term_is_gone_at_once() {
    let (mut b, t0) = book();
    b.observe(KEY, session(10, uuid(2)), t0);
    assert_eq!(holder(&mut b, uuid(2), 12, t0), Verdict::Live);
    assert_eq!(
        b.observe(KEY, releasing(14, uuid(2), 11), t0),
        Vec::new(),
        "another revision of the role"
    );
    assert_eq!(
        b.observe(KEY, releasing(15, uuid(2), 12), t0),
        vec![(role(), 12)]
    );
    // A role value seen after the session released it is gone when seen.
    let (mut b, t0) = book();
    b.observe(KEY, releasing(15, uuid(2), 12), t0);
    assert_eq!(holder(&mut b, uuid(2), 12, t0), Verdict::Gone);
    // Another session's list says nothing about `u`'s terms.
    let (mut b, t0) = book();
    b.observe(KEY, releasing(15, uuid(3), 12), t0);
    assert_eq!(holder(&mut b, uuid(2), 16, t0), Verdict::Unknown);
}

/// Many roles on one key, resting on two uuids of it (a value of the old session seen late):
/// a renewal of the current uuid makes none gone; a release list makes exactly the listed
/// terms gone (sorted by role, once each, even when listed twice); a role whose value moves
/// to another uuid rests on that one only; a newer uuid makes every role on the old one gone.
#[test]
fn roles_on_two_uuids_of_one_key_are_judged_by_the_uuid_they_name() {
    let (mut b, t0) = book();
    let r = |i: usize| RoleName::new(format!("r{i:02}")).expect("valid role name");
    b.observe(KEY, session(10, uuid(2)), t0);
    for i in 0..20 {
        assert_eq!(
            b.role(&r(i), Some((KEY, uuid(2), a())), 11 + i as u64, t0),
            Verdict::Live
        );
    }
    assert!(
        b.observe(KEY, session(40, uuid(2)), t0).is_empty(),
        "a renewal"
    );
    // The release list of the current uuid names r03 and r07 (r07 twice) and a term of r09
    // that is not the one held: only r03 and r07 are gone.
    let mut v = session(50, uuid(2));
    if let SessionKeyState::Value { value: Some(s), .. } = &mut v {
        for (i, rev) in [(7, 18), (3, 14), (7, 18), (9, 99)] {
            s.released.push(crate::value::ReleasedTerm {
                role: r(i),
                revision: rev,
            });
        }
    }
    assert_eq!(b.observe(KEY, v, t0), vec![(r(3), 14), (r(7), 18)]);
    // r05's value moves to uuid 4 (its holder restarted): under uuid 4 only.
    assert_eq!(
        b.role(&r(5), Some((KEY, uuid(4), a())), 60, t0),
        Verdict::Unknown
    );
    // uuid 4 shows: every role still on uuid 2 is gone (r03, r07 reported already), r05 not.
    let gone = b.observe(KEY, session(61, uuid(4)), t0);
    let expected: Vec<(RoleName, u64)> = (0..20)
        .filter(|i| ![3, 5, 7].contains(i))
        .map(|i| (r(i), 11 + i as u64))
        .collect();
    assert_eq!(gone, expected);
    // A marker: only r05 is left to go.
    assert_eq!(b.observe(KEY, marker(70), t0), vec![(r(5), 60)]);
}

fn instances(n: usize) -> BTreeSet<InstanceId> {
    (0..n)
        .map(|i| InstanceId::new(format!("node-{i}")).expect("valid instance id"))
        .collect()
}

/// Q7: among live instances exactly one ranks 0 for a role (claims at once), the others wait
/// a multiple of the step, at most the cap; the previous holder is left out of the ranking.
#[test]
fn herd_ranks_exactly_one_instance_first() {
    let herd = Herd::DEFAULT;
    let cap = herd.cap;
    let live = instances(8);
    for r in 0..20 {
        let role = RoleName::new(format!("role-{r}")).expect("valid role name");
        let delays: Vec<Duration> = live
            .iter()
            .map(|me| herd.delay(&role, me, &live, None, false))
            .collect();
        assert_eq!(
            delays.iter().filter(|d| d.is_zero()).count(),
            1,
            "{role}: {delays:?}"
        );
        assert!(delays.iter().all(|d| *d <= cap));
        // Without the first-ranked (the previous holder), another one ranks 0.
        let first = live
            .iter()
            .zip(&delays)
            .find(|(_, d)| d.is_zero())
            .map(|(i, _)| i.clone())
            .expect("a first");
        let others: Vec<Duration> = live
            .iter()
            .filter(|i| **i != first)
            .map(|me| herd.delay(&role, me, &live, Some(&first), false))
            .collect();
        assert_eq!(
            others.iter().filter(|d| d.is_zero()).count(),
            1,
            "{role}: {others:?}"
        );
    }
}

/// Q6/Q7 restart adoption: when the previous holder came back with a new session, it claims
/// at once and everyone else waits the return grace on top of its rank.
#[test]
fn a_returning_holder_claims_first() {
    let herd = Herd::DEFAULT;
    let live = instances(5);
    for r in 0..20 {
        let role = RoleName::new(format!("role-{r}")).expect("valid role name");
        for previous in &live {
            for me in &live {
                let d = herd.delay(&role, me, &live, Some(previous), true);
                if me == previous {
                    assert_eq!(d, Duration::ZERO);
                } else {
                    assert!(d >= herd.return_grace, "{role} {me}: {d:?}");
                    assert!(d <= herd.return_grace + herd.cap, "{role} {me}: {d:?}");
                }
            }
        }
    }
}

/// Q7: an instance whose own session the book has not seen yet ranks after every live one.
#[test]
fn an_unseen_instance_ranks_last() {
    let herd = Herd::DEFAULT;
    let live = instances(3);
    let stranger = InstanceId::new("stranger").expect("valid instance id");
    let role = RoleName::new("r").expect("valid role name");
    assert_eq!(
        herd.delay(&role, &stranger, &live, None, false),
        herd.step * 3
    );
    // With no live instance known at all, everyone claims at once (v1 behaviour).
    assert_eq!(
        herd.delay(&role, &stranger, &BTreeSet::new(), None, false),
        Duration::ZERO
    );
}

/// The book tells a session key taken over by a new session of its instance (a restart)
/// from the same session renewed, and from a session that ended.
#[test]
fn a_restarted_session_is_returned() {
    let (mut b, t0) = book();
    b.observe(KEY, session(10, uuid(2)), t0);
    assert!(!b.returned(KEY, uuid(2)));
    b.observe(KEY, session(20, uuid(3)), t0);
    assert!(b.returned(KEY, uuid(2)));
    assert!(!b.returned(KEY, uuid(3)));
    assert!(!b.returned("session.b.3000", uuid(2)));
    b.observe(KEY, marker(30), t0);
    assert!(!b.returned(KEY, uuid(2)), "ended, not returned");
}

/// A reap whose outcome never comes back (its driver dropped it) blocks the key only for a
/// while, never for good.
#[test]
fn a_lost_reap_does_not_block_the_key_for_good() {
    let (mut b, t0) = book();
    b.observe(KEY, session(10, uuid(2)), t0);
    holder(&mut b, uuid(2), 12, t0);
    assert_eq!(b.due_reaps(t0 + PERIOD), vec![reap(10)]);
    assert!(b.due_reaps(t0 + PERIOD * 3).is_empty(), "one in flight");
    assert_eq!(
        b.due_reaps(t0 + PERIOD + Duration::from_secs(31)),
        vec![reap(10)]
    );
}

/// Protocol Q8 rule 4: a follower judges a listed session by what its key shows. A record
/// another client wrote for a dead member, listing a class nobody uses (1 h: its key has no
/// entry), is judged ended after this instance's own backstop period — not after the hour the
/// record claims, during which the dead member counted as live for the herd ranking,
/// placement and the successor rankings (a foreign record has no presence TTL). A key showing
/// a live session value of a long class is judged by that value's class.
#[test]
fn a_listed_session_is_judged_by_the_class_its_key_shows_not_the_one_the_record_claims() {
    let now = Instant::now();
    let mut b = SessionBook::new(TTL, HEARTBEAT).following(b_me());
    b.follow_only(BTreeSet::from([b_me(), a()]), now);
    b.member_put(
        a(),
        crate::core::PresentRecord {
            revision: 7,
            sessions: std::collections::BTreeMap::from([(3_600_000, uuid(9))]),
        },
    );
    assert!(b.ended_members(now).is_empty());
    assert!(
        b.ended_members(now + PERIOD - Duration::from_millis(1))
            .is_empty()
    );
    assert_eq!(b.ended_members(now + PERIOD), vec![(a(), 7)]);

    // A live session of a 60 s class under the listed key: its own class's period.
    let mut b = SessionBook::new(TTL, HEARTBEAT).following(b_me());
    b.follow_only(BTreeSet::from([b_me(), a()]), now);
    b.member_put(
        a(),
        crate::core::PresentRecord {
            revision: 7,
            sessions: std::collections::BTreeMap::from([(60_000, uuid(9))]),
        },
    );
    let mut long = session(3, uuid(9));
    if let SessionKeyState::Value { value: Some(v), .. } = &mut long {
        v.ttl_ms = 60_000;
    }
    b.observe("session.a.60000", long, now);
    assert!(b.ended_members(now + PERIOD).is_empty());
    let long_period = Duration::from_millis(60_000 + 750 + 500);
    assert!(
        b.ended_members(now + long_period - Duration::from_millis(1))
            .is_empty()
    );
    assert_eq!(b.ended_members(now + long_period), vec![(a(), 7)]);
}

fn b_me() -> InstanceId {
    InstanceId::new("me").expect("valid")
}
