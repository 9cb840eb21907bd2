//! The network and the server: writes, reads, acknowledgements, expiries.

use std::time::Duration;

use crate::core::session::SessionKeyState;
use crate::core::types::{FailureKind, KeyState, WriteOutcome};
use crate::sim::clock::{Nanos, nanos};
use crate::sim::kv::KvWrite;

use super::{Ev, Flight, Input, ReadFlight, SInput, Sim, Who};

impl Sim {
    pub(super) fn reply_write(
        &mut self,
        n: Who,
        op: u64,
        outcome: WriteOutcome,
        delay: Nanos,
        unknown_at: Nanos,
    ) {
        let (at, outcome) = if self.now + delay <= unknown_at {
            (self.now + delay, outcome)
        } else {
            (unknown_at, WriteOutcome::Unknown)
        };
        self.deliver_write(n, at, op, outcome, unknown_at);
    }

    /// Reports `Unknown` for `op` when its timeout passes.
    pub(super) fn unknown_at(&mut self, n: Who, op: u64, unknown_at: Nanos) {
        self.deliver_write(n, unknown_at, op, WriteOutcome::Unknown, unknown_at);
    }

    /// Hands the writer the outcome of its write `op` at `at`.
    pub(super) fn deliver_write(
        &mut self,
        who: Who,
        at: Nanos,
        op: u64,
        outcome: WriteOutcome,
        unknown_at: Nanos,
    ) {
        let ev = match who {
            Who::Role(n) => Ev::Node(
                n,
                Input::Write {
                    op,
                    outcome,
                    unknown_at,
                },
            ),
            Who::Session(i) => Ev::Inst(
                i,
                SInput::Write {
                    op,
                    outcome,
                    unknown_at,
                },
            ),
            Who::Backstop(i) => Ev::Inst(i, SInput::Reaped { op, outcome }),
            Who::Member(i) => Ev::Inst(i, SInput::MemberDone { op, outcome }),
            Who::Foreign => return,
        };
        self.push(at, ev);
    }

    /// The process a writer or reader runs in.
    pub(super) fn inst_of(&self, who: Who) -> usize {
        match who {
            Who::Role(n) => self.nodes[n].inst,
            Who::Session(i) | Who::Backstop(i) | Who::Member(i) => i,
            Who::Foreign => unreachable!("another client's writes and reads bypass the network"),
        }
    }

    /// Another client's write, applied now (nobody waits for its acknowledgement).
    pub(super) fn foreign_write(&mut self, w: KvWrite) {
        let now = self.now;
        self.in_flight(Who::Foreign, 0, w, now, None, now);
    }

    /// Queues a write for the server to apply at `at` (`ack`: delay of the acknowledgement).
    pub(super) fn in_flight(
        &mut self,
        who: Who,
        op: u64,
        w: KvWrite,
        at: Nanos,
        ack: Option<Nanos>,
        unknown_at: Nanos,
    ) {
        self.writes.push(Flight {
            who,
            op,
            w,
            ack,
            unknown_at,
        });
        self.push(at, Ev::Apply(self.writes.len() - 1));
    }

    /// Decides what happens to a write: rejected, applied now, applied late, acknowledged
    /// or not.
    pub(super) fn send_write(&mut self, n: Who, op: u64, w: KvWrite, timeout: Duration) {
        let net = self.sc.net;
        let i = self.inst_of(n);
        let timeout = self.insts[i].clock.span(timeout);
        let unknown_at = self.now + timeout;
        let hop = self.rng.hop();
        if let Some(up) = self.insts[i].disconnected_until {
            return self.send_disconnected(n, op, w, up, unknown_at);
        }
        if matches!(n, Who::Role(_)) && self.now < self.insts[i].deny_role_until {
            // The user's permission to publish to role keys is revoked.
            let denied = WriteOutcome::Failed(FailureKind::PermissionDenied);
            return self.reply_write(n, op, denied, hop, unknown_at);
        }
        if self.rng.chance(net.retry_pct) {
            return self.reply_write(n, op, WriteOutcome::Retry, hop, unknown_at);
        }
        if self.rng.chance(net.fail_pct) {
            let failed = WriteOutcome::Failed(FailureKind::Unavailable);
            return self.reply_write(n, op, failed, hop, unknown_at);
        }
        let (apply, ack) = if self.rng.chance(net.late_pct) {
            let ttl = nanos(self.timing.ttl);
            (self.rng.between(timeout, timeout + ttl), self.rng.hop())
        } else if self.rng.chance(net.slow_write_pct) {
            let apply = self.rng.between(0, timeout);
            (apply, self.rng.between(0, timeout - apply))
        } else {
            (hop, self.rng.hop())
        };
        let ack = Some(ack)
            .filter(|_| !self.rng.chance(net.lost_ack_pct))
            .filter(|a| apply + a <= timeout);
        if ack.is_none() {
            self.unknown_at(n, op, unknown_at);
        }
        self.in_flight(n, op, w, self.now + apply, ack, unknown_at);
    }

