//! Who is present in the bucket and whose sessions this instance follows (protocol Q8): the
//! sessions each member record lists, the successor ranking, the set of instances to follow
//! (itself, the members it is a successor of, orphans), the second tier it reads, and the
//! judgement that a member's listed session ended. Pure: the watcher feeds it the `member.`
//! entries and the instances role values name; the follower acts on what it answers.
//!
//! Nothing here decides a vacancy. A member record only says whom to follow and who counts as
//! live for the herd ranking and placement; Q5 decides vacancies from the followed keys.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::session_types::SessionKeyState;
use crate::names::InstanceId;

/// How many members follow each member's sessions (protocol Q8 rule 2).
pub const SUCCESSORS: usize = 3;

/// How long an instance that role values name but that never had a record here waits to be
/// followed as an orphan: its record usually arrives just after its first role value (the
/// record and the acquire are written concurrently at a session start).
pub const ORPHAN_GRACE: Duration = Duration::from_millis(1500);

/// A session some role value names: its instance, TTL class in milliseconds and uuid.
pub type NamedSession = (InstanceId, u64, Uuid);

/// One member record as presence reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresentRecord {
    /// The record's revision (the CAS of a delete).
    pub revision: u64,
    /// The member's live sessions: TTL class in milliseconds → session uuid. Empty: the
    /// record says nothing about sessions (an older build): not present.
    pub sessions: BTreeMap<u64, Uuid>,
}

/// Whom to follow and whom to read, as of one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    /// Instances whose session keys this instance follows (one consumer each).
    pub follow: BTreeSet<InstanceId>,
    /// Members this instance reads from the stream leader once per backstop period (the
    /// second tier: it ranks `SUCCESSORS … 2 × SUCCESSORS − 1` for them).
    pub poll: BTreeSet<InstanceId>,
    /// When the answer may change without any input (an orphan's grace ends).
    pub recheck_at: Option<Instant>,
}

/// The member records this instance knows and what follows from them.
#[derive(Debug)]
pub struct Presence {
    me: InstanceId,
    records: BTreeMap<InstanceId, PresentRecord>,
    /// Members whose record was deleted (a marker seen): an orphan at once when named.
    deleted: BTreeSet<InstanceId>,
    /// Followed members seen to end a listed session, with the record revision judged: not
    /// live until the record is written again.
    ended: BTreeMap<InstanceId, u64>,
    /// Sessions role values name, with when this instance first saw each named.
    named: HashMap<NamedSession, Instant>,
    /// This instance's place in the rankings, computed once per change of the live members
    /// (a vacancy or a refresh asks [`Presence::wanted`] again and finds it here).
    places: Option<Places>,
}

/// The members this instance is a successor of and the second tier of.
#[derive(Debug, Clone, Default)]
struct Places {
    follow: BTreeSet<InstanceId>,
    poll: BTreeSet<InstanceId>,
}

impl Presence {
    /// Nothing known yet, for instance `me`.
    #[must_use]
    pub fn new(me: InstanceId) -> Self {
        Self {
            me,
            records: BTreeMap::new(),
            deleted: BTreeSet::new(),
            ended: BTreeMap::new(),
            named: HashMap::new(),
            places: None,
        }
    }

    /// The instance this presence is of.
    #[must_use]
    pub fn me(&self) -> &InstanceId {
        &self.me
    }

    /// Forgets everything (the bucket was recreated).
    pub fn reset(&mut self) {
        self.places = None;
        self.records.clear();
        self.deleted.clear();
        self.ended.clear();
        self.named.clear();
    }

    /// A record of `id` was written (or a newer one read). Older revisions are ignored.
    pub fn record(&mut self, id: InstanceId, record: PresentRecord) {
        if self
            .records
            .get(&id)
            .is_some_and(|r| r.revision >= record.revision)
        {
            return;
        }
        self.deleted.remove(&id);
        let was_live = self.is_live(&id);
        // A rewrite listing the same sessions (the presence TTL's refresh) does not bring
        // back a member seen to end; one listing other sessions does.
        match self.records.get(&id) {
            Some(old) if old.sessions == record.sessions => {
                if let Some(judged) = self.ended.get_mut(&id) {
                    *judged = record.revision;
                }
            }
            _ => {
                self.ended.remove(&id);
            }
        }
        // A named session of `id` this record does not list waits its grace from now (the
        // record just changed: a restarted holder's record lists its new session before it
        // takes its roles back, and nobody follows it meanwhile).
        if !record.sessions.is_empty() {
            self.named.retain(|(named, ttl_ms, uuid), _| {
                *named != id || record.sessions.get(ttl_ms) == Some(uuid)
            });
        }
        self.records.insert(id.clone(), record);
        if self.is_live(&id) != was_live {
            self.places = None;
        }
    }

