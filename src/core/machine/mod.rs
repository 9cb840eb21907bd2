//! The election state machine of one role: `(state, input, now) -> (state, actions)`.
//!
//! It performs no I/O and reads no clock: the driver feeds it observations of the role key,
//! outcomes of the writes and reads it asked for, the state of this instance's session
//! ([`super::SessionMachine`]) and of the holder's session, and the current monotonic time, and
//! executes the [`Action`]s it returns. Rule numbers (P3, Q4, ...) refer to `docs/protocol.md`:
//! protocol version 2 writes the role key only when a term starts or ends; the term lasts
//! while the session it names does.
//!
//! This file holds the machine's state and its inputs (`handle_*`) and queries; `step.rs`
//! decides what to send next, `answers.rs` takes the server's answers, `terms.rs` ends terms
//! (releases, stops, deadlines, losses seen) and notices duplicates.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::attempts::Attempts;
use super::backoff::{RetryPolicy, SplitMix64};
use super::types::{
    Action, DemoteReason, FailureKind, KeyState, ReleaseReason, Term, Timing, WriteOutcome,
};
use crate::names::InstanceId;
use crate::status::RoleState;
use crate::value::HolderValue;

mod answers;
mod permit;
mod step;
mod terms;

/// Extra wait of the follower backstop beyond TTL + heartbeat (P5). The backstop is for lost
/// events; the server's expiry marker is the normal path. nats-server processes due expiries in
/// batches up to ~250 ms late when many keys expire together; a backstop takeover racing that
/// batch could see a stale expiry marker land after its own write and flap. Waiting past the
/// batch keeps the two apart.
pub const BACKSTOP_GRACE: Duration = Duration::from_millis(500);

/// This instance's session as the role machine needs it (protocol Q4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionUpdate {
    /// The session is live: terms resting on it may act until `acked_sent_at` + the role's
    /// local lease.
    Live {
        /// The session's uuid.
        uuid: Uuid,
        /// Send time of the session's last acknowledged write.
        acked_sent_at: Instant,
    },
    /// The session ended: every term resting on it ends now.
    Lost {
        /// The session's uuid.
        uuid: Uuid,
        /// Reported to the application as the demotion's reason.
        reason: DemoteReason,
    },
}

/// Who this machine writes as.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Instance id written into the lease.
    pub instance: InstanceId,
    /// Random id of this process start.
    pub incarnation: Uuid,
    /// Priority written into the lease.
    pub priority: i32,
    /// Free-form metadata written into the lease.
    pub meta: std::collections::BTreeMap<String, String>,
}

/// What the machine knows about the role key.
#[derive(Debug, Clone)]
struct Known {
    state: KeyState,
    /// Monotonic time at which this revision was first observed.
    seen_at: Instant,
}

impl Known {
    fn rev(&self) -> u64 {
        self.state.revision()
    }
}

/// The operation in flight (at most one per role).
#[derive(Debug, Clone, Copy)]
enum Pending {
    Acquire {
        op: u64,
        nonce: Uuid,
        /// Revision the CAS expects.
        expected: u64,
        /// The session the acquire names.
        session: Uuid,
    },
    Release {
        op: u64,
    },
    Read {
        op: u64,
    },
}

impl Pending {
    fn op(self) -> u64 {
        match self {
            Self::Acquire { op, .. } | Self::Release { op } | Self::Read { op } => op,
        }
    }
}

/// What to do once a release finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterRelease {
    Cooldown(Duration),
    Stop,
}

#[derive(Debug, Clone)]
struct Release {
    after: AfterRelease,
    drained: bool,
    /// Set when the delete must be re-checked by a read before being sent again.
    verify: bool,
    /// The term was handed to the session's released list ([`Action::ReleaseTerm`]).
    handed: bool,
}

#[derive(Debug, Clone)]
struct Leading {
    term: Term,
    /// Revision of the term's role key (the acquire; it does not change during the term).
    rev: u64,
    /// The session the term rests on.
    session: Uuid,
    disconnected_since: Option<Instant>,
    /// Set once a graceful release began: the term was demoted to the application, the
    /// lease is still renewed until the drain finished, then deleted.
    release: Option<Release>,
}

