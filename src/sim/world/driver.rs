//! Role machine inputs: what each role node's driver (the role runner) feeds its machine, and
//! how it acts on the machine's actions and timer.

use tokio::time::Instant;

use crate::core::machine::SessionUpdate;
use crate::core::slot_permits::SlotView;
use crate::core::types::{Action, FailureKind, KeyState, Notice, ReleaseReason, WriteOutcome};
use crate::sim::clock::{MS, Nanos, nanos};
use crate::sim::kv::{EntryKind, KvWrite};
use crate::sim::trace::{Rec, Seen};
use crate::value::HolderValue;

use super::bucket::young_hold;
use super::{Ev, Input, Queued, SessionMsg, Sim, Who};

impl Sim {
    /// Whether an event of instance `i` cannot be handled now: dropped after a crash, deferred
    /// past a pause (keeping the original order among everything that queued up meanwhile).
    pub(super) fn held_back(&mut self, i: usize, seq: u64, ev: Ev) -> Option<Ev> {
        let inst = &self.insts[i];
        if inst.crashed {
            return None;
        }
        if self.now < inst.paused_until {
            let at = inst.paused_until;
            self.queue.push(Queued { at, seq, ev });
            return None;
        }
        Some(ev)
    }

    /// Delivers an input unless the node's process crashed; defers it past a pause; applies
    /// the connection state.
    pub(super) fn node_event(&mut self, n: usize, seq: u64, input: Input) {
        let i = self.nodes[n].inst;
        let Some(Ev::Node(_, input)) = self.held_back(i, seq, Ev::Node(n, input)) else {
            return;
        };
        let Some(input) = self.through_connection(n, input) else {
            return;
        };
        if let Input::Validate = input {
            return self.validate(n);
        }
        if let Input::Timer(generation) = input {
            let node = &mut self.nodes[n];
            if node.timer.map(|t| t.1) != Some(generation) {
                return;
            }
            node.timer = None;
        }
        self.feed(n, input);
    }

