//! The in-memory model of the bucket's keys (protocol v2): role keys (no TTL), session keys
//! and member records (per-message TTL, expiry markers that may age out), `history: 1`, CAS on
//! the last subject sequence, one stream sequence for all keys, and the bucket's epoch (a
//! deleted and recreated bucket starts again with no keys and revisions from 1).

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::core::session::SessionKeyState;
use crate::core::types::WriteOutcome;
use crate::core::types::{KeyState, WriteKind};
use crate::names::InstanceId;
use crate::value::{HolderValue, LeaseValue, SessionValue};

use super::clock::Nanos;

/// Epoch of the bucket a run starts with (a reset makes the next one: 2, 3, …; real epochs
/// are creation times, which increase too).
pub(super) const EPOCH: u64 = 1;

/// What one stream message of a key is.
#[derive(Debug, Clone)]
pub(super) enum EntryKind {
    /// A role value.
    Put(Box<LeaseValue>),
    /// A session value.
    Session(Box<SessionValue>),
    /// A member record (protocol Q8 rule 1: the presence part, `member.<instance>`).
    Member(Box<MemberRec>),
    /// A delete marker (a release, a session end, an operator's eviction).
    Delete,
    /// A server expiry marker (`MaxAge`): the only marker that ages out
    /// (`subject_delete_marker_ttl`).
    Expiry,
    /// A client's purge marker (a reap, Q5 rule 4): read as an expiry, never ages out.
    Purge,
    /// Not a message: the expiry marker before it aged out and the key has no entry at all
    /// (its revision is the marker's).
    Vanished,
}

impl EntryKind {
    /// A delete, expiry or purge marker.
    pub(super) fn is_marker(&self) -> bool {
        matches!(self, Self::Delete | Self::Expiry | Self::Purge)
    }
}

/// What a member record says, as far as protocol Q8 reads it: whose it is and the live
/// sessions it lists (TTL class in ms → uuid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MemberRec {
    pub(super) instance: InstanceId,
    /// The writing process (another client's records carry a random one).
    pub(super) incarnation: Uuid,
    pub(super) sessions: BTreeMap<u64, Uuid>,
}

/// First eight hex digits of a nonce.
pub(super) fn short(u: Uuid) -> String {
    u.simple().to_string()[..8].to_owned()
}

/// How an entry reads in traces and violations.
pub(super) fn kind_name(k: &EntryKind) -> String {
    match k {
        EntryKind::Put(v) => format!("put(nonce {} session {})", short(v.nonce), short(v.session)),
        EntryKind::Session(v) => format!("session({} {})", v.instance, short(v.session)),
        EntryKind::Member(m) => {
            let sessions: Vec<String> = m.sessions.values().map(|u| short(*u)).collect();
            format!("member({} [{}])", m.instance, sessions.join(" "))
        }
        EntryKind::Delete => "delete".into(),
        EntryKind::Expiry => "expiry".into(),
        EntryKind::Purge => "purge".into(),
        EntryKind::Vanished => "(marker aged out: no entry)".into(),
    }
}

/// One message of a key (the key's history; the bucket keeps only the last).
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) rev: u64,
    pub(super) at: Nanos,
    pub(super) kind: EntryKind,
    /// Role keys: the role node and kind of the write that stored it; session keys: the
    /// instance and [`WriteKind::Renew`] for every session write. `None` for markers the
    /// server wrote, and for whatever another client (an operator, a reap, a foreign writer)
    /// wrote.
    pub(super) writer: Option<(usize, WriteKind)>,
    /// The bucket (epoch) the message was stored in.
    pub(super) epoch: u64,
}

impl Entry {
    /// The entry as a role key's state.
    pub(super) fn state(&self) -> KeyState {
        match &self.kind {
            EntryKind::Put(v) => KeyState::Held {
                revision: self.rev,
                value: HolderValue::Lease(v.clone()),
            },
            EntryKind::Session(_) | EntryKind::Member(_) => KeyState::Held {
                revision: self.rev,
                value: HolderValue::Foreign,
            },
            EntryKind::Delete => KeyState::Vacant {
                revision: self.rev,
                expired: false,
            },
            EntryKind::Expiry | EntryKind::Purge => KeyState::Vacant {
                revision: self.rev,
                expired: true,
            },
            EntryKind::Vanished => KeyState::Absent,
        }
    }

