//! One role inside its driver ([`super::role_driver`]): its [`RoleMachine`], the I/O the
//! machine asks for (started here, completed through the driver), its callbacks in order and
//! its status. Every method runs synchronously inside one step of the driver; the only wait a
//! role may need in the middle of its actions (a demotion waiting for a start of the term's
//! work, Q12) is handed to the driver as a gate, and the role's later deliveries wait for it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};

use super::backend::LeaseWrite;
use super::role_input::{RoleId, RoleInput};
use super::role_report::{RoleReport, Snapshot};
use super::session_link::{SessionClock, SessionView};
use super::shared::Shared;
use crate::callbacks::{CallbackCall, CallbackQueue, Demotion, PrepareOutcome};
use crate::core::{
    Action, DemoteReason, FailureKind, KeyState, Notice, RoleMachine, WriteKind, WriteOutcome,
};
use crate::leadership::{Leadership, LiveTerm, TermShared};
use crate::names::RoleName;
use crate::placement::controller::PrepareEnd;
use crate::store::ROLE_PREFIX;
use crate::tap::TapEvent;
use crate::value::now_rfc3339;

/// Longest wait of a demotion for a start of the term's work in progress (the gate).
const START_GATE_LIMIT: Duration = Duration::from_secs(5);

/// The outcome of an operation a role started.
pub(crate) enum OpResult {
    /// A write's outcome, its duration, the highest bucket revision this instance had seen
    /// when it was sent (P6: the write is stored above it, or in another bucket), and how many
    /// bucket resets the machine had had then.
    Write(WriteKind, WriteOutcome, Duration, u64, u64),
    Read(Result<KeyState, FailureKind>),
    Validate(Result<KeyState, FailureKind>),
}

/// What reaches one role through its driver, in the order it arrived.
pub(crate) enum Delivery {
    /// An operation (write, read, validation read) completed.
    Op(u64, OpResult),
    /// The drain of a graceful release (numbered: only the latest counts) ended.
    Drained(u64),
    /// A message from the watcher, the manager, placement or a probe.
    Input(RoleInput),
}

/// The I/O of every role of a driver: what the roles started, completed by the driver.
#[derive(Default)]
pub(crate) struct DriverIo {
    /// Writes and reads in flight, with the role and the machine's operation id.
    pub(crate) ops: FuturesUnordered<BoxFuture<'static, (RoleId, u64, OpResult)>>,
    /// Drains of graceful releases (demote callbacks running), with the drain's number.
    pub(crate) drains: FuturesUnordered<BoxFuture<'static, (RoleId, u64)>>,
    /// Demotions waiting for a start of the term's work to finish (Q12).
    pub(crate) gates: FuturesUnordered<BoxFuture<'static, RoleId>>,
}

/// How a role is set up inside its driver (everything but its machine and report).
pub(crate) struct RoleSetup {
    pub(crate) id: RoleId,
    pub(crate) role: RoleName,
    pub(crate) machine: RoleMachine,
    pub(crate) shared: Arc<Shared>,
    pub(crate) report: RoleReport,
    pub(crate) callbacks: Arc<dyn crate::callbacks::RoleCallbacks>,
    pub(crate) current: watch::Sender<Option<Leadership>>,
    pub(crate) operation_timeout: Duration,
    pub(crate) validation_interval: Option<Duration>,
    pub(crate) clock: Option<Arc<SessionClock>>,
    pub(crate) session_class: Option<u64>,
    /// Told when the role stopped and its last callback returned.
    pub(crate) done: oneshot::Sender<()>,
}

