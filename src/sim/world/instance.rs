//! One process beside its role nodes, as the manager wires it: the session task (a
//! [`SessionMachine`](crate::core::SessionMachine) whose state goes to every role node), and
//! the watcher with the session book (role entries to the role nodes, session entries to the
//! book and the own session machine, `HolderGone` verdicts, herd ranking; its reaps are in
//! `backstop`). Mirrors `src/manager/session_task.rs`, `watcher.rs` and `role_runner/`.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::core::machine::SessionUpdate;
use crate::core::session::{SessionAction, SessionLoss, SessionWriteKind};
use crate::core::session_book::Verdict;
use crate::core::types::{FailureKind, KeyState, WriteKind, WriteOutcome};
use crate::sim::clock::{MS, nanos};
use crate::sim::kv::{EntryKind, KvWrite};
use crate::sim::scenario::BACKSTOP_TICK;
use crate::value::HolderValue;

use super::{Ev, Input, SInput, SessionMsg, Sim, Who};

/// Herd ranking: the longest wait of any rank (as the role runner; a returning holder's
/// grace comes on top, only where the previous holder restarted).
pub(in crate::sim) const HERD_CAP: Duration = crate::core::Herd::DEFAULT.cap;
/// The watcher's first backoff after it failed (`manager::watcher`).
const WATCHER_BACKOFF: Duration = Duration::from_millis(100);
/// Timeout of one reap or backstop read.
pub(super) const BACKSTOP_IO_TIMEOUT: Duration = Duration::from_secs(1);

impl Sim {
    /// Delivers an input of instance `i` unless it crashed; defers it past a pause.
    pub(super) fn inst_event(&mut self, i: usize, seq: u64, input: SInput) {
        let Some(Ev::Inst(_, input)) = self.held_back(i, seq, Ev::Inst(i, input)) else {
            return;
        };
        let now = self.insts[i].clock.local(self.now);
        if let SInput::Timer(generation) = input
            && self.insts[i].timer.map(|t| t.1) != Some(generation)
        {
            return; // replaced by a later timer (or the task was blocked meanwhile)
        }
        match input {
            SInput::Timer(_) | SInput::Write { .. } | SInput::Read { .. } => {
                self.session_msg(i, SessionMsg::Input(input), now);
            }
            other => self.watcher_input(i, other, now),
        }
        self.session_actions(i, now);
    }

    /// An input of the session task's own operations and timer.
    pub(super) fn session_input(&mut self, i: usize, input: SInput, now: Instant) {
        let g = self.now;
        let disconnected = self.insts[i].disconnected_until.is_some();
        match input {
            SInput::Timer(generation) => {
                if self.insts[i].timer.map(|t| t.1) != Some(generation) {
                    return;
                }
                self.insts[i].timer = None;
                self.insts[i].session.handle_timeout(now);
            }
            SInput::Write {
                op,
                outcome,
                unknown_at,
            } => {
                if disconnected
                    && matches!(
                        outcome,
                        WriteOutcome::Ok { .. } | WriteOutcome::Conflict | WriteOutcome::Retry
                    )
                {
                    // The acknowledgement is lost: `Unknown` at the timeout.
                    let at = unknown_at.max(g);
                    let unknown = WriteOutcome::Unknown;
                    return self.deliver_write(Who::Session(i), at, op, unknown, unknown_at);
                }
                if let WriteOutcome::Ok { revision } = outcome {
                    let inst = &mut self.insts[i];
                    inst.seen_high = inst.seen_high.max(revision);
                }
                self.insts[i].session.handle_write(op, outcome, now);
            }
            SInput::Read { op, result } => {
                let result = if disconnected {
                    Err(FailureKind::Unavailable)
                } else {
                    result
                };
                self.insts[i].session.handle_read(op, result, now);
            }
            _ => {}
        }
    }

