//! Each process's own member record (protocol Q8 rules 1 and 6), as the manager writes it: the
//! presence record `member.<instance>` listing its live session, written when a session is
//! announced, rewritten unchanged every third of the presence TTL (with that TTL), deleted at a
//! graceful stop; after another process deleted or replaced it, written again only after an
//! acknowledged session renewal sent after the delete was seen, at most once per heartbeat.
//! Every write is a CAS on the last revision of the key this process knows.

use std::collections::BTreeMap;

use tokio::time::Instant;
use uuid::Uuid;

use crate::core::types::{WriteKind, WriteOutcome};
use crate::sim::clock::Nanos;
use crate::sim::kv::{EntryKind, KvWrite, MemberRec};

use super::instance::BACKSTOP_IO_TIMEOUT;
use super::presence_state::MemberOp;
use super::{Sim, Who};

impl Sim {
    /// The presence TTL of the member records' writes (none with flaw `no_record_ends`).
    fn presence_ttl(&self) -> Option<Nanos> {
        (!self.flaws.no_record_ends).then(|| self.sc.presence_ttl())
    }

    /// Sends a member-key operation of process `i`.
    pub(super) fn send_member_write(&mut self, i: usize, op: MemberOp, w: KvWrite) {
        let id = self.insts[i].next_reap;
        self.insts[i].next_reap += 1;
        self.insts[i].member_ops.push((id, op));
        self.send_write(Who::Member(i), id, w, BACKSTOP_IO_TIMEOUT);
    }

    /// Writes process `i`'s record listing session `uuid` (CAS on the revision known).
    fn write_record(&mut self, i: usize, uuid: Uuid, now: Instant) {
        if self.flaws.pre_q8 {
            return;
        }
        let ttl_ms = u64::try_from(self.timing.ttl.as_millis()).unwrap_or(u64::MAX);
        let inst = &mut self.insts[i];
        inst.own.session = Some(uuid);
        inst.own.last_write = Some(now);
        inst.own.retry = false;
        let rec = MemberRec {
            instance: inst.id.clone(),
            incarnation: inst.incarnation,
            sessions: BTreeMap::from([(ttl_ms, uuid)]),
        };
        let w = KvWrite {
            key: self.member_key_of(self.insts[i].slot),
            expected: Some(self.insts[i].own.rev),
            kind: EntryKind::Member(Box::new(rec)),
            ttl: self.presence_ttl(),
            renew: false,
            writer: Some((i, WriteKind::Renew)),
        };
        self.count("record_written");
        self.send_member_write(i, MemberOp::Own, w);
    }

    /// A session was announced to the roles (rule 1: the record names it; a new session also
    /// ends a wait of rule 6, its start being an acknowledged write sent after it).
    pub(super) fn record_session_started(&mut self, i: usize, uuid: Uuid) {
        let now = self.insts[i].clock.local(self.now);
        self.insts[i].own.blocked_since = None;
        let refresh = self.sc.presence_ttl() / 3;
        self.insts[i].own.next_refresh = self.now + refresh;
        self.write_record(i, uuid, now);
    }

    /// An acknowledged renewal of session `uuid` sent at `sent`: the record is written again
    /// if another process deleted or replaced it before `sent` (rule 6) or a write failed.
    pub(super) fn record_renewed(&mut self, i: usize, uuid: Uuid, sent: Instant, now: Instant) {
        let own = &self.insts[i].own;
        let after_delete = own.blocked_since.is_some_and(|t| sent >= t);
        let due = own
            .last_write
            .is_none_or(|w| now >= w + self.timing.heartbeat);
        if (after_delete || (own.retry && own.blocked_since.is_none())) && due {
            if after_delete {
                self.count("record_rewritten_after_delete");
            }
            self.insts[i].own.blocked_since = None;
            self.write_record(i, uuid, now);
        }
    }

    /// The backstop tick: the unchanged rewrite every third of the presence TTL, while the
    /// listed session lives and no wait of rule 6 holds it back.
    pub(super) fn record_tick(&mut self, i: usize, now: Instant) {
        let inst = &self.insts[i];
        if self.now < inst.own.next_refresh || inst.own.blocked_since.is_some() {
            return;
        }
        let Some(uuid) = inst.own.session.filter(|u| inst.live == Some(*u)) else {
            return;
        };
        self.insts[i].own.next_refresh = self.now + self.sc.presence_ttl() / 3;
        self.write_record(i, uuid, now);
    }

    /// The session ended at a graceful stop: the record is deleted (CAS).
    pub(super) fn record_stopped(&mut self, i: usize) {
        if self.flaws.pre_q8 {
            return;
        }
        let inst = &mut self.insts[i];
        inst.own.session = None;
        let w = KvWrite {
            key: self.member_key_of(self.insts[i].slot),
            expected: Some(self.insts[i].own.rev),
            kind: EntryKind::Delete,
            ttl: None,
            renew: false,
            writer: Some((i, WriteKind::Release)),
        };
        self.send_member_write(i, MemberOp::Own, w);
    }

    /// The watcher delivered an entry of the own member key at `rev` (`ours`: this process
    /// wrote it): a delete or another process's value waits for a renewal (rule 6).
    pub(super) fn own_record_seen(&mut self, i: usize, rev: u64, ours: bool, now: Instant) {
        let inst = &mut self.insts[i];
        inst.own.rev = inst.own.rev.max(rev);
        if !ours && inst.own.session.is_some() && inst.own.blocked_since.is_none() {
            inst.own.blocked_since = Some(now);
            self.count("own_record_removed_by_another");
        }
    }

    /// The outcome of the own record's write.
    pub(super) fn own_record_done(&mut self, i: usize, outcome: WriteOutcome, now: Instant) {
        let own = &mut self.insts[i].own;
        match outcome {
            WriteOutcome::Ok { revision } => own.rev = own.rev.max(revision),
            // Replaced meanwhile (or written by an earlier incarnation): rule 6.
            WriteOutcome::Conflict => {
                own.blocked_since.get_or_insert(now);
            }
            WriteOutcome::Retry | WriteOutcome::Failed(_) | WriteOutcome::Unknown => {
                own.retry = true;
            }
        }
    }

    /// A new bucket: no record in it yet (the next session start writes one).
    pub(super) fn record_reset(&mut self, i: usize) {
        let own = &mut self.insts[i].own;
        own.rev = 0;
        own.blocked_since = None;
        own.retry = own.session.is_some();
    }
}