    /// The entry as a session key's state.
    pub(super) fn session_state(&self) -> SessionKeyState {
        match &self.kind {
            EntryKind::Session(v) => SessionKeyState::Value {
                revision: self.rev,
                value: Some((**v).clone()),
            },
            EntryKind::Put(_) | EntryKind::Member(_) => SessionKeyState::Value {
                revision: self.rev,
                value: None,
            },
            EntryKind::Delete => SessionKeyState::Marker {
                revision: self.rev,
                expired: false,
            },
            EntryKind::Expiry | EntryKind::Purge => SessionKeyState::Marker {
                revision: self.rev,
                expired: true,
            },
            EntryKind::Vanished => SessionKeyState::Absent,
        }
    }

    pub(super) fn nonce(&self) -> Option<Uuid> {
        match &self.kind {
            EntryKind::Put(v) => Some(v.nonce),
            _ => None,
        }
    }
}

/// Deliberate model bugs for the negative controls.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct KvFlaws {
    /// Store every write whatever its expected revision (a plain put).
    pub(super) ignore_cas: bool,
    /// Store session renewals without a TTL: once renewed, a session never expires.
    pub(super) no_ttl_on_renew: bool,
}

/// A conditional write of one key.
#[derive(Debug, Clone)]
pub(super) struct KvWrite {
    pub(super) key: usize,
    /// `None`: a plain put (another client's).
    pub(super) expected: Option<u64>,
    pub(super) kind: EntryKind,
    /// The write's `Nats-TTL` (session starts and renewals).
    pub(super) ttl: Option<Nanos>,
    /// A session renewal (for [`KvFlaws::no_ttl_on_renew`]).
    pub(super) renew: bool,
    pub(super) writer: Option<(usize, WriteKind)>,
}

/// The keys of a JetStream KV bucket with `history: 1` and, unless `no_ttl`, per-message TTLs
/// and limit markers.
#[derive(Debug, Default)]
pub(super) struct Kv {
    /// Every key's log over every epoch, in time order, by key index (roles first, then one
    /// session key per instance slot, then one member key per instance slot).
    pub(super) logs: Vec<Vec<Entry>>,
    /// The bucket ignores TTLs (server < 2.11 or no limit markers, P3): keys never expire.
    pub(super) no_ttl: bool,
    /// Expiry markers are removed this long after they were written
    /// (`subject_delete_marker_ttl`); `None`: they stay.
    pub(super) marker_ttl: Option<Nanos>,
    /// Stream sequence of the current bucket: messages of other keys (and keys outside the
    /// model) make gaps between a key's revisions.
    pub(super) seq: u64,
    /// The current bucket's epoch.
    pub(super) epoch: u64,
    /// When the current bucket was created (server time); `None`: long before the run.
    pub(super) created: Option<Nanos>,
    pub(super) flaws: KvFlaws,
}

impl Kv {
    /// A bucket of `keys` keys, created at `created` (`None`: long before the run).
    pub(super) fn new(keys: usize, no_ttl: bool, created: Option<Nanos>, flaws: KvFlaws) -> Self {
        Self {
            logs: vec![Vec::new(); keys],
            no_ttl,
            marker_ttl: None,
            seq: 0,
            epoch: EPOCH,
            created,
            flaws,
        }
    }

    /// The entries of `key` stored in bucket `epoch` (in revision order).
    pub(super) fn epoch_log(&self, key: usize, epoch: u64) -> &[Entry] {
        let log = &self.logs[key];
        let from = log.partition_point(|e| e.epoch < epoch);
        let to = log.partition_point(|e| e.epoch <= epoch);
        &log[from..to]
    }

    /// The key's last entry in the current bucket (`None`: no entry at all).
    pub(super) fn last(&self, key: usize) -> Option<&Entry> {
        self.epoch_log(key, self.epoch)
            .last()
            .filter(|e| !matches!(e.kind, EntryKind::Vanished))
    }

    /// Revision of the key's last entry (0 = no entry).
    pub(super) fn last_rev(&self, key: usize) -> u64 {
        self.last(key).map_or(0, |e| e.rev)
    }

    /// The message at `rev` of `key` in bucket `epoch`.
    pub(super) fn entry(&self, key: usize, epoch: u64, rev: u64) -> Option<&Entry> {
        let log = self.epoch_log(key, epoch);
        // A vanished marker keeps its revision: the message comes first.
        let i = log.partition_point(|e| e.rev < rev);
        log.get(i)
            .filter(|e| e.rev == rev && !matches!(e.kind, EntryKind::Vanished))
    }

    /// Whether the expiry marker at `rev` of `key` in bucket `epoch` aged out: a watcher that
    /// gets to it only now skips it (its consumer is recreated past it).
    pub(super) fn aged_out(&self, key: usize, epoch: u64, rev: u64) -> bool {
        let log = self.epoch_log(key, epoch);
        let i = log.partition_point(|e| e.rev < rev);
        log.get(i + 1)
            .is_some_and(|e| e.rev == rev && matches!(e.kind, EntryKind::Vanished))
    }