    /// An input of the watcher (and the process start).
    fn watcher_input(&mut self, i: usize, input: SInput, now: Instant) {
        let g = self.now;
        let disconnected = self.insts[i].disconnected_until.is_some();
        match input {
            SInput::Start => self.start_process(i, now),
            SInput::Watch {
                key,
                epoch,
                rev,
                replay,
            } => {
                // A silent watcher (disconnected, or on a deposed leader), the watcher of a
                // deleted bucket once the process moved to the new one, and a marker that
                // aged out before the watcher got to it (a paused process: its consumer is
                // recreated past it).
                if disconnected
                    || self.insts[i].deposed.is_some()
                    || epoch != self.insts[i].epoch
                    || self.kv.aged_out(key, epoch, rev)
                {
                    return;
                }
                // Q8: a session key only of a followed instance, through its consumer.
                if self.session_slot(key).is_some() && !self.delivers(i, key, epoch, rev, replay) {
                    self.count("session_entry_not_followed");
                    return;
                }
                let known = self.insts[i].watch_rev[key];
                if rev < known || (rev == known && !replay) {
                    return;
                }
                let inst = &mut self.insts[i];
                inst.watch_rev[key] = rev;
                inst.seen_high = inst.seen_high.max(rev);
                self.dispatch(i, key, epoch, rev, now);
            }
            SInput::Tick => self.tick(i, disconnected, now),
            SInput::Consumer { key, epoch } => self.consumer_created(i, key, epoch),
            SInput::Recheck => {
                self.insts[i].follow.recheck = None;
                self.refollow(i);
            }
            SInput::MemberDone { op, outcome } => {
                let outcome = if disconnected {
                    WriteOutcome::Unknown
                } else {
                    outcome
                };
                self.member_done(i, op, outcome);
            }
            SInput::EndNotDone { slot, revision } => self.end_not_done(i, slot, revision),
            SInput::Polled { key, op, result } => {
                let result = result.ok().filter(|_| !disconnected);
                self.polled(i, key, op, result);
            }
            SInput::Reaped { op, outcome } => self.reaped(i, op, outcome, disconnected, now),
            SInput::Backstop { key, op, result } => {
                let result = result.ok().filter(|_| !disconnected);
                self.backstop_read(i, key, op, result, now);
            }
            SInput::Connection(up) => {
                for n in self.insts[i].nodes.clone() {
                    self.push(g, Ev::Node(n, Input::Connection(up)));
                }
                if up {
                    // The watcher is recreated; the driver checks the bucket first.
                    self.insts[i].disconnected_until = None;
                    let ts = self.answer_ts();
                    if !self.learn_epoch(i, ts) {
                        self.resync(i);
                    }
                }
            }
            SInput::EpochChecked => {
                self.insts[i].checking_epoch = false;
                if !disconnected {
                    let ts = self.answer_ts();
                    self.learn_epoch(i, ts);
                }
                // A started session waiting for a check is announced (or checked again).
                self.epoch_checked_for_up(i, !disconnected);
                self.release_start(i, now);
            }
            SInput::Unblock => self.unblock_session(i),
            SInput::WatcherFailed => {
                // `manager::watcher`: the watcher ends with an error; after a 100 ms backoff the
                // bucket is checked before a new watcher starts.
                if self.insts[i].epoch != self.kv.epoch {
                    let at = g + self.insts[i].clock.span(WATCHER_BACKOFF);
                    self.push(at, Ev::Inst(i, SInput::EpochChecked));
                    self.insts[i].checking_epoch = true;
                }
            }
            SInput::Undeposed => {
                self.insts[i].deposed = None;
                let ts = self.answer_ts();
                if !self.learn_epoch(i, ts) {
                    self.resync(i);
                }
            }
            SInput::Timer(_) | SInput::Write { .. } | SInput::Read { .. } => {}
        }
    }

