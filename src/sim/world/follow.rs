//! Whose session keys each process follows (protocol Q8 rules 2–5 and 7), as the manager
//! runs it: the shared watcher delivers role and member keys, and session keys only of the
//! instances the session book wants followed — each through its own consumer, which starts a
//! round trip after the decision with the last entry of the key and delivers what is stored
//! after its creation; an instance no longer followed delivers nothing more. Every backstop
//! tick the book's ended members' records are deleted (rule 4, CAS on the record's revision; a
//! failed delete is asked for again a second later) and the second tier reads the session keys
//! of the members it polls from the leader once per backstop period (the first read spread
//! over a period, one read in flight) and deletes a record whose session it judges ended
//! (rule 5), as `manager::successor` does.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::core::PresentRecord;
use crate::core::presence::Wanted;
use crate::core::presence::session_ended;
use crate::core::session::SessionKeyState;
use crate::core::types::WriteOutcome;
use crate::names::InstanceId;
use crate::sim::clock::Nanos;
use crate::sim::kv::{EntryKind, KvWrite};

use super::instance::BACKSTOP_IO_TIMEOUT;
use super::presence_state::MemberOp;
use super::{Ev, SInput, Sim, Who, instance_id};

/// How long a failed record delete waits before it is asked for again
/// (`manager::successor::DELETE_RETRY`).
const DELETE_RETRY: Duration = Duration::from_secs(1);

impl Sim {
    /// Key index of instance slot `slot`'s member key.
    pub(super) fn member_key_of(&self, slot: usize) -> usize {
        self.roles.len() + self.session_keys.len() + slot
    }

    /// The instance slot of a session key (`None`: a role or member key).
    pub(super) fn session_slot(&self, key: usize) -> Option<usize> {
        key.checked_sub(self.roles.len())
            .filter(|s| *s < self.session_keys.len())
    }

    /// The instance slot of a member key.
    pub(super) fn member_slot(&self, key: usize) -> Option<usize> {
        key.checked_sub(self.roles.len() + self.session_keys.len())
    }

    fn slot_of(&self, id: &InstanceId) -> Option<usize> {
        (0..self.session_keys.len()).find(|&s| instance_id(s) == *id)
    }

    /// The backstop period (Q5 rule 4) for the run's one TTL.
    fn period(&self) -> Duration {
        self.timing.ttl + self.timing.heartbeat + crate::core::machine::BACKSTOP_GRACE
    }

    /// Whether the watcher of process `i` delivers entry `rev` of session key `key` now: its
    /// instance is followed and the entry was stored after the consumer was created (or it is
    /// the consumer's first delivery, `replay`).
    pub(super) fn delivers(
        &self,
        i: usize,
        key: usize,
        epoch: u64,
        rev: u64,
        replay: bool,
    ) -> bool {
        if self.flaws.pre_q8 {
            return true;
        }
        let Some(&from) = self.insts[i].follow.consumers.get(&key) else {
            return false;
        };
        replay || self.kv.entry(key, epoch, rev).is_some_and(|e| e.at >= from)
    }

    /// Asks the book whom to follow and poll now and acts on it: consumers started and
    /// stopped, the second tier's set, the next re-evaluation.
    pub(super) fn refollow(&mut self, i: usize) {
        let now = self.insts[i].clock.local(self.now);
        let Some(Wanted {
            follow,
            poll,
            recheck_at,
        }) = self.insts[i].book.wanted(now)
        else {
            return;
        };
        let old = std::mem::take(&mut self.insts[i].follow.follows);
        if follow != old {
            self.insts[i].book.follow_only(follow.clone(), now);
            for id in old.difference(&follow) {
                let Some(key) = self.slot_of(id).map(|s| self.roles.len() + s) else {
                    continue;
                };
                self.insts[i].follow.consumers.remove(&key);
                self.insts[i].watch_rev[key] = 0;
            }
            for id in follow.difference(&old) {
                let orphan = self.insts[i]
                    .book
                    .member(id)
                    .is_none_or(|r| r.sessions.is_empty());
                if orphan {
                    self.count("orphan_followed");
                }
                if let Some(key) = self.slot_of(id).map(|s| self.roles.len() + s) {
                    self.start_consumer(i, key);
                }
            }
        }
        self.insts[i].follow.follows = follow;
        let polled: BTreeSet<usize> = poll.iter().filter_map(|h| self.slot_of(h)).collect();
        let f = &mut self.insts[i].follow;
        f.polls.retain(|s, _| polled.contains(s));
        for s in polled {
            f.polls.entry(s).or_default();
        }
        if let Some(t) = recheck_at {
            let at = self.insts[i].clock.global(t).max(self.now);
            if self.insts[i]
                .follow
                .recheck
                .is_none_or(|r| r > at || r < self.now)
            {
                self.insts[i].follow.recheck = Some(at);
                self.push(at, Ev::Inst(i, SInput::Recheck));
            }
        }
    }

