//! What one instance knows about every session in the bucket, and which roles' holders rest
//! on which session (protocol Q5): decides when a role whose holder's session is gone is
//! vacant. Pure: the watcher feeds it entries of `session.` keys, the role values it
//! dispatches and the outcomes of the reaps and reads it asks for.
//!
//! A session `S` with uuid `u` is **gone** for a role value at revision `R` naming it when `S`
//! shows a marker or another uuid at a revision above `s_u` (the revision at which `u` was
//! first seen in `S`) — or, when `u` was never seen, above `R` (the holder wrote `u` before it
//! wrote the role value, so anything in `S` above `R` came after `u`) — or when `S`'s current
//! value (uuid `u`) lists the term as released (rule 5). Plain absence never counts (a lagging
//! replica shows it too). The backstop (rule 4) is a **reap**: a session key known at one
//! revision for the backstop period is purged with a CAS on that revision, whose marker makes
//! every role resting on it gone by rule 2 — the decision rests on the stream leader's CAS,
//! never on a read.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::machine::BACKSTOP_GRACE;
use super::presence::{NamedSession, Presence, PresentRecord, Wanted, session_ended, shown_ttl};
use super::session::SessionKeyState;
use super::types::WriteOutcome;
use crate::names::{InstanceId, RoleName};

/// How many uuids a session key remembers the first revision of (the current one and a few
/// before it: enough for the values dispatched while the watcher catches up).
const REMEMBERED_UUIDS: usize = 8;

/// A reap whose outcome was never reported this long after it was sent is taken as lost (the
/// driver's timeout is far shorter): a dropped reap never blocks the key for good.
const REAP_LOST: Duration = Duration::from_secs(30);

/// What the book says about the session a role's holder rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The session is live as far as this instance knows.
    Live,
    /// The session is gone: the role is vacant (takeover by CAS on the role value's revision).
    Gone,
    /// Not known yet (the session's entries not seen yet): wait, the backstop decides.
    Unknown,
}

/// A reap the book asks for (protocol Q5 rule 4): purge session key `key` with a CAS on
/// `expected` (0: the key must have no entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reap {
    /// The session key.
    pub key: String,
    /// The revision the key must still be at.
    pub expected: u64,
}

/// What became of a reap ([`SessionBook::reap_done`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapResult {
    /// Roles that became vacant (the reap's marker), with the revision of their role value.
    pub gone: Vec<(RoleName, u64)>,
    /// The key moved: read it from the stream leader and report with
    /// [`SessionBook::leader_read`].
    pub read: bool,
}

#[derive(Debug, Clone)]
struct Track {
    state: SessionKeyState,
    /// First sighting of `state`'s revision (for revision 0: when the book started tracking
    /// the key).
    seen_at: Instant,
    /// Uuids seen in the key with the revision they were first seen at (most recent last).
    uuids: Vec<(Uuid, u64)>,
    /// The last reap: its expected revision, when it was sent, and whether it is in flight.
    reap: Option<(u64, Instant, bool)>,
    /// A leader read after a refused reap found no entry at all: reap on 0 next, at once.
    absent_at_leader: bool,
}

impl Track {
    fn new(now: Instant) -> Self {
        Self {
            state: SessionKeyState::Absent,
            seen_at: now,
            uuids: Vec::new(),
            reap: None,
            absent_at_leader: false,
        }
    }

    fn first_seen(&self, uuid: Uuid) -> Option<u64> {
        self.uuids.iter().find(|(u, _)| *u == uuid).map(|(_, r)| *r)
    }
}

#[derive(Debug, Clone)]
struct Interest {
    key: String,
    uuid: Uuid,
    /// Revision of the role value naming the session.
    revision: u64,
    /// When the role value was first seen (rule 4 never counts from before it).
    since: Instant,
    /// Already reported gone.
    gone: bool,
}

/// The sessions of the bucket and the roles resting on them.
#[derive(Debug)]
pub struct SessionBook {
    sessions: HashMap<String, Track>,
    roles: HashMap<RoleName, Interest>,
    /// The roles resting on each session key, grouped by the uuid their role value names: a
    /// renewal of a live session then looks only at the roles resting on other uuids (usually
    /// none), not at every role its instance holds.
    by_key: HashMap<String, HashMap<Uuid, BTreeSet<RoleName>>>,
    /// This instance's own TTL and heartbeat (the backstop waits for the longer TTL).
    own_ttl: Duration,
    own_heartbeat: Duration,
    /// Q8: the member records and whom this instance follows; `None`: every session key is
    /// followed (the shared watcher delivers them all).
    presence: Option<Following>,
}