    /// The process starts: it opens the bucket (its epoch and age: `handle_bucket_age` for
    /// every role machine, Q6), starts its session task, its role runners and its watcher,
    /// which first delivers every key's last entry.
    fn start_process(&mut self, i: usize, now: Instant) {
        let g = self.now;
        self.insts[i].started = true;
        self.insts[i].seen_high = self.kv.seq;
        let ts = self.answer_ts();
        let age = self.bucket_age(ts);
        let epoch = self.kv.epoch;
        let nodes = self.insts[i].nodes.clone();
        if self.insts[i].epoch != epoch {
            // Recreated between the machines' creation and the start.
            self.insts[i].epoch = epoch;
            for &n in &nodes {
                // A process that never saw the old bucket knows no holder's TTL there.
                let reset = Input::BucketReset {
                    epoch,
                    age,
                    old_ttl: Duration::ZERO,
                };
                self.push(g, Ev::Node(n, reset));
            }
        } else if !self.flaws.no_bucket_age {
            for &n in &nodes {
                self.push(g, Ev::Node(n, Input::BucketAge(age)));
            }
        } else {
            // The flaw removes both reset holds: the young bucket's and an absent key's.
            for &n in &nodes {
                self.nodes[n].machine.without_absent_hold();
            }
        }
        self.insts[i].session.start(now);
        for n in nodes {
            self.push(g, Ev::Node(n, Input::Start));
        }
        self.resync(i);
        let tick = self.insts[i].clock.span(BACKSTOP_TICK);
        self.push(g + tick, Ev::Inst(i, SInput::Tick));
    }