    /// A consumer for session key `key` is created a hop from now.
    fn start_consumer(&mut self, i: usize, key: usize) {
        self.insts[i].follow.consumers.insert(key, Nanos::MAX);
        let epoch = self.insts[i].epoch;
        let at = self.now + self.rng.hop();
        self.push(at, Ev::Inst(i, SInput::Consumer { key, epoch }));
    }

    /// The consumer of `key` was created at the server: it delivers the key's last entry
    /// (deliver-last-per-subject) a hop later, then what is stored from now on.
    pub(super) fn consumer_created(&mut self, i: usize, key: usize, epoch: u64) {
        let inst = &self.insts[i];
        if !inst.follow.consumers.contains_key(&key)
            || epoch != inst.epoch
            || epoch != self.kv.epoch
            || inst.disconnected_until.is_some()
        {
            // Stopped meanwhile, or the watcher's next restart replays the key.
            return;
        }
        self.insts[i].follow.consumers.insert(key, self.now);
        let rev = self.kv.last_rev(key);
        if rev > 0 {
            let at = self.now + self.rng.hop();
            let replay = true;
            let input = SInput::Watch {
                key,
                epoch,
                rev,
                replay,
            };
            self.push(at, Ev::Inst(i, input));
        }
    }

    /// The watcher delivered entry `rev` of member key `key`: the book learns the record or
    /// its end; the own record's writer learns what happened to it; whom to follow may change.
    pub(super) fn member_entry(&mut self, i: usize, key: usize, epoch: u64, rev: u64) {
        let Some(slot) = self.member_slot(key) else {
            return;
        };
        let Some(entry) = self.kv.entry(key, epoch, rev) else {
            return;
        };
        let now = self.insts[i].clock.local(self.now);
        let ours = entry.writer.is_some_and(|(w, _)| w == i);
        let id = instance_id(slot);
        match &entry.kind {
            EntryKind::Member(rec) => {
                let record = PresentRecord {
                    revision: rev,
                    sessions: rec.sessions.clone(),
                };
                self.insts[i].book.member_put(id, record);
            }
            _ => self.insts[i].book.member_gone(&id, rev),
        }
        if slot == self.insts[i].slot {
            self.own_record_seen(i, rev, ours, now);
        }
        self.refollow(i);
    }

    /// The backstop tick's part of Q8: the records of followed members seen to end are
    /// deleted (rule 4), the second tier reads what is due (rule 5), the own record is
    /// rewritten when due.
    pub(super) fn follow_tick(&mut self, i: usize, now: Instant) {
        self.record_tick(i, now);
        self.refollow(i);
        if self.flaws.no_record_ends {
            return;
        }
        for (id, revision) in self.insts[i].book.ended_members(now) {
            let Some(slot) = self.slot_of(&id) else {
                continue;
            };
            self.delete_record(
                i,
                slot,
                revision,
                MemberOp::Delete {
                    slot,
                    revision,
                    second_tier: false,
                },
            );
        }
        let period = self.period();
        let slots: Vec<usize> = self.insts[i].follow.polls.keys().copied().collect();
        for slot in slots {
            let Some(record) = self.insts[i].book.member(&instance_id(slot)).cloned() else {
                continue;
            };
            let Some(p) = self.insts[i].follow.polls.get_mut(&slot) else {
                continue;
            };
            if p.reading || p.next_at.is_some_and(|t| now < t) {
                continue;
            }
            let Some(next) = p.next_at else {
                p.next_at = Some(
                    now + period
                        .mul_f64(crate::core::presence::first_read_spread(&instance_id(slot))),
                );
                continue;
            };
            p.next_at = Some(next.max(now) + period);
            p.reading = true;
            for (ttl_ms, uuid) in record.sessions {
                let name = crate::value::session_key(&instance_id(slot), ttl_ms);
                let Some(key) = self.session_key_named(&name) else {
                    continue;
                };
                let op = self.insts[i].next_reap;
                self.insts[i].next_reap += 1;
                let poll = MemberOp::Poll {
                    slot,
                    uuid,
                    record: record.revision,
                };
                self.insts[i].member_ops.push((op, poll));
                self.send_read(Who::Member(i), key, op, BACKSTOP_IO_TIMEOUT, false);
            }
        }
    }