    /// `id`'s record was deleted, purged or expired (a marker at `revision`), or replaced by
    /// something that is not a record.
    pub fn record_gone(&mut self, id: &InstanceId, revision: u64) {
        if self.records.get(id).is_some_and(|r| r.revision >= revision) {
            return;
        }
        if self.records.remove(id).is_some() {
            self.places = None;
        }
        self.ended.remove(id);
        self.deleted.insert(id.clone());
    }

    /// The record of `id`, if any.
    #[must_use]
    pub fn get(&self, id: &InstanceId) -> Option<&PresentRecord> {
        self.records.get(id)
    }

    /// A followed member was seen to end a session its record at `revision` lists: not live
    /// until its record changes.
    pub fn saw_end(&mut self, id: &InstanceId, revision: u64) {
        if self.records.get(id).is_some_and(|r| r.revision == revision)
            && self.ended.insert(id.clone(), revision).is_none()
        {
            self.places = None;
        }
    }

    /// The sessions role values name now (their holders'), as of `now`.
    pub fn set_named(&mut self, named: &BTreeSet<NamedSession>, now: Instant) {
        self.named.retain(|s, _| named.contains(s));
        for s in named {
            self.named.entry(s.clone()).or_insert(now);
        }
    }

    /// Whether `id` has a record listing a session that was not seen to end.
    #[must_use]
    pub fn is_live(&self, id: &InstanceId) -> bool {
        self.records.get(id).is_some_and(|r| !r.sessions.is_empty()) && !self.ended.contains_key(id)
    }

    /// The live members (Q8 rule 1), this instance included once its record is seen.
    #[must_use]
    pub fn live(&self) -> BTreeSet<InstanceId> {
        self.records
            .keys()
            .filter(|id| self.is_live(id))
            .cloned()
            .collect()
    }

    /// The live members other than `h` in the order they follow `h` (rendezvous hash of
    /// `(h, member)`, highest first).
    ///
    /// This instance counts itself live whatever its own record shows: it follows the members
    /// it ranks high for from its start, before its record is written or seen (a process cut
    /// off before its watcher delivered its own record still tracks the sessions it is a
    /// successor of, and its reaps and leader reads need no watcher).
    #[cfg(test)]
    #[must_use]
    pub fn ranking(&self, h: &InstanceId) -> Vec<InstanceId> {
        follow_order(
            h,
            self.records
                .keys()
                .filter(|m| self.is_live(m))
                .chain(std::iter::once(&self.me)),
        )
    }

    /// Whether the instance of `named`, a session a role value names, counts as an orphan
    /// now: its record does not list that session — the record was deleted or lists no
    /// session at all (at once), or there is none here or it lists other sessions for
    /// [`ORPHAN_GRACE`] since the session was first named. The record of a new session
    /// arrives just after its first role values; a session that ended while its instance
    /// lives on (restarted without the role, or a TTL class given up) is never listed again,
    /// so its end is seen by its successors only, and they judge only the sessions the record
    /// lists: without this, a role resting on it waits for ever for a candidate that is not
    /// a successor (Q8 rule 7).
    fn orphan(&self, named: &NamedSession, since: Instant, now: Instant) -> Result<bool, Instant> {
        let (id, ttl_ms, uuid) = named;
        match self.records.get(id) {
            Some(r) if r.sessions.get(ttl_ms) == Some(uuid) => return Ok(false),
            Some(r) if r.sessions.is_empty() => return Ok(true),
            None if self.deleted.contains(id) => return Ok(true),
            _ => {}
        }
        let due = since + ORPHAN_GRACE;
        if due <= now { Ok(true) } else { Err(due) }
    }

    /// Whom this instance follows and reads now (Q8 rules 3 and 5).
    pub fn wanted(&mut self, now: Instant) -> Wanted {
        let places = match self.places.take() {
            Some(p) => p,
            None => self.compute_places(),
        };
        let mut out = Wanted {
            follow: places.follow.clone(),
            poll: places.poll.clone(),
            recheck_at: None,
        };
        self.places = Some(places);
        out.follow.insert(self.me.clone());
        for (named, since) in &self.named {
            match self.orphan(named, *since, now) {
                Ok(true) => {
                    out.follow.insert(named.0.clone());
                }
                Ok(false) => {}
                Err(due) => {
                    out.recheck_at = Some(out.recheck_at.map_or(due, |t| t.min(due)));
                }
            }
        }
        out.poll.retain(|h| !out.follow.contains(h));
        out
    }