    /// What a disconnected node gets instead: no replies.
    pub(super) fn through_connection(&mut self, n: usize, input: Input) -> Option<Input> {
        let i = self.nodes[n].inst;
        if self.insts[i].disconnected_until.is_none() {
            return Some(input);
        }
        match input {
            // The acknowledgement is lost: the driver reports `Unknown` at the timeout.
            Input::Write {
                op,
                outcome: WriteOutcome::Ok { .. } | WriteOutcome::Conflict | WriteOutcome::Retry,
                unknown_at,
            } => {
                let at = unknown_at.max(self.now);
                self.deliver_write(Who::Role(n), at, op, WriteOutcome::Unknown, unknown_at);
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
        let i = self.nodes[n].inst;
        let now = self.insts[i].clock.local(g);
        let input_seen = input.seen();
        let node = &mut self.nodes[n];
        node.trace.recs.push(Rec::Input {
            g,
            what: input_seen,
        });
        // As the role runner: the session's latest renewal first (Q4, one deadline per session).
        if !matches!(input, Input::Start)
            && let Some((uuid, sent, _, _)) = self.insts[i].renewal
            && node.synced != (Some(sent), node.term_sent.map(|t| t.0))
        {
            node.synced = (Some(sent), node.term_sent.map(|t| t.0));
            if let Some((_, arrived)) = node.term_sent {
                node.trace.recs.push(Rec::Synced { g, arrived });
            }
            if node.session_until.is_some() {
                node.session_until = Some(sent + self.timing.local_lease());
            }
            let term_sent = node.term_sent.map(|t| t.0);
            node.machine
                .handle_session_renewed(uuid, sent, term_sent, now);
        }
        let m = &mut node.machine;
        let mut read_state = None;
        match input {
            Input::Start => m.start(now),
            Input::Timer(_) => m.handle_timeout(now),
            Input::Observed(state) => m.handle_observed(state, now),
            Input::Write { op, outcome, .. } => {
                // As the role runner: the bucket's high-water mark when the write was sent bounds
                // what may be promoted (P6). A write sent before the machine's last bucket
                // reset says nothing about the new bucket (an `Ok` may be a put there that
                // skipped the young-bucket hold): its outcome is unknown, and the old bucket's
                // mark is not seeded (it would refuse every acquire in the new one).
                let mut outcome = outcome;
                if let Some(at) = node.sent_seen.iter().position(|s| s.0 == op) {
                    let (_, seen, resets) = node.sent_seen.remove(at);
                    if resets == node.resets {
                        m.seed_high_water(seen);
                    } else {
                        outcome = WriteOutcome::Unknown;
                    }
                }
                m.handle_write(op, outcome, now);
            }
            Input::Read { op, result } => {
                read_state = result.as_ref().ok().cloned();
                m.handle_read(op, result, now);
            }
            Input::Validated(state) => m.handle_validation(state, now),
            Input::Validate => {}
            Input::Drained => {
                node.demoting = false;
                m.handle_drained(now);
            }
            Input::Release(cooldown) => m.handle_release(ReleaseReason::Requested, cooldown, now),
            Input::MoveRelease => {
                // Q13: only the term the move named (the role runner checks it the same way).
                let named = self
                    .moves
                    .iter()
                    .rev()
                    .find(|mv| mv.from == n)
                    .map(|mv| mv.term);
                if m.term().map(|t| t.token.term()) == named {
                    m.handle_release(ReleaseReason::Move, std::time::Duration::ZERO, now);
                }
            }
            Input::CampaignDelay(d) => m.handle_campaign_delay(d, now),
            Input::Stop => m.handle_stop(now),
            Input::Connection(up) => m.handle_connection(up, now),
            Input::Session(update) => {
                node.session_until = match update {
                    SessionUpdate::Live { acked_sent_at, .. } => {
                        Some(acked_sent_at + self.timing.local_lease())
                    }
                    SessionUpdate::Lost { .. } => None,
                };
                m.handle_session(update, now);
            }
            Input::HolderGone(rev) => {
                self.nodes[n].last_held = Some(rev);
                self.rank_for_vacancy(n);
                self.nodes[n].machine.handle_holder_gone(rev, now);
            }
            Input::BucketAge(age) => {
                self.note_hold(n, age, now);
                self.nodes[n]
                    .machine
                    .handle_bucket_age(Some(age), std::time::Duration::ZERO, now);
            }
            Input::BucketReset {
                epoch,
                age,
                old_ttl,
            } => {
                self.nodes[n].resets += 1;
                self.note_hold(n, age, now);
                self.nodes[n]
                    .machine
                    .handle_bucket_reset(epoch, Some(age), old_ttl, now);
            }
        }
        if let Some(state) = read_state {
            // As the role runner: a read showing a holder asks the session book about it.
            self.check_holder_session(n, &state, now);
        }
        self.drain(n, now);
        self.rearm(n, now, matches!(input_seen, Seen::Timer));
        self.arm_validation(n);
        self.decide_permits(n);
        self.maybe_end_session(i);
    }

    /// After a step of node `n`: the slot permit of its role's slots in its process (nothing
    /// for a role that is not a slot), as the role driver decides it after every step of a
    /// slot, before any other role steps (Q15, S7) — the same [`SlotPermits`] decision, on
    /// the same view of each sibling's machine. A slot given the permit is woken at once (a
    /// timer due now: a step of its own, then this decision again).
    ///
    /// [`SlotPermits`]: crate::core::slot_permits::SlotPermits
    fn decide_permits(&mut self, n: usize) {
        let (i, role) = (self.nodes[n].inst, self.nodes[n].role);
        if self.flaws.slot_no_permit || self.roles[role].slot().is_none() {
            return;
        }
        let nodes = &self.nodes;
        let decision = self.insts[i].permits.decide(&self.roles[role], |m| {
            // A slot whose demote callback still runs claims, as the role runner's view.
            if nodes[m].demoting {
                SlotView::Claims
            } else {
                SlotView::of_machine(&nodes[m].machine)
            }
        });
        let g = self.now;
        for (m, permit) in decision {
            let node = &mut self.nodes[m];
            let opened = permit && !node.machine.acquire_permit();
            node.machine.set_acquire_permit(permit);
            if opened {
                node.timer_gen += 1;
                node.timer = Some((g, node.timer_gen));
                let generation = node.timer_gen;
                self.count("slot_permit_opened");
                self.push(g, Ev::Node(m, Input::Timer(generation)));
            }
        }
    }

    /// While the machine holds a term, the driver validates it every heartbeat.
    pub(super) fn arm_validation(&mut self, n: usize) {
        let clock = self.insts[self.nodes[n].inst].clock;
        let node = &mut self.nodes[n];
        if self.sc.validate && !node.validating && node.machine.term().is_some() {
            node.validating = true;
            let at = self.now + clock.span(self.timing.heartbeat);
            self.push(at, Ev::Node(n, Input::Validate));
        }
    }

    /// The validation timer fired: read the key if the machine still holds a term.
    pub(super) fn validate(&mut self, n: usize) {
        self.nodes[n].validating = false;
        if self.nodes[n].machine.term().is_some() {
            let timeout = self.timing.operation_timeout;
            let key = self.nodes[n].role;
            self.send_read(Who::Role(n), key, 0, timeout, true);
        }
        self.arm_validation(n);
    }

    /// Executes the actions machine `n` produced.
    pub(super) fn drain(&mut self, n: usize, now: Instant) {
        while let Some(action) = self.nodes[n].machine.poll_action() {
            let g = self.now;
            self.nodes[n].trace.recs.push(Rec::Act {
                g,
                now,
                action: Box::new(action.clone()),
            });
            match action {
                Action::Write(req) => {
                    let seen = self.insts[self.nodes[n].inst].seen_high;
                    let resets = self.nodes[n].resets;
                    self.nodes[n].sent_seen.push((req.op, seen, resets));
                    let w = KvWrite {
                        key: self.nodes[n].role,
                        expected: Some(req.expected),
                        kind: req
                            .value
                            .map_or(EntryKind::Delete, |v| EntryKind::Put(Box::new(v))),
                        ttl: None,
                        renew: false,
                        writer: Some((n, req.kind)),
                    };
                    self.send_write(Who::Role(n), req.op, w, req.timeout);
                }
                Action::Read { op, timeout } => {
                    let key = self.nodes[n].role;
                    self.send_read(Who::Role(n), key, op, timeout, false);
                }
                Action::Promote { term, .. } => {
                    self.nodes[n].leading = Some(term.deadline);
                    self.nodes[n].app_deadline = Some(term.deadline);
                    self.nodes[n].term_sent = None;
                }
                Action::Renewed { term, .. } => {
                    let node = &mut self.nodes[n];
                    if node.leading.is_some() {
                        node.leading = Some(term.deadline);
                    }
                    node.app_deadline = node.app_deadline.map(|d| d.max(term.deadline));
                }
                Action::Demote { drain, .. } => {
                    self.nodes[n].leading = None;
                    self.nodes[n].demoting = drain;
                    if !drain {
                        self.nodes[n].app_deadline = None;
                        self.nodes[n].term_sent = None;
                    }
                    if drain {
                        let delay = self.drain_delay();
                        self.push(g + delay, Ev::Node(n, Input::Drained));
                    }
                }
                Action::Stopped => {
                    self.nodes[n].leading = None;
                    self.nodes[n].app_deadline = None;
                }
                Action::ReleaseTerm { revision, session } => {
                    let i = self.nodes[n].inst;
                    let role = self.roles[self.nodes[n].role].clone();
                    let now_i = self.insts[i].clock.local(g);
                    let msg = SessionMsg::ReleaseTerm(session, role, revision);
                    self.session_msg(i, msg, now_i);
                    self.session_actions(i, now_i);
                }
                Action::Notice(Notice::RevisionRegressed { .. }) => {
                    // As the role runner: revisions went back, have the epoch checked.
                    let i = self.nodes[n].inst;
                    self.check_epoch(i);
                }
                Action::Failed(_)
                | Action::Recovered
                | Action::Notice(_)
                | Action::LostDuringRelease { .. } => {}
            }
        }
    }

    /// Records the young-bucket hold (Q6) node `n` gets from a bucket of age `age`.
    fn note_hold(&mut self, n: usize, age: std::time::Duration, now: Instant) {
        let g = self.now;
        let clock = self.insts[self.nodes[n].inst].clock;
        if let Some(hold) = young_hold(self.timing.ttl, self.timing.heartbeat, age) {
            let until = clock.global(now + std::time::Duration::from_nanos(hold));
            self.nodes[n].trace.recs.push(Rec::Hold { g, until });
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
        let clock = self.insts[self.nodes[n].inst].clock;
        let node = &mut self.nodes[n];
        // Same timing for sessions and roles here: the session's deadline ends a term in time.
        let timeout = node.machine.poll_timeout_with(true);
        let (pending, stopped) = (node.machine.has_pending(), node.machine.is_stopped());
        // Waiting for news from elsewhere, no timer needed: for a live session (none, or its
        // deadline passed: its loss is on the way), or for the
        // session book's verdict on the holder of a v2 role value (Q5).
        let follows_lease = matches!(
            node.machine.observed(),
            Some(KeyState::Held {
                value: HolderValue::Lease(_),
                ..
            })
        );
        // A slot without the permit waits for its driver to give it (Q15).
        let waiting = node.session_until.is_none_or(|u| now >= u)
            || follows_lease
            || !node.machine.acquire_permit();
        node.trace.recs.push(Rec::Idle {
            g,
            now,
            timeout,
            pending,
            stopped,
            waiting,
            covered: true,
        });
        let Some(t) = timeout else {
            node.timer = None;
            return;
        };
        // A timer already due fires at once: after an ignored input (a stale acknowledgement)
        // a timer can be overdue. One that stays due after it fired would spin a real driver
        // (L1 reports it); fire it 1 ms later so that the run goes on.
        let at = match (t <= now, fired) {
            (false, _) => clock.global(t),
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