/// The member records and the instances whose session keys this instance follows (Q8).
#[derive(Debug)]
struct Following {
    presence: Presence,
    /// Instances whose session keys are followed now.
    follows: BTreeSet<InstanceId>,
    /// Members whose record this instance asked to delete, with the record's revision (one
    /// delete per revision).
    ending: HashMap<InstanceId, u64>,
}

impl SessionBook {
    /// An empty book for an instance whose longest role TTL is `own_ttl` and shortest
    /// heartbeat `own_heartbeat`.
    #[must_use]
    pub fn new(own_ttl: Duration, own_heartbeat: Duration) -> Self {
        Self {
            sessions: HashMap::new(),
            roles: HashMap::new(),
            by_key: HashMap::new(),
            own_ttl,
            own_heartbeat,
            presence: None,
        }
    }

    /// The book of instance `me` that follows only the session keys protocol Q8 says
    /// (itself, the members it is a successor of, orphans): [`SessionBook::wanted`] tells
    /// whom, [`SessionBook::follow_only`] is told whom it follows.
    #[must_use]
    pub fn following(mut self, me: InstanceId) -> Self {
        let mut follows = BTreeSet::new();
        follows.insert(me.clone());
        self.presence = Some(Following {
            presence: Presence::new(me),
            follows,
            ending: HashMap::new(),
        });
        self
    }

    /// Whether the session key `key` belongs to an instance this book follows.
    #[must_use]
    pub fn follows_key(&self, key: &str) -> bool {
        match &self.presence {
            None => true,
            Some(f) => instance_of(key).is_some_and(|i| f.follows.contains(&i)),
        }
    }

    /// A member record of `id` at `record.revision` (Q8 rule 1).
    pub fn member_put(&mut self, id: InstanceId, record: PresentRecord) {
        if let Some(f) = &mut self.presence {
            f.presence.record(id, record);
        }
    }

    /// `id`'s member record is gone (a marker at `revision`, or replaced by a foreign value).
    pub fn member_gone(&mut self, id: &InstanceId, revision: u64) {
        if let Some(f) = &mut self.presence {
            f.presence.record_gone(id, revision);
            f.ending.remove(id);
        }
    }

    /// The member record of `id` this book knows.
    #[must_use]
    pub fn member(&self, id: &InstanceId) -> Option<&PresentRecord> {
        self.presence.as_ref().and_then(|f| f.presence.get(id))
    }

    /// Whom to follow and read now (Q8 rules 3 and 5); `None` when every key is followed.
    #[must_use]
    pub fn wanted(&mut self, now: Instant) -> Option<Wanted> {
        let named: BTreeSet<NamedSession> = self
            .by_key
            .iter()
            .filter_map(|(k, by_uuid)| {
                let (id, ttl_ms) = crate::value::parse_session_key(k)?;
                Some(by_uuid.keys().map(move |u| (id.clone(), ttl_ms, *u)))
            })
            .flatten()
            .collect();
        let f = self.presence.as_mut()?;
        f.presence.set_named(&named, now);
        Some(f.presence.wanted(now))
    }

    /// The instances whose session keys are followed from now on. The keys of an instance no
    /// longer followed are forgotten (nothing here judges them any more: Q8 rule 7); the keys
    /// of a newly followed one that roles rest on are tracked from `now`, as not seen yet.
    pub fn follow_only(&mut self, follows: BTreeSet<InstanceId>, now: Instant) {
        let Some(f) = &mut self.presence else {
            return;
        };
        self.sessions
            .retain(|key, _| instance_of(key).is_some_and(|i| follows.contains(&i)));
        for key in self.by_key.keys() {
            if instance_of(key).is_some_and(|i| follows.contains(&i) && !f.follows.contains(&i)) {
                self.sessions
                    .entry(key.clone())
                    .or_insert_with(|| Track::new(now));
            }
        }
        f.follows = follows;
    }

