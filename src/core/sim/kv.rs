//! The in-memory model of the role's JetStream KV key (history 1, per-message TTLs, CAS).

use uuid::Uuid;

use crate::core::types::{KeyState, WriteKind, WriteOutcome, WriteRequest};
use crate::value::{HolderValue, LeaseValue};

use super::clock::{MS, Nanos};

/// Bucket epoch of every machine (the simulation never resets the bucket).
pub(super) const EPOCH: u64 = 1;

/// What one stream message of the role key is.
#[derive(Debug, Clone)]
pub(super) enum EntryKind {
    Put(Box<LeaseValue>),
    Delete,
    Expiry,
}

/// One message of the role key (the key's history; the bucket keeps only the last).
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) rev: u64,
    pub(super) at: Nanos,
    pub(super) kind: EntryKind,
    /// Node and kind of the write that stored it (`None` for expiry markers).
    pub(super) writer: Option<(usize, WriteKind)>,
}

impl Entry {
    pub(super) fn state(&self) -> KeyState {
        match &self.kind {
            EntryKind::Put(v) => KeyState::Held {
                revision: self.rev,
                value: HolderValue::Lease(v.clone()),
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

    pub(super) fn nonce(&self) -> Option<Uuid> {
        match &self.kind {
            EntryKind::Put(v) => Some(v.nonce),
            EntryKind::Delete | EntryKind::Expiry => None,
        }
    }
}

/// Deliberate model bugs for the negative controls.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct KvFlaws {
    /// Store every write whatever its expected revision (a plain put).
    pub(super) ignore_cas: bool,
    /// Store renewals without a TTL: once renewed, the key never expires.
    pub(super) no_ttl_on_renew: bool,
}

/// One key of a JetStream KV bucket with `history: 1` and, unless `no_ttl`, per-message TTLs
/// and limit markers.
#[derive(Debug, Default)]
pub(super) struct Kv {
    pub(super) log: Vec<Entry>,
    /// The bucket ignores TTLs (server < 2.11 or no limit markers, P3): keys never expire.
    pub(super) no_ttl: bool,
    /// Stream sequence: messages of other keys make gaps between this key's revisions.
    pub(super) seq: u64,
    pub(super) flaws: KvFlaws,
}

impl Kv {
    /// Revision of the key's last entry (0 = never written).
    pub(super) fn last_rev(&self) -> u64 {
        self.log.last().map_or(0, |e| e.rev)
    }

    pub(super) fn entry(&self, rev: u64) -> Option<&Entry> {
        let i = self.log.binary_search_by_key(&rev, |e| e.rev).ok()?;
        self.log.get(i)
    }

    pub(super) fn state(&self) -> KeyState {
        self.log.last().map_or(KeyState::Absent, Entry::state)
    }

    /// The key as a replica that lags behind at server time `at` shows it.
    pub(super) fn state_at(&self, at: Nanos) -> KeyState {
        let n = self.log.partition_point(|e| e.at <= at);
        n.checked_sub(1)
            .map_or(KeyState::Absent, |i| self.log[i].state())
    }

    pub(super) fn push(
        &mut self,
        at: Nanos,
        gap: u64,
        kind: EntryKind,
        writer: Option<(usize, WriteKind)>,
    ) {
        self.seq += 1 + gap;
        self.log.push(Entry {
            rev: self.seq,
            at,
            kind,
            writer,
        });
    }

    /// Applies a conditional write of `node` at `at` (NATS `Expected-Last-Subject-Sequence`:
    /// stored iff the key's last revision is the expected one). Returns the outcome and, for
    /// a put with a TTL, when the server expires it.
    pub(super) fn apply(
        &mut self,
        node: usize,
        req: &WriteRequest,
        at: Nanos,
        gap: u64,
    ) -> (WriteOutcome, Option<Nanos>) {
        if !self.flaws.ignore_cas && req.expected != self.last_rev() {
            return (WriteOutcome::Conflict, None);
        }
        let (kind, expires) = match &req.value {
            Some(v) => {
                let keep =
                    self.no_ttl || (self.flaws.no_ttl_on_renew && req.kind == WriteKind::Renew);
                let expires = (!keep).then(|| at + v.ttl_ms * MS);
                (EntryKind::Put(Box::new(v.clone())), expires)
            }
            None => (EntryKind::Delete, None),
        };
        self.push(at, gap, kind, Some((node, req.kind)));
        (WriteOutcome::Ok { revision: self.seq }, expires)
    }

    /// The TTL of the put at `rev` ran out: if it is still the key's last entry, the server
    /// removes it and leaves an expiry marker. Returns the marker's revision.
    pub(super) fn expire(&mut self, rev: u64, at: Nanos, gap: u64) -> Option<u64> {
        let last = self.log.last()?;
        if last.rev != rev || !matches!(last.kind, EntryKind::Put(_)) {
            return None;
        }
        self.push(at, gap, EntryKind::Expiry, None);
        Some(self.seq)
    }
}
