//! What one instance knows about every session in the bucket, and which roles' holders rest
//! on which session (protocol Q5): decides when a role whose holder's session is gone is
//! vacant. Pure: the watcher feeds it entries of `session.` keys, the role values it
//! dispatches and the results of the backstop reads it asks for.
//!
//! A session `S` with uuid `u` is **gone** for a role value at revision `R` naming it when `S`
//! shows a marker or another uuid at a revision above `s_u` (the revision at which `u` was
//! first seen in `S`) — or, when `u` was never seen, above `R` (the holder wrote `u` before it
//! wrote the role value, so anything in `S` above `R` came after `u`). Plain absence never
//! counts (a lagging replica shows it too), except in the backstop (rule 4): a leader read
//! after `S` stayed unchanged, or `u` unseen, for the observed-expiry period.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::machine::BACKSTOP_GRACE;
use super::session::SessionKeyState;
use crate::names::{InstanceId, RoleName};

/// How many uuids a session key remembers the first revision of (the current one and a few
/// before it: enough for the values dispatched while the watcher catches up).
const REMEMBERED_UUIDS: usize = 8;

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

#[derive(Debug, Clone)]
struct Track {
    state: SessionKeyState,
    /// First sighting of `state`'s revision.
    seen_at: Instant,
    /// Uuids seen in the key with the revision they were first seen at (most recent last).
    uuids: Vec<(Uuid, u64)>,
    /// A backstop read found the key unchanged at this revision after the backstop period
    /// (or absent: revision 0): sessions in it that were live are gone.
    stale: Option<u64>,
    /// When the last backstop read was sent (at most one per period).
    read_at: Option<Instant>,
    /// The revision known when that read was sent.
    read_rev: Option<u64>,
}

impl Track {
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
    /// When the role value was first seen (rule 4: a session never seen).
    since: Instant,
    /// Already reported gone.
    gone: bool,
}