    /// Followed members (other than this instance) whose record lists a session that ended,
    /// by what the followed keys show (Q8 rule 4): their records are to be deleted, by CAS on
    /// the revision returned. Each record revision is returned once.
    pub fn ended_members(&mut self, now: Instant) -> Vec<(InstanceId, u64)> {
        let Some(f) = &self.presence else {
            return Vec::new();
        };
        let candidates: Vec<(InstanceId, u64, Vec<ListedKey>)> = f
            .follows
            .iter()
            .filter(|id| *id != f.presence.me())
            .filter_map(|id| {
                let record = f.presence.get(id)?;
                if f.ending.get(id) == Some(&record.revision) {
                    return None;
                }
                let keys = record
                    .sessions
                    .iter()
                    .map(|(ttl_ms, uuid)| (crate::value::session_key(id, *ttl_ms), *uuid))
                    .collect();
                Some((id.clone(), record.revision, keys))
            })
            .collect();
        let mut out = Vec::new();
        for (id, revision, keys) in candidates {
            let mut ended = false;
            for (key, uuid) in keys {
                // A listed key with no entry seen is counted from now (rule 4's period), by
                // the class of what the key shows, not of what the record claims.
                let t = self.sessions.entry(key).or_insert_with(|| Track::new(now));
                let period =
                    self.own_ttl.max(shown_ttl(&t.state)) + self.own_heartbeat + BACKSTOP_GRACE;
                ended |= session_ended(uuid, &t.state, t.seen_at, now, period);
            }
            if ended {
                out.push((id, revision));
            }
        }
        if let Some(f) = &mut self.presence {
            for (id, revision) in &out {
                f.ending.insert(id.clone(), *revision);
                f.presence.saw_end(id, *revision);
            }
        }
        out
    }

    /// A role with this TTL and heartbeat joined: the backstop waits for the longest TTL and
    /// the shortest heartbeat of this instance's roles.
    pub fn note_timing(&mut self, ttl: Duration, heartbeat: Duration) {
        self.own_ttl = self.own_ttl.max(ttl);
        self.own_heartbeat = self.own_heartbeat.min(heartbeat);
    }

    /// Forgets everything (the bucket was recreated).
    pub fn reset(&mut self) {
        self.sessions.clear();
        self.roles.clear();
        self.by_key.clear();
        if let Some(f) = &mut self.presence {
            f.presence.reset();
            f.ending.clear();
        }
    }

    /// A session key's entry from the watcher (or a newer one from a read). Returns the roles
    /// that became vacant, with the revision of their role value.
    pub fn observe(
        &mut self,
        key: &str,
        state: SessionKeyState,
        now: Instant,
    ) -> Vec<(RoleName, u64)> {
        if !self.follows_key(key) {
            // Not followed (Q8 rule 7): a late event of a consumer just stopped.
            return Vec::new();
        }
        let rev = state.revision();
        let track = self
            .sessions
            .entry(key.to_string())
            .or_insert_with(|| Track::new(now));
        if rev <= track.state.revision() {
            return Vec::new();
        }
        if let Some(u) = state.uuid()
            && track.first_seen(u).is_none()
        {
            if track.uuids.len() >= REMEMBERED_UUIDS {
                track.uuids.remove(0);
            }
            track.uuids.push((u, rev));
        }
        track.state = state;
        track.seen_at = now;
        track.absent_at_leader = false;
        self.newly_gone(key)
    }

    /// A role value at `revision` names session `uuid` in `key`, held by `holder` (or the
    /// role's key no longer names a session: `None`). Returns the verdict for it.
    pub fn role(
        &mut self,
        role: &RoleName,
        holder: Option<(&str, Uuid, InstanceId)>,
        revision: u64,
        now: Instant,
    ) -> Verdict {
        if self.roles.get(role).is_some_and(|p| p.revision > revision) {
            // Older than what the watcher registered (a read that raced it): keep the newer.
            return Verdict::Unknown;
        }
        let previous = self.roles.remove(role);
        if let Some(p) = &previous
            && let Some(by_uuid) = self.by_key.get_mut(&p.key)
        {
            if let Some(set) = by_uuid.get_mut(&p.uuid) {
                set.remove(role);
                if set.is_empty() {
                    by_uuid.remove(&p.uuid);
                }
            }
            if by_uuid.is_empty() {
                self.by_key.remove(&p.key);
            }
        }
        let Some((key, uuid, _holder)) = holder else {
            return Verdict::Unknown;
        };
        let since = previous
            .filter(|p| p.revision == revision && p.uuid == uuid)
            .map_or(now, |p| p.since);
        if self.follows_key(key) {
            self.sessions
                .entry(key.to_string())
                .or_insert_with(|| Track::new(now));
        }
        let mut interest = Interest {
            key: key.to_string(),
            uuid,
            revision,
            since,
            gone: false,
        };
        let verdict = self.verdict_of(role, &interest);
        interest.gone = verdict == Verdict::Gone;
        self.by_key
            .entry(key.to_string())
            .or_default()
            .entry(uuid)
            .or_default()
            .insert(role.clone());
        self.roles.insert(role.clone(), interest);
        verdict
    }

