//! The membership table: live members as seen through the bucket watcher, with the join
//! stability window and the leave delay applied (docs/placement.md).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::member::MemberRecord;
use super::plan::Candidate;
use crate::names::InstanceId;

/// Extra time past two heartbeats before a member counts as silent.
const SILENCE_SLACK: Duration = Duration::from_millis(100);

/// Heartbeat intervals beyond this (a foreign or corrupt record) are taken as this.
const MAX_HEARTBEAT: Duration = Duration::from_secs(3600);

impl Seen {
    /// Whether the member is live while its session is (record format 2, protocol Q9: written
    /// only on change); a format-1 record is heartbeated and live while it is rewritten.
    fn follows_session(&self) -> bool {
        self.record.v >= 2
    }

    /// When this member counts as silent: two of its heartbeats after its latest record
    /// (`None` if that lies beyond the clock's range, or for a record that is not heartbeated).
    fn silent_at(&self) -> Option<Instant> {
        if self.follows_session() {
            return None;
        }
        let hb = Duration::from_millis(self.record.heartbeat_ms).min(MAX_HEARTBEAT);
        self.beat_at.checked_add(hb * 2 + SILENCE_SLACK)
    }
}

/// How membership changes are debounced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MembershipTiming {
    /// Members that joined count only once no further member joined for this long.
    pub stability_window: Duration,
    /// A member whose record expired (crash) still counts for this long, so that a member
    /// that flaps does not move roles back and forth.
    pub leave_delay: Duration,
}

#[derive(Debug, Clone)]
struct Seen {
    record: MemberRecord,
    revision: u64,
    /// When its latest revision was first seen (local monotonic clock).
    beat_at: Instant,
    /// Since when the member has no live session (format 2 only; `None` while it has one).
    unlive_since: Option<Instant>,
}

/// Members of the bucket, fed by the watcher.
#[derive(Debug, Clone)]
pub struct Membership {
    timing: MembershipTiming,
    present: BTreeMap<InstanceId, Seen>,
    /// Expired records still counted until the leave delay passed: (record, expired at).
    departed: BTreeMap<InstanceId, (Seen, Instant)>,
    /// Members the plan uses.
    effective: BTreeSet<InstanceId>,
    /// Last time a member appeared that is not effective yet.
    last_join: Option<Instant>,
    /// Instances with a live session (protocol Q9), once the watcher delivered the bucket's
    /// state; `None` before: every present format-2 member counts as live.
    sessions: Option<BTreeSet<InstanceId>>,
}

impl Membership {
    /// An empty table.
    #[must_use]
    pub fn new(timing: MembershipTiming) -> Self {
        Self {
            timing,
            present: BTreeMap::new(),
            departed: BTreeMap::new(),
            effective: BTreeSet::new(),
            last_join: None,
            sessions: None,
        }
    }

    /// The instances whose sessions are live now (protocol Q9: a member is live while its
    /// session is). A member whose session went away counts like an expired record (for the
    /// leave delay); one whose session comes back joins again (the stability window), so a
    /// member that was cut off is not handed roles before it can take them, nor at once.
    pub fn set_sessions(&mut self, live: BTreeSet<InstanceId>, now: Instant) {
        self.sessions = Some(live);
        self.refresh(now);
    }

    /// A record was written (or replayed). Older revisions than known are ignored.
    pub fn observe_put(&mut self, record: MemberRecord, revision: u64, now: Instant) {
        let id = record.instance.clone();
        if self
            .present
            .get(&id)
            .is_some_and(|s| s.revision >= revision)
        {
            return;
        }
        let previous = self
            .present
            .get(&id)
            .or_else(|| self.departed.get(&id).map(|(s, _)| s))
            .map(|s| s.record.incarnation);
        self.departed.remove(&id);
        match previous {
            // A restarted process (new incarnation) is a new member: it waits for the
            // stability window like any join, so a crash-looping instance moves nothing.
            Some(inc) if inc != record.incarnation => {
                self.effective.remove(&id);
                self.last_join = Some(now);
            }
            Some(_) => {}
            None if !self.effective.contains(&id) => self.last_join = Some(now),
            None => {}
        }
        self.present.insert(
            id,
            Seen {
                record,
                revision,
                beat_at: now,
                unlive_since: None,
            },
        );
        self.refresh(now);
    }

