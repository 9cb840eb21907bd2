//! The watcher's backstop (protocol Q5 rule 4), as `manager::watcher` runs it: every tick the
//! session book's due reaps go out (a purge marker with a CAS on the revision known), a
//! refused reap is followed by a leader read of the key, and the book learns the outcomes.
//! Flaw `read_backstop` replaces the reap by a read (the design reaps replaced).

use tokio::time::Instant;

use crate::core::session::SessionKeyState;
use crate::core::types::{FailureKind, WriteOutcome};
use crate::sim::kv::{EntryKind, KvWrite};
use crate::sim::scenario::BACKSTOP_TICK;

use super::instance::BACKSTOP_IO_TIMEOUT;
use super::{Ev, SInput, Sim, Who};

impl Sim {
    /// The watcher's backstop tick: the reaps the book finds due go out.
    pub(super) fn tick(&mut self, i: usize, disconnected: bool, now: Instant) {
        let tick = self.insts[i].clock.span(BACKSTOP_TICK);
        self.push(self.now + tick, Ev::Inst(i, SInput::Tick));
        if disconnected {
            return;
        }
        self.follow_tick(i, now);
        let due = self.insts[i].book.due_reaps(now);
        for reap in due {
            self.send_reap(i, reap);
        }
    }

    /// A reap finished: the book learns it; a refused one is followed by a leader read.
    pub(super) fn reaped(
        &mut self,
        i: usize,
        op: u64,
        outcome: WriteOutcome,
        disconnected: bool,
        now: Instant,
    ) {
        let Some(at) = self.insts[i].reaps.iter().position(|(o, _)| *o == op) else {
            return;
        };
        let (_, reap) = self.insts[i].reaps.remove(at);
        let outcome = if disconnected {
            WriteOutcome::Unknown
        } else {
            outcome
        };
        let key = self.session_key_named(&reap.key);
        match (outcome, key) {
            (WriteOutcome::Ok { .. }, _) if reap.expected == 0 => {
                self.count("reap_on_zero_ok");
            }
            (WriteOutcome::Ok { .. }, _) => self.count("reap_ok"),
            (WriteOutcome::Conflict, Some(key)) => {
                self.insts[i].refused.push((key, reap.expected));
            }
            _ => {}
        }
        let done = self.insts[i].book.reap_done(&reap, outcome, now);
        self.holders_gone(i, done.gone);
        if done.read
            && let Some(key) = key
        {
            self.send_read(Who::Backstop(i), key, 0, BACKSTOP_IO_TIMEOUT, false);
        }
    }

    /// A backstop read of session key `key` answered (`None`: it failed): the leader read after
    /// a refused reap (`op` 0), or the flawed backstop's probe.
    pub(super) fn backstop_read(
        &mut self,
        i: usize,
        key: usize,
        op: u64,
        result: Option<SessionKeyState>,
        now: Instant,
    ) {
        if op != 0 {
            return self.probed(i, op, result, now);
        }
        let Some(state) = result else { return };
        if let Some(at) = self.insts[i].refused.iter().position(|r| r.0 == key) {
            let (_, expected) = self.insts[i].refused.remove(at);
            if state.revision() > expected {
                self.count("reap_refused_learned");
            } else if state == SessionKeyState::Absent {
                self.count("reap_refused_absent");
            }
        }
        let name = self.session_keys[key - self.roles.len()].clone();
        let gone = self.insts[i].book.leader_read(&name, state, now);
        self.holders_gone(i, gone);
    }

    /// Sends a reap the book asks for (Q5 rule 4): a purge marker with a CAS on the revision
    /// known. Flaw `read_backstop`: a read of the key instead ([`Sim::probed`]).
    fn send_reap(&mut self, i: usize, reap: crate::core::Reap) {
        let Some(key) = self.session_key_named(&reap.key) else {
            return;
        };
        let op = self.insts[i].next_reap;
        self.insts[i].next_reap += 1;
        let expected = reap.expected;
        self.insts[i].reaps.push((op, reap));
        if self.flaws.read_backstop {
            return self.send_read(Who::Backstop(i), key, op, BACKSTOP_IO_TIMEOUT, false);
        }
        let w = KvWrite {
            key,
            expected: Some(expected),
            kind: EntryKind::Purge,
            ttl: None,
            renew: false,
            writer: None,
        };
        self.send_write(Who::Backstop(i), op, w, BACKSTOP_IO_TIMEOUT);
    }

    /// Flaw `read_backstop`: the read that replaced reap `op` answered. A key at or below the
    /// revision the book knows counts as the session's end (as if the reap were accepted);
    /// a newer entry is learned.
    fn probed(&mut self, i: usize, op: u64, result: Option<SessionKeyState>, now: Instant) {
        let Some(at) = self.insts[i].reaps.iter().position(|(o, _)| *o == op) else {
            return;
        };
        let (_, reap) = self.insts[i].reaps.remove(at);
        let book = &mut self.insts[i].book;
        let gone = match result {
            Some(state) if state.revision() <= reap.expected => {
                let revision = reap.expected + 1;
                book.reap_done(&reap, WriteOutcome::Ok { revision }, now)
                    .gone
            }
            Some(state) => {
                let failed = WriteOutcome::Failed(FailureKind::Unavailable);
                book.reap_done(&reap, failed, now);
                book.leader_read(&reap.key, state, now)
            }
            None => {
                let failed = WriteOutcome::Failed(FailureKind::Unavailable);
                book.reap_done(&reap, failed, now).gone
            }
        };
        self.holders_gone(i, gone);
    }
}
