//! Machine inputs: what each node's driver feeds its machine, and how it acts on the
//! machine's actions and timer.

use tokio::time::Instant;

use crate::core::sim::clock::{MS, Nanos, nanos};
use crate::core::sim::kv::Entry;
use crate::core::sim::trace::{Rec, Seen};
use crate::core::types::{Action, FailureKind, KeyState, ReleaseReason, WriteOutcome};

use super::{Ev, Input, Queued, Sim};

impl Sim {
    /// Delivers an input unless the node crashed; defers it past a pause; applies the
    /// connection state.
    pub(super) fn node_event(&mut self, n: usize, seq: u64, input: Input) {
        let node = &self.nodes[n];
        if node.crashed {
            return;
        }
        if self.now < node.paused_until {
            // Keep the original order among everything that queued up during the pause.
            let at = node.paused_until;
            self.queue.push(Queued {
                at,
                seq,
                ev: Ev::Node(n, input),
            });
            return;
        }
        let Some(input) = self.through_connection(n, input) else {
            return;
        };
        if let Input::Validate = input {
            return self.validate(n);
        }
        let node = &mut self.nodes[n];
        match input {
            Input::Timer(generation) => {
                if node.timer.map(|t| t.1) != Some(generation) {
                    return;
                }
                node.timer = None;
            }
            Input::Observed { rev, replay } => {
                if rev < node.watch_rev || (rev == node.watch_rev && !replay) {
                    return;
                }
                node.watch_rev = rev;
            }
            _ => {}
        }
        self.feed(n, input);
    }

    /// What a disconnected node gets instead: no watcher events, no replies.
    pub(super) fn through_connection(&mut self, n: usize, input: Input) -> Option<Input> {
        if self.nodes[n].disconnected_until.is_none() {
            return Some(input);
        }
        match input {
            Input::Observed { .. } => None,
            // The acknowledgement is lost: the driver reports `Unknown` at the timeout.
            Input::Write {
                op,
                outcome: WriteOutcome::Ok { .. } | WriteOutcome::Conflict | WriteOutcome::Retry,
                unknown_at,
            } => {
                let at = unknown_at.max(self.now);
                self.deliver_write(n, at, op, WriteOutcome::Unknown, unknown_at);
                None
            }
            Input::Read { op, result: Ok(_) } => Some(Input::Read {
                op,
                result: Err(FailureKind::Unavailable),
            }),
            Input::Validated(_) => None,
            other => Some(other),
        }
    }

    /// Feeds one input to machine `n`, then executes its actions and re-arms its timer.
    pub(super) fn feed(&mut self, n: usize, input: Input) {
        let g = self.now;
        let node = &mut self.nodes[n];
        let now = node.clock.local(g);
        let input_seen = input.seen();
        node.trace.recs.push(Rec::Input {
            g,
            what: input_seen,
        });
        let m = &mut node.machine;
        match input {
            Input::Start => {
                // The watcher starts with the machine and first delivers the last entry.
                m.start(now);
                node.started = true;
                self.resync(n);
            }
            Input::Timer(_) => m.handle_timeout(now),
            Input::Observed { rev, .. } => {
                let state = self.kv.entry(rev).map_or(KeyState::Absent, Entry::state);
                m.handle_observed(state, now);
            }
            Input::Write { op, outcome, .. } => m.handle_write(op, outcome, now),
            Input::Read { op, result } => m.handle_read(op, result, now),
            Input::Validated(state) => m.handle_validation(state, now),
            Input::Validate => {}
            Input::Drained => m.handle_drained(now),
            Input::Release(cooldown) => m.handle_release(ReleaseReason::Requested, cooldown, now),
            Input::CampaignDelay(d) => m.handle_campaign_delay(d, now),
            Input::Stop => m.handle_stop(now),
            Input::Connection(up) => {
                m.handle_connection(up, now);
                if up {
                    node.disconnected_until = None;
                    self.resync(n);
                }
            }
        }
        self.drain(n, now);
        self.rearm(n, now, matches!(input_seen, Seen::Timer));
        self.arm_validation(n);
    }