#[derive(Debug, Clone)]
enum Phase {
    /// Not started.
    Init,
    /// Campaigning (or following a holder while ready to campaign).
    Candidate,
    /// Not campaigning for this role: observe only.
    Observer,
    /// Holding the role.
    Leader(Box<Leading>),
    /// Released voluntarily; campaigning again at `until`.
    Cooldown { until: Instant },
    /// Stop requested while not leading; waiting for the in-flight operation to settle.
    Stopping,
    /// Finished (stopped, or failed permanently).
    Stopped,
}

/// The state machine of one role.
#[derive(Debug)]
pub struct RoleMachine {
    id: Identity,
    timing: Timing,
    attempts: Attempts,
    campaign: bool,
    epoch: u64,
    rng: SplitMix64,
    phase: Phase,
    known: Option<Known>,
    pending: Option<Pending>,
    /// Earliest time the next operation may be sent (backoff, jitter, re-read delay).
    not_before: Option<Instant>,
    /// Nonce of an acquire whose outcome is unknown (P5 own late write).
    unknown_nonce: Option<Uuid>,
    /// The nonce of `unknown_nonce` once the key showed another writer's value (Q15: the
    /// acquire is resolved for the slot permit for good, whatever the key shows later).
    unknown_resolved: Option<Uuid>,
    /// Whether this process already wrote this role's key, or adopted a predecessor's lease.
    adopted_or_wrote: bool,
    /// Incarnations already reported as duplicates.
    duplicates: Vec<Uuid>,
    /// Stopping: acquire won after stop was requested; delete it.
    stop_cleanup: Option<u64>,
    /// A backstop read confirmed the held revision is unchanged: take it over.
    confirmed: Option<u64>,
    /// Next operation id.
    next_op: u64,
    /// Highest revision seen in this epoch (revisions never go back within one bucket).
    high_water: u64,
    /// A newer entry was observed while a read was in flight: that read may predate it.
    observed_during_read: bool,
    /// Placement hold-back: contend for a vacancy only this long after first seeing it
    /// (another live instance is preferred for the role and should acquire first).
    campaign_delay: Duration,
    /// Revision of the first state of the key this process observed (the bucket as it was
    /// when the process started): only a lease seen there can be a predecessor's (P5
    /// restart adoption).
    first_seen_rev: Option<u64>,
    /// This instance's live session: its uuid and the send time of its last acknowledged
    /// write (protocol Q4). No acquire is sent without one.
    session: Option<(Uuid, Instant)>,
    /// An acquire waits for a renewal newer than `session`'s (see
    /// [`RoleMachine::wants_session_renewal`]).
    wants_renewal: bool,
    /// This role's session key (`session.<instance>.<ttl_ms>`).
    session_key: String,
    /// Herd ranking (Q7): contend for the current vacancy only this long after seeing it.
    herd_delay: Duration,
    /// Placement's target for a vacancy: no herd wait ([`RoleMachine::handle_campaign_first`]).
    campaign_first: bool,
    /// A targeted move's hold-back at the current vacancy (Q13): when set, it replaces the
    /// placement and herd hold-backs (zero for the move's target, the grace for the others).
    move_delay: Option<Duration>,
    /// No acquire before this instant: the bucket is younger than the TTL + heartbeat, and a
    /// holder of a bucket it replaced may still act (Q6, bucket reset).
    young_until: Option<Instant>,
    /// Whether a key with no entry at all is acquired only after a TTL + heartbeat (always,
    /// except in the simulation's negative control that removes every reset hold).
    absent_hold: bool,
    /// Revision of the last role value naming our live session that was handed over through
    /// the session ([`Action::ReleaseTerm`]).
    handed_over: Option<u64>,
    /// The slot permit (Q15): while false, no acquire is sent ([`RoleMachine::set_acquire_permit`]).
    permit: bool,

    actions: VecDeque<Action>,
}