/// One role inside its driver.
pub(crate) struct RoleRunner {
    id: RoleId,
    role: RoleName,
    /// The role's key in the bucket.
    key: String,
    /// The `role` span every step of the role runs in.
    span: tracing::Span,
    machine: RoleMachine,
    shared: Arc<Shared>,
    /// Everything that shows the role's changes: tap, log and spans, status, events.
    report: RoleReport,
    /// The role's callbacks, run in order (their runner starts with the first one).
    calls: CallbackQueue,
    /// The current term: this runner is its only writer; handles and the manager read it.
    current: watch::Sender<Option<Leadership>>,
    operation_timeout: Duration,
    validation_interval: Option<Duration>,
    /// When the next validation read is due (a held term only).
    next_validation: Option<Instant>,
    /// This instance's session clock for the role's TTL class: its renewals and the deadline
    /// of a term held here (Q4, one deadline per session). `None` for an observer.
    clock: Option<Arc<SessionClock>>,
    /// What was handed to the machine from the clock last: the latest renewal's send time and
    /// that of the last one applied to the held term.
    synced: (Option<Instant>, Option<Instant>),
    /// That session's TTL class (ms).
    session_class: Option<u64>,
    /// The session's state handed to the machine last, and the session failure reported.
    view: Option<SessionView>,
    session_failure: Option<FailureKind>,
    /// The term whose graceful release is draining (demoted, its work stopping): told when it
    /// is lost before the release went through.
    draining: Option<Leadership>,
    /// The number of the drain the machine waits for (`None`: none).
    drain: Option<u64>,
    drains_started: u64,
    /// Bucket resets handed to the machine (`handle_bucket_reset`): a write sent before the
    /// last one belongs to a bucket the machine no longer knows.
    resets: u64,
    /// Revision of the last term of the role seen (any holder): the term a vacancy ends, for
    /// a targeted move's hold-back (Q13).
    last_held: Option<u64>,
    /// Cancels the preparation asked for last (warm hand-over), queued or running: a promotion
    /// abandons it.
    preparing: Option<CancellationToken>,
    /// Start of the current term (its nonce and RFC 3339 time), repeated in renewals (P2).
    acquired: Option<(uuid::Uuid, String)>,
    /// A demotion waiting for the term's start gate: nothing else of the role happens until
    /// the driver reports the gate open ([`RoleRunner::gate_opened`]).
    gated: Option<Action>,
    /// What arrived for the role while it waited at the gate, in order.
    backlog: VecDeque<Delivery>,
    /// Told when the role stopped and its last callback returned.
    done: Option<oneshot::Sender<()>>,
}

impl RoleRunner {
    /// Sets the role up and starts its machine with the session's current state.
    pub(crate) fn start(setup: RoleSetup, view: Option<SessionView>, io: &mut DriverIo) -> Self {
        let span =
            tracing::info_span!("role", role = %setup.role, instance = %setup.shared.instance);
        let mut runner = Self {
            id: setup.id,
            key: format!("{ROLE_PREFIX}{}", setup.role),
            role: setup.role,
            span,
            machine: setup.machine,
            shared: setup.shared,
            report: setup.report,
            calls: CallbackQueue::new(setup.callbacks),
            current: setup.current,
            operation_timeout: setup.operation_timeout,
            validation_interval: setup.validation_interval,
            next_validation: None,
            clock: setup.clock,
            synced: (None, None),
            session_class: setup.session_class,
            view: None,
            session_failure: None,
            draining: None,
            drain: None,
            drains_started: 0,
            resets: 0,
            last_held: None,
            preparing: None,
            acquired: None,
            gated: None,
            backlog: VecDeque::new(),
            done: Some(setup.done),
        };
        let span = runner.span.clone();
        let _entered = span.enter();
        // The connection's state now (later only changes are sent to the role).
        let connected = *runner.shared.connected.borrow();
        runner.report.tap(TapEvent::Connection(connected));
        runner.machine.start(Instant::now());
        if let Some(view) = view {
            runner.apply_view(view);
        }
        runner.settle(io);
        runner
    }

    /// Whether the machine stopped (the driver then finishes the role: [`RoleRunner::finish`]).
    pub(crate) fn is_stopped(&self) -> bool {
        self.machine.is_stopped() && self.gated.is_none()
    }

    /// Whether the machine's acquire waits for a newer session renewal than it has: the
    /// driver then hands it the next one ([`RoleRunner::renewed`]).
    pub(crate) fn wants_renewal(&self) -> bool {
        self.gated.is_none() && self.machine.wants_session_renewal()
    }