    /// Deletes member `slot`'s record by CAS on `revision` (another process's delete).
    fn delete_record(&mut self, i: usize, slot: usize, revision: u64, op: MemberOp) {
        let w = KvWrite {
            key: self.member_key_of(slot),
            expected: Some(revision),
            kind: EntryKind::Delete,
            ttl: None,
            renew: false,
            writer: None,
        };
        self.send_member_write(i, op, w);
    }

    /// A second-tier read answered: the session it lists is judged (a marker or another uuid
    /// at once; the same revision for a period), and an ended one's record deleted.
    pub(super) fn polled(&mut self, i: usize, key: usize, op: u64, state: Option<SessionKeyState>) {
        let Some(at) = self.insts[i].member_ops.iter().position(|(o, _)| *o == op) else {
            return;
        };
        let (_, what) = self.insts[i].member_ops.remove(at);
        let MemberOp::Poll { slot, uuid, record } = what else {
            return;
        };
        let now = self.insts[i].clock.local(self.now);
        let period = self.period();
        let current = self.insts[i]
            .book
            .member(&instance_id(slot))
            .map(|r| r.revision);
        let Some(p) = self.insts[i].follow.polls.get_mut(&slot) else {
            return;
        };
        p.reading = false;
        let Some(state) = state else {
            return; // unknown: judged at the next read
        };
        let read = p.reads.entry(key).or_insert((state.revision(), now));
        if read.0 != state.revision() {
            *read = (state.revision(), now);
        }
        let ended = session_ended(uuid, &state, read.1, now, period);
        if ended && current == Some(record) {
            self.delete_record(
                i,
                slot,
                record,
                MemberOp::Delete {
                    slot,
                    revision: record,
                    second_tier: true,
                },
            );
        }
    }

    /// A member-key write of process `i` finished.
    pub(super) fn member_done(&mut self, i: usize, op: u64, outcome: WriteOutcome) {
        let Some(at) = self.insts[i].member_ops.iter().position(|(o, _)| *o == op) else {
            return;
        };
        let (_, what) = self.insts[i].member_ops.remove(at);
        let now = self.insts[i].clock.local(self.now);
        match (what, outcome) {
            (MemberOp::Own, _) => self.own_record_done(i, outcome, now),
            (MemberOp::Delete { second_tier, .. }, WriteOutcome::Ok { .. }) => {
                self.count(if second_tier {
                    "record_deleted_by_second_tier"
                } else {
                    "record_deleted_by_successor"
                });
            }
            // Somebody changed the record: judged again as it is now.
            (MemberOp::Delete { .. } | MemberOp::Poll { .. }, WriteOutcome::Conflict)
            | (MemberOp::Poll { .. }, _) => {}
            (MemberOp::Delete { slot, revision, .. }, _) => {
                // As `manager::successor`: a failed delete is asked for again a while later.
                let at = self.now + self.insts[i].clock.span(DELETE_RETRY);
                self.push(at, Ev::Inst(i, SInput::EndNotDone { slot, revision }));
            }
        }
    }

    /// A failed record delete's pause is over: the book asks for it again (if the record is
    /// unchanged).
    pub(super) fn end_not_done(&mut self, i: usize, slot: usize, revision: u64) {
        self.insts[i]
            .book
            .end_not_done(&instance_id(slot), revision);
    }

    /// A new bucket: no records, no consumers of the old stream (the watcher's replay creates
    /// them again for the followed keys), nothing polled.
    pub(super) fn follow_reset(&mut self, i: usize) {
        let f = &mut self.insts[i].follow;
        f.polls.clear();
        self.record_reset(i);
    }
}