    /// While the machine holds a term, the driver validates it every heartbeat.
    pub(super) fn arm_validation(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        if self.sc.validate && !node.validating && node.machine.term().is_some() {
            node.validating = true;
            let at = self.now + node.clock.span(self.timing.heartbeat);
            self.push(at, Ev::Node(n, Input::Validate));
        }
    }

    /// The validation timer fired: read the key if the machine still holds a term.
    pub(super) fn validate(&mut self, n: usize) {
        self.nodes[n].validating = false;
        if self.nodes[n].machine.term().is_some() {
            let timeout = self.timing.operation_timeout;
            self.send_read(n, 0, timeout, true);
        }
        self.arm_validation(n);
    }

    /// When a watcher starts, and after a reconnect recreated it, it (re)delivers the last
    /// entry.
    pub(super) fn resync(&mut self, n: usize) {
        let rev = self.kv.last_rev();
        if rev > 0 {
            let at = (self.now + self.rng.hop()).max(self.nodes[n].watch_tail);
            self.nodes[n].watch_tail = at;
            self.push(at, Ev::Node(n, Input::Observed { rev, replay: true }));
        }
    }

    /// Executes the actions machine `n` produced.
    pub(super) fn drain(&mut self, n: usize, now: Instant) {
        while let Some(action) = self.nodes[n].machine.poll_action() {
            let g = self.now;
            self.nodes[n].trace.recs.push(Rec::Act {
                g,
                now,
                action: action.clone(),
            });
            match action {
                Action::Write(req) => self.send_write(n, req),
                Action::Read { op, timeout } => self.send_read(n, op, timeout, false),
                Action::Promote { term, .. } => self.nodes[n].leading = Some(term.deadline),
                Action::Renewed { term, .. } => {
                    let node = &mut self.nodes[n];
                    if node.leading.is_some() {
                        node.leading = Some(term.deadline);
                    }
                }
                Action::Demote { drain, .. } => {
                    self.nodes[n].leading = None;
                    if drain {
                        let delay = self.drain_delay();
                        self.push(g + delay, Ev::Node(n, Input::Drained));
                    }
                }
                Action::Stopped => self.nodes[n].leading = None,
                Action::Failed(_) | Action::Recovered | Action::Notice(_) => {}
            }
        }
    }

    /// How long the application's demote callback takes.
    pub(super) fn drain_delay(&mut self) -> Nanos {
        if self.rng.chance(self.sc.net.long_drain_pct) {
            let ttl = self.timing.ttl;
            self.rng.between(0, 2 * nanos(ttl))
        } else {
            self.rng.between(0, 10 * MS)
        }
    }

    /// Records the machine's timer and schedules it (`fired`: the input was that timer).
    pub(super) fn rearm(&mut self, n: usize, now: Instant, fired: bool) {
        let g = self.now;
        let node = &mut self.nodes[n];
        let timeout = node.machine.poll_timeout();
        let (pending, stopped) = (node.machine.has_pending(), node.machine.is_stopped());
        node.trace.recs.push(Rec::Idle {
            g,
            now,
            timeout,
            pending,
            stopped,
        });
        let Some(t) = timeout else {
            node.timer = None;
            return;
        };
        // A timer already due fires at once: after an ignored input (a stale acknowledgement)
        // a timer can be overdue. One that stays due after it fired would spin a real driver
        // (L1 reports it); fire it 1 ms later so that the run goes on.
        let at = match (t <= now, fired) {
            (false, _) => node.clock.global(t),
            (true, false) => g,
            (true, true) => g + MS,
        };
        if node.timer.is_some_and(|(a, _)| a == at) {
            return;
        }
        node.timer_gen += 1;
        node.timer = Some((at, node.timer_gen));
        let generation = node.timer_gen;
        self.push(at, Ev::Node(n, Input::Timer(generation)));
    }
}