    /// When the role wants to be woken ([`RoleRunner::wake`]): its machine's timer or its
    /// next validation, whichever is first.
    pub(crate) fn wake_at(&self) -> Option<Instant> {
        if self.gated.is_some() {
            return None;
        }
        // The session's deadline ends a held term in time unless the term's lease is the
        // shorter one, or a renewal the session accepted came too late for the term.
        let session_ends_term = self.clock.as_ref().is_some_and(|c| {
            c.ends_terms_of(self.machine.timing().local_lease()) && !c.term_behind(&self.role)
        });
        let timer = self.machine.poll_timeout_with(session_ends_term);
        match (timer, self.next_validation) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Something arrived for the role: handled now, or after the gate it waits at.
    pub(crate) fn deliver(&mut self, delivery: Delivery, io: &mut DriverIo) {
        if self.gated.is_some() {
            self.backlog.push_back(delivery);
            return;
        }
        let span = self.span.clone();
        let _entered = span.enter();
        self.handle(delivery);
        self.settle(io);
    }

    /// The session's state changed (or a new renewal came that the machine waits for).
    pub(crate) fn session_changed(&mut self, view: Option<SessionView>, io: &mut DriverIo) {
        if self.gated.is_some() {
            // Applied when the gate opens (`resume`).
            return;
        }
        let span = self.span.clone();
        let _entered = span.enter();
        self.sync_session(Instant::now());
        if let Some(view) = view {
            self.apply_view(view);
        }
        self.settle(io);
    }

    /// The role's wake-up came due: its validation read, its machine's timer, or both.
    pub(crate) fn wake(&mut self, io: &mut DriverIo) {
        if self.gated.is_some() {
            return;
        }
        let span = self.span.clone();
        let _entered = span.enter();
        let now = Instant::now();
        self.sync_session(now);
        if self.next_validation.is_some_and(|at| at <= now) {
            self.next_validation = None;
            let store = self.shared.store.clone();
            let (k, t) = (self.key.clone(), self.operation_timeout);
            let span = self.report.kv_span("read", "validate", 0);
            let id = self.id;
            io.ops.push(Box::pin(
                async move { (id, 0, OpResult::Validate(store.read(&k, t).await)) }
                    .instrument(span),
            ));
        }
        self.machine.handle_timeout(now);
        self.settle(io);
    }

    /// The start gate the role waited at is open: the demotion goes on, then what arrived
    /// meanwhile, in order.
    pub(crate) fn gate_opened(&mut self, view: Option<SessionView>, io: &mut DriverIo) {
        let Some(action) = self.gated.take() else {
            return;
        };
        let span = self.span.clone();
        let _entered = span.enter();
        self.execute(action, io);
        self.sync_session(Instant::now());
        if let Some(view) = view {
            self.apply_view(view);
        }
        self.settle(io);
        while self.gated.is_none() {
            let Some(delivery) = self.backlog.pop_front() else {
                break;
            };
            self.handle(delivery);
            self.settle(io);
        }
    }

    /// The role stopped: its last callbacks finish on their own task, then its status says
    /// stopped and whoever waits for the role is told.
    pub(crate) fn finish(self) {
        let Self {
            calls,
            report,
            done,
            span,
            ..
        } = self;
        tokio::spawn(
            async move {
                // Wait for queued callbacks (the last demote) to finish.
                calls.finish().await;
                report.stopped();
                if let Some(done) = done {
                    let _ = done.send(());
                }
            }
            .instrument(span),
        );
    }

    /// Runs the machine's actions, publishes the status and arms the validation.
    fn settle(&mut self, io: &mut DriverIo) {
        while self.gated.is_none() {
            let Some(action) = self.machine.poll_action() else {
                break;
            };
            if let Action::Demote { reason, .. } = &action
                && let Some(wait) = self.end_term(*reason)
            {
                // Q12: the demotion waits until no start of the term's work is in progress.
                self.gated = Some(action);
                let id = self.id;
                io.gates.push(Box::pin(async move {
                    wait.await;
                    id
                }));
                break;
            }
            self.execute(action, io);
        }
        self.publish_status();
        if self.machine.term().is_some() {
            if let (Some(iv), None) = (self.validation_interval, self.next_validation) {
                self.next_validation = Some(Instant::now() + iv);
            }
        } else {
            self.next_validation = None;
        }
    }

    /// One delivery, handed to the machine.
    fn handle(&mut self, delivery: Delivery) {
        let now = Instant::now();
        self.sync_session(now);
        match delivery {
            Delivery::Op(op, result) => self.op_completed(op, result, now),
            Delivery::Drained(n) => {
                if self.drain != Some(n) {
                    // A drain the machine no longer waits for (a later one replaced it).
                    return;
                }
                self.drain = None;
                if self.draining.take().is_some() {
                    self.let_go();
                }
                self.machine.handle_drained(now);
            }
            Delivery::Input(input) => self.input(input, now),
        }
    }

    fn op_completed(&mut self, op: u64, result: OpResult, now: Instant) {
        match result {
            OpResult::Write(kind, o, elapsed, seen_before, resets_before) => {
                if o == WriteOutcome::Failed(FailureKind::BucketNotFound) {
                    self.shared.bucket_check.notify_one();
                }
                if let (WriteKind::Release, WriteOutcome::Ok { revision }) = (kind, o) {
                    self.release_stored(revision, now);
                }
                self.report.tap(TapEvent::WriteCompleted {
                    op,
                    kind,
                    outcome: o,
                    elapsed,
                });
                if resets_before == self.resets {
                    // P6: the highest revision seen in this bucket (any key: the session's
                    // writes move it most) before the write was sent bounds what may be
                    // promoted (writes elsewhere since then do not).
                    self.machine.seed_high_water(seen_before);
                    self.machine.handle_write(op, o, now);
                } else {
                    // Sent before the bucket was recreated: its outcome says nothing about the
                    // new bucket (an `Ok` may even be a put there that skipped the young-bucket
                    // hold, Q6), and the old bucket's high-water mark would refuse every acquire
                    // in the new one as stale. Unknown: the machine finds out by a read.
                    self.machine.handle_write(op, WriteOutcome::Unknown, now);
                }
            }
            OpResult::Read(r) => {
                let held = r.as_ref().ok().cloned();
                self.machine.handle_read(op, r, now);
                if let Some(state) = held {
                    self.check_holder_session(&state, now);
                }
            }
            OpResult::Validate(Ok(state)) => self.machine.handle_validation(state, now),
            OpResult::Validate(Err(_)) => {}
        }
    }

    fn input(&mut self, input: RoleInput, now: Instant) {
        match input {
            RoleInput::Observed(state) => {
                if let KeyState::Held { revision, .. } = &state {
                    // A term: the vacancy (and any move's hold-back) is over.
                    self.last_held = Some(*revision);
                    self.machine.handle_move_delay(None);
                }
                if matches!(state, KeyState::Vacant { .. } | KeyState::Absent) {
                    self.rank_for_vacancy();
                }
                self.machine.handle_observed(state, now);
            }
            RoleInput::HolderGone(revision) => {
                self.last_held = Some(revision);
                self.rank_for_vacancy();
                self.machine.handle_holder_gone(revision, now);
            }
            RoleInput::DuplicateInstance => self.report.duplicate(None),
            RoleInput::Connection(up) => {
                self.report.tap(TapEvent::Connection(up));
                self.machine.handle_connection(up, now);
            }
            RoleInput::Release(reason, cooldown) => {
                self.machine.handle_release(reason, cooldown, now);
            }
            RoleInput::MoveAccepted(term) => {
                // Q13: only the term the move names is handed over (the role may have changed
                // hands since the request).
                if self.machine.term().is_some_and(|t| t.token.term() == term) {
                    info!(term, "moving the role to the instance an operator named");
                    // Held back like every other candidate from the moment the release is sent
                    // (the vacancy may reach the machine through the release's own outcome
                    // before the watcher delivers it).
                    self.last_held = Some(term);
                    self.rank_for_vacancy();
                    self.machine.handle_release(
                        crate::core::ReleaseReason::Move,
                        Duration::ZERO,
                        now,
                    );
                }
            }
            RoleInput::BucketReset(epoch) => {
                self.resets += 1;
                self.last_held = None;
                let age = self.shared.bucket_age(now);
                self.machine.handle_bucket_reset(epoch, Some(age), now);
            }
            RoleInput::Placement { delay, preferred } => {
                self.report.preferred(preferred);
                self.machine.handle_campaign_delay(delay, now);
            }
            RoleInput::Stop => self.machine.handle_stop(now),
            RoleInput::Prepare(limit) => self.prepare(limit),
            // Answered by the driver from its loop (it never reaches a role).
            RoleInput::Probe(reply) => {
                let _ = reply.send(());
            }
            // Handled by the driver (the role is dropped).
            RoleInput::Abort => {}
        }
    }

    fn execute(&mut self, action: Action, io: &mut DriverIo) {
        let id = self.id;
        match action {
            Action::Write(req) => {
                let backend = self.shared.backend.clone();
                let key = self.key.clone();
                let acquired = &mut self.acquired;
                // Version 2: role keys carry no TTL (the session does, Q1).
                let ttl = None;
                let op = req.op;
                let payload = req.value.map(|mut v| {
                    let now = now_rfc3339();
                    if req.kind == WriteKind::Acquire {
                        v.acquired_at = Some(now.clone());
                        *acquired = Some((v.nonce, now.clone()));
                    } else if v.acquired_at.is_none()
                        && let Some((nonce, at)) = acquired.as_ref()
                        && *nonce == v.nonce
                    {
                        // P2: renewals repeat when the term began.
                        v.acquired_at = Some(at.clone());
                    }
                    v.renewed_at = Some(now);
                    v.to_bytes()
                });
                let kind = req.kind;
                debug!(?kind, expected = req.expected, "write");
                self.report.tap(TapEvent::WriteInvoked {
                    op,
                    kind,
                    expected: req.expected,
                });
                let span = self.report.kv_span("cas", kind.as_str(), req.expected);
                let seen_before = self.shared.bucket_high_water();
                let resets_before = self.resets;
                io.ops.push(Box::pin(
                    async move {
                        let sent = Instant::now();
                        let write = LeaseWrite {
                            kind,
                            expected: req.expected,
                            ttl,
                            payload: payload.unwrap_or_default(),
                        };
                        let outcome = backend.write(key, write, req.timeout).await;
                        tracing::Span::current().record("outcome", outcome_name(outcome));
                        (
                            id,
                            op,
                            OpResult::Write(
                                kind,
                                outcome,
                                sent.elapsed(),
                                seen_before,
                                resets_before,
                            ),
                        )
                    }
                    .instrument(span),
                ));
            }
            Action::Read { op, timeout } => {
                let store = self.shared.store.clone();
                let key = self.key.clone();
                let span = self.report.kv_span("read", "read", 0);
                io.ops.push(Box::pin(
                    async move { (id, op, OpResult::Read(store.read(&key, timeout).await)) }
                        .instrument(span),
                ));
            }
            Action::Promote { term, revision } => {
                let leadership = Leadership {
                    inner: Arc::new(TermShared::started(
                        self.role.clone(),
                        self.shared.instance.clone(),
                        term.token,
                        self.handed_deadline(term.deadline),
                        revision,
                        self.shared.store.clone(),
                        self.operation_timeout,
                        self.shared.tap.clone(),
                    )),
                };
                // Recorded before anything else can record about it (a renewal, below).
                self.report.promoted(term.token, term.deadline);
                self.current.send_replace(Some(leadership.clone()));
                // From now on the session's renewals move the term's deadline (Q4).
                if let (Some(clock), Some(session)) = (&self.clock, self.machine.held_session()) {
                    let backend = self.shared.backend.clone();
                    clock.hold(
                        &self.role,
                        session,
                        leadership.clone(),
                        self.machine.timing().local_lease(),
                        |d| backend.handed_deadline(d),
                    );
                }
                self.report.leading(term.token);
                // The term has started: a preparation still queued or running is abandoned, so
                // that `on_promote` (and an exec child) does not wait for it.
                if let Some(preparing) = self.preparing.take() {
                    preparing.cancel();
                }
                self.calls.send(CallbackCall::Promote(leadership));
            }
            Action::Renewed { term, revision } => {
                // The machine caught up with renewals the session task already handed to the
                // term (deadline, tap record) when they arrived (Q4, one deadline per
                // session); a term outside the clock (an observer's, a test backend's) gets
                // them here.
                let current = self
                    .current
                    .borrow()
                    .clone()
                    .or_else(|| self.draining.clone())
                    .filter(|l| l.token() == term.token);
                if let Some(l) = current {
                    let deadline = self.handed_deadline(term.deadline);
                    let moved = if let Ok(mut live) = l.inner.live.lock() {
                        let moved = deadline > live.deadline;
                        *live = LiveTerm {
                            deadline: deadline.max(live.deadline),
                            revision,
                        };
                        moved
                    } else {
                        false
                    };
                    if moved {
                        l.inner.live_changed.notify_waiters();
                    }
                    if self.clock.is_none() {
                        self.report.tap(TapEvent::Renewed {
                            token: term.token,
                            deadline: term.deadline,
                        });
                    }
                }
                let renewed = self
                    .clock
                    .as_ref()
                    .and_then(|c| c.renewed(&self.role))
                    .unwrap_or_else(SystemTime::now);
                self.report.renewed(renewed);
            }
            Action::Demote {
                term,
                reason,
                drain: wait,
            } => {
                if !self.shared.backend.carries_out(reason) {
                    // The term stays open for the application and the history (only the
                    // test-only negative controls do not carry demotions out).
                    self.let_go();
                    self.current.send_replace(None);
                    self.report.demotion_skipped();
                    if wait {
                        self.drain_until(io, async {});
                    }
                    return;
                }
                let leadership = self.current.send_replace(None);
                // P9: end the term (token cancelled) before anyone hears of the demotion
                // (`end_term` did so already; the reason stays the first one stored).
                if let Some(l) = &leadership {
                    l.inner.end(reason);
                }
                // A term whose release does not drain follows no more renewals (before its
                // demotion is recorded: no renewal record after it); a draining one does,
                // until the drain ends.
                if !wait {
                    self.let_go();
                }
                self.report.demoted(term.token, reason);
                if let Some(l) = leadership {
                    // P9: the token is cancelled before on_demote runs (above).
                    let demotion = Demotion {
                        leadership: l,
                        reason,
                    };
                    if wait {
                        self.draining = Some(demotion.leadership.clone());
                        let (tx, rx) = oneshot::channel();
                        self.calls.send(CallbackCall::Demote(demotion, Some(tx)));
                        let timeout = self.shared.drain_timeout;
                        self.drain_until(io, async move {
                            let _ = tokio::time::timeout(timeout, rx).await;
                        });
                    } else {
                        self.calls.send(CallbackCall::Demote(demotion, None));
                    }
                } else if wait {
                    self.drain_until(io, async {});
                }
            }
            Action::Failed(kind) => self.report.failed(kind),
            Action::Recovered => self.report.recovered(),
            Action::Notice(Notice::DuplicateInstance { other_incarnation }) => {
                self.report.duplicate(Some(other_incarnation));
            }
            Action::Notice(Notice::RevisionRegressed {
                revision,
                high_water,
            }) => {
                warn!(
                    revision,
                    high_water, "revisions went back: the bucket was recreated; checking its epoch"
                );
                self.shared.bucket_check.notify_one();
            }
            Action::LostDuringRelease { term, reason } => {
                warn!(
                    term = term.token.term(),
                    %reason,
                    "the role was lost while its release drained: its work is stopped at once"
                );
                if let Some(l) = self.draining.take() {
                    l.inner.lose(reason);
                }
            }
            Action::ReleaseTerm { revision, session } => {
                warn!(
                    revision,
                    "nobody here acts on the role value naming this instance's session (a \
                     release that did not go through, or a value another client wrote while \
                     this role cools down or cannot write role keys): handing it over through \
                     the session (protocol Q5 rule 5)"
                );
                self.shared
                    .release_term(self.session_class, session, &self.role, revision);
            }
            Action::Stopped => debug!("stopped"),
        }
    }

    /// Hands the machine the session's latest renewal from the clock, as of its arrival
    /// (Q4, one deadline per session), before any other input at `now`.
    fn sync_session(&mut self, now: Instant) {
        let Some((renewal, term_sent)) = self.clock.as_ref().and_then(|c| c.sync(&self.role))
        else {
            return;
        };
        let synced = (Some(renewal.acked_sent_at), term_sent);
        if self.synced == synced {
            return;
        }
        self.synced = synced;
        self.machine
            .handle_session_renewed(renewal.uuid, renewal.acked_sent_at, term_sent, now);
    }

    /// The term held here no longer follows the session's renewals; the status keeps the
    /// time of the last one that moved its deadline.
    fn let_go(&mut self) {
        let Some(renewed) = self.clock.as_ref().and_then(|c| c.let_go(&self.role)) else {
            return;
        };
        self.report.last_renewal(renewed);
    }

    /// Before a demotion is recorded or announced: ends the current term (its reason stored,
    /// its token cancelled, so that its work reacts at once: an `exec` child is killed on a
    /// loss). Returns the wait until no start of its work is in progress (the term's start
    /// gate) if one is, so that a child start either precedes the demotion or sees the term
    /// ended (Q12).
    fn end_term(&self, reason: DemoteReason) -> Option<BoxFuture<'static, ()>> {
        if !self.shared.backend.carries_out(reason) {
            return None;
        }
        let l = self.current.borrow().clone()?;
        l.inner.end(reason);
        if l.inner.start_gate.try_lock().is_ok() {
            return None;
        }
        // A start holds the gate for one process spawn and its report; the bound only keeps
        // a hung spawn from holding the role (the watchdog's deadline still holds).
        Some(Box::pin(async move {
            let _ = tokio::time::timeout(START_GATE_LIMIT, l.inner.start_gate.lock()).await;
        }))
    }

