//! The session state machine of one instance and TTL class (protocol Q1–Q4):
//! `(state, input, now) -> (state, actions)`, like [`super::RoleMachine`].
//!
//! A session key `session.<instance>.<ttl_ms>` is written by CAS with a per-key TTL when the
//! session starts and at every heartbeat. Every term of the instance rests on it: a term's
//! deadline is the send time of the last *acknowledged* session write plus the role's local
//! lease, so the machine reports the send time of every acknowledged write
//! ([`SessionAction::Up`], [`SessionAction::Renewed`]) and every loss
//! ([`SessionAction::Lost`]), after which the roles of the session demote at once and a new
//! session (new uuid) starts.
//!
//! This file holds the machine's state, its inputs (`handle_*`) and queries; `step.rs` decides
//! what to send next, `answers.rs` takes the server's answers.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::attempts::Attempts;
use super::backoff::{RetryPolicy, SplitMix64};
use super::machine::BACKSTOP_GRACE;
use super::types::{FailureKind, Timing, WriteOutcome};
use crate::names::{InstanceId, RoleName};
use crate::value::{MAX_RELEASED, ReleasedTerm, SessionValue};

mod answers;
mod step;

pub use super::session_types::{
    SessionAction, SessionKeyState, SessionLoss, SessionWrite, SessionWriteKind,
};

#[derive(Debug, Clone, Copy)]
enum Pending {
    Write {
        op: u64,
        kind: SessionWriteKind,
        sent_at: Instant,
        /// The uuid the write carries (start/renew).
        uuid: Uuid,
    },
    Read {
        op: u64,
    },
}

impl Pending {
    fn op(self) -> u64 {
        match self {
            Self::Write { op, .. } | Self::Read { op } => op,
        }
    }
}

#[derive(Debug, Clone)]
struct Live {
    uuid: Uuid,
    /// Revision of our last acknowledged (or seen) write.
    rev: u64,
    /// Send time of the last acknowledged write.
    acked_sent_at: Instant,
    next_renew: Instant,
    /// Re-read before the next write (after a conflict, 10164 or unknown outcome).
    reread: bool,
}

#[derive(Debug, Clone)]
enum Phase {
    Init,
    /// No live session: learn the key's revision, then write a new session over it.
    Starting {
        /// What the key was last known as (`None`: read first).
        known: Option<SessionKeyState>,
        /// The uuid of the session being started (kept across an unknown outcome, so that a
        /// late commit of our own start is recognised).
        uuid: Uuid,
        /// Send time of a start write whose outcome is unknown.
        unknown_sent_at: Option<Instant>,
    },
    Live(Live),
    /// Another process with this instance id holds the session key: wait while its value
    /// changes (a live process renews it); a value unchanged for the backstop period is not
    /// live and is written over (Q4).
    Yielding {
        /// What the key holds.
        other: SessionKeyState,
        /// First sighting of that revision.
        since: Instant,
    },
    /// Ending: the delete marker is (being) written.
    Ending,
    Stopped,
}

/// The session state machine of one instance and TTL class.
#[derive(Debug)]
pub struct SessionMachine {
    instance: InstanceId,
    incarnation: Uuid,
    timing: Timing,
    attempts: Attempts,
    rng: SplitMix64,
    phase: Phase,
    pending: Option<Pending>,
    not_before: Option<Instant>,
    /// Whether this process already wrote the key (a later write by another incarnation is a
    /// live duplicate's, not a predecessor's).
    wrote: bool,
    /// Incarnations already reported as duplicates.
    duplicates: Vec<Uuid>,
    /// Highest revision of the key seen (reads, the watcher, acknowledgements).
    high_water: u64,
    next_op: u64,
    /// Ending: the revision to delete at once the operation in flight settles, or to retry on.
    ending_rev: Option<u64>,
    /// Ending: the delete is to be sent again after a backoff.
    ending_retry: bool,
    /// Terms of the live session that nobody acts on (Q5 rule 5), carried by its writes.
    released: Vec<ReleasedTerm>,
    /// The last values this process wrote for the current session (the newest last): a value
    /// carrying our uuid that is none of them was written by somebody else.
    sent: VecDeque<SessionValue>,
    actions: VecDeque<SessionAction>,
}

impl SessionMachine {
    /// A machine for `instance`'s session of TTL class `timing.ttl`. `timing.heartbeat` is the
    /// renewal interval, `timing.local_lease()` the session's own deadline (the longest any of
    /// its roles may act after a write was sent).
    #[must_use]
    pub fn new(
        instance: InstanceId,
        incarnation: Uuid,
        timing: Timing,
        retry: RetryPolicy,
        seed: u64,
    ) -> Self {
        Self {
            instance,
            incarnation,
            timing,
            attempts: Attempts::new(retry),
            rng: SplitMix64::new(seed),
            phase: Phase::Init,
            pending: None,
            not_before: None,
            wrote: false,
            duplicates: Vec::new(),
            high_water: 0,
            next_op: 1,
            ending_rev: None,
            ending_retry: false,
            released: Vec::new(),
            sent: VecDeque::new(),
            actions: VecDeque::new(),
        }
    }

