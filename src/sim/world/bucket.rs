//! The bucket's lifecycle as the driver sees it: expiry markers that age out, a deleted and
//! recreated bucket (a new epoch), the driver's epoch check (a stream-info request, as
//! `manager::watcher::check_bucket`) and the session task's wait for it
//! (`manager::session_task::await_epoch_check`: its loop is blocked, its inbox fills up).

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::sim::clock::{MS, Nanos, nanos};

use super::{Ev, Input, SInput, SessionMsg, Sim};

/// How long a session lost to a recreated bucket waits for the epoch check before it starts
/// again (`manager::session_task::EPOCH_CHECK_WAIT`).
pub(in crate::sim) const EPOCH_CHECK_WAIT: Duration = Duration::from_secs(2);

/// A watcher's consumer fails this long after its last delivery when its stream is gone
/// (async-nats `ORDERED_IDLE_HEARTBEAT`).
const IDLE_HEARTBEAT: Duration = Duration::from_secs(5);

impl Sim {
    /// The expiry marker `rev` of `key` in bucket `epoch` ages out
    /// (`subject_delete_marker_ttl`): the key has no entry any more. Nobody is told.
    pub(super) fn vanish(&mut self, key: usize, epoch: u64, rev: u64) {
        if self.kv.vanish(key, epoch, rev, self.now) {
            self.count("marker_aged_out");
            self.try_foreign_sessions();
        }
    }

    /// An operator deletes the bucket and creates it again; `fresh`: a new process starts
    /// right after, in a spare instance slot.
    pub(super) fn reset_bucket(&mut self, fresh: bool) {
        self.kv.reset(self.now);
        self.created.push(self.now);
        let epoch = self.kv.epoch;
        self.faults.push((
            self.now,
            format!("ResetBucket (epoch {epoch}, fresh: {fresh})"),
        ));
        // The watchers' ordered consumers were deleted with the stream: each notices when its
        // idle heartbeats stop coming (`ORDERED_IDLE_HEARTBEAT`, 5 s after the last delivery).
        for i in 0..self.insts.len() {
            if self.insts[i].started && !self.insts[i].crashed {
                let at = self.now + self.insts[i].clock.span(IDLE_HEARTBEAT);
                self.push(at, Ev::Inst(i, SInput::WatcherFailed));
            }
        }
        if fresh && self.sc.nodes + self.spares_used < self.session_keys.len() {
            let slot = self.sc.nodes + self.spares_used;
            self.spares_used += 1;
            let at = self.now + self.rng.hop();
            self.spawn(slot, true, at);
        }
    }

    /// The bucket's age as a stream-info answer sent at server time `ts` tells it (`ts −
    /// created`); a bucket created before the run is old.
    pub(super) fn bucket_age(&self, ts: Nanos) -> Duration {
        self.kv.created.map_or(Duration::from_secs(3600), |c| {
            Duration::from_nanos(ts.saturating_sub(c))
        })
    }

    /// Asks the server for the bucket's epoch (once at a time); the answer comes a round trip
    /// later ([`SInput::EpochChecked`]).
    pub(super) fn check_epoch(&mut self, i: usize) {
        if self.insts[i].checking_epoch {
            return;
        }
        self.insts[i].checking_epoch = true;
        let at = self.now + self.rng.hop() + self.rng.hop();
        self.push(at, Ev::Inst(i, SInput::EpochChecked));
    }

    /// The driver learns the bucket's current epoch (a stream-info answer the server sent at
    /// `ts`). A new one resets every role node (`handle_bucket_reset` with the new bucket's
    /// age), the session book, and the watcher (it replays the new bucket); a session task
    /// waiting for it goes on. Whether the epoch was new.
    pub(super) fn learn_epoch(&mut self, i: usize, ts: Nanos) -> bool {
        let epoch = self.kv.epoch;
        if self.insts[i].epoch == epoch {
            return false;
        }
        self.count("epoch_learned");
        let age = self.bucket_age(ts);
        let inst = &mut self.insts[i];
        inst.epoch = epoch;
        inst.seen_high = 0;
        let old_ttl = inst.book.longest_session_ttl();
        inst.book.reset();
        inst.watch_rev.iter_mut().for_each(|r| *r = 0);
        self.follow_reset(i);
        let inst = &mut self.insts[i];
        for n in inst.nodes.clone() {
            let reset = Input::BucketReset {
                epoch,
                age,
                old_ttl,
            };
            self.push(self.now, Ev::Node(n, reset));
        }
        self.resync(i);
        if self.insts[i].session_blocked.is_some() && self.insts[i].held_start.is_none() {
            // The session task polls the epoch every 20 ms.
            let at = self.now + self.rng.between(0, 20 * MS);
            self.insts[i].session_blocked = Some(at);
            self.push(at, Ev::Inst(i, SInput::Unblock));
        }
        true
    }