    /// The machine waits for a drain (a graceful release's demote callback): `until` ends it.
    fn drain_until(&mut self, io: &mut DriverIo, until: impl Future<Output = ()> + Send + 'static) {
        self.drains_started += 1;
        let n = self.drains_started;
        self.drain = Some(n);
        let id = self.id;
        io.drains.push(Box::pin(async move {
            until.await;
            (id, n)
        }));
    }

    /// Hands the machine the session's state if it changed since it was handed last; a
    /// failure of the session's writes (or the end of one) is reported as the role's, since
    /// the role cannot campaign without it.
    fn apply_view(&mut self, view: SessionView) {
        if self.view == Some(view) {
            return;
        }
        self.view = Some(view);
        if let Some(update) = view.update {
            self.machine.handle_session(update, Instant::now());
        }
        if view.failure == self.session_failure {
            return;
        }
        self.session_failure = view.failure;
        match view.failure {
            Some(kind) => self.report.failed(kind),
            None => self.report.recovered(),
        }
    }

    /// Herd ranking (Q7) for the vacancy about to be delivered: the rank of this instance
    /// among the live instances other than the holder that just left.
    fn rank_for_vacancy(&mut self) {
        // Q13: an accepted move of the term this vacancy ends orders the claim (the target at
        // once, the others after the move's grace) whatever placement and the herd say.
        let ended = self.last_held;
        let ttl = self.machine.timing().ttl;
        self.machine.handle_move_delay(super::moves::hold_back(
            &self.shared,
            &self.role,
            ended,
            ttl,
        ));
        if !self.shared.backend.herd_ranking() {
            return;
        }
        let previous = self.machine.observed().and_then(KeyState::lease);
        let (live, returning) = {
            let book = self.shared.book();
            let returning = previous.is_some_and(|v| book.returned(&v.session_key, v.session));
            (book.live_instances(), returning)
        };
        // Members at their capacity rank after everyone (this one included: it then waits
        // as if its session were unseen).
        let live = match &self.shared.placement {
            Some(p) => {
                let full = p.full();
                live.into_iter().filter(|i| !full.contains(i)).collect()
            }
            None => live,
        };
        let delay = crate::core::Herd::DEFAULT.delay(
            &self.role,
            &self.shared.instance,
            &live,
            previous.map(|v| &v.holder),
            returning,
        );
        self.machine.handle_herd_delay(delay);
    }

