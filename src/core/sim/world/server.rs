//! The network and the server: writes, reads, acknowledgements, expiries.

use std::time::Duration;

use crate::core::sim::clock::{Nanos, nanos};
use crate::core::types::{FailureKind, WriteOutcome, WriteRequest};

use super::{Ev, Flight, Input, ReadFlight, Sim};

impl Sim {
    pub(super) fn reply_write(
        &mut self,
        n: usize,
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
    pub(super) fn unknown_at(&mut self, n: usize, op: u64, unknown_at: Nanos) {
        self.deliver_write(n, unknown_at, op, WriteOutcome::Unknown, unknown_at);
    }

    /// Hands node `n` the outcome of its write `op` at `at`.
    pub(super) fn deliver_write(
        &mut self,
        n: usize,
        at: Nanos,
        op: u64,
        outcome: WriteOutcome,
        unknown_at: Nanos,
    ) {
        let input = Input::Write {
            op,
            outcome,
            unknown_at,
        };
        self.push(at, Ev::Node(n, input));
    }

    /// Queues a write for the server to apply at `at` (`ack`: delay of the acknowledgement).
    pub(super) fn in_flight(
        &mut self,
        n: usize,
        req: WriteRequest,
        at: Nanos,
        ack: Option<Nanos>,
        unknown_at: Nanos,
    ) {
        let op = req.op;
        self.writes.push(Flight {
            node: n,
            op,
            req,
            ack,
            unknown_at,
        });
        self.push(at, Ev::Apply(self.writes.len() - 1));
    }

    /// Decides what happens to a write: rejected, applied now, applied late, acknowledged
    /// or not.
    pub(super) fn send_write(&mut self, n: usize, req: WriteRequest) {
        let net = self.sc.net;
        let timeout = self.nodes[n].clock.span(req.timeout);
        let unknown_at = self.now + timeout;
        let op = req.op;
        let hop = self.rng.hop();
        if let Some(up) = self.nodes[n].disconnected_until {
            return self.send_disconnected(n, req, up, unknown_at);
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
        self.in_flight(n, req, self.now + apply, ack, unknown_at);
    }

    /// A write while the connection is down: the client fails fast, or buffers the publish
    /// and maybe flushes it after the reconnect at `up` (a late commit).
    pub(super) fn send_disconnected(
        &mut self,
        n: usize,
        req: WriteRequest,
        up: Nanos,
        unknown_at: Nanos,
    ) {
        let hop = self.rng.hop();
        if self.rng.chance(50) {
            let failed = WriteOutcome::Failed(FailureKind::Unavailable);
            return self.reply_write(n, req.op, failed, hop, unknown_at);
        }
        self.unknown_at(n, req.op, unknown_at);
        if self.rng.chance(50) {
            self.in_flight(n, req, up.max(self.now) + hop, None, unknown_at);
        }
    }

    /// The server applies a write.
    pub(super) fn apply(&mut self, w: usize) {
        let gap = self.gap();
        let f = &self.writes[w];
        let (node, op, ack, unknown_at) = (f.node, f.op, f.ack, f.unknown_at);
        let (outcome, expires) = self.kv.apply(node, &f.req, self.now, gap);
        if let WriteOutcome::Ok { revision } = outcome {
            self.stored(revision);
            if let Some(at) = expires {
                self.push(at, Ev::Expire(revision));
            }
        }
        if let Some(delay) = ack {
            self.push(
                self.now + delay,
                Ev::Node(
                    node,
                    Input::Write {
                        op,
                        outcome,
                        unknown_at,
                    },
                ),
            );
        }
    }

    /// A put's TTL ran out.
    pub(super) fn expire(&mut self, rev: u64) {
        let gap = self.gap();
        if let Some(marker) = self.kv.expire(rev, self.now, gap) {
            self.stored(marker);
        }
    }

    /// Sends a new entry to every watcher: late, lost, but in revision order per watcher.
    pub(super) fn stored(&mut self, rev: u64) {
        let net = self.sc.net;
        let ttl = nanos(self.timing.ttl);
        for n in 0..self.nodes.len() {
            if !self.nodes[n].started || self.nodes[n].crashed || self.rng.chance(net.drop_pct) {
                continue;
            }
            let delay = if self.rng.chance(net.slow_pct) {
                self.rng.between(0, 2 * ttl)
            } else {
                self.rng.hop()
            };
            let at = (self.now + delay).max(self.nodes[n].watch_tail);
            self.nodes[n].watch_tail = at;
            self.push(at, Ev::Node(n, Input::Observed { rev, replay: false }));
        }
    }

    /// Decides what happens to a read: fails, times out, or is served (maybe stale).
    pub(super) fn send_read(&mut self, n: usize, op: u64, timeout: Duration, validation: bool) {
        let net = self.sc.net;
        let timeout = self.nodes[n].clock.span(timeout);
        let hop = self.rng.hop();
        if self.nodes[n].disconnected_until.is_some() || self.rng.chance(net.fail_pct) {
            return self.read_failed(n, op, hop.min(timeout), validation);
        }
        let reply = self.rng.hop();
        if self.rng.chance(net.late_pct) || hop + reply > timeout {
            return self.read_failed(n, op, timeout, validation);
        }
        let flight = ReadFlight {
            node: n,
            op,
            reply,
            validation,
        };
        self.reads.push(flight);
        self.push(self.now + hop, Ev::Serve(self.reads.len() - 1));
    }

    /// A read fails after `delay` (the driver ignores a failed validation read).
    pub(super) fn read_failed(&mut self, n: usize, op: u64, delay: Nanos, validation: bool) {
        if !validation {
            let result = Err(FailureKind::Unavailable);
            self.push(self.now + delay, Ev::Node(n, Input::Read { op, result }));
        }
    }

    /// The server (or a lagging replica) answers a read.
    pub(super) fn serve(&mut self, r: usize) {
        let ReadFlight {
            node,
            op,
            reply,
            validation,
        } = self.reads[r];
        let state = if self.rng.chance(self.sc.net.stale_pct) {
            let lag = self.rng.between(0, 2 * nanos(self.timing.heartbeat));
            self.kv.state_at(self.now.saturating_sub(lag))
        } else {
            self.kv.state()
        };
        let input = if validation {
            Input::Validated(state)
        } else {
            Input::Read {
                op,
                result: Ok(state),
            }
        };
        self.push(self.now + reply, Ev::Node(node, input));
    }
}