impl RoleMachine {
    /// A machine for one role. `seed` drives jitter; `epoch` is the bucket epoch.
    #[must_use]
    pub fn new(
        id: Identity,
        timing: Timing,
        retry: RetryPolicy,
        campaign: bool,
        epoch: u64,
        seed: u64,
    ) -> Self {
        let ttl_ms = u64::try_from(timing.ttl.as_millis()).unwrap_or(u64::MAX);
        let session_key = crate::value::session_key(&id.instance, ttl_ms);
        Self {
            session_key,
            session: None,
            herd_delay: Duration::ZERO,
            campaign_first: false,
            move_delay: None,
            young_until: None,
            wants_renewal: false,
            absent_hold: true,
            handed_over: None,
            permit: true,
            id,
            timing,
            attempts: Attempts::new(retry),
            campaign,
            epoch,
            rng: SplitMix64::new(seed),
            phase: Phase::Init,
            known: None,
            pending: None,
            not_before: None,
            unknown_nonce: None,
            unknown_resolved: None,
            adopted_or_wrote: false,
            duplicates: Vec::new(),
            stop_cleanup: None,
            confirmed: None,
            next_op: 1,
            high_water: 0,
            observed_during_read: false,
            campaign_delay: Duration::ZERO,
            first_seen_rev: None,
            actions: VecDeque::new(),
        }
    }

    /// The public state of the role.
    #[must_use]
    pub fn state(&self) -> RoleState {
        match &self.phase {
            Phase::Init => RoleState::Init,
            Phase::Candidate => match self.known.as_ref().map(|k| &k.state) {
                Some(KeyState::Held { .. }) if self.pending.is_none() => RoleState::Follower,
                _ => RoleState::Candidate,
            },
            Phase::Observer => RoleState::Follower,
            Phase::Leader(l) if l.release.is_none() => RoleState::Leader,
            Phase::Leader(_) | Phase::Cooldown { .. } => RoleState::Demoted,
            Phase::Stopping | Phase::Stopped => RoleState::Stopped,
        }
    }

    /// The current term, while leading (and not yet demoted by a release).
    #[must_use]
    pub fn term(&self) -> Option<&Term> {
        match &self.phase {
            Phase::Leader(l) if l.release.is_none() => Some(&l.term),
            _ => None,
        }
    }

    /// The role's timing.
    #[must_use]
    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// The latest observed state of the key, if any.
    #[must_use]
    pub fn observed(&self) -> Option<&KeyState> {
        self.known.as_ref().map(|k| &k.state)
    }

    /// Whether the machine has finished.
    #[must_use]
    pub fn is_stopped(&self) -> bool {
        matches!(self.phase, Phase::Stopped)
    }

    /// Whether an operation is in flight.
    #[must_use]
    #[cfg(test)]
    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Next action produced by the last inputs.
    pub fn poll_action(&mut self) -> Option<Action> {
        let next = self.actions.pop_front();
        if next.is_none() && self.actions.capacity() != 0 {
            // Drained: give the queue's memory back (a role at rest would keep it for good;
            // with thousands of roles that is most of their state).
            self.actions = VecDeque::new();
        }
        next
    }