    /// A write while the connection is down: the client fails fast, or buffers the publish
    /// and maybe flushes it after the reconnect at `up` (a late commit).
    pub(super) fn send_disconnected(
        &mut self,
        n: Who,
        op: u64,
        w: KvWrite,
        up: Nanos,
        unknown_at: Nanos,
    ) {
        let hop = self.rng.hop();
        if self.rng.chance(50) {
            let failed = WriteOutcome::Failed(FailureKind::Unavailable);
            return self.reply_write(n, op, failed, hop, unknown_at);
        }
        self.unknown_at(n, op, unknown_at);
        if self.rng.chance(50) {
            self.in_flight(n, op, w, up.max(self.now) + hop, None, unknown_at);
        }
    }

    /// The server applies a write.
    pub(super) fn apply(&mut self, w: usize) {
        let gap = self.gap();
        let f = &self.writes[w];
        let (who, op, ack, unknown_at, key) = (f.who, f.op, f.ack, f.unknown_at, f.w.key);
        let (outcome, expires) = self.kv.apply(&f.w, self.now, gap);
        if let WriteOutcome::Ok { revision } = outcome {
            self.stored(key, revision, None);
            if let Some(at) = expires {
                let epoch = self.kv.epoch;
                self.push(at, Ev::Expire(key, epoch, revision));
            }
        }
        if let Some(delay) = ack {
            self.deliver_write(who, self.now + delay, op, outcome, unknown_at);
        }
    }

    /// A put's TTL ran out.
    pub(super) fn expire(&mut self, key: usize, epoch: u64, rev: u64) {
        let gap = self.gap();
        if let Some(marker) = self.kv.expire(key, epoch, rev, self.now, gap) {
            self.stored(key, marker, None);
            if let Some(ttl) = self.kv.marker_ttl {
                self.push(self.now + ttl, Ev::Vanish(key, epoch, marker));
            }
        }
    }

    /// Sends a new entry to every watcher: late, lost, but in stream order per watcher.
    /// `first`: an instance that gets it at once (an eviction reaches its victim first).
    pub(super) fn stored(&mut self, key: usize, rev: u64, first: Option<usize>) {
        let net = self.sc.net;
        let ttl = nanos(self.timing.ttl);
        let epoch = self.kv.epoch;
        for i in 0..self.insts.len() {
            let inst = &self.insts[i];
            // A watcher of a deleted bucket gets nothing of the new one.
            if !inst.started || inst.crashed || inst.epoch != epoch || self.rng.chance(net.drop_pct)
            {
                continue;
            }
            let delay = if first == Some(i) {
                0
            } else if self.rng.chance(net.slow_pct) {
                self.rng.between(0, 2 * ttl)
            } else {
                self.rng.hop()
            };
            let at = (self.now + delay).max(self.insts[i].watch_tail);
            self.insts[i].watch_tail = at;
            let replay = false;
            let input = SInput::Watch {
                key,
                epoch,
                rev,
                replay,
            };
            self.push(at, Ev::Inst(i, input));
        }
        if self.kv.last(key).is_some_and(|e| e.kind.is_marker()) {
            if key < self.roles.len() {
                self.try_foreign_roles();
            } else if self.session_slot(key).is_some() {
                self.try_foreign_sessions();
            }
        }
    }