    fn verdict_of(&self, role: &RoleName, i: &Interest) -> Verdict {
        let Some(track) = self.sessions.get(&i.key) else {
            return Verdict::Unknown;
        };
        if let SessionKeyState::Value { value: Some(v), .. } = &track.state
            && v.session == i.uuid
        {
            // Rule 5: the session's owner declares the term released.
            return if v.releases(role, i.revision) {
                Verdict::Gone
            } else {
                Verdict::Live
            };
        }
        let rev = track.state.revision();
        let floor = track.first_seen(i.uuid).unwrap_or(i.revision);
        if rev > floor {
            // Rule 2: a marker or another value above the first sighting of the uuid.
            Verdict::Gone
        } else {
            Verdict::Unknown
        }
    }

    fn newly_gone(&mut self, key: &str) -> Vec<(RoleName, u64)> {
        let Some(by_uuid) = self.by_key.get(key) else {
            return Vec::new();
        };
        // A value of session `live`: a role resting on `live` is gone only if the value lists
        // its term as released (rule 5), so of those only the listed roles need a verdict —
        // none in the common renewal; roles resting on any other uuid all need one (rule 2).
        let live = match self.sessions.get(key).map(|t| &t.state) {
            Some(SessionKeyState::Value { value: Some(v), .. }) => Some(v),
            _ => None,
        };
        let mut out = Vec::new();
        let mut judge = |role: &RoleName| {
            if let Some(i) = self.roles.get(role)
                && !i.gone
                && self.verdict_of(role, i) == Verdict::Gone
            {
                out.push((role.clone(), i.revision));
            }
        };
        for (uuid, roles) in by_uuid {
            match live {
                Some(v) if v.session == *uuid => {
                    for term in &v.released {
                        if roles.contains(&term.role) {
                            judge(&term.role);
                        }
                    }
                }
                _ => roles.iter().for_each(&mut judge),
            }
        }
        // One order whatever the map's: the simulation replays runs by seed.
        out.sort();
        out.dedup();
        for (role, _) in &out {
            if let Some(i) = self.roles.get_mut(role) {
                i.gone = true;
            }
        }
        out
    }

    /// A delete of `id`'s record at `revision` asked for by [`SessionBook::ended_members`]
    /// failed or its outcome is unknown: it is asked for again (if the record is unchanged).
    pub fn end_not_done(&mut self, id: &InstanceId, revision: u64) {
        if let Some(f) = &mut self.presence
            && f.ending.get(id) == Some(&revision)
        {
            f.ending.remove(id);
        }
    }

