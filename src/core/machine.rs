//! The election state machine of one role: `(state, input, now) -> (state, actions)`.
//!
//! It performs no I/O and reads no clock: the driver feeds it observations of the role key,
//! outcomes of the writes and reads it asked for, the state of this instance's session
//! ([`super::SessionMachine`]) and of the holder's session, and the current monotonic time, and
//! executes the [`Action`]s it returns. Rule numbers (P3, Q4, ...) refer to `docs/protocol.md`:
//! protocol version 2 writes the role key only when a term starts or ends; the term lasts
//! while the session it names does.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::attempts::Attempts;
use super::backoff::{RetryPolicy, SplitMix64};
use super::types::{
    Action, DemoteReason, FailureKind, KeyState, Notice, ReleaseReason, Term, Timing, WriteKind,
    WriteOutcome, WriteRequest,
};
use crate::names::InstanceId;
use crate::status::RoleState;
use crate::token::FencingToken;
use crate::value::{HolderValue, LeaseValue};

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
            move_delay: None,
            young_until: None,
            wants_renewal: false,
            absent_hold: true,
            handed_over: None,
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
        self.actions.pop_front()
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
    pub fn handle_bucket_age(&mut self, age: Option<Duration>, now: Instant) {
        let hold =
            (self.timing.ttl + self.timing.heartbeat).saturating_sub(age.unwrap_or(Duration::ZERO));
        self.young_until = (!hold.is_zero()).then_some(now + hold);
        self.step(now);
    }

    /// Removes the hold of a key with no entry (the simulation's negative control of the reset
    /// holds: the code before issue 24).
    #[cfg(test)]
    pub(crate) fn without_absent_hold(&mut self) {
        self.absent_hold = false;
    }

    /// The bucket was recreated (new epoch): everything known is void. `age` is the new
    /// bucket's age (see [`RoleMachine::handle_bucket_age`]).
    pub fn handle_bucket_reset(&mut self, epoch: u64, age: Option<Duration>, now: Instant) {
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
        // the new bucket only after that (Q6: no overlap across a bucket reset).
        self.handle_bucket_age(age, now);
    }

    // ----- internals ----------------------------------------------------------------------

    fn begin_release(&mut self, reason: ReleaseReason, after: AfterRelease, now: Instant) {
        match &mut self.phase {
            Phase::Leader(l) => {
                if let Some(r) = &mut l.release {
                    // A stop during a release-with-cooldown turns into a stop.
                    if after == AfterRelease::Stop {
                        r.after = AfterRelease::Stop;
                    }
                    return;
                }
                l.release = Some(Release {
                    after,
                    drained: false,
                    verify: false,
                    handed: false,
                });
                let term = l.term.clone();
                self.actions.push_back(Action::Demote {
                    term,
                    reason: DemoteReason::Released(reason),
                    drain: true,
                });
            }
            Phase::Stopped | Phase::Stopping => {}
            Phase::Init | Phase::Observer => {
                if after == AfterRelease::Stop {
                    self.finish_stop();
                }
            }
            Phase::Candidate | Phase::Cooldown { .. } => match after {
                AfterRelease::Stop => {
                    self.phase = Phase::Stopping;
                    if self.pending.is_none()
                        && self.unknown_nonce.is_none()
                        && self.stop_cleanup.is_none()
                    {
                        self.finish_stop();
                    }
                }
                AfterRelease::Cooldown(d) => {
                    self.phase = Phase::Cooldown { until: now + d };
                }
            },
        }
    }

    fn finish_stop(&mut self) {
        self.phase = Phase::Stopped;
        self.actions.push_back(Action::Stopped);
    }

    /// P4: demote at the local deadline, or after the disconnect grace.
    fn check_deadline(&mut self, now: Instant) {
        let Phase::Leader(l) = &self.phase else {
            return;
        };
        let reason = if now >= l.term.deadline {
            DemoteReason::DeadlineExpired
        } else if l
            .disconnected_since
            .is_some_and(|d| now >= d + self.timing.disconnect_grace)
        {
            DemoteReason::Disconnected
        } else {
            return;
        };
        let term = l.term.clone();
        let released = l.release.is_some();
        self.leave_leadership(term, reason, released, now);
    }

    /// Ends a term without a release round trip.
    fn leave_leadership(&mut self, term: Term, reason: DemoteReason, demoted: bool, now: Instant) {
        let after = match &self.phase {
            Phase::Leader(l) => l.release.as_ref().map(|r| r.after),
            _ => None,
        };
        if !demoted {
            self.actions.push_back(Action::Demote {
                term,
                reason,
                drain: false,
            });
        } else if reason.is_loss() {
            // Demoted for a release already, its work still draining: stop it at once now.
            self.actions
                .push_back(Action::LostDuringRelease { term, reason });
        }
        // A delete in flight belongs to the ended term; its outcome is ignored.
        if matches!(self.pending, Some(Pending::Release { .. })) {
            self.pending = None;
        }
        self.not_before = None;
        match after {
            Some(AfterRelease::Stop) => self.finish_stop(),
            Some(AfterRelease::Cooldown(d)) => self.phase = Phase::Cooldown { until: now + d },
            // An operator evicted us (CAS delete of our lease): stay away for one TTL so that
            // another instance takes the role instead of this one winning it straight back.
            None if reason == DemoteReason::Evicted => {
                self.phase = Phase::Cooldown {
                    until: now + self.timing.ttl,
                };
            }
            None => {
                self.phase = if self.campaign {
                    Phase::Candidate
                } else {
                    Phase::Observer
                }
            }
        }
    }

    /// Records an observation if it is newer than what is known; demotes on a visible loss.
    fn observe(&mut self, state: KeyState, now: Instant, validation: bool) {
        let rev = state.revision();
        if self.known.as_ref().is_some_and(|k| rev <= k.rev()) {
            return;
        }
        self.known = Some(Known {
            state: state.clone(),
            seen_at: now,
        });
        self.first_seen_rev.get_or_insert(rev);
        self.notice_duplicate(&state);
        self.confirmed = None;
        self.high_water = self.high_water.max(rev);
        if matches!(self.pending, Some(Pending::Read { .. })) {
            self.observed_during_read = true;
        }
        if self.attempts.clear() {
            // New information ends a wait for the watcher (not a backoff after errors).
            self.not_before = None;
        }
        let Phase::Leader(l) = &mut self.phase else {
            return;
        };
        if rev <= l.rev {
            return;
        }
        let reason = match &state {
            KeyState::Held {
                value: HolderValue::Lease(v),
                ..
            } if v.nonce == l.term.nonce => {
                // Our own write, seen before (or instead of) its acknowledgement.
                l.rev = rev;
                return;
            }
            KeyState::Held { .. } => DemoteReason::Superseded,
            KeyState::Vacant { expired: true, .. } => DemoteReason::Expired,
            KeyState::Vacant { .. } => DemoteReason::Evicted,
            KeyState::Absent | KeyState::Unknown { .. } => return,
        };
        let reason = if validation {
            DemoteReason::ValidationFailed
        } else {
            reason
        };
        let (term, released) = (l.term.clone(), l.release.is_some());
        self.leave_leadership(term, reason, released, now);
    }

    /// A lease naming this instance but another process (another incarnation, not our live
    /// session), written after this process first looked at the key, is a live duplicate's
    /// (P5): reported once per incarnation, as soon as it is seen — whatever this machine is
    /// doing (an initial read in flight, no live session yet, leading). Only a notice: the
    /// value is then treated like any other holder's (its session decides when it is gone),
    /// and waiting to report it until a candidate step finds it would miss it whenever the
    /// session book declares the value gone first.
    fn notice_duplicate(&mut self, state: &KeyState) {
        let KeyState::Held {
            value: HolderValue::Lease(v),
            revision,
        } = state
        else {
            return;
        };
        let ours = v.incarnation == self.id.incarnation
            || self.session.is_some_and(|(u, _)| u == v.session);
        let written_later = self.first_seen_rev.is_some_and(|first| *revision > first);
        if v.holder != self.id.instance || ours || !written_later {
            return;
        }
        if !self.duplicates.contains(&v.incarnation) {
            self.duplicates.push(v.incarnation);
            self.actions
                .push_back(Action::Notice(Notice::DuplicateInstance {
                    other_incarnation: v.incarnation,
                }));
        }
    }

    fn acquire_done(
        &mut self,
        nonce: Uuid,
        session: Uuid,
        expected: u64,
        outcome: WriteOutcome,
        now: Instant,
    ) {
        if !matches!(self.phase, Phase::Candidate) {
            // A stop or release came while the acquire was in flight: never promote; give a
            // won lease back at once, and find out about an unknown one.
            match outcome {
                WriteOutcome::Ok { revision } => self.stop_cleanup = Some(revision),
                WriteOutcome::Unknown => self.unknown_nonce = Some(nonce),
                _ => {}
            }
            return;
        }
        match outcome {
            WriteOutcome::Ok { revision } if self.is_stale_ack(revision, nonce) => {
                // A newer revision was already seen: either our term was superseded before
                // its acknowledgement arrived, or the bucket was recreated and revisions
                // restarted. Either way a term from this write would carry a token smaller
                // than one already issued: never promote it. What we know (the newer entry)
                // stays; the driver checks the bucket's epoch (a reset re-enables us).
                self.attempts.succeeded();
                self.unknown_nonce = None;
                self.actions
                    .push_back(Action::Notice(Notice::RevisionRegressed {
                        revision,
                        high_water: self.high_water,
                    }));
            }
            WriteOutcome::Ok { revision }
                if self.session.is_none_or(|(u, acked)| {
                    u != session || now >= acked + self.timing.local_lease()
                }) =>
            {
                // The session the acquire names ended (or its deadline passed: the process
                // was paused) before the acknowledgement arrived: the term ended before it
                // began (Q6, late acquire). Promoting it would hand the application a dead
                // term after newer terms may have been promoted elsewhere (P6 order). Treat
                // the put as our own late write instead (P5): re-acquire over it if it is
                // still the key's last entry.
                self.attempts.succeeded();
                self.unknown_nonce = None;
                self.adopted_or_wrote = true;
                let value = HolderValue::Lease(Box::new(self.value_with(nonce, session)));
                self.observe(KeyState::Held { revision, value }, now, false);
            }
            WriteOutcome::Ok { revision } => {
                self.high_water = self.high_water.max(revision);
                self.attempts.succeeded();
                self.unknown_nonce = None;
                self.adopted_or_wrote = true;
                let acked = self.session.map_or(now, |(_, acked)| acked);
                let deadline = acked + self.timing.local_lease();
                let term = Term {
                    token: FencingToken::new(self.epoch, revision, nonce),
                    nonce,
                    deadline,
                };
                let state = KeyState::Held {
                    revision,
                    value: HolderValue::Lease(Box::new(self.value_with(nonce, session))),
                };
                self.known = Some(Known {
                    state,
                    seen_at: now,
                });
                self.not_before = None;
                self.phase = Phase::Leader(Box::new(Leading {
                    term: term.clone(),
                    rev: revision,
                    session,
                    disconnected_since: None,
                    release: None,
                }));
                self.actions.push_back(Action::Promote { term, revision });
            }
            WriteOutcome::Conflict | WriteOutcome::Retry => {
                // Somebody else won (or a replicated stream raced us): learn the new state
                // from the watcher; read if it stays silent for a heartbeat. An entry newer
                // than the one the CAS expected (the watcher showed it meanwhile) already
                // explains the conflict: keep it, so that the backstop counts from its first
                // sighting (P5).
                self.attempts.succeeded();
                if self.known.as_ref().is_none_or(|k| k.rev() <= expected) {
                    self.mark_stale(now);
                }
            }
            WriteOutcome::Unknown => {
                self.unknown_nonce = Some(nonce);
                self.mark_stale(now);
                self.back_off(now);
            }
            WriteOutcome::Failed(kind) if kind.is_permanent() => self.stall(kind, now),
            WriteOutcome::Failed(kind) => {
                self.report_failure(kind);
                self.back_off(now);
            }
        }
    }

    fn release_done(&mut self, outcome: WriteOutcome, now: Instant) {
        let Phase::Leader(l) = &mut self.phase else {
            // The clean-up delete of an acquire won after a stop.
            match outcome {
                WriteOutcome::Unknown | WriteOutcome::Retry => self.back_off(now),
                _ => self.stop_cleanup = None,
            }
            return;
        };
        if matches!(outcome, WriteOutcome::Unknown | WriteOutcome::Failed(_))
            && let Some(r) = &mut l.release
            && !r.handed
        {
            // The delete did not go through (refused: a permission revoked at run time, full
            // storage…; or unknown): the value still names our live session, so nobody else
            // could take the role. The work is drained (the release began with it): hand the
            // term over through the session (Q4, Q5 rule 5) and keep retrying the delete.
            r.handed = true;
            let (revision, session) = (l.rev, l.session);
            self.actions
                .push_back(Action::ReleaseTerm { revision, session });
            self.handed_over = Some(revision);
        }
        let term = l.term.clone();
        match outcome {
            WriteOutcome::Ok { revision } => {
                let state = KeyState::Vacant {
                    revision,
                    expired: false,
                };
                self.known = Some(Known {
                    state,
                    seen_at: now,
                });
                // Our own delete: the end of a release, not a loss.
                let reason = DemoteReason::Released(ReleaseReason::Requested);
                self.leave_leadership(term, reason, true, now);
            }
            WriteOutcome::Conflict => {
                // P8: the conflict may be our own renewal that committed late (its outcome was
                // unknown): re-read at once. Still ours -> delete on the revision read (the
                // hand-over stays immediate); anything else -> we lost, and never delete.
                if let Some(r) = &mut l.release {
                    r.verify = true;
                }
            }
            WriteOutcome::Retry | WriteOutcome::Unknown => {
                if let Some(r) = &mut l.release {
                    r.verify = true;
                }
                self.back_off(now);
            }
            WriteOutcome::Failed(kind) if kind.is_permanent() => {
                self.report_failure(kind);
                self.leave_leadership(term, DemoteReason::Failed(kind), true, now);
            }
            WriteOutcome::Failed(kind) => {
                // Full storage, lost quorum...: retry until the deadline like an unknown
                // outcome (the delete may succeed once the condition heals).
                if let Some(r) = &mut l.release {
                    r.verify = true;
                }
                self.report_failure(kind);
                self.back_off(now);
            }
        }
    }

    fn read_done(&mut self, state: KeyState, now: Instant) {
        match &mut self.phase {
            Phase::Leader(l) => {
                let rev = state.revision();
                match &state {
                    KeyState::Held {
                        value: HolderValue::Lease(v),
                        revision,
                    } if v.nonce == l.term.nonce => {
                        // Still our term: continue on the revision read (our own late write).
                        l.rev = l.rev.max(*revision);
                        if let Some(r) = &mut l.release {
                            r.verify = false;
                        }
                        self.not_before = None;
                    }
                    _ if rev < l.rev => {
                        // Reads go to the stream leader (P3), which never shows an older
                        // revision of a key than one it acknowledged: the key is gone or below
                        // our revision only in a recreated bucket (or after an operator purged
                        // it). The term is over: demote at once and have the epoch checked.
                        let (term, released) = (l.term.clone(), l.release.is_some());
                        let high_water = self.high_water;
                        self.leave_leadership(term, DemoteReason::BucketReset, released, now);
                        self.actions
                            .push_back(Action::Notice(Notice::RevisionRegressed {
                                revision: rev,
                                high_water,
                            }));
                    }
                    _ => {
                        self.observe(state, now, false);
                        if let Phase::Leader(l) = &self.phase {
                            let (term, released) = (l.term.clone(), l.release.is_some());
                            self.leave_leadership(term, DemoteReason::Superseded, released, now);
                        }
                    }
                }
            }
            Phase::Stopping | Phase::Cooldown { .. } => {
                // The only read while stopping or cooling down: is the acquire of unknown
                // outcome ours? (If so it is deleted at once.)
                if matches!(self.phase, Phase::Cooldown { .. }) {
                    self.observe(state.clone(), now, false);
                }
                if let KeyState::Held {
                    value: HolderValue::Lease(v),
                    revision,
                } = &state
                    && Some(v.nonce) == self.unknown_nonce
                {
                    self.stop_cleanup = Some(*revision);
                }
                self.unknown_nonce = None;
            }
            _ => {
                let known_rev = self.known.as_ref().map(Known::rev);
                match known_rev {
                    Some(k) if state.revision() == k => {
                        // Unchanged since first seen: keep `seen_at` (the backstop counts from
                        // the first sighting) and let step() act on the confirmation.
                        if let (Some(known), KeyState::Held { .. }) = (&mut self.known, &state) {
                            if matches!(known.state, KeyState::Unknown { .. }) {
                                known.state = state;
                                known.seen_at = now;
                            } else {
                                self.confirmed = Some(k);
                            }
                        } else if let Some(known) = &mut self.known {
                            known.state = state;
                        }
                    }
                    // The watcher showed an entry after this read was sent: "absent" may just
                    // predate it. Keep the newer entry.
                    Some(_) if state == KeyState::Absent && self.observed_during_read => {}
                    Some(_) if state == KeyState::Absent => {
                        // The key is gone without a marker we saw (a stream purge, a recreated
                        // bucket, max_age expiry without limit markers): a vacancy once it stayed
                        // absent for a TTL + heartbeat (a holder may still act on a term it won
                        // there); the acquire CAS on revision 0 decides whether it really is one.
                        self.known = Some(Known {
                            state,
                            seen_at: now,
                        });
                        self.confirmed = None;
                    }
                    Some(k) if state.revision() < k => {
                        // Older than what we know (a lagging replica): ask again a heartbeat
                        // later (a watcher event ends the wait sooner), not at once.
                        self.not_before = Some(now + self.timing.heartbeat);
                        return;
                    }
                    _ => self.observe(state, now, false),
                }
                self.not_before = None;
            }
        }
    }

    /// Whether an acquire acknowledged at `revision` cannot start a term: a newer revision was
    /// seen already, or the same revision holding something other than this write (revisions
    /// restarted in a recreated bucket).
    fn is_stale_ack(&self, revision: u64, nonce: Uuid) -> bool {
        if revision > self.high_water {
            return false;
        }
        let seen_as_ours = self.known.as_ref().is_some_and(|k| {
            k.rev() == revision && k.state.lease().is_some_and(|v| v.nonce == nonce)
        });
        revision < self.high_water || !seen_as_ours
    }

    /// The vacancy we saw is gone (someone won, or our own write may commit): wait for the
    /// watcher, or re-read after a heartbeat.
    fn mark_stale(&mut self, now: Instant) {
        if let Some(k) = &mut self.known {
            k.state = KeyState::Unknown { revision: k.rev() };
            k.seen_at = now;
        }
    }

    fn back_off(&mut self, now: Instant) {
        self.not_before = Some(self.attempts.back_off(now, &mut self.rng));
        if matches!(self.phase, Phase::Candidate) && self.attempts.gave_up() {
            // `retry.max_attempts` bounds the fast retries only: from now on the role retries
            // at the slow cadence until an attempt succeeds (never stopped for good).
            self.report_failure(FailureKind::GaveUp);
            self.slow_retry(now);
        }
    }

    /// A persistent failure (P3): a holder that cannot write cannot keep its term, so it
    /// demotes at once; the failure is reported and the role retries at the slow cadence.
    fn stall(&mut self, kind: FailureKind, now: Instant) {
        if let Phase::Leader(l) = &self.phase {
            let (term, released) = (l.term.clone(), l.release.is_some());
            self.leave_leadership(term, DemoteReason::Failed(kind), released, now);
        }
        self.report_failure(kind);
        self.attempts.failed_persistently();
        self.slow_retry(now);
    }

    fn slow_retry(&mut self, now: Instant) {
        self.not_before = Some(self.attempts.slow_retry_at(now, &mut self.rng));
    }

    /// Reports a failure that keeps the role from campaigning or renewing: persistent ones and
    /// every refusal with a server error code (full storage, lost quorum...). Connection-level
    /// trouble is reported by the connection state instead. Once per condition.
    fn report_failure(&mut self, kind: FailureKind) {
        if self.attempts.report(kind) {
            self.actions.push_back(Action::Failed(kind));
        }
    }

    /// The server answered normally: a reported failure is over.
    fn recovered(&mut self) {
        if self.attempts.recover() {
            self.actions.push_back(Action::Recovered);
        }
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

    /// Earliest time a follower may act on what it knows without news (P5 backstop).
    fn backstop_at(&self) -> Option<Instant> {
        let k = self.known.as_ref()?;
        match &k.state {
            // A lease of another protocol version is never taken over by the backstop (Q10),
            // and a version 2 lease's key does not change while its term lasts: its vacancy
            // is decided from its session (Q5, the session book: `handle_holder_gone`).
            KeyState::Held {
                value: HolderValue::Newer { .. } | HolderValue::Lease(_),
                ..
            } => None,
            KeyState::Held { value, .. } => {
                // A foreign value, or a version 1 lease: a live v1 holder renews its key every
                // heartbeat, so one unchanged for the period on its TTL is not live (P5, Q10).
                let holder_ttl = match value {
                    HolderValue::Older { ttl_ms, .. } => Duration::from_millis(*ttl_ms),
                    other => other.lease().map_or(Duration::ZERO, LeaseValue::ttl),
                };
                Some(
                    k.seen_at
                        + self.timing.ttl.max(holder_ttl)
                        + self.timing.heartbeat
                        + BACKSTOP_GRACE,
                )
            }
            KeyState::Unknown { .. } => Some(k.seen_at + self.timing.heartbeat),
            _ => None,
        }
    }

    /// The role value of a term started on `session` with `nonce` (Q2).
    fn value_with(&self, nonce: Uuid, session: Uuid) -> LeaseValue {
        LeaseValue {
            v: crate::value::VALUE_VERSION,
            holder: self.id.instance.clone(),
            incarnation: self.id.incarnation,
            session,
            session_key: self.session_key.clone(),
            nonce,
            term: None,
            priority: self.id.priority,
            ttl_ms: u64::try_from(self.timing.ttl.as_millis()).unwrap_or(u64::MAX),
            meta: self.id.meta.clone(),
            acquired_at: None,
            renewed_at: None,
        }
    }

    fn op_id(&mut self) -> u64 {
        let op = self.next_op;
        self.next_op += 1;
        op
    }

    fn send_write(
        &mut self,
        kind: WriteKind,
        expected: u64,
        value: Option<LeaseValue>,
        timeout: Duration,
    ) -> u64 {
        let op = self.op_id();
        self.actions.push_back(Action::Write(WriteRequest {
            op,
            kind,
            expected,
            value,
            timeout,
        }));
        op
    }

    fn send_acquire(&mut self, expected: u64, now: Instant) {
        if let Some(until) = self.young_until {
            if now < until {
                // A young bucket (Q6): a holder of the bucket it replaced may still act.
                self.not_before = Some(until);
                return;
            }
            self.young_until = None;
        }
        let Some((session, acked)) = self.session else {
            // No live session: nothing to rest a term on. `handle_session` steps again.
            return;
        };
        if now >= acked + self.timing.local_lease() {
            // The session's last renewal known here is older than this role's local lease (the
            // session's loss is on its way, or the session's lease is longer than the role's):
            // a term on it could not be promoted. Wait for the next session update — which the
            // driver must deliver even while renewals wake no role (Q4).
            self.wants_renewal = true;
            return;
        }
        let nonce = Uuid::from_u64_pair(self.rng.next_u64(), self.rng.next_u64());
        let value = self.value_with(nonce, session);
        let timeout = self.timing.operation_timeout;
        let op = self.send_write(WriteKind::Acquire, expected, Some(value), timeout);
        self.pending = Some(Pending::Acquire {
            op,
            nonce,
            expected,
            session,
        });
        self.confirmed = None;
    }

    fn send_release(&mut self, expected: u64, timeout: Duration) {
        let op = self.send_write(WriteKind::Release, expected, None, timeout);
        self.pending = Some(Pending::Release { op });
    }

    fn send_read(&mut self, timeout: Duration) {
        self.observed_during_read = false;
        let op = self.op_id();
        self.pending = Some(Pending::Read { op });
        self.actions.push_back(Action::Read { op, timeout });
    }

    /// Decides the next operation from the current state (called after every input).
    fn step(&mut self, now: Instant) {
        self.check_deadline(now);
        self.hand_over_unserved_value();
        if self.pending.is_some() || self.not_before.is_some_and(|t| now < t) {
            return;
        }
        match &self.phase {
            Phase::Leader(_) => self.step_leader(now),
            Phase::Candidate => self.step_candidate(now),
            Phase::Cooldown { until } => {
                let until = *until;
                if !self.clean_up_stray_acquire() && now >= until {
                    self.phase = Phase::Candidate;
                    self.step_candidate(now);
                }
            }
            Phase::Stopping => {
                if !self.clean_up_stray_acquire() {
                    self.finish_stop();
                }
            }
            Phase::Init | Phase::Observer | Phase::Stopped => {}
        }
    }

    /// A role value naming this instance's live session at a revision that is not our term,
    /// which this machine will not take over now — it cools down after a release, or cannot
    /// write the role key (a permanent failure is reported) — is handed over through the
    /// session (Q4, Q5 rule 5): nobody acts on it, and every candidate then finds the role
    /// vacant instead of waiting for the cooldown or the slow retry. Once per revision, and
    /// never while an acquire of ours is in flight or of unknown outcome (the value may be its
    /// put, seen before the acknowledgement: it may still become our term).
    fn hand_over_unserved_value(&mut self) {
        let Some((session, _)) = self.session else {
            return;
        };
        if matches!(self.pending, Some(Pending::Acquire { .. })) {
            return;
        }
        let unserved = match &self.phase {
            Phase::Cooldown { .. } => true,
            Phase::Candidate => self
                .attempts
                .reported()
                .is_some_and(FailureKind::is_permanent),
            _ => false,
        };
        let Some(Known {
            state:
                KeyState::Held {
                    revision,
                    value: HolderValue::Lease(v),
                },
            ..
        }) = &self.known
        else {
            return;
        };
        if !unserved
            || v.session != session
            || self.unknown_nonce == Some(v.nonce)
            || self.handed_over == Some(*revision)
        {
            return;
        }
        let revision = *revision;
        self.handed_over = Some(revision);
        self.actions
            .push_back(Action::ReleaseTerm { revision, session });
    }

    /// An acquire that was in flight when a release or stop began must not leave a lease no
    /// one serves: delete it if it won, find out by a read if its outcome is unknown. True
    /// while such work was sent.
    fn clean_up_stray_acquire(&mut self) -> bool {
        let timeout = self.timing.operation_timeout;
        if let Some(rev) = self.stop_cleanup {
            self.send_release(rev, timeout);
            true
        } else if self.unknown_nonce.is_some() {
            self.send_read(timeout);
            true
        } else {
            false
        }
    }

    fn step_leader(&mut self, now: Instant) {
        let Phase::Leader(l) = &self.phase else {
            return;
        };
        let remaining = l.term.deadline.saturating_duration_since(now);
        let timeout = self.timing.operation_timeout.min(remaining);
        if timeout.is_zero() {
            return;
        }
        // Version 2: the role key is not renewed (the session is); it is written again only
        // to end the term (Q4).
        if l.release.as_ref().is_some_and(|r| r.verify) {
            self.send_read(timeout);
        } else if l.release.as_ref().is_some_and(|r| r.drained) {
            let rev = l.rev;
            self.send_release(rev, timeout);
        }
    }

    fn step_candidate(&mut self, now: Instant) {
        let timeout = self.timing.operation_timeout;
        let Some(k) = self.known.clone() else {
            // Nothing known yet: learn the key's revision first (P3: a read only supplies the
            // expected revision of the next CAS).
            self.send_read(timeout);
            return;
        };
        match &k.state {
            KeyState::Absent | KeyState::Vacant { .. } => {
                // A key with no entry at all (never written — or every entry of the stream
                // removed without a marker: a stream purge, a bucket recreated under the same
                // epoch) says nothing about a holder that may still act on a term it won
                // there: acquire only once it was absent for a TTL + heartbeat (Q5 rule 1, Q6).
                // A marker is a fact: no such wait.
                let absent = if self.absent_hold && matches!(k.state, KeyState::Absent) {
                    self.timing.ttl + self.timing.heartbeat
                } else {
                    Duration::ZERO
                };
                // Placement hold-back: another live instance is preferred; let it acquire
                // first and contend only if it does not within the delay.
                let delay = self
                    .move_delay
                    .unwrap_or_else(|| self.campaign_delay.max(self.herd_delay));
                // The hold-back counts from when the role could first be taken (after the
                // absent key's wait and a young bucket's): otherwise it would have passed
                // during those waits, and at their end every candidate would claim at once,
                // the first one to start taking nearly every role of a new bucket (issue 27).
                let open = (k.seen_at + absent).max(self.young_until.unwrap_or(k.seen_at));
                let hold = open + delay;
                if now < hold {
                    // The jitter is added here: when `not_before` passes, the acquire goes
                    // out at once, and held-back candidates must not all fire together.
                    let jitter = self.rng.below(self.timing.campaign_jitter);
                    self.not_before = Some(hold + jitter);
                    return;
                }
                // Vacancy: contend after a small random delay (P5). `not_before` already
                // passed if it was set, so a set value means the jitter has been waited.
                if self.not_before.take().is_some() {
                    self.send_acquire(k.rev(), now);
                } else {
                    let jitter = self.rng.below(self.timing.campaign_jitter);
                    if jitter.is_zero() {
                        self.send_acquire(k.rev(), now);
                    } else {
                        self.not_before = Some(now + jitter);
                    }
                }
            }
            KeyState::Unknown { .. } => {
                if self.backstop_at().is_some_and(|b| now >= b) {
                    self.send_read(timeout);
                }
            }
            KeyState::Held { value, revision } => {
                let revision = *revision;
                if self.backstop_at().is_none() {
                    // Nothing to time (a v2 lease: the session book reports when its holder is
                    // gone; or ours, waiting for a session): a passed backoff must not stay
                    // due (a busy loop).
                    self.not_before = None;
                }
                if self.session.is_none() {
                    // Nothing can be acquired without a session (Q4): decide about adoption
                    // and duplicates once it is live (`handle_session` steps again).
                    return;
                }
                if let HolderValue::Lease(v) = value
                    && v.holder == self.id.instance
                {
                    let our_session = self.session.is_some_and(|(u, _)| u == v.session);
                    if v.incarnation == self.id.incarnation || our_session {
                        // Our own write (a late acquire, or a term we demoted from while the
                        // key stayed ours) — or a value somebody else wrote naming our live
                        // session, on which nobody acts (Q4): take it over with a CAS,
                        // starting a new term. Never a duplicate: a predecessor's or a
                        // duplicate's value names its own session, not ours.
                        self.send_acquire(revision, now);
                        return;
                    }
                    if !self.adopted_or_wrote
                        && self.first_seen_rev.is_some_and(|first| revision <= first)
                    {
                        // Restart adoption (P5), once per role and process, and only of a
                        // lease that was already there when this process first looked: one
                        // written later is a live duplicate's. Without a live session nothing
                        // is sent yet: the adoption waits for it (not a duplicate).
                        self.send_acquire(revision, now);
                        self.adopted_or_wrote = self.pending.is_some();
                        return;
                    }
                    let other = v.incarnation;
                    if !self.duplicates.contains(&other) {
                        self.duplicates.push(other);
                        self.actions
                            .push_back(Action::Notice(Notice::DuplicateInstance {
                                other_incarnation: other,
                            }));
                    }
                }
                if self.backstop_at().is_some_and(|b| now >= b) {
                    if self.confirmed == Some(revision) {
                        // Unchanged for longer than any lease: take over on that revision.
                        self.send_acquire(revision, now);
                    } else {
                        self.send_read(timeout);
                    }
                }
            }
        }
    }
}