    /// The role key's state (from the stream leader).
    pub(super) fn state(&self, key: usize) -> KeyState {
        self.last(key).map_or(KeyState::Absent, Entry::state)
    }

    /// The session key's state (from the stream leader).
    pub(super) fn session_state(&self, key: usize) -> SessionKeyState {
        self.last(key)
            .map_or(SessionKeyState::Absent, Entry::session_state)
    }

    /// The last entry of the current bucket as a replica that lags behind (or a deposed
    /// leader that stopped) at server time `at` shows it.
    fn entry_at(&self, key: usize, at: Nanos) -> Option<&Entry> {
        let log = self.epoch_log(key, self.epoch);
        let n = log.partition_point(|e| e.at <= at);
        n.checked_sub(1).map(|i| &log[i])
    }

    /// The role key as a replica that lags behind at server time `at` shows it.
    pub(super) fn state_at(&self, key: usize, at: Nanos) -> KeyState {
        self.entry_at(key, at)
            .map_or(KeyState::Absent, Entry::state)
    }

    /// The session key as a replica that lags behind at server time `at` shows it.
    pub(super) fn session_state_at(&self, key: usize, at: Nanos) -> SessionKeyState {
        self.entry_at(key, at)
            .map_or(SessionKeyState::Absent, Entry::session_state)
    }

    fn push(
        &mut self,
        key: usize,
        at: Nanos,
        gap: u64,
        kind: EntryKind,
        writer: Option<(usize, WriteKind)>,
    ) -> u64 {
        self.seq += 1 + gap;
        self.logs[key].push(Entry {
            rev: self.seq,
            at,
            kind,
            writer,
            epoch: self.epoch,
        });
        self.seq
    }

    /// Applies a conditional write at `at` (NATS `Expected-Last-Subject-Sequence`: stored iff
    /// the key's last revision is the expected one). Returns the outcome and, for a put with
    /// a TTL, when the server expires it.
    pub(super) fn apply(
        &mut self,
        w: &KvWrite,
        at: Nanos,
        gap: u64,
    ) -> (WriteOutcome, Option<Nanos>) {
        if !self.flaws.ignore_cas
            && w.expected
                .is_some_and(|expected| expected != self.last_rev(w.key))
        {
            return (WriteOutcome::Conflict, None);
        }
        let keep = self.no_ttl || (self.flaws.no_ttl_on_renew && w.renew);
        let expires = w.ttl.filter(|_| !keep).map(|ttl| at + ttl);
        let revision = self.push(w.key, at, gap, w.kind.clone(), w.writer);
        (WriteOutcome::Ok { revision }, expires)
    }

    /// The TTL of the put at `rev` of bucket `epoch` ran out: if it is still the key's last
    /// entry, the server removes it and leaves an expiry marker. Returns the marker's
    /// revision.
    pub(super) fn expire(
        &mut self,
        key: usize,
        epoch: u64,
        rev: u64,
        at: Nanos,
        gap: u64,
    ) -> Option<u64> {
        if epoch != self.epoch {
            return None;
        }
        let last = self.last(key)?;
        if last.rev != rev || last.kind.is_marker() {
            return None;
        }
        Some(self.push(key, at, gap, EntryKind::Expiry, None))
    }

    /// The expiry marker at `rev` of bucket `epoch` aged out: if it is still the key's last
    /// entry, the key has no entry any more. Whether it did.
    pub(super) fn vanish(&mut self, key: usize, epoch: u64, rev: u64, at: Nanos) -> bool {
        if epoch != self.epoch
            || !self
                .last(key)
                .is_some_and(|e| e.rev == rev && matches!(e.kind, EntryKind::Expiry))
        {
            return false;
        }
        self.logs[key].push(Entry {
            rev,
            at,
            kind: EntryKind::Vanished,
            writer: None,
            epoch,
        });
        true
    }

    /// An operator deletes the key (a plain delete: an eviction). Returns the marker's revision.
    pub(super) fn evict(&mut self, key: usize, at: Nanos, gap: u64) -> u64 {
        self.push(key, at, gap, EntryKind::Delete, None)
    }

    /// An operator deletes the bucket and creates it again at `at`: no keys, revisions from 1,
    /// a new epoch. The logs keep the old bucket's entries for the checker.
    pub(super) fn reset(&mut self, at: Nanos) {
        self.epoch += 1;
        self.seq = 0;
        self.created = Some(at);
    }
}