    /// The longest TTL of the sessions whose values the book holds (zero without any): after
    /// the bucket is recreated, a holder of the old one with that TTL may act until its
    /// deadline, so the roles hold their acquires in the new bucket for at least that long
    /// (Q6). Read before the book is reset.
    pub fn longest_session_ttl(&self) -> Duration {
        self.sessions
            .values()
            .filter_map(|t| match &t.state {
                SessionKeyState::Value { value: Some(v), .. } => Some(v.ttl()),
                _ => None,
            })
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// The backstop period for a session of TTL `session_ttl` (Q5 rule 4).
    #[must_use]
    pub fn period(&self, session_ttl: Duration) -> Duration {
        self.own_ttl.max(session_ttl) + self.own_heartbeat + BACKSTOP_GRACE
    }

    /// Reaps that are due (rule 4): a session key some role rests on (without a verdict of
    /// gone) that stayed at one revision for the backstop period — counted from the first
    /// sighting of that revision, and never from before the role value was seen — or that a
    /// leader read found without any entry after a refused reap. At most one reap per key in
    /// flight, and after one the next waits a period (except after such an absent read).
    pub fn due_reaps(&mut self, now: Instant) -> Vec<Reap> {
        let mut due = Vec::new();
        for (key, roles) in &self.by_key {
            let Some(track) = self.sessions.get(key) else {
                continue;
            };
            let ttl = match &track.state {
                SessionKeyState::Value { value: Some(v), .. } => v.ttl(),
                _ => Duration::ZERO,
            };
            let period = self.period(ttl);
            if track
                .reap
                .is_some_and(|(_, sent_at, in_flight)| in_flight && now < sent_at + REAP_LOST)
            {
                continue;
            }
            let expected = if track.absent_at_leader {
                0
            } else {
                if track
                    .reap
                    .is_some_and(|(_, sent_at, _)| now < sent_at + period)
                {
                    continue;
                }
                // Nothing rests on this revision for a period yet (the common case: a live
                // session renewed every heartbeat): no role to look at.
                if now < track.seen_at + period {
                    continue;
                }
                let waiting = roles.values().flatten().any(|r| {
                    self.roles.get(r).is_some_and(|i| {
                        !i.gone
                            && self.verdict_of(r, i) != Verdict::Gone
                            && now >= track.seen_at.max(i.since) + period
                    })
                });
                if !waiting {
                    continue;
                }
                track.state.revision()
            };
            due.push(Reap {
                key: key.clone(),
                expected,
            });
        }
        for reap in &due {
            if let Some(t) = self.sessions.get_mut(&reap.key) {
                t.reap = Some((reap.expected, now, true));
                t.absent_at_leader = false;
            }
        }
        due
    }

    /// The outcome of a reap asked for by [`SessionBook::due_reaps`].
    pub fn reap_done(&mut self, reap: &Reap, outcome: WriteOutcome, now: Instant) -> ReapResult {
        if let Some(t) = self.sessions.get_mut(&reap.key)
            && let Some((_, _, in_flight)) = &mut t.reap
        {
            *in_flight = false;
        }
        match outcome {
            WriteOutcome::Ok { revision } => ReapResult {
                // Our own purge marker: rule 2 for every role resting on the key.
                gone: self.observe(
                    &reap.key,
                    SessionKeyState::Marker {
                        revision,
                        expired: true,
                    },
                    now,
                ),
                read: false,
            },
            // The key moved (or a replicated stream raced us): learn it from the leader.
            WriteOutcome::Conflict | WriteOutcome::Retry => ReapResult {
                gone: Vec::new(),
                read: true,
            },
            // Perhaps stored (the watcher will show the marker), or refused: a period later.
            WriteOutcome::Unknown | WriteOutcome::Failed(_) => ReapResult::default(),
        }
    }

    /// The result of a leader read of `key` after a refused reap. A newer entry is learned
    /// (the period starts again from it); no entry at all where one was known makes the next
    /// reap one on revision 0 (it succeeds only if the key really has no entry). Returns the
    /// roles that became vacant.
    pub fn leader_read(
        &mut self,
        key: &str,
        state: SessionKeyState,
        now: Instant,
    ) -> Vec<(RoleName, u64)> {
        let known = self.sessions.get(key).map_or(0, |t| t.state.revision());
        if state.revision() > known {
            return self.observe(key, state, now);
        }
        if state == SessionKeyState::Absent
            && known > 0
            && let Some(t) = self.sessions.get_mut(key)
        {
            t.absent_at_leader = true;
        }
        Vec::new()
    }

    /// Whether the session key `key`, which held session `uuid`, now holds a live session of
    /// the same instance with another uuid: the instance restarted (or started a new session
    /// after losing one) and comes back for the roles of its old session (Q6 restart
    /// adoption, Q7: it ranks first for them).
    #[must_use]
    pub fn returned(&self, key: &str, uuid: Uuid) -> bool {
        let followed = self.sessions.get(key).is_some_and(|t| {
            matches!(&t.state, SessionKeyState::Value { value: Some(v), .. } if v.session != uuid)
        });
        // Not followed (Q8): its member record lists the class's current session.
        followed
            || crate::value::parse_session_key(key).is_some_and(|(instance, ttl_ms)| {
                self.member(&instance)
                    .and_then(|r| r.sessions.get(&ttl_ms))
                    .is_some_and(|u| *u != uuid)
                    && self.is_member_live(&instance)
            })
    }

    fn is_member_live(&self, id: &InstanceId) -> bool {
        self.presence
            .as_ref()
            .is_some_and(|f| f.presence.is_live(id))
    }

    /// Whether `instance` has the live session `uuid` (the latest entry of one of its session
    /// keys holds it): the target of a move still lives (Q13).
    #[must_use]
    pub fn is_live_session(&self, instance: &InstanceId, uuid: Uuid) -> bool {
        let followed = self.sessions.values().any(|t| {
            matches!(&t.state, SessionKeyState::Value { value: Some(v), .. }
                if v.session == uuid && &v.instance == instance)
        });
        followed
            || (!self.follows_instance(instance)
                && self.is_member_live(instance)
                && self
                    .member(instance)
                    .is_some_and(|r| r.sessions.values().any(|u| *u == uuid)))
    }

    fn follows_instance(&self, id: &InstanceId) -> bool {
        self.presence
            .as_ref()
            .is_none_or(|f| f.follows.contains(id))
    }

    /// Instances with a live session (the latest entry of one of their session keys holds a
    /// session value), for herd ranking (Q7).
    #[must_use]
    pub fn live_instances(&self) -> BTreeSet<InstanceId> {
        let mut live: BTreeSet<InstanceId> = self
            .sessions
            .values()
            .filter_map(|t| match &t.state {
                SessionKeyState::Value { value: Some(v), .. } => Some(v.instance.clone()),
                _ => None,
            })
            .collect();
        if let Some(f) = &self.presence {
            // Q8: the members whose records list a session not seen to end (followed or
            // not); a followed member whose every key shows its end is not live.
            live.extend(f.presence.live());
        }
        live
    }
}

/// A session key a member record lists: the key and the uuid listed.
type ListedKey = (String, Uuid);

/// The instance a canonical session key names.
fn instance_of(key: &str) -> Option<InstanceId> {
    crate::value::parse_session_key(key).map(|(i, _)| i)
}

/// The herd stagger (protocol Q7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Herd {
    /// Rank `k` waits `k × step` before claiming a vacancy.
    pub step: Duration,
    /// The longest wait of any rank.
    pub cap: Duration,
    /// What every other candidate waits, on top of its rank's wait, when the previous holder
    /// came back with a new session (a restart): the returning instance claims at once.
    pub return_grace: Duration,
}