    /// The bucket was recreated (P1): its revisions restart at 1, so every revision known is
    /// forgotten (the records stay, as members, until the new bucket says otherwise) and the
    /// new bucket's lower revisions are accepted.
    pub fn bucket_reset(&mut self) {
        for seen in self.present.values_mut() {
            seen.revision = 0;
        }
        for (seen, _) in self.departed.values_mut() {
            seen.revision = 0;
        }
    }

    /// A record disappeared: deleted on a graceful stop (gone at once) or expired (counted
    /// for the leave delay).
    pub fn observe_gone(&mut self, id: &InstanceId, expired: bool, revision: u64, now: Instant) {
        let Some(seen) = self.present.get(id) else {
            return;
        };
        if seen.revision >= revision {
            return;
        }
        if let Some(seen) = self.present.remove(id)
            && expired
        {
            self.departed.insert(id.clone(), (seen, now));
        }
        self.refresh(now);
    }

    /// Applies the leave delay and the stability window at `now`.
    pub fn refresh(&mut self, now: Instant) {
        let delay = self.timing.leave_delay;
        if let Some(live) = &self.sessions {
            let mut returned = Vec::new();
            for (id, seen) in self.present.iter_mut().filter(|(_, s)| s.follows_session()) {
                if live.contains(id) {
                    if seen.unlive_since.take().is_some() {
                        returned.push(id.clone());
                    }
                } else {
                    seen.unlive_since.get_or_insert(now);
                }
            }
            for id in returned {
                // Back with a session (a healed link, a new session after a loss): a join.
                self.effective.remove(&id);
                self.last_join = Some(now);
            }
        }
        self.departed.retain(|_, (_, at)| now < *at + delay);
        // A crashed member's record normally expires (per-key TTL) and takes the path above.
        // Should no expiry ever arrive (a bucket without per-key TTLs, a lost marker), a
        // member silent for the leave delay is gone all the same: no ghost keeps a share.
        self.present.retain(|_, seen| {
            seen.silent_at()
                .and_then(|t| t.checked_add(delay))
                .is_none_or(|gone| now < gone)
        });
        let raw: BTreeSet<InstanceId> = self
            .present
            .iter()
            .filter(|(_, s)| s.unlive_since.is_none_or(|t| now < t + delay))
            .map(|(id, _)| id)
            .chain(self.departed.keys())
            .cloned()
            .collect();
        self.effective.retain(|id| raw.contains(id));
        let stable = self
            .last_join
            .is_none_or(|t| now >= t + self.timing.stability_window);
        if stable {
            self.effective = raw;
            self.last_join = None;
        }
    }

    /// The next instant at which [`Membership::refresh`] changes something.
    #[must_use]
    #[cfg(test)]
    pub fn next_change(&self) -> Option<Instant> {
        let join = self.last_join.map(|t| t + self.timing.stability_window);
        let leave = self
            .departed
            .values()
            .map(|(_, at)| *at + self.timing.leave_delay)
            .min();
        join.into_iter().chain(leave).min()
    }

    /// Whether time alone changes the table (a join within the stability window, a departure
    /// within the leave delay, heartbeated format-1 members that may fall silent, a member
    /// without a session whose record is not deleted yet): re-plans are due on a timer while
    /// it does.
    #[must_use]
    pub fn settling(&self) -> bool {
        self.last_join.is_some()
            || !self.departed.is_empty()
            || self
                .present
                .values()
                .any(|s| !s.follows_session() || s.unlive_since.is_some())
    }

