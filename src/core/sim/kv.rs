//! The in-memory model of the bucket's keys (protocol v2): role keys (no TTL) and session keys
//! (per-message TTL, expiry markers), `history: 1`, CAS on the last subject sequence, one
//! stream sequence for all keys.

use uuid::Uuid;

use crate::core::session::SessionKeyState;
use crate::core::types::WriteOutcome;
use crate::core::types::{KeyState, WriteKind};
use crate::value::{HolderValue, LeaseValue, SessionValue};

use super::clock::Nanos;

/// Bucket epoch of every machine (the simulation never resets the bucket).
pub(super) const EPOCH: u64 = 1;

/// What one stream message of a key is.
#[derive(Debug, Clone)]
pub(super) enum EntryKind {
    /// A role value.
    Put(Box<LeaseValue>),
    /// A session value.
    Session(Box<SessionValue>),
    Delete,
    Expiry,
}

/// One message of a key (the key's history; the bucket keeps only the last).
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) rev: u64,
    pub(super) at: Nanos,
    pub(super) kind: EntryKind,
    /// Role keys: the role node and kind of the write that stored it; session keys: the
    /// instance and [`WriteKind::Renew`] for every session write. `None` for markers the
    /// server or an operator wrote.
    pub(super) writer: Option<(usize, WriteKind)>,
}

impl Entry {
    /// The entry as a role key's state.
    pub(super) fn state(&self) -> KeyState {
        match &self.kind {
            EntryKind::Put(v) => KeyState::Held {
                revision: self.rev,
                value: HolderValue::Lease(v.clone()),
            },
            EntryKind::Session(_) => KeyState::Held {
                revision: self.rev,
                value: HolderValue::Foreign,
            },
            EntryKind::Delete => KeyState::Vacant {
                revision: self.rev,
                expired: false,
            },
            EntryKind::Expiry => KeyState::Vacant {
                revision: self.rev,
                expired: true,
            },
        }
    }

    /// The entry as a session key's state.
    pub(super) fn session_state(&self) -> SessionKeyState {
        match &self.kind {
            EntryKind::Session(v) => SessionKeyState::Value {
                revision: self.rev,
                value: Some((**v).clone()),
            },
            EntryKind::Put(_) => SessionKeyState::Value {
                revision: self.rev,
                value: None,
            },
            EntryKind::Delete => SessionKeyState::Marker {
                revision: self.rev,
                expired: false,
            },
            EntryKind::Expiry => SessionKeyState::Marker {
                revision: self.rev,
                expired: true,
            },
        }
    }

    pub(super) fn nonce(&self) -> Option<Uuid> {
        match &self.kind {
            EntryKind::Put(v) => Some(v.nonce),
            EntryKind::Session(_) | EntryKind::Delete | EntryKind::Expiry => None,
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
    pub(super) expected: u64,
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
    /// Every key's log, by key index (roles first, then one session key per instance slot).
    pub(super) logs: Vec<Vec<Entry>>,
    /// The bucket ignores TTLs (server < 2.11 or no limit markers, P3): keys never expire.
    pub(super) no_ttl: bool,
    /// Stream sequence: messages of other keys (and keys outside the model) make gaps
    /// between a key's revisions.
    pub(super) seq: u64,
    pub(super) flaws: KvFlaws,
}

impl Kv {
    /// A bucket of `keys` keys.
    pub(super) fn new(keys: usize, no_ttl: bool, flaws: KvFlaws) -> Self {
        Self {
            logs: vec![Vec::new(); keys],
            no_ttl,
            seq: 0,
            flaws,
        }
    }

    /// Revision of the key's last entry (0 = never written).
    pub(super) fn last_rev(&self, key: usize) -> u64 {
        self.logs[key].last().map_or(0, |e| e.rev)
    }

    pub(super) fn entry(&self, key: usize, rev: u64) -> Option<&Entry> {
        let log = &self.logs[key];
        let i = log.binary_search_by_key(&rev, |e| e.rev).ok()?;
        log.get(i)
    }

    /// The role key's state (from the stream leader).
    pub(super) fn state(&self, key: usize) -> KeyState {
        self.logs[key].last().map_or(KeyState::Absent, Entry::state)
    }

    /// The session key's state (from the stream leader).
    pub(super) fn session_state(&self, key: usize) -> SessionKeyState {
        self.logs[key]
            .last()
            .map_or(SessionKeyState::Absent, Entry::session_state)
    }

    /// The role key as a replica that lags behind at server time `at` shows it.
    pub(super) fn state_at(&self, key: usize, at: Nanos) -> KeyState {
        let log = &self.logs[key];
        let n = log.partition_point(|e| e.at <= at);
        n.checked_sub(1)
            .map_or(KeyState::Absent, |i| log[i].state())
    }

    fn push(
        &mut self,
        key: usize,
        at: Nanos,
        gap: u64,
        kind: EntryKind,
        writer: Option<(usize, WriteKind)>,
    ) {
        self.seq += 1 + gap;
        self.logs[key].push(Entry {
            rev: self.seq,
            at,
            kind,
            writer,
        });
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
        if !self.flaws.ignore_cas && w.expected != self.last_rev(w.key) {
            return (WriteOutcome::Conflict, None);
        }
        let keep = self.no_ttl || (self.flaws.no_ttl_on_renew && w.renew);
        let expires = w.ttl.filter(|_| !keep).map(|ttl| at + ttl);
        self.push(w.key, at, gap, w.kind.clone(), w.writer);
        (WriteOutcome::Ok { revision: self.seq }, expires)
    }

    /// The TTL of the put at `rev` ran out: if it is still the key's last entry, the server
    /// removes it and leaves an expiry marker. Returns the marker's revision.
    pub(super) fn expire(&mut self, key: usize, rev: u64, at: Nanos, gap: u64) -> Option<u64> {
        let last = self.logs[key].last()?;
        if last.rev != rev || matches!(last.kind, EntryKind::Delete | EntryKind::Expiry) {
            return None;
        }
        self.push(key, at, gap, EntryKind::Expiry, None);
        Some(self.seq)
    }

    /// An operator deletes the key (a plain delete: an eviction). Returns the marker's revision.
    pub(super) fn evict(&mut self, key: usize, at: Nanos, gap: u64) -> u64 {
        self.push(key, at, gap, EntryKind::Delete, None);
        self.seq
    }
}