    /// This instance's rank for every live member (and every member seen to end whose record
    /// is still there): O(members²) hashes, without sorting.
    fn compute_places(&self) -> Places {
        let live: Vec<&InstanceId> = self
            .records
            .keys()
            .filter(|m| self.is_live(m) && **m != self.me)
            .collect();
        let mut places = Places::default();
        for h in self.records.keys() {
            if *h == self.me || (!self.is_live(h) && !self.ended.contains_key(h)) {
                continue;
            }
            let mine = (pair_weight(h, &self.me), &self.me);
            let ahead = live
                .iter()
                .filter(|m| **m != h)
                .filter(|m| {
                    let theirs = (pair_weight(h, m), **m);
                    theirs.0 > mine.0 || (theirs.0 == mine.0 && theirs.1 < mine.1)
                })
                .count();
            if ahead < SUCCESSORS {
                places.follow.insert(h.clone());
            } else if ahead < 2 * SUCCESSORS {
                places.poll.insert(h.clone());
            }
        }
        places
    }
}

/// The TTL class by which a listed session key's judgement ([`session_ended`]) waits: the one
/// of the session value the key shows (a session value's `ttl_ms` is its key's class), zero
/// for anything else — never the class the member record claims. A record is any client's
/// write: one listing a class nobody uses (`"3600000"`, a key that has no entry) would
/// otherwise keep a dead member live (herd ranking, placement, successor rankings) for as long
/// as it claims (a foreign record has no presence TTL either).
#[must_use]
pub fn shown_ttl(state: &SessionKeyState) -> Duration {
    match state {
        SessionKeyState::Value { value: Some(v), .. } => v.ttl(),
        _ => Duration::ZERO,
    }
}

/// Whether a session a member's record lists (`uuid`) has ended, from what the key shows:
/// `state`, first sighted at `seen_at` (Q8 rule 4). A marker, another uuid, or no entry or
/// the same entry for `period` — a member record's delete is not a vacancy, so no CAS proof
/// is needed, only a fair judgement.
#[must_use]
pub fn session_ended(
    uuid: Uuid,
    state: &SessionKeyState,
    seen_at: Instant,
    now: Instant,
    period: Duration,
) -> bool {
    match state {
        SessionKeyState::Marker { .. } => true,
        SessionKeyState::Value { value: Some(v), .. } if v.session != uuid => true,
        SessionKeyState::Value { .. } | SessionKeyState::Absent => {
            now.saturating_duration_since(seen_at) >= period
        }
    }
}

/// `members` other than `h` in the order they follow `h` (Q8 rule 2: rendezvous hash of
/// `(h, member)`, highest first; the first [`SUCCESSORS`] are `h`'s successors, the next
/// [`SUCCESSORS`] its second tier).
#[cfg(any(test, feature = "tooling"))]
#[must_use]
pub fn follow_order<'a>(
    h: &InstanceId,
    members: impl IntoIterator<Item = &'a InstanceId>,
) -> Vec<InstanceId> {
    let mut ranked: Vec<(u64, &InstanceId)> = members
        .into_iter()
        .filter(|m| *m != h)
        .map(|m| (pair_weight(h, m), m))
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    ranked.dedup_by(|a, b| a.1 == b.1);
    ranked.into_iter().map(|(_, m)| m.clone()).collect()
}

/// Where in a backstop period the second tier's first read of `member` falls, as a fraction
/// in `[0, 1)` fixed per member (Q8 rule 5): a member that enters many second tiers at once
/// is not read by all of them together.
#[must_use]
pub fn first_read_spread(member: &InstanceId) -> f64 {
    let h = member
        .as_str()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    // 53 bits of the hash as a fraction.
    #[allow(clippy::cast_precision_loss)]
    let f = (h >> 11) as f64 / (1u64 << 53) as f64;
    f
}

/// The weight of member `m` as a follower of `h`: FNV-1a over both ids, then mixed.
fn pair_weight(h: &InstanceId, m: &InstanceId) -> u64 {
    let mut x: u64 = 0xcbf2_9ce4_8422_2325;
    for b in h
        .as_str()
        .bytes()
        .chain(std::iter::once(0xff))
        .chain(m.as_str().bytes())
    {
        x ^= u64::from(b);
        x = x.wrapping_mul(0x0100_0000_01b3);
    }
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
#[path = "presence_tests.rs"]
mod tests;