    /// Format-2 records of members without a live session for the leave delay plus `after`:
    /// any member may delete them (by CAS on the revision, protocol Q9), so that a crashed
    /// instance's record does not stay for ever.
    #[must_use]
    pub fn stale_records(&self, now: Instant, after: Duration) -> Vec<(InstanceId, u64)> {
        self.present
            .iter()
            .filter(|(_, s)| {
                s.unlive_since
                    .is_some_and(|t| now >= t + self.timing.leave_delay + after)
            })
            .map(|(id, s)| (id.clone(), s.revision))
            .collect()
    }

    /// Live members that joined within the stability window (not counted by the plan yet):
    /// vacancies may go to them at once — giving a vacant role to a member moves nothing — so
    /// that a fleet starting together is not first planned without its late starters.
    #[must_use]
    pub fn joining(&self, now: Instant) -> Vec<Candidate> {
        self.present
            .iter()
            .filter(|(id, _)| !self.effective.contains(*id) && self.is_live(id, now))
            .map(|(_, s)| Candidate::from(&s.record))
            .collect()
    }

    /// Members the plan counts (stability window and leave delay applied).
    #[must_use]
    pub fn effective(&self) -> Vec<Candidate> {
        self.effective
            .iter()
            .filter_map(|id| {
                self.present
                    .get(id)
                    .or_else(|| self.departed.get(id).map(|(s, _)| s))
            })
            .map(|s| Candidate::from(&s.record))
            .collect()
    }

    /// Whether `id` is present and live: its record exists and its session is live (format 2,
    /// protocol Q9), or its format-1 record was rewritten within two of its heartbeats. A
    /// member that is not live is never waited for.
    #[must_use]
    pub fn is_live(&self, id: &InstanceId, now: Instant) -> bool {
        self.present.get(id).is_some_and(|s| {
            if s.follows_session() {
                s.unlive_since.is_none()
                    && self.sessions.as_ref().is_none_or(|live| live.contains(id))
            } else {
                s.silent_at().is_none_or(|t| now <= t)
            }
        })
    }

    /// The record of a present member.
    pub fn record(&self, id: &InstanceId) -> Option<&MemberRecord> {
        self.present.get(id).map(|s| &s.record)
    }