    /// Whether the machine finished.
    #[must_use]
    pub fn is_stopped(&self) -> bool {
        matches!(self.phase, Phase::Stopped)
    }

    /// Next action produced by the last inputs.
    pub fn poll_action(&mut self) -> Option<SessionAction> {
        self.actions.pop_front()
    }

    /// The next time at which [`SessionMachine::handle_timeout`] must be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |i: Instant| t = Some(t.map_or(i, |c| c.min(i)));
        if let Phase::Live(l) = &self.phase {
            consider(self.deadline(l));
            if self.pending.is_none() {
                consider(
                    self.not_before
                        .map_or(l.next_renew, |n| n.max(l.next_renew)),
                );
            }
        } else if self.pending.is_none() {
            if let Some(n) = self.not_before {
                consider(n);
            }
            if let Phase::Yielding { other, since } = &self.phase {
                consider(*since + self.yield_period(other));
            }
        }
        t
    }

    /// How long a value of another process must stay unchanged before it is written over
    /// (Q4): the backstop period of Q5 rule 4.
    fn yield_period(&self, other: &SessionKeyState) -> Duration {
        let other_ttl = match other {
            SessionKeyState::Value { value: Some(v), .. } => v.ttl(),
            _ => Duration::ZERO,
        };
        self.timing.ttl.max(other_ttl) + self.timing.heartbeat + BACKSTOP_GRACE
    }

    fn deadline(&self, l: &Live) -> Instant {
        l.acked_sent_at + self.timing.local_lease()
    }

    /// Starts the first session.
    pub fn start(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Init) {
            self.phase = self.starting(None);
            self.step(now);
        }
    }

    /// Timers fired.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.step(now);
    }

    /// The watcher reported the session key's state.
    pub fn handle_observed(&mut self, state: SessionKeyState, now: Instant) {
        self.check_deadline(now);
        let rev = state.revision();
        if rev != 0 && rev <= self.high_water {
            // A replay or an entry we know already — but the deadline check above may have
            // ended the session (a process paused past it): start the next one.
            self.step(now);
            return;
        }
        self.high_water = self.high_water.max(rev);
        let fresh = self.new_uuid().as_u128();
        match &mut self.phase {
            Phase::Live(l) => {
                let ours = state.uuid() == Some(l.uuid) && is_sent(&self.sent, &state);
                if ours {
                    // Our own write, seen before (or instead of) its acknowledgement.
                    l.rev = l.rev.max(rev);
                } else if rev > l.rev || state.uuid() == Some(l.uuid) {
                    // Another writer — also one that copied our uuid into a value we never
                    // wrote (e.g. with a forged list of released terms, Q5 rule 5): the
                    // session is lost, as after a foreign overwrite (forceful, Q6).
                    let reason = loss_reason(&state);
                    self.lose(reason, Some(state), now);
                }
            }
            Phase::Starting {
                known,
                uuid,
                unknown_sent_at,
            } => {
                if self.pending.is_none() && self.attempts.clear() {
                    self.not_before = None;
                }
                if unknown_sent_at.is_some() && state.uuid() != Some(*uuid) {
                    // A start of unknown outcome may still commit (or did, and its entry is
                    // gone already): the next start must not carry its uuid, or that uuid
                    // would show up again after a removal others saw (they would count the
                    // new session as gone).
                    *uuid = Uuid::from_u128(fresh);
                    *unknown_sent_at = None;
                }
                *known = Some(state);
            }
            Phase::Yielding { .. } => {
                if matches!(&state, SessionKeyState::Value { value: Some(v), .. }
                    if v.instance == self.instance && v.incarnation != self.incarnation)
                {
                    // It renewed (or another one wrote): live; the period starts again.
                    self.phase = Phase::Yielding {
                        other: state,
                        since: now,
                    };
                } else {
                    // The other process's session is gone: start ours.
                    self.phase = Phase::Starting {
                        known: Some(state),
                        uuid: self.new_uuid(),
                        unknown_sent_at: None,
                    };
                    self.not_before = None;
                }
            }
            Phase::Init | Phase::Ending | Phase::Stopped => {}
        }
        self.step(now);
    }

    /// A write asked for with [`SessionAction::Write`] finished.
    pub fn handle_write(&mut self, op: u64, outcome: WriteOutcome, now: Instant) {
        let Some(Pending::Write {
            kind,
            sent_at,
            uuid,
            ..
        }) = self.pending.filter(|p| p.op() == op)
        else {
            return;
        };
        self.pending = None;
        if matches!(outcome, WriteOutcome::Ok { .. } | WriteOutcome::Conflict) {
            self.recovered();
        }
        self.check_deadline(now);
        match kind {
            SessionWriteKind::Start => self.start_done(uuid, sent_at, outcome, now),
            SessionWriteKind::Renew => self.renew_done(uuid, sent_at, outcome, now),
            SessionWriteKind::End => self.end_done(outcome, now),
        }
        self.step(now);
    }

    /// A read asked for with [`SessionAction::Read`] finished.
    pub fn handle_read(
        &mut self,
        op: u64,
        result: Result<SessionKeyState, FailureKind>,
        now: Instant,
    ) {
        if !matches!(self.pending, Some(Pending::Read { op: o }) if o == op) {
            return;
        }
        self.pending = None;
        if matches!(self.phase, Phase::Ending) {
            // Stopping while a read was in flight: nothing of ours to delete for sure.
            self.finish();
            return;
        }
        self.check_deadline(now);
        match result {
            Ok(state) => {
                self.attempts.succeeded();
                self.recovered();
                self.read_done(state, now);
            }
            Err(kind) => {
                self.report_failure(kind);
                if kind.is_permanent() {
                    self.slow_retry(now);
                } else {
                    self.back_off(now);
                }
            }
        }
        self.step(now);
    }

    /// End the session (after every role of it was released): a delete marker on its
    /// revision, then [`SessionAction::Stopped`].
    pub fn handle_stop(&mut self, now: Instant) {
        match &self.phase {
            Phase::Live(l) => {
                let uuid = l.uuid;
                let rev = l.rev;
                self.actions.push_back(SessionAction::Lost {
                    uuid,
                    reason: SessionLoss::Ended,
                });
                self.phase = Phase::Ending;
                if self.pending.is_none() {
                    self.send_end(rev, now);
                } else {
                    // A renewal in flight: end on whatever it leaves (see `renew_done`).
                    self.ending_rev = Some(rev);
                }
            }
            Phase::Ending | Phase::Stopped => {}
            _ => {
                if self.pending.is_none() {
                    self.finish();
                } else {
                    self.phase = Phase::Ending;
                }
            }
        }
    }

    /// Nobody acts on the term at `revision` of `role`, whose value names session `uuid` (a
    /// release of it was refused or its outcome is unknown, or somebody else wrote it): list
    /// it in the session's value and renew at once, so that every candidate finds the role
    /// vacant (Q5 rule 5). Ignored unless `uuid` is the live session. When the list is full the
    /// session is replaced instead ([`SessionLoss::Rotated`]).
    pub fn handle_release_term(&mut self, uuid: Uuid, role: RoleName, revision: u64, now: Instant) {
        self.check_deadline(now);
        let Phase::Live(l) = &mut self.phase else {
            // Not live (perhaps just ended by the deadline check): go on with the next session.
            self.step(now);
            return;
        };
        if l.uuid != uuid
            || self
                .released
                .iter()
                .any(|t| t.role == role && t.revision == revision)
        {
            return;
        }
        if self.released.len() >= MAX_RELEASED {
            self.lose(SessionLoss::Rotated, None, now);
        } else {
            self.released.push(ReleasedTerm { role, revision });
            l.next_renew = now;
        }
        self.step(now);
    }

    /// The key of `role` moved to `revision`: released terms of it below that are settled
    /// (somebody took the role over) and leave the list with the next renewal.
    pub fn handle_role_moved(&mut self, role: &RoleName, revision: u64) {
        self.released
            .retain(|t| t.role != *role || t.revision >= revision);
    }

    /// The released terms the live session lists (Q5 rule 5).
    #[must_use]
    pub fn released(&self) -> &[ReleasedTerm] {
        &self.released
    }
}

/// How many of its latest distinct values a session remembers (its value changes only with the
/// released terms; a late commit of an older one is still recognised).
const SENT_REMEMBERED: usize = 8;

/// Whether `state` holds one of the values in `sent` (this process wrote it).
fn is_sent(sent: &VecDeque<SessionValue>, state: &SessionKeyState) -> bool {
    matches!(state, SessionKeyState::Value { value: Some(v), .. } if sent.contains(v))
}

/// Why a session whose key now shows `state` (newer than our last write) is over.
fn loss_reason(state: &SessionKeyState) -> SessionLoss {
    match state {
        SessionKeyState::Marker { expired: true, .. } => SessionLoss::Expired,
        SessionKeyState::Marker { .. } => SessionLoss::Evicted,
        SessionKeyState::Value { .. } => SessionLoss::Superseded,
        SessionKeyState::Absent => SessionLoss::BucketReset,
    }
}