    /// When a watcher starts, and after a reconnect recreated it, it (re)delivers the last
    /// entry of every role and member key, and its consumers that of every followed session
    /// key (they are recreated with it).
    pub(super) fn resync(&mut self, i: usize) {
        let epoch = self.kv.epoch;
        if self.insts[i].epoch != epoch {
            return; // the watcher of a deleted bucket: the next epoch check replays
        }
        let now = self.now;
        for from in self.insts[i].follow.consumers.values_mut() {
            *from = now;
        }
        let mut last: Vec<(u64, usize)> = (0..self.kv.logs.len())
            .filter(|&key| {
                self.session_slot(key).is_none()
                    || self.insts[i].follow.consumers.contains_key(&key)
            })
            .map(|key| (self.kv.last_rev(key), key))
            .filter(|(rev, _)| *rev > 0)
            .collect();
        last.sort_unstable();
        for (rev, key) in last {
            let at = (self.now + self.rng.hop()).max(self.insts[i].watch_tail);
            self.insts[i].watch_tail = at;
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

    /// One watcher entry: a role entry goes to the role's node (with the book's verdict about
    /// its holder), a session entry to the book (and to the own session machine).
    fn dispatch(&mut self, i: usize, key: usize, epoch: u64, rev: u64, now: Instant) {
        let Some(entry) = self.kv.entry(key, epoch, rev) else {
            return;
        };
        let g = self.now;
        if self.member_slot(key).is_some() {
            return self.member_entry(i, key, epoch, rev);
        }
        if key >= self.roles.len() {
            let state = entry.session_state();
            let slot = key - self.roles.len();
            if slot == self.insts[i].slot {
                self.session_msg(i, SessionMsg::Observed(state.clone()), now);
            }
            let name = self.session_keys[slot].clone();
            let gone = self.insts[i].book.observe(&name, state, now);
            return self.holders_gone(i, gone);
        }
        let state = entry.state();
        let n = self.insts[i].nodes[key];
        let lease = state.lease().cloned();
        let role_name = self.roles[key].clone();
        self.session_msg(i, SessionMsg::RoleMoved(role_name.clone(), rev), now);
        if let Some(v) = &lease
            && v.holder == self.insts[i].id
            && !self.insts[i].campaign
        {
            // The watcher's rule (Q4): a value naming our live session that no campaigning
            // node of ours acts on is listed as released (the machine ignores other uuids).
            let msg = SessionMsg::ReleaseTerm(v.session, role_name, rev);
            self.session_msg(i, msg, now);
        }
        let holder = lease
            .as_ref()
            .map(|v| (v.session_key.as_str(), v.session, v.holder.clone()));
        let role = self.roles[key].clone();
        let verdict = self.insts[i].book.role(&role, holder, rev, now);
        let foreign_holder = lease.is_some_and(|v| v.holder != self.insts[i].id);
        // Flaw `ignore_session`: another holder counts as gone at once (once per process and
        // role, or the takeovers would ping-pong for the rest of the run).
        let ignored = self.flaws.ignore_session && foreign_holder && !self.insts[i].ignored[key];
        if ignored {
            self.insts[i].ignored[key] = true;
        }
        let gone = verdict == Verdict::Gone || ignored;
        if let KeyState::Held { revision, .. } = &state {
            // A term: the vacancy (and any move's hold-back) is over (as the role runner).
            self.nodes[n].last_held = Some(*revision);
            self.nodes[n].machine.handle_move_delay(None);
        }
        if matches!(state, KeyState::Vacant { .. } | KeyState::Absent) {
            self.rank_for_vacancy(n);
        }
        self.push(g, Ev::Node(n, Input::Observed(state)));
        if gone {
            self.push(g, Ev::Node(n, Input::HolderGone(rev)));
        }
        // The instances role values name changed, perhaps an orphan's among them (Q8 rule 3).
        self.refollow(i);
    }

    /// Roles whose holder's session is gone (Q5): their nodes hear it.
    pub(super) fn holders_gone(&mut self, i: usize, gone: Vec<(crate::names::RoleName, u64)>) {
        for (role, rev) in gone {
            if let Some(r) = self.roles.iter().position(|x| *x == role) {
                let n = self.insts[i].nodes[r];
                self.push(self.now, Ev::Node(n, Input::HolderGone(rev)));
            }
        }
    }

    /// Herd ranking (Q7) for the vacancy about to be delivered to node `n`.
    pub(super) fn rank_for_vacancy(&mut self, n: usize) {
        let node = &self.nodes[n];
        let inst = &self.insts[node.inst];
        let previous = node.machine.observed().and_then(KeyState::lease);
        let returning = previous.is_some_and(|v| inst.book.returned(&v.session_key, v.session));
        let live = inst.book.live_instances();
        let role = &self.roles[node.role];
        let delay = crate::core::Herd::DEFAULT.delay(
            role,
            &inst.id,
            &live,
            previous.map(|v| &v.holder),
            returning,
        );
        self.nodes[n].machine.handle_herd_delay(delay);
        let delay = self.move_delay(n);
        self.nodes[n].machine.handle_move_delay(delay);
    }

    /// A targeted move's hold-back for node `n` at the vacancy that ends its `last_held` term
    /// (protocol Q13, as `manager::moves::hold_back`): zero for the target, the grace for the
    /// others, while the target's session is live in this process's book.
    fn move_delay(&self, n: usize) -> Option<Duration> {
        if self.flaws.move_no_holdback {
            return None;
        }
        let node = &self.nodes[n];
        let ended = node.last_held?;
        let m = self
            .moves
            .iter()
            .rev()
            .find(|m| m.role == node.role && m.term == ended)?;
        let target = &self.insts[self.nodes[m.to].inst];
        if !self.insts[node.inst]
            .book
            .live_instances()
            .contains(&target.id)
        {
            return None;
        }
        Some(if m.to == n { Duration::ZERO } else { m.grace })
    }

    /// A read showed the role key: if it names a session, ask the book whether it is gone.
    pub(super) fn check_holder_session(&mut self, n: usize, state: &KeyState, now: Instant) {
        let KeyState::Held {
            revision,
            value: HolderValue::Lease(v),
        } = state
        else {
            return;
        };
        let (i, role) = (self.nodes[n].inst, self.nodes[n].role);
        let name = self.roles[role].clone();
        let holder = Some((v.session_key.as_str(), v.session, v.holder.clone()));
        let verdict = self.insts[i].book.role(&name, holder, *revision, now);
        // As the role runner: a role value read rings the follower (an orphan named only by
        // a read is followed too, Q8 rule 3).
        self.refollow(i);
        if verdict == Verdict::Gone {
            self.nodes[n].last_held = Some(*revision);
            self.rank_for_vacancy(n);
            self.nodes[n].machine.handle_holder_gone(*revision, now);
        }
    }

    /// A stopping process ends its session once every role node stopped (releases done).
    pub(super) fn maybe_end_session(&mut self, i: usize) {
        let inst = &self.insts[i];
        if !inst.stopping
            || inst.session_ending
            || inst.crashed
            || !inst
                .nodes
                .iter()
                .all(|&n| self.nodes[n].machine.is_stopped())
        {
            return;
        }
        let now = inst.clock.local(self.now);
        self.insts[i].session_ending = true;
        self.session_msg(i, SessionMsg::Stop, now);
        self.session_actions(i, now);
    }

    /// Executes the actions of instance `i`'s session machine and re-arms its timer.
    pub(super) fn session_actions(&mut self, i: usize, now: Instant) {
        let g = self.now;
        if self.insts[i].session_blocked.is_some() {
            return; // the task waits for the epoch check
        }
        while let Some(action) = self.insts[i].session.poll_action() {
            match action {
                SessionAction::Write(w)
                    if w.kind == SessionWriteKind::Start && self.flaws.check_before_start =>
                {
                    let inst = &mut self.insts[i];
                    inst.held_start = Some(w);
                    inst.session_blocked = Some(crate::sim::clock::Nanos::MAX);
                    inst.timer = None;
                    return self.check_epoch(i);
                }
                SessionAction::Write(w) => self.send_session_write(i, w),
                SessionAction::Read { op, timeout } => {
                    let key = self.session_key_of(self.insts[i].slot);
                    self.send_read(Who::Session(i), key, op, timeout, false);
                }
                SessionAction::Up {
                    uuid,
                    acked_sent_at,
                    ..
                } => {
                    self.insts[i].live = Some(uuid);
                    if self.flaws.no_start_check || self.flaws.check_before_start {
                        self.announce(i, uuid, acked_sent_at);
                    } else {
                        // `manager::session_task`: the roles hear of the session once an epoch
                        // check sent after its start's acknowledgement answered (a new epoch
                        // resets them and the book first, Q6).
                        self.hold_up(i, uuid, acked_sent_at);
                    }
                }
                SessionAction::Renewed {
                    uuid,
                    acked_sent_at,
                    ..
                } => {
                    self.insts[i].live = Some(uuid);
                    if let Some(held) = &mut self.insts[i].held_up {
                        // Not announced yet: the announcement carries the latest renewal.
                        held.1 = acked_sent_at;
                        continue;
                    }
                    self.record_renewed(i, uuid, acked_sent_at, now);
                    let uuid = self.insts[i].lost.unwrap_or(uuid);
                    // Wakes no role machine: they read it when they next wake (Q4). The
                    // deadline the applications of the session's terms act on moves now.
                    self.insts[i].renewal = Some((uuid, acked_sent_at, g, now));
                    let deadline = acked_sent_at + self.timing.local_lease();
                    for n in self.insts[i].nodes.clone() {
                        if self.nodes[n].machine.wants_session_renewal() {
                            // As the role runner: an acquire waiting for a newer renewal is
                            // woken by this one.
                            self.push(
                                self.now,
                                Ev::Node(
                                    n,
                                    Input::Session(SessionUpdate::Live {
                                        uuid,
                                        acked_sent_at,
                                    }),
                                ),
                            );
                        }
                        let node = &mut self.nodes[n];
                        if node.machine.held_session() == Some(uuid)
                            && let Some(d) = node.app_deadline
                            && now < d
                            && deadline > d
                        {
                            node.app_deadline = Some(deadline);
                            node.term_sent = Some((acked_sent_at, g));
                            node.trace
                                .recs
                                .push(crate::sim::trace::Rec::Extended { g, deadline });
                        }
                    }
                }
                SessionAction::Lost { uuid, reason } => {
                    if self.insts[i].live == Some(uuid) {
                        self.insts[i].live = None;
                    }
                    if self.insts[i].held_up.is_some_and(|(u, ..)| u == uuid) {
                        self.insts[i].held_up = None;
                    }
                    if self.flaws.renew_after_loss && reason != SessionLoss::Ended {
                        self.insts[i].lost.get_or_insert(uuid);
                    } else {
                        let demote = reason.demote_reason();
                        self.send_to_roles(
                            i,
                            SessionUpdate::Lost {
                                uuid,
                                reason: demote,
                            },
                        );
                    }
                    if reason == SessionLoss::Ended && self.insts[i].stopping {
                        // A graceful stop: the record goes (Q8 rule 1).
                        self.record_stopped(i);
                    }
                    if reason == SessionLoss::BucketReset {
                        // The task waits for the watcher to confirm a new epoch before it goes
                        // on (the rest of the actions wait with it).
                        self.count("session_bucket_reset");
                        self.insts[i].timer = None;
                        return self.block_session(i);
                    }
                }
                SessionAction::Duplicate { .. }
                | SessionAction::Failed(_)
                | SessionAction::Recovered
                | SessionAction::Stopped => {}
            }
        }
        self.rearm_session(i, now, g);
    }

    /// Announces instance `i`'s started session to its role machines (the session task's
    /// `watch` channel).
    pub(super) fn announce(&mut self, i: usize, uuid: Uuid, acked_sent_at: Instant) {
        // Flaw `renew_after_loss`: the new session's writes extend the lost one.
        // Q8 rule 1: the record naming the session goes out before the roles hear of it.
        self.record_session_started(i, uuid);
        let uuid = self.insts[i].lost.unwrap_or(uuid);
        let now = self.insts[i].clock.local(self.now);
        self.insts[i].renewal = Some((uuid, acked_sent_at, self.now, now));
        self.send_to_roles(
            i,
            SessionUpdate::Live {
                uuid,
                acked_sent_at,
            },
        );
    }

    /// Sends a write of instance `i`'s session machine.
    pub(super) fn send_session_write(&mut self, i: usize, w: crate::core::session::SessionWrite) {
        let ttl = (w.kind != SessionWriteKind::End).then(|| nanos(self.timing.ttl));
        let kv = KvWrite {
            key: self.session_key_of(self.insts[i].slot),
            expected: Some(w.expected),
            kind: w
                .value
                .map_or(EntryKind::Delete, |v| EntryKind::Session(Box::new(v))),
            ttl,
            renew: w.kind == SessionWriteKind::Renew,
            writer: Some((i, WriteKind::Renew)),
        };
        self.send_write(Who::Session(i), w.op, kv, w.timeout);
    }

    /// Sends a session update to every role node of instance `i` (the session task's `watch`
    /// channel).
    fn send_to_roles(&mut self, i: usize, update: SessionUpdate) {
        for n in self.insts[i].nodes.clone() {
            self.push(self.now, Ev::Node(n, Input::Session(update)));
        }
    }

    fn rearm_session(&mut self, i: usize, now: Instant, g: u64) {
        let inst = &mut self.insts[i];
        let Some(t) = inst.session.poll_timeout() else {
            inst.timer = None;
            return;
        };
        let at = if t <= now {
            // Due: fire soon, and an armed timer that fires soon is not pushed back (events
            // more often than that would starve it).
            if let Some((armed, _)) = inst.timer
                && armed <= g + MS
            {
                return;
            }
            g + MS
        } else {
            inst.clock.global(t)
        };
        if inst.timer.is_some_and(|(a, _)| a == at) {
            return;
        }
        inst.timer_gen += 1;
        inst.timer = Some((at, inst.timer_gen));
        let generation = inst.timer_gen;
        self.push(at, Ev::Inst(i, SInput::Timer(generation)));
    }
}