    /// Decides what happens to a read: fails, times out, or is served (maybe stale).
    pub(super) fn send_read(
        &mut self,
        who: Who,
        key: usize,
        op: u64,
        timeout: Duration,
        validation: bool,
    ) {
        let net = self.sc.net;
        let i = self.inst_of(who);
        let timeout = self.insts[i].clock.span(timeout);
        let hop = self.rng.hop();
        if self.insts[i].disconnected_until.is_some() || self.rng.chance(net.fail_pct) {
            return self.read_failed(who, key, op, hop.min(timeout), validation);
        }
        let reply = self.rng.hop();
        if self.rng.chance(net.late_pct) || hop + reply > timeout {
            return self.read_failed(who, key, op, timeout, validation);
        }
        let flight = ReadFlight {
            who,
            key,
            op,
            reply,
            validation,
        };
        self.reads.push(flight);
        self.push(self.now + hop, Ev::Serve(self.reads.len() - 1));
    }

    /// A read fails after `delay` (the driver ignores a failed validation read).
    pub(super) fn read_failed(
        &mut self,
        who: Who,
        key: usize,
        op: u64,
        delay: Nanos,
        validation: bool,
    ) {
        if !validation {
            let at = self.now + delay;
            self.read_result(
                who,
                key,
                op,
                at,
                Err(FailureKind::Unavailable),
                Err(FailureKind::Unavailable),
            );
        }
    }

    /// Hands a reader its result at `at` (`role` for role nodes, `session` for the others).
    pub(super) fn read_result(
        &mut self,
        who: Who,
        key: usize,
        op: u64,
        at: Nanos,
        role: Result<KeyState, FailureKind>,
        session: Result<SessionKeyState, FailureKind>,
    ) {
        let ev = match who {
            Who::Role(n) => Ev::Node(n, Input::Read { op, result: role }),
            Who::Session(i) => Ev::Inst(
                i,
                SInput::Read {
                    op,
                    result: session,
                },
            ),
            Who::Backstop(i) => Ev::Inst(
                i,
                SInput::Backstop {
                    key,
                    op,
                    result: session,
                },
            ),
            Who::Member(i) => Ev::Inst(
                i,
                SInput::Polled {
                    key,
                    op,
                    result: session,
                },
            ),
            Who::Foreign => return,
        };
        self.push(at, ev);
    }

    /// The server answers a read. Reads go to the stream leader (session reads by
    /// `STREAM.MSG.GET`, Q5 rule 3), but a replica that lags up to 2 heartbeats may answer
    /// (`stale_pct`), and while the reader is on a deposed leader
    /// ([`crate::sim::scenario::FaultKind::DeposedLeader`]) it answers as of the moment it
    /// stopped applying.
    pub(super) fn serve(&mut self, r: usize) {
        let ReadFlight {
            who,
            key,
            op,
            reply,
            validation,
        } = self.reads[r];
        let at = self.now + reply;
        let as_of = if let Some((frozen, _)) = self.insts[self.inst_of(who)].deposed {
            Some(frozen)
        } else if self.rng.chance(self.sc.net.stale_pct) {
            let lag = self.rng.between(0, 2 * nanos(self.timing.heartbeat));
            Some(self.now.saturating_sub(lag))
        } else {
            None
        };
        if let Who::Session(_) | Who::Backstop(_) | Who::Member(_) = who {
            let state = as_of.map_or_else(
                || self.kv.session_state(key),
                |t| self.kv.session_state_at(key, t),
            );
            return self.read_result(who, key, op, at, Err(FailureKind::Unavailable), Ok(state));
        }
        let state = as_of.map_or_else(|| self.kv.state(key), |t| self.kv.state_at(key, t));
        if validation {
            let Who::Role(n) = who else { return };
            self.push(at, Ev::Node(n, Input::Validated(state)));
        } else {
            self.read_result(who, key, op, at, Ok(state), Err(FailureKind::Unavailable));
        }
    }
}