    /// The session was lost to a recreated bucket: the session task asks for an epoch check
    /// and waits for a new epoch, at most [`EPOCH_CHECK_WAIT`].
    pub(super) fn block_session(&mut self, i: usize) {
        let at = self.now + self.insts[i].clock.span(EPOCH_CHECK_WAIT);
        self.insts[i].session_blocked = Some(at);
        self.push(at, Ev::Inst(i, SInput::Unblock));
        self.check_epoch(i);
    }

    /// Flaw `check_before_start`: an epoch check answered while a session start waited for
    /// it: the start goes out, then the task goes on.
    pub(super) fn release_start(&mut self, i: usize, now: Instant) {
        let Some(w) = self.insts[i].held_start.take() else {
            return;
        };
        self.insts[i].session_blocked = Some(self.now);
        self.send_session_write(i, w);
        self.unblock_session(i);
        self.session_actions(i, now);
    }

    /// A session's start was acknowledged: it is announced to the roles once an epoch check
    /// sent from now on answers (`manager::session_task`, Q6).
    pub(super) fn hold_up(&mut self, i: usize, uuid: Uuid, acked_sent_at: Instant) {
        self.count("start_epoch_check");
        let in_flight = self.insts[i].checking_epoch;
        self.insts[i].held_up = Some((uuid, acked_sent_at, !in_flight));
        self.check_epoch(i);
    }

    /// An epoch check answered (`answered`: not while disconnected; the epoch it showed is
    /// applied already). A started session waiting for it is announced, if the check was sent
    /// after its start was acknowledged; an earlier or unanswered check is followed by another
    /// (at once, or 250 ms later).
    pub(super) fn epoch_checked_for_up(&mut self, i: usize, answered: bool) {
        let Some((uuid, acked_sent_at, fresh)) = self.insts[i].held_up else {
            return;
        };
        if !fresh || !answered {
            self.insts[i].held_up = Some((uuid, acked_sent_at, true));
            let wait = if answered { 0 } else { 250 * MS };
            let at = self.now + wait + self.rng.hop() + self.rng.hop();
            self.insts[i].checking_epoch = true;
            self.push(at, Ev::Inst(i, SInput::EpochChecked));
            return;
        }
        self.insts[i].held_up = None;
        self.announce(i, uuid, acked_sent_at);
    }

    /// The session task's wait is over: what queued up in its inbox is handled in order.
    pub(super) fn unblock_session(&mut self, i: usize) {
        if self.insts[i].held_start.is_some()
            || self.insts[i].session_blocked.is_none_or(|b| self.now < b)
        {
            return;
        }
        self.insts[i].session_blocked = None;
        let inbox = std::mem::take(&mut self.insts[i].session_inbox);
        let now = self.insts[i].clock.local(self.now);
        for msg in inbox {
            self.session_msg(i, msg, now);
        }
        self.session_actions(i, now);
    }

    /// Hands a message to instance `i`'s session task: queued while it waits for an epoch
    /// check, else handled at once (the caller executes the actions).
    pub(super) fn session_msg(&mut self, i: usize, msg: SessionMsg, now: Instant) {
        if self.insts[i].session_blocked.is_some() && self.insts[i].held_start.is_none() {
            self.insts[i].session_inbox.push(msg);
            return;
        }
        let session = &mut self.insts[i].session;
        match msg {
            SessionMsg::Input(input) => self.session_input(i, input, now),
            SessionMsg::Observed(state) => session.handle_observed(state, now),
            SessionMsg::ReleaseTerm(uuid, role, rev) => {
                session.handle_release_term(uuid, role, rev, now);
            }
            SessionMsg::RoleMoved(role, rev) => session.handle_role_moved(&role, rev),
            SessionMsg::Stop => session.handle_stop(now),
        }
    }

    /// Server time of a stream-info answer arriving now.
    pub(super) fn answer_ts(&mut self) -> Nanos {
        self.now.saturating_sub(self.rng.hop())
    }
}

/// The young-bucket hold a role machine gets from a bucket of age `age` (Q6): TTL +
/// heartbeat − age, if positive.
pub(super) fn young_hold(ttl: Duration, heartbeat: Duration, age: Duration) -> Option<Nanos> {
    let hold = (ttl + heartbeat).saturating_sub(age);
    (!hold.is_zero()).then(|| nanos(hold))
}