impl Herd {
    /// What the manager and the simulation use: 5 ms per rank, at most 50 ms; 100 ms for a
    /// returning holder. (2 ms / 10 ms let 100 candidates on a loaded 2-core machine send 63
    /// acquires per vacancy: the winner's put reached the others later than 10 ms; 5 / 50: 3.4,
    /// docs/benchmarks.md "Scale".)
    pub const DEFAULT: Herd = Herd {
        step: Duration::from_millis(5),
        cap: Duration::from_millis(50),
        return_grace: Duration::from_millis(100),
    };

    /// `me`'s wait before claiming `role`, vacant since `previous` (the holder that left; with
    /// `returning` when it came back with a new session) left it. By rendezvous hashing over
    /// the `live` instances other than `previous`: rank 0 claims at once, rank `k` waits
    /// `k × step`, at most `cap`; an instance not in `live` (its session not seen yet) waits
    /// as if ranked after all of them. A returning previous holder claims at once, everyone
    /// else waits `return_grace` more.
    #[must_use]
    pub fn delay(
        &self,
        role: &RoleName,
        me: &InstanceId,
        live: &BTreeSet<InstanceId>,
        previous: Option<&InstanceId>,
        returning: bool,
    ) -> Duration {
        if returning && previous == Some(me) {
            return Duration::ZERO;
        }
        let mine = rendezvous(role, me);
        let others = live.iter().filter(|i| *i != me && Some(*i) != previous);
        let ahead = if live.contains(me) {
            others.filter(|i| rendezvous(role, i) > mine).count()
        } else {
            others.count()
        };
        let rank = u32::try_from(ahead).unwrap_or(u32::MAX);
        let wait = self.step.saturating_mul(rank).min(self.cap);
        if returning && previous.is_some() {
            wait + self.return_grace
        } else {
            wait
        }
    }
}

/// The rendezvous weight of `(role, instance)`: FNV-1a over both names, then mixed.
fn rendezvous(role: &RoleName, instance: &InstanceId) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in role
        .as_str()
        .bytes()
        .chain(std::iter::once(0))
        .chain(instance.as_str().bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // splitmix64 finaliser: FNV's low bits mix poorly for short, similar names.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}
