//! Tests of the presence book: successors, orphans, the second tier and end judgements.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::*;
use crate::core::session_types::SessionKeyState;

fn id(s: &str) -> InstanceId {
    InstanceId::new(s).expect("valid")
}

fn rec(revision: u64) -> PresentRecord {
    PresentRecord {
        revision,
        sessions: BTreeMap::from([(3000, Uuid::new_v4())]),
    }
}

fn fleet(me: &str, n: usize) -> Presence {
    let mut p = Presence::new(id(me));
    for i in 0..n {
        p.record(id(&format!("n{i}")), rec(i as u64 + 1));
    }
    p
}

#[test]
fn every_member_has_exactly_its_successors_following_it() {
    let n = 12;
    let now = Instant::now();
    let mut books: Vec<Presence> = (0..n).map(|i| fleet(&format!("n{i}"), n)).collect();
    let wanted: Vec<Wanted> = books.iter_mut().map(|b| b.wanted(now)).collect();
    for h in 0..n {
        let h = id(&format!("n{h}"));
        let followers = books
            .iter()
            .zip(&wanted)
            .filter(|(b, w)| *b.me() != h && w.follow.contains(&h))
            .count();
        let readers = wanted.iter().filter(|w| w.poll.contains(&h)).count();
        assert_eq!(followers, SUCCESSORS, "{h}");
        assert_eq!(readers, SUCCESSORS, "{h}");
        // The places computed without sorting agree with the ranking.
        for (b, w) in books.iter().zip(&wanted) {
            if *b.me() == h {
                continue;
            }
            let rank = b.ranking(&h).iter().position(|m| m == b.me());
            assert_eq!(w.follow.contains(&h), rank.is_some_and(|k| k < SUCCESSORS));
            assert_eq!(
                w.poll.contains(&h),
                rank.is_some_and(|k| (SUCCESSORS..2 * SUCCESSORS).contains(&k))
            );
        }
    }
    // Each instance follows itself and about SUCCESSORS others.
    let total: usize = wanted.iter().map(|w| w.follow.len()).sum();
    assert_eq!(total, n * (SUCCESSORS + 1));
}

#[test]
fn a_deleted_record_moves_the_ranking_and_makes_its_instance_an_orphan() {
    let now = Instant::now();
    let mut p = fleet("n0", 8);
    let h = id("n5");
    let before = p.ranking(&h);
    let gone = before[0].clone();
    p.record_gone(&gone, 100);
    let after = p.ranking(&h);
    assert_eq!(after, before[1..].to_vec(), "the next member moves up");
    // Named by a role value: a deleted record is an orphan at once.
    p.set_named(&BTreeSet::from([(gone.clone(), 3000, Uuid::new_v4())]), now);
    assert!(p.wanted(now).follow.contains(&gone));
    // Written again: no longer an orphan (unless a successor).
    p.record(gone.clone(), rec(101));
    let w = p.wanted(now);
    assert_eq!(
        w.follow.contains(&gone),
        p.ranking(&gone)
            .iter()
            .take(SUCCESSORS)
            .any(|m| m == p.me())
    );
}

#[test]
fn an_instance_never_seen_with_a_record_is_followed_after_the_grace() {
    let now = Instant::now();
    let mut p = fleet("n0", 3);
    let stranger = id("old-build");
    p.set_named(
        &BTreeSet::from([(stranger.clone(), 3000, Uuid::new_v4())]),
        now,
    );
    let w = p.wanted(now);
    assert!(!w.follow.contains(&stranger));
    assert_eq!(w.recheck_at, Some(now + ORPHAN_GRACE));
    assert!(p.wanted(now + ORPHAN_GRACE).follow.contains(&stranger));
    // A record without sessions (an older build) does not make it present.
    p.record(
        stranger.clone(),
        PresentRecord {
            revision: 9,
            sessions: BTreeMap::new(),
        },
    );
    assert!(p.wanted(now).follow.contains(&stranger));
    assert!(!p.is_live(&stranger));
}

#[test]
fn older_record_events_are_ignored_and_an_end_is_forgotten_with_a_new_record() {
    let mut p = fleet("n0", 2);
    let n1 = id("n1");
    p.record_gone(&n1, 1); // not above the record's revision 2
    assert!(p.is_live(&n1));
    p.saw_end(&n1, 1); // another revision: ignored
    assert!(p.is_live(&n1));
    p.saw_end(&n1, 2);
    assert!(!p.is_live(&n1));
    p.record(n1.clone(), rec(7));
    assert!(p.is_live(&n1));
}