    /// A read showed the role key: if it names a session, ask the session book whether that
    /// session is gone (the watcher reports later changes).
    fn check_holder_session(&mut self, state: &KeyState, now: Instant) {
        let KeyState::Held {
            revision,
            value: crate::value::HolderValue::Lease(v),
        } = state
        else {
            return;
        };
        let verdict = self.shared.book().role(
            &self.role,
            Some((&v.session_key, v.session, v.holder.clone())),
            *revision,
            now,
        );
        let ignored = v.holder != self.shared.instance && self.shared.backend.ignores_sessions();
        if verdict == crate::core::Verdict::Gone || ignored {
            self.shared.vacancies.crashed(&self.role, now);
            self.last_held = Some(*revision);
            self.rank_for_vacancy();
            self.machine.handle_holder_gone(*revision, now);
        }
    }

    /// The deadline handed to the application (the term's; see [`super::backend::RoleBackend`]).
    fn handed_deadline(&self, deadline: Instant) -> Instant {
        self.shared.backend.handed_deadline(deadline)
    }

    /// Runs the role's `on_prepare` in order with its other callbacks; tells placement how
    /// it ended: ready, failed (an error or `limit` ran out: not ready), or abandoned by a
    /// promotion. A role this instance holds is not prepared (nobody would wait for it, and
    /// the term's callbacks would wait behind it).
    fn prepare(&mut self, limit: Duration) {
        let Some(link) = self.shared.placement.clone() else {
            return;
        };
        let role = self.role.clone();
        if self.current.borrow().is_some() {
            debug!(%role, "placement: not preparing a role held here");
            link.prepared(role, PrepareEnd::Abandoned);
            return;
        }
        let (done, finished) = oneshot::channel();
        let cancel = CancellationToken::new();
        if let Some(previous) = self.preparing.replace(cancel.clone()) {
            previous.cancel();
        }
        self.calls.send(CallbackCall::Prepare {
            role: role.clone(),
            limit,
            cancel,
            done,
        });
        tokio::spawn(async move {
            let end = match finished.await {
                Ok(PrepareOutcome::Ready) => PrepareEnd::Ready,
                Ok(PrepareOutcome::Failed(reason)) => {
                    warn!(%role, %reason, "on_prepare failed: not ready (the holder hands the role over without waiting)");
                    PrepareEnd::Failed
                }
                Ok(PrepareOutcome::TimedOut) => {
                    warn!(%role, ?limit, "on_prepare ran out of placement.prepare_timeout: not ready");
                    PrepareEnd::Failed
                }
                Ok(PrepareOutcome::Abandoned) | Err(_) => {
                    debug!(%role, "placement: preparation abandoned (promoted)");
                    PrepareEnd::Abandoned
                }
            };
            link.prepared(role, end);
        });
    }