    /// Every present member's record.
    pub fn records(&self) -> impl Iterator<Item = &MemberRecord> {
        self.present.values().map(|s| &s.record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn rec(id: &str) -> MemberRecord {
        crate::placement::member::test_record(id, &[], 100)
    }

    /// A record of the heartbeated format 1 (live while rewritten).
    fn rec_v1(id: &str) -> MemberRecord {
        let mut r = rec(id);
        r.v = crate::placement::member::MEMBER_VERSION_HEARTBEATED;
        r
    }

    fn set(ids: &[&str]) -> BTreeSet<InstanceId> {
        ids.iter()
            .map(|i| InstanceId::new(*i).expect("valid"))
            .collect()
    }

    /// Members a and b, both joined at `t0` and counted after the stability window.
    fn members_a_and_b(t0: Instant) -> Membership {
        let mut m = Membership::new(T);
        m.observe_put(rec("a"), 1, t0);
        m.observe_put(rec("b"), 2, t0);
        m.refresh(t0 + T.stability_window);
        m
    }

    fn ids(m: &Membership) -> Vec<String> {
        m.effective().iter().map(|c| c.id.to_string()).collect()
    }

    const T: MembershipTiming = MembershipTiming {
        stability_window: Duration::from_secs(1),
        leave_delay: Duration::from_secs(2),
    };

    #[test]
    fn a_recreated_bucket_s_lower_revisions_are_accepted() {
        let mut m = Membership::new(T);
        let now = Instant::now();
        let weighted = |weight| MemberRecord { weight, ..rec("a") };
        m.observe_put(weighted(1), 50, now);
        m.observe_put(weighted(2), 3, now);
        assert_eq!(
            m.record(&InstanceId::new("a").expect("valid"))
                .map(|r| r.weight),
            Some(1)
        );
        m.bucket_reset();
        m.observe_put(weighted(2), 3, now);
        assert_eq!(
            m.record(&InstanceId::new("a").expect("valid"))
                .map(|r| r.weight),
            Some(2),
            "the new bucket's revision 3 is newer than anything known"
        );
    }

    #[test]
    fn joins_count_after_a_quiet_stability_window() {
        let t0 = Instant::now();
        let mut m = Membership::new(T);
        m.observe_put(rec("a"), 1, t0);
        assert!(ids(&m).is_empty());
        m.observe_put(rec("b"), 2, t0 + Duration::from_millis(600));
        m.refresh(t0 + Duration::from_millis(1100));
        assert!(ids(&m).is_empty(), "b restarted the window");
        assert_eq!(m.next_change(), Some(t0 + Duration::from_millis(1600)));
        m.refresh(t0 + Duration::from_millis(1600));
        assert_eq!(ids(&m), ["a", "b"]);
        // Heartbeats of known members do not restart anything.
        m.observe_put(rec("a"), 3, t0 + Duration::from_millis(1700));
        assert_eq!(ids(&m), ["a", "b"]);
    }

    #[test]
    fn graceful_leave_is_immediate_expiry_waits_the_leave_delay() {
        let t0 = Instant::now();
        let mut m = members_a_and_b(t0);
        let a = InstanceId::new("a").expect("valid");
        let b = InstanceId::new("b").expect("valid");
        m.observe_gone(&a, false, 3, t0 + Duration::from_secs(2));
        assert_eq!(ids(&m), ["b"]);
        m.observe_gone(&b, true, 4, t0 + Duration::from_secs(2));
        assert_eq!(ids(&m), ["b"]);
        assert!(!m.is_live(&b, t0 + Duration::from_secs(2)));
        // b comes back within the leave delay: no change at all.
        m.observe_put(rec("b"), 5, t0 + Duration::from_secs(3));
        m.refresh(t0 + Duration::from_secs(5));
        assert_eq!(ids(&m), ["b"]);
        m.observe_gone(&b, true, 6, t0 + Duration::from_secs(6));
        m.refresh(t0 + Duration::from_secs(8));
        assert!(ids(&m).is_empty());
    }

    #[test]
    fn a_restarted_member_waits_for_the_stability_window_again() {
        let t0 = Instant::now();
        let mut m = Membership::new(T);
        m.observe_put(rec("a"), 1, t0);
        m.refresh(t0 + Duration::from_secs(1));
        assert_eq!(ids(&m), ["a"]);
        let mut again = rec("a");
        again.incarnation = Uuid::from_u128(7);
        m.observe_put(again, 2, t0 + Duration::from_secs(2));
        assert!(ids(&m).is_empty());
        m.refresh(t0 + Duration::from_secs(3));
        assert_eq!(ids(&m), ["a"]);
    }

    #[test]
    fn a_member_silent_for_the_leave_delay_is_gone_even_without_an_expiry() {
        let t0 = Instant::now();
        let mut m = Membership::new(T);
        m.observe_put(rec_v1("a"), 1, t0);
        m.observe_put(rec_v1("b"), 2, t0);
        m.refresh(t0 + T.stability_window);
        assert_eq!(ids(&m), ["a", "b"]);
        // "b" keeps beating (every 100 ms), "a" stops and no expiry marker ever comes; "a" is
        // silent two heartbeats + 100 ms after its last record.
        let silent = Duration::from_millis(300);
        let mut t = t0;
        while t + Duration::from_millis(100) < t0 + silent + T.leave_delay {
            t += Duration::from_millis(100);
            m.observe_put(rec_v1("b"), 3 + (t - t0).as_millis() as u64, t);
        }
        m.refresh(t0 + silent + T.leave_delay - Duration::from_millis(1));
        assert_eq!(ids(&m), ["a", "b"], "counted during the leave delay");
        m.refresh(t0 + silent + T.leave_delay + Duration::from_millis(1));
        assert_eq!(ids(&m), ["b"]);
    }

    #[test]
    fn a_corrupt_heartbeat_interval_does_not_overflow_the_clock() {
        let t0 = Instant::now();
        let mut m = Membership::new(T);
        let mut r = rec("a");
        r.heartbeat_ms = u64::MAX;
        m.observe_put(r, 1, t0);
        let a = InstanceId::new("a").expect("valid");
        assert!(m.is_live(&a, t0 + Duration::from_secs(3600)));
        m.refresh(t0 + Duration::from_secs(86_400));
    }

    #[test]
    fn silent_members_are_not_live() {
        let t0 = Instant::now();
        let mut m = Membership::new(T);
        m.observe_put(rec_v1("a"), 1, t0);
        let a = InstanceId::new("a").expect("valid");
        assert!(m.is_live(&a, t0 + Duration::from_millis(300)));
        assert!(!m.is_live(&a, t0 + Duration::from_millis(301)));
    }

    /// Protocol Q9: a format-2 record is never silent; its member is live while its session is.
    /// Without a session it counts for the leave delay (not live: never waited for), then not;
    /// its record is stale for deletion a stability window later.
    #[test]
    fn a_member_is_live_while_its_session_is() {
        let t0 = Instant::now();
        let mut m = members_a_and_b(t0);
        let (a, b) = (
            InstanceId::new("a").expect("valid"),
            InstanceId::new("b").expect("valid"),
        );
        // Before the watcher caught up: live.
        assert!(m.is_live(&a, t0 + Duration::from_secs(3600)));
        let t1 = t0 + Duration::from_secs(5);
        m.set_sessions(set(&["a", "b"]), t1);
        assert!(m.is_live(&a, t1) && m.is_live(&b, t1));
        assert!(!m.settling(), "nothing changes with time");
        let t2 = t1 + Duration::from_secs(1);
        m.set_sessions(set(&["b"]), t2);
        assert!(!m.is_live(&a, t2), "a has no session");
        assert!(m.settling());
        m.refresh(t2 + T.leave_delay - Duration::from_millis(1));
        assert_eq!(ids(&m), ["a", "b"], "counted during the leave delay");
        m.refresh(t2 + T.leave_delay);
        assert_eq!(ids(&m), ["b"]);
        assert!(
            m.stale_records(t2 + T.leave_delay, T.stability_window)
                .is_empty()
        );
        let stale = m.stale_records(t2 + T.leave_delay + T.stability_window, T.stability_window);
        assert_eq!(stale, vec![(a, 1)]);
    }

    /// The healed-link case (issue 27): a member cut off long enough to lose its session keeps
    /// its record (written only on change); when its session comes back it is live at once but
    /// counts in the plan only after a stability window, like any join.
    #[test]
    fn a_member_whose_session_comes_back_joins_again() {
        let t0 = Instant::now();
        let mut m = members_a_and_b(t0);
        let a = InstanceId::new("a").expect("valid");
        let t1 = t0 + Duration::from_secs(5);
        m.set_sessions(set(&["a", "b"]), t1);
        m.set_sessions(set(&["b"]), t1 + Duration::from_millis(100));
        let back = t1 + T.leave_delay + Duration::from_secs(1);
        m.refresh(back);
        assert_eq!(ids(&m), ["b"], "gone after the leave delay");
        m.set_sessions(set(&["a", "b"]), back);
        assert!(m.is_live(&a, back));
        assert_eq!(ids(&m), ["b"], "not counted before the stability window");
        m.refresh(back + T.stability_window);
        assert_eq!(ids(&m), ["a", "b"]);
        // Back within the leave delay: it rejoins too (no roles handed to it at once).
        let t2 = back + T.stability_window + Duration::from_secs(1);
        m.set_sessions(set(&["b"]), t2);
        m.set_sessions(set(&["a", "b"]), t2 + Duration::from_millis(500));
        assert_eq!(ids(&m), ["b"]);
        m.refresh(t2 + Duration::from_millis(500) + T.stability_window);
        assert_eq!(ids(&m), ["a", "b"]);
    }
}
