//! Unit tests of [`SessionBook`] (protocol Q5) and [`Herd`] (Q7).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::machine::BACKSTOP_GRACE;
use super::session::SessionKeyState;
use super::session_book::{Herd, SessionBook, Verdict};
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
        }),
    }
}

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
    assert!(b.backstop_read(KEY, SessionKeyState::Absent, t0).is_empty());
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

/// Rule 4: a session some role rests on that stayed at one revision is read from the stream
/// leader only after the backstop period, at most once per period; unchanged -> gone, newer
/// -> learned (live again).
#[test]
fn the_backstop_reads_once_per_period() {
    let period = TTL + HEARTBEAT + BACKSTOP_GRACE;
    let (mut b, t0) = book();
    b.observe(KEY, session(10, uuid(2)), t0);
    holder(&mut b, uuid(2), 12, t0);
    assert!(
        b.due_reads(t0 + period - Duration::from_millis(1))
            .is_empty()
    );
    let t1 = t0 + period;
    assert_eq!(b.due_reads(t1), vec![KEY.to_string()]);
    assert!(
        b.due_reads(t1 + Duration::from_millis(300)).is_empty(),
        "twice in a period"
    );
    // Newer: learned, nothing gone.
    assert!(b.backstop_read(KEY, session(14, uuid(2)), t1).is_empty());
    assert_eq!(holder(&mut b, uuid(2), 12, t1), Verdict::Live);
    // Unchanged a period later: gone.
    let t2 = t1 + period;
    assert_eq!(b.due_reads(t2), vec![KEY.to_string()]);
    assert_eq!(
        b.backstop_read(KEY, session(14, uuid(2)), t2),
        vec![(role(), 12)]
    );
}

/// Rule 4: a backstop read answered with the revision the watcher delivered while the read was
/// on its way proves nothing (that revision was first seen just now).
#[test]
fn a_read_racing_a_watcher_delivery_is_not_unchanged() {
    let period = TTL + HEARTBEAT + BACKSTOP_GRACE;
    let (mut b, t0) = book();
    b.observe(KEY, session(10, uuid(2)), t0);
    holder(&mut b, uuid(2), 12, t0);
    let t1 = t0 + period;
    assert_eq!(b.due_reads(t1), vec![KEY.to_string()]);
    b.observe(KEY, session(14, uuid(2)), t1);
    assert!(b.backstop_read(KEY, session(14, uuid(2)), t1).is_empty());
    assert_eq!(holder(&mut b, uuid(2), 12, t1), Verdict::Live);
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