    /// Our delete of the role was stored: the vacancy starts now (measured here until the
    /// watcher shows the next holder).
    fn release_stored(&self, revision: u64, now: Instant) {
        use super::vacancy::VacancyCause;
        let cause = match self.report.status().last_demote_reason {
            Some(DemoteReason::Released(crate::core::ReleaseReason::Placement)) => {
                VacancyCause::Move
            }
            _ => VacancyCause::HandOver,
        };
        if let Some((cause, took)) =
            self.shared
                .vacancies
                .released(&self.role, cause, revision, now, &self.shared.instance)
        {
            super::watcher::record_vacancy(&self.shared, &self.role, cause, took);
        }
    }

    fn publish_status(&mut self) {
        let snapshot = Snapshot {
            state: self.machine.state(),
            observed: self.machine.observed(),
            connected: *self.shared.connected.borrow(),
            cooldown_until: self.machine.cooldown_until(),
            term: self.machine.term().map(|t| t.token.term()),
        };
        self.report.publish(snapshot);
    }
}

/// The outcome of a write as a span field.
fn outcome_name(outcome: WriteOutcome) -> &'static str {
    match outcome {
        WriteOutcome::Ok { .. } => "ok",
        WriteOutcome::Conflict => "conflict",
        WriteOutcome::Retry => "retry",
        WriteOutcome::Unknown => "unknown",
        WriteOutcome::Failed(_) => "failed",
    }
}