    /// The next time at which [`RoleMachine::handle_timeout`] must be called.
    #[must_use]
    #[cfg(test)]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.poll_timeout_with(false)
    }

    /// [`RoleMachine::poll_timeout`], leaving out a held term's deadline when
    /// `session_ends_term` says the driver delivers the end of the term's session (its
    /// [`SessionUpdate::Lost`]) no later than that deadline: the session's own deadline is no
    /// later than the term's (docs/protocol.md Q4, "one deadline per session").
    #[must_use]
    pub fn poll_timeout_with(&self, session_ends_term: bool) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |i: Instant| t = Some(t.map_or(i, |c| c.min(i)));
        match &self.phase {
            Phase::Leader(l) => {
                if !session_ends_term || l.release.is_some() {
                    consider(l.term.deadline);
                }
                if let Some(d) = l.disconnected_since {
                    consider(d + self.timing.disconnect_grace);
                }
                // A release waiting for its backoff.
                if self.pending.is_none()
                    && l.release.as_ref().is_some_and(|r| r.drained || r.verify)
                {
                    consider(self.not_before.unwrap_or(l.term.deadline));
                }
            }
            // step() does nothing while an operation is in flight or before `not_before`:
            // a timer due earlier would fire at once, again and again (busy loop).
            Phase::Cooldown { until } if self.pending.is_none() => {
                if self.stop_cleanup.is_some() || self.unknown_nonce.is_some() {
                    // A stray acquire to clean up: as soon as a backoff allows.
                    // (`not_before` is set: the clean-up waits for a backoff.)
                    consider(self.not_before.unwrap_or(*until));
                } else {
                    consider(self.not_before.map_or(*until, |n| n.max(*until)));
                }
            }
            Phase::Candidate if self.pending.is_none() => {
                // Not even the backstop read is sent before `not_before`.
                match (self.not_before, self.backstop_at()) {
                    (Some(n), Some(b)) => consider(n.max(b)),
                    (n, b) => n.or(b).into_iter().for_each(&mut consider),
                }
            }
            // A retry after a backoff (failed read or delete) needs a timer, or the stop
            // waits for an unrelated watcher event that may never come.
            Phase::Stopping if self.pending.is_none() => {
                if let Some(n) = self.not_before {
                    consider(n);
                }
            }
            _ => {}
        }
        t
    }

    // ----- inputs -------------------------------------------------------------------------

    /// Starts campaigning (or observing).
    pub fn start(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Init) {
            self.phase = if self.campaign {
                Phase::Candidate
            } else {
                Phase::Observer
            };
            self.step(now);
        }
    }

    /// Timers fired.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.step(now);
    }

    /// The watcher (or a read) reported the key's state.
    pub fn handle_observed(&mut self, state: KeyState, now: Instant) {
        self.check_deadline(now);
        self.observe(state, now, false);
        self.step(now);
    }

    /// A background validation read (P6) returned the key's state: a loss it reveals is
    /// reported as [`DemoteReason::ValidationFailed`].
    pub fn handle_validation(&mut self, state: KeyState, now: Instant) {
        self.check_deadline(now);
        self.observe(state, now, true);
        self.step(now);
    }

    /// The connection to NATS went down or came back.
    pub fn handle_connection(&mut self, connected: bool, now: Instant) {
        self.check_deadline(now);
        if let Phase::Leader(l) = &mut self.phase {
            if connected {
                l.disconnected_since = None;
            } else if l.disconnected_since.is_none() {
                l.disconnected_since = Some(now);
            }
        }
        self.step(now);
    }

    /// A write (acquire, renew or release) finished.
    pub fn handle_write(&mut self, op: u64, outcome: WriteOutcome, now: Instant) {
        let Some(pending) = self.pending.filter(|p| p.op() == op) else {
            return;
        };
        self.pending = None;
        self.check_deadline(now);
        if matches!(outcome, WriteOutcome::Ok { .. } | WriteOutcome::Conflict) {
            self.recovered();
        }
        match pending {
            Pending::Acquire {
                nonce,
                expected,
                session,
                ..
            } => {
                self.acquire_done(nonce, session, expected, outcome, now);
            }
            Pending::Release { .. } => self.release_done(outcome, now),
            Pending::Read { .. } => {}
        }
        self.step(now);
    }

    /// A read asked for with [`Action::Read`] finished.
    pub fn handle_read(&mut self, op: u64, result: Result<KeyState, FailureKind>, now: Instant) {
        if !matches!(self.pending, Some(Pending::Read { op: o }) if o == op) {
            return;
        }
        self.pending = None;
        self.check_deadline(now);
        match result {
            Ok(state) => {
                self.attempts.succeeded();
                self.recovered();
                self.read_done(state, now);
            }
            Err(kind) if matches!(self.phase, Phase::Stopping) && kind.is_permanent() => {
                // A stop does not wait for a permission fix: the clean-up is given up (the
                // server's TTL removes a lease that may have been stored).
                self.report_failure(kind);
                self.stop_cleanup = None;
                self.unknown_nonce = None;
            }
            Err(kind) if kind.is_permanent() => self.stall(kind, now),
            Err(kind) => {
                self.report_failure(kind);
                self.back_off(now);
            }
        }
        self.step(now);
    }

    /// This instance's session started, was renewed, or ended (protocol Q4): a renewal moves
    /// the deadline of a term resting on it ([`Action::Renewed`]), a loss ends that term at
    /// once; a candidate acquires only while a session is live.
    pub fn handle_session(&mut self, update: SessionUpdate, now: Instant) {
        self.wants_renewal = false;
        // P4: a term whose deadline passed is over before any renewal can move it.
        self.check_deadline(now);
        let local_lease = self.timing.local_lease();
        match update {
            SessionUpdate::Live {
                uuid,
                acked_sent_at,
            } => {
                self.session = Some((uuid, acked_sent_at));
                if let Phase::Leader(l) = &mut self.phase
                    && l.session == uuid
                {
                    let deadline = acked_sent_at + local_lease;
                    if deadline > l.term.deadline {
                        l.term.deadline = deadline;
                        let (term, revision) = (l.term.clone(), l.rev);
                        self.actions.push_back(Action::Renewed { term, revision });
                    }
                }
            }
            SessionUpdate::Lost { uuid, reason } => {
                if self.session.is_some_and(|(u, _)| u == uuid) {
                    self.session = None;
                }
                if let Phase::Leader(l) = &self.phase
                    && l.session == uuid
                {
                    let (term, released) = (l.term.clone(), l.release.is_some());
                    self.leave_leadership(term, reason, released, now);
                }
            }
        }
        self.check_deadline(now);
        // A term on another session than the live one cannot last (a session replaced
        // without a loss report seen yet).
        if let (Phase::Leader(l), Some((uuid, _))) = (&self.phase, self.session)
            && l.session != uuid
        {
            let (term, released) = (l.term.clone(), l.release.is_some());
            self.leave_leadership(term, DemoteReason::Expired, released, now);
        }
        self.step(now);
    }

    /// Renewals of this instance's session `uuid` handed over late: the driver reads them from
    /// the session's clock when it wakes for something else (docs/protocol.md Q4, "one
    /// deadline per session"). `acked_sent_at` is the send time of the session's latest
    /// acknowledged write (a new term's deadline starts from it); `term_sent_at` the send time
    /// of the last renewal the clock applied to the held term **in time** — each one arrived
    /// before the term's deadline as the previous ones had moved it, the rule
    /// [`RoleMachine::handle_session`] applies when renewals come one by one. The held term's
    /// deadline becomes `term_sent_at` plus the local lease; then it is checked against `now`.
    pub fn handle_session_renewed(
        &mut self,
        uuid: Uuid,
        acked_sent_at: Instant,
        term_sent_at: Option<Instant>,
        now: Instant,
    ) {
        self.wants_renewal = false;
        if let Some((live, sent)) = &mut self.session
            && *live == uuid
            && acked_sent_at > *sent
        {
            *sent = acked_sent_at;
        }
        let local_lease = self.timing.local_lease();
        if let Phase::Leader(l) = &mut self.phase
            && l.session == uuid
            && let Some(term_sent_at) = term_sent_at
        {
            let deadline = term_sent_at + local_lease;
            if deadline > l.term.deadline {
                l.term.deadline = deadline;
                let (term, revision) = (l.term.clone(), l.rev);
                self.actions.push_back(Action::Renewed { term, revision });
            }
        }
        self.check_deadline(now);
        self.step(now);
    }

    /// Whether an acquire waits for a newer renewal of the session than the machine has (the
    /// last one is older than the role's local lease): the driver hands it the next renewal as
    /// soon as there is one (docs/protocol.md Q4, "one deadline per session").
    #[must_use]
    pub fn wants_session_renewal(&self) -> bool {
        self.wants_renewal
    }

    /// The session this machine's held term rests on (its uuid), while it holds one (a release
    /// in progress included).
    #[must_use]
    pub fn held_session(&self) -> Option<Uuid> {
        match &self.phase {
            Phase::Leader(l) => Some(l.session),
            _ => None,
        }
    }

    /// The session the role's holder (at `revision` of the role key) rests on is gone
    /// (protocol Q5 rules 2–4, decided by the session book): the role is vacant, and a
    /// takeover is a CAS on `revision`.
    pub fn handle_holder_gone(&mut self, revision: u64, now: Instant) {
        self.check_deadline(now);
        // The holder's value resolved an acquire of unknown outcome before it turns vacant.
        self.note_resolved();
        if let Some(k) = &mut self.known
            && k.rev() == revision
            && let KeyState::Held {
                value: HolderValue::Lease(_),
                ..
            } = &k.state
            && !matches!(&self.phase, Phase::Leader(l) if l.rev == revision)
        {
            k.state = KeyState::Vacant {
                revision,
                expired: true,
            };
            k.seen_at = now;
            self.confirmed = None;
            if self.attempts.clear() {
                self.not_before = None;
            }
        }
        self.step(now);
    }

    /// Herd ranking (protocol Q7): contend for a vacancy only `delay` after seeing it (zero:
    /// at once). Only delays acquires, so it can never create a second holder.
    pub fn handle_herd_delay(&mut self, delay: Duration) {
        self.herd_delay = delay;
    }

    /// Placement made this instance the target of the role's vacancy (everybody else holds
    /// back for the claim grace): it contends without the herd's wait. Only shortens a wait
    /// before an acquire, which is still a CAS: it can never create a second holder.
    pub fn handle_campaign_first(&mut self, first: bool) {
        self.campaign_first = first;
    }

    /// Targeted move (Q13) for the vacancy about to be delivered: `Some(delay)` replaces the
    /// placement and herd hold-backs at that vacancy (zero for the move's target, the move's
    /// grace for everybody else); `None` leaves them as they are. Only delays or orders
    /// acquires, each still a CAS on the vacancy: it can never create a second holder.
    pub fn handle_move_delay(&mut self, delay: Option<Duration>) {
        self.move_delay = delay;
    }

    /// The application's demote callback returned (or the drain timeout passed).
    pub fn handle_drained(&mut self, now: Instant) {
        if let Phase::Leader(l) = &mut self.phase
            && let Some(r) = &mut l.release
        {
            r.drained = true;
        }
        self.step(now);
    }

    /// Give the role up voluntarily (health failure, operator request) and stay away for
    /// `cooldown`.
    pub fn handle_release(&mut self, reason: ReleaseReason, cooldown: Duration, now: Instant) {
        self.check_deadline(now);
        self.begin_release(reason, AfterRelease::Cooldown(cooldown), now);
        self.step(now);
    }

    /// Placement hold-back (docs/placement.md): from now on contend for a vacancy only
    /// `delay` after first seeing it. Zero contends at once. Only delays acquires, so it can
    /// never create a second holder; a shorter delay takes effect at once.
    pub fn handle_campaign_delay(&mut self, delay: Duration, now: Instant) {
        if delay == self.campaign_delay {
            return;
        }
        let shorter = delay < self.campaign_delay;
        self.campaign_delay = delay;
        let vacancy = self
            .known
            .as_ref()
            .is_some_and(|k| matches!(k.state, KeyState::Absent | KeyState::Vacant { .. }));
        if shorter
            && matches!(self.phase, Phase::Candidate)
            && self.pending.is_none()
            && self.attempts.clear()
            && vacancy
        {
            // The wait for the hold-back (or jitter) is recomputed from the new delay.
            self.not_before = None;
        }
        self.step(now);
    }

    /// When the cooldown this machine sits in ends (after a voluntary release with a cooldown,
    /// or for one TTL after an eviction): it does not campaign before then. `None` outside a
    /// cooldown.
    #[must_use]
    pub fn cooldown_until(&self) -> Option<Instant> {
        match self.phase {
            Phase::Cooldown { until } => Some(until),
            _ => None,
        }
    }

    /// Stop: release if leading, then finish.
    pub fn handle_stop(&mut self, now: Instant) {
        self.check_deadline(now);
        self.begin_release(ReleaseReason::Shutdown, AfterRelease::Stop, now);
        self.step(now);
    }

    /// The bucket was created `age` ago by the server's clock, as learned at `now` (when the
    /// stream-info answer arrived); `None`: its age is unknown. No acquire is sent before the
    /// bucket is the TTL + heartbeat old (Q6, bucket reset: a holder of a bucket this one
    /// replaced may act until then), so an unknown age holds for that long from `now`.
    ///
    /// `old_ttl`: the longest TTL of the sessions this process knew in a bucket this one
    /// replaced (zero if none): a holder there may act until its deadline, so the hold lasts at
    /// least that long (a role added after a reset).
    pub fn handle_bucket_age(&mut self, age: Option<Duration>, old_ttl: Duration, now: Instant) {
        self.hold_young(age, old_ttl, now);
        self.step(now);
    }

    /// The young-bucket hold (Q6): no acquire before the bucket is `T + heartbeat` old, `T`
    /// the longer of this role's TTL and `old_ttl`. A hold already running is never
    /// shortened: a second reset does not move the deadline of a holder of the bucket before
    /// (whose session this process may no longer know).
    fn hold_young(&mut self, age: Option<Duration>, old_ttl: Duration, now: Instant) {
        let longest = self.timing.ttl.max(old_ttl);
        let hold = (longest + self.timing.heartbeat).saturating_sub(age.unwrap_or(Duration::ZERO));
        let until = (!hold.is_zero()).then_some(now + hold);
        self.young_until = match (self.young_until, until) {
            (Some(running), Some(new)) => Some(running.max(new)),
            (running, new) => new.or(running.filter(|r| *r > now)),
        };
    }

    /// Removes the hold of a key with no entry (the simulation's negative control of the reset
    /// holds: the code before issue 24).
    #[cfg(test)]
    pub(crate) fn without_absent_hold(&mut self) {
        self.absent_hold = false;
    }

    /// The bucket was recreated (new epoch): everything known is void. `age` is the new
    /// bucket's age (see [`RoleMachine::handle_bucket_age`]); `old_ttl` the longest TTL of the
    /// sessions this instance knew in the old bucket: a holder there acts until its deadline,
    /// so the hold lasts at least that long (zero when nothing was known).
    pub fn handle_bucket_reset(
        &mut self,
        epoch: u64,
        age: Option<Duration>,
        old_ttl: Duration,
        now: Instant,
    ) {
        self.epoch = epoch;
        self.known = None;
        self.high_water = 0;
        // Everything in the new bucket was written after this process started: nothing in it
        // is a predecessor's lease to adopt (P5).
        self.first_seen_rev = Some(0);
        if let Phase::Leader(l) = &self.phase {
            let term = l.term.clone();
            let released = l.release.is_some();
            self.leave_leadership(term, DemoteReason::BucketReset, released, now);
        }
        // A recreated bucket says nothing about who held what in the old one, and a holder
        // there acts until it notices (its next session write, at most its deadline: one
        // local lease after its last renewal, which came before the deletion). Acquire in
        // the new bucket only after that (Q6: no overlap across a bucket reset), also for a
        // holder whose TTL is longer than this role's.
        self.hold_young(age, old_ttl, now);
        self.step(now);
    }

    /// Revisions up to `revision` were already seen in this bucket (any key, P6): an acquire
    /// acknowledged at or below it cannot have been stored in this bucket, so it is never
    /// promoted (the driver checks the epoch). Call before [`RoleMachine::start`].
    pub fn seed_high_water(&mut self, revision: u64) {
        self.high_water = self.high_water.max(revision);
    }

    /// Nonce of the acquire whose outcome is unknown (tests).
    #[cfg(test)]
    pub(crate) fn unknown_acquire_nonce(&self) -> Option<Uuid> {
        self.unknown_nonce
    }

    /// The failure currently reported (cleared when the server answers normally again).
    #[must_use]
    #[cfg(test)]
    pub fn failure(&self) -> Option<FailureKind> {
        self.attempts.reported()
    }
}