#[test]
fn a_session_ends_by_a_marker_another_uuid_or_a_period_without_change() {
    let u = Uuid::new_v4();
    let t0 = Instant::now();
    let p = Duration::from_secs(4);
    let marker = SessionKeyState::Marker {
        revision: 5,
        expired: true,
    };
    assert!(session_ended(u, &marker, t0, t0, p));
    assert!(!session_ended(u, &SessionKeyState::Absent, t0, t0, p));
    assert!(session_ended(u, &SessionKeyState::Absent, t0, t0 + p, p));
    let foreign = SessionKeyState::Value {
        revision: 5,
        value: None,
    };
    assert!(!session_ended(u, &foreign, t0, t0 + p / 2, p));
    assert!(session_ended(u, &foreign, t0, t0 + p, p));
}

#[test]
fn an_instance_follows_the_members_it_ranks_high_for_before_its_own_record_is_seen() {
    let now = Instant::now();
    // n9 has no record yet: it still ranks itself among the live members.
    let mut p = Presence::new(id("n9"));
    p.record(id("n0"), rec(1));
    let w = p.wanted(now);
    assert!(
        w.follow.contains(&id("n0")),
        "the only other member: n9 is its successor"
    );
    p.record(id("n1"), rec(2));
    assert_eq!(p.ranking(&id("n0")).len(), 2);
}

#[test]
fn a_named_session_its_instance_s_record_does_not_list_is_followed_after_the_grace() {
    let now = Instant::now();
    let mut p = fleet("n0", 8);
    // n0 is a successor of few members: pick one it does not follow.
    let w = p.wanted(now);
    let h = (1..8)
        .map(|i| id(&format!("n{i}")))
        .find(|h| !w.follow.contains(h))
        .expect("a member n0 does not follow");
    let live = *p
        .get(&h)
        .expect("a record")
        .sessions
        .get(&3000)
        .expect("listed");
    // A role value naming the session the record lists: nothing to follow.
    p.set_named(&BTreeSet::from([(h.clone(), 3000, live)]), now);
    let w = p.wanted(now);
    assert!(!w.follow.contains(&h));
    assert_eq!(w.recheck_at, None);
    // A role value naming an older session of h (h restarted without the role, or gave its
    // TTL class up): only its successors see that session's end and they judge only the
    // listed ones, so it is followed as an orphan after the grace.
    let dead = Uuid::new_v4();
    p.set_named(
        &BTreeSet::from([(h.clone(), 3000, live), (h.clone(), 3000, dead)]),
        now,
    );
    let w = p.wanted(now);
    assert!(!w.follow.contains(&h));
    assert_eq!(w.recheck_at, Some(now + ORPHAN_GRACE));
    assert!(p.wanted(now + ORPHAN_GRACE).follow.contains(&h));
    // Another class the record does not list: the same.
    p.set_named(
        &BTreeSet::from([(h.clone(), 2000, live)]),
        now + ORPHAN_GRACE,
    );
    assert!(!p.wanted(now + ORPHAN_GRACE).follow.contains(&h));
    assert!(p.wanted(now + 2 * ORPHAN_GRACE).follow.contains(&h));
    // The role taken over (nothing names the old session): not followed any more.
    p.set_named(
        &BTreeSet::from([(h.clone(), 3000, live)]),
        now + 2 * ORPHAN_GRACE,
    );
    assert!(!p.wanted(now + 2 * ORPHAN_GRACE).follow.contains(&h));
}

#[test]
fn a_restarted_holder_s_old_session_waits_its_grace_from_the_new_record() {
    let t0 = Instant::now();
    let mut p = fleet("n0", 10);
    // A member n0 is no successor of (so it would follow it only as an orphan).
    let h = (1..10)
        .map(|i| id(&format!("n{i}")))
        .find(|h| !p.ranking(h).iter().take(SUCCESSORS).any(|m| *m == id("n0")))
        .expect("n0 is a successor of at most a few of nine members");
    let old = p.get(&h).expect("a record").sessions[&3000];
    let named = BTreeSet::from([(h.clone(), 3000, old)]);
    p.set_named(&named, t0);
    let later = t0 + ORPHAN_GRACE * 10;
    // The holder restarts: its record lists a new session while its role values still name
    // the old one. Nobody follows it at once (it takes its roles back within the grace) ...
    p.record(
        h.clone(),
        PresentRecord {
            revision: 50,
            sessions: BTreeMap::from([(3000, Uuid::new_v4())]),
        },
    );
    p.set_named(&named, later);
    assert!(!p.wanted(later).follow.contains(&h));
    // ... but if the old session stays named past the grace, it is followed as an orphan.
    p.set_named(&named, later + ORPHAN_GRACE);
    assert!(p.wanted(later + ORPHAN_GRACE).follow.contains(&h));
}