/// The sessions of the bucket and the roles resting on them.
#[derive(Debug)]
pub struct SessionBook {
    sessions: HashMap<String, Track>,
    roles: HashMap<RoleName, Interest>,
    by_key: HashMap<String, BTreeSet<RoleName>>,
    /// This instance's own TTL and heartbeat (the backstop waits for the longer TTL).
    own_ttl: Duration,
    own_heartbeat: Duration,
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
        }
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
    }

    /// A session key's entry from the watcher (or a newer one from a read). Returns the roles
    /// that became vacant, with the revision of their role value.
    pub fn observe(
        &mut self,
        key: &str,
        state: SessionKeyState,
        now: Instant,
    ) -> Vec<(RoleName, u64)> {
        let rev = state.revision();
        let track = self
            .sessions
            .entry(key.to_string())
            .or_insert_with(|| Track {
                state: SessionKeyState::Absent,
                seen_at: now,
                uuids: Vec::new(),
                stale: None,
                read_at: None,
                read_rev: None,
            });
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
        track.stale = None;
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
            && let Some(set) = self.by_key.get_mut(&p.key)
        {
            set.remove(role);
            if set.is_empty() {
                self.by_key.remove(&p.key);
            }
        }
        let Some((key, uuid, _holder)) = holder else {
            return Verdict::Unknown;
        };
        let since = previous
            .filter(|p| p.revision == revision && p.uuid == uuid)
            .map_or(now, |p| p.since);
        let mut interest = Interest {
            key: key.to_string(),
            uuid,
            revision,
            since,
            gone: false,
        };
        let verdict = self.verdict_of(&interest);
        interest.gone = verdict == Verdict::Gone;
        self.by_key
            .entry(key.to_string())
            .or_default()
            .insert(role.clone());
        self.roles.insert(role.clone(), interest);
        verdict
    }

    fn verdict_of(&self, i: &Interest) -> Verdict {
        let Some(track) = self.sessions.get(&i.key) else {
            return Verdict::Unknown;
        };
        let rev = track.state.revision();
        if track.stale.is_some_and(|s| s == rev) {
            // The backstop read confirmed it: unchanged (or absent) for the whole period.
            return if track.state.uuid() == Some(i.uuid) || rev == 0 || rev > i.revision {
                Verdict::Gone
            } else {
                Verdict::Unknown
            };
        }
        if track.state.uuid() == Some(i.uuid) {
            return Verdict::Live;
        }
        let floor = track.first_seen(i.uuid).unwrap_or(i.revision);
        match track.state {
            SessionKeyState::Absent => Verdict::Unknown,
            _ if rev > floor => Verdict::Gone,
            _ => Verdict::Unknown,
        }
    }

    fn newly_gone(&mut self, key: &str) -> Vec<(RoleName, u64)> {
        let Some(roles) = self.by_key.get(key) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for role in roles {
            let Some(i) = self.roles.get(role) else {
                continue;
            };
            if !i.gone && self.verdict_of(i) == Verdict::Gone {
                out.push((role.clone(), i.revision));
            }
        }
        for (role, _) in &out {
            if let Some(i) = self.roles.get_mut(role) {
                i.gone = true;
            }
        }
        out
    }

    fn period(&self, session_ttl: Duration) -> Duration {
        self.own_ttl.max(session_ttl) + self.own_heartbeat + BACKSTOP_GRACE
    }

    /// Session keys due for a backstop read from the stream leader (rule 4): a session some
    /// role rests on that stayed at one revision, or was never seen with the role's uuid, for
    /// the observed-expiry period. Each key at most once per period.
    pub fn due_reads(&mut self, now: Instant) -> Vec<String> {
        let mut due = Vec::new();
        for (key, roles) in &self.by_key {
            let track = self.sessions.get(key);
            let ttl = match track.map(|t| &t.state) {
                Some(SessionKeyState::Value { value: Some(v), .. }) => v.ttl(),
                _ => Duration::ZERO,
            };
            let period = self.period(ttl);
            if track
                .and_then(|t| t.read_at)
                .is_some_and(|r| now < r + period)
            {
                continue;
            }
            let waiting = roles.iter().filter_map(|r| self.roles.get(r)).any(|i| {
                if i.gone {
                    return false;
                }
                match self.verdict_of(i) {
                    Verdict::Live => track.is_some_and(|t| now >= t.seen_at + period),
                    Verdict::Unknown => now >= i.since + period,
                    Verdict::Gone => false,
                }
            });
            if waiting {
                due.push(key.clone());
            }
        }
        for key in &due {
            if let Some(t) = self.sessions.get_mut(key) {
                t.read_at = Some(now);
                t.read_rev = Some(t.state.revision());
            } else {
                self.sessions.insert(
                    key.clone(),
                    Track {
                        state: SessionKeyState::Absent,
                        seen_at: now,
                        uuids: Vec::new(),
                        stale: None,
                        read_at: Some(now),
                        read_rev: Some(0),
                    },
                );
            }
        }
        due
    }

    /// The result of a backstop read of `key` (from the stream leader). Returns the roles that
    /// became vacant.
    pub fn backstop_read(
        &mut self,
        key: &str,
        state: SessionKeyState,
        now: Instant,
    ) -> Vec<(RoleName, u64)> {
        let known = self.sessions.get(key).map_or(0, |t| t.state.revision());
        if state.revision() > known {
            // News the watcher has not delivered (yet): learn it; the period starts again.
            return self.observe(key, state, now);
        }
        if let Some(t) = self.sessions.get_mut(key)
            && state.revision() == known
            && t.read_rev == Some(known)
        {
            // (Only if that revision was already the known one when the read was asked for:
            // one the watcher delivered while the read was on its way was first seen just
            // now, and says nothing about the period.)
            // Unchanged since first seen at least a period ago (the read was asked for only
            // then): the holder's deadline has passed under the clock assumption (P4, P5).
            t.stale = Some(known);
        }
        self.newly_gone(key)
    }

    /// Whether the session key `key`, which held session `uuid`, now holds a live session of
    /// the same instance with another uuid: the instance restarted (or started a new session
    /// after losing one) and comes back for the roles of its old session (Q6 restart
    /// adoption, Q7: it ranks first for them).
    #[must_use]
    pub fn returned(&self, key: &str, uuid: Uuid) -> bool {
        self.sessions.get(key).is_some_and(|t| {
            t.stale.is_none()
                && matches!(&t.state, SessionKeyState::Value { value: Some(v), .. } if v.session != uuid)
        })
    }

    /// Instances with a live session (the latest entry of one of their session keys holds a
    /// session value), for herd ranking (Q7).
    #[must_use]
    pub fn live_instances(&self) -> BTreeSet<InstanceId> {
        self.sessions
            .values()
            .filter(|t| t.stale.is_none())
            .filter_map(|t| match &t.state {
                SessionKeyState::Value { value: Some(v), .. } => Some(v.instance.clone()),
                _ => None,
            })
            .collect()
    }
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
