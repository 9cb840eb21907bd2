//! One role inside its driver ([`super::role_driver`]): its [`RoleMachine`], the I/O the
//! machine asks for (started here, completed through the driver), its callbacks in order and
//! its status. Every method runs synchronously inside one step of the driver; the only wait a
//! role may need in the middle of its actions (a demotion waiting for a start of the term's
//! work, Q12) is handed to the driver as a gate, and the role's later deliveries wait for it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};

use super::role_input::{RoleId, RoleInput};
use super::role_report::RoleReport;
use super::session_link::{SessionClock, SessionView};
use super::shared::Shared;
use crate::callbacks::{CallbackCall, CallbackQueue, PrepareOutcome};
use crate::core::slot_permits::SlotView;
use crate::core::{
    Action, DemoteReason, FailureKind, KeyState, RoleMachine, WriteKind, WriteOutcome,
};
use crate::leadership::Leadership;
use crate::names::RoleName;
use crate::placement::controller::PrepareEnd;
use crate::store::ROLE_PREFIX;
use crate::tap::TapEvent;

mod actions;

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
    /// The `on_demote` callbacks of slots (Q15), numbered: a slot claims its role's permit
    /// until its term's work stopped (an `exec` child is gone).
    pub(crate) demoted: FuturesUnordered<BoxFuture<'static, (RoleId, u64, RoleName)>>,
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
    /// A slot's `on_demote` still running (its number): the slot claims its role's permit
    /// until it returned (Q15: the term's work, an `exec` child, may still act).
    demoting: Option<u64>,
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
            demoting: None,
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

    /// The role (its slot permit's group; the `negative-controls` panic seam picks a driver
    /// by it).
    pub(crate) fn role(&self) -> &RoleName {
        &self.role
    }

    /// Where this role stands for its slot permit (Q15; meaningful for a slot only). It
    /// claims the permit while its machine does, and while its term is still with the
    /// application (a demotion waiting at the start gate, the term not yet taken back).
    pub(crate) fn slot_view(&self) -> SlotView {
        if self.gated.is_some() || self.demoting.is_some() || self.current.borrow().is_some() {
            return SlotView::Claims;
        }
        SlotView::of_machine(&self.machine)
    }

    /// The slot's `on_demote` numbered `n` returned (a later one may still run).
    pub(crate) fn demote_ended(&mut self, n: u64) {
        if self.demoting == Some(n) {
            self.demoting = None;
        }
    }

    /// Whether a slot's `on_demote` still runs ([`RoleRunner::slot_view`]).
    pub(crate) fn demoting(&self) -> bool {
        self.demoting.is_some()
    }

    /// Gives or takes this role's acquire permit (Q15); true when it was just given (the
    /// driver then wakes the role so that it campaigns).
    pub(crate) fn set_permit(&mut self, permit: bool) -> bool {
        // Always given under the `slot-no-permit` negative control.
        let permit = permit || !self.shared.backend.slot_permits();
        let opened = permit && !self.machine.acquire_permit();
        self.machine.set_acquire_permit(permit);
        opened
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
                    self.shared.bucket.ask_check();
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
            RoleInput::BucketReset { epoch, old_ttl } => {
                self.resets += 1;
                self.last_held = None;
                let age = self.shared.bucket.age(now);
                self.machine
                    .handle_bucket_reset(epoch, Some(age), old_ttl, now);
            }
            RoleInput::Placement {
                delay,
                first,
                preferred,
            } => {
                self.report.preferred(preferred);
                self.machine.handle_campaign_first(first);
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
            let book = self.shared.reports.book();
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
        tracing::debug!(
            live = live.len(),
            previous = ?previous.map(|v| &v.holder),
            returning,
            ?delay,
            "vacancy: waiting for the better-ranked candidates (herd, protocol Q7)"
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
        let verdict = self.shared.reports.role(
            &self.role,
            Some((&v.session_key, v.session, v.holder.clone())),
            *revision,
            now,
        );
        let ignored = v.holder != self.shared.instance && self.shared.backend.ignores_sessions();
        if verdict == crate::core::Verdict::Gone || ignored {
            self.shared.reports.vacancies.crashed(&self.role, now);
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
        if let Some((cause, took)) = self.shared.reports.vacancies.released(
            &self.role,
            cause,
            revision,
            now,
            &self.shared.instance,
        ) {
            super::watcher::record_vacancy(&self.shared, &self.role, cause, took);
        }
    }
}
