//! The driver of one session (protocol Q1–Q4): runs a [`SessionMachine`] for this instance
//! and one TTL class, performs its writes and reads, and publishes the session's state to the
//! role runners of that class on a `watch` channel (the only writer).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{Instrument, debug, error, info, warn};

use super::backend::LeaseWrite;
use super::session_link::{SessionInput, SessionView};
use super::shared::Shared;
use crate::core::{
    FailureKind, SessionAction, SessionKeyState, SessionLoss, SessionMachine, SessionUpdate,
    SessionWriteKind, WriteKind, WriteOutcome,
};
use crate::tap::SessionEvent;

enum OpResult {
    /// A write's kind, outcome and duration.
    Write(SessionWriteKind, WriteOutcome, Duration),
    Read(Result<SessionKeyState, FailureKind>),
}

/// Everything one session task needs.
pub(crate) struct SessionTask {
    pub(crate) machine: SessionMachine,
    pub(crate) key: String,
    pub(crate) ttl: Duration,
    pub(crate) shared: Arc<Shared>,
    pub(crate) inbox: mpsc::UnboundedReceiver<SessionInput>,
    pub(crate) view: watch::Sender<SessionView>,
    /// The session's renewals and the terms resting on it (Q4, one deadline per session).
    pub(crate) clock: Arc<super::session_link::SessionClock>,
    /// When the machine took its last input: the arrival of what it acknowledges in the
    /// actions that follow (a renewal is judged against a term's deadline as of then).
    pub(crate) input_at: Instant,
    /// The timeout of the last start write (the epoch check after it uses the same) and the
    /// bucket's epoch as this instance knew it when the write was sent.
    pub(crate) start_timeout: Duration,
    pub(crate) start_epoch: u64,
    /// A started session its roles have not heard of yet: until the bucket's epoch, asked
    /// after the start's acknowledgement, is confirmed (Q6).
    pub(crate) unannounced: Option<Unannounced>,
}

/// A session whose start was acknowledged, not yet announced to its roles.
pub(crate) struct Unannounced {
    uuid: uuid::Uuid,
    revision: u64,
    /// Send time and arrival of its last acknowledged write (the start, or a renewal since).
    acked_sent_at: Instant,
    acked_at: Instant,
}

impl SessionTask {
    /// Runs until the machine stopped (after [`SessionInput::Stop`]).
    pub(crate) async fn run(mut self) {
        let span =
            tracing::info_span!("session", key = %self.key, instance = %self.shared.instance);
        async move { self.drive().await }.instrument(span).await;
    }

    async fn drive(&mut self) {
        let mut ops: FuturesUnordered<BoxFuture<'static, (u64, OpResult)>> =
            FuturesUnordered::new();
        let mut inbox_open = true;
        // The epoch check of an unannounced session (Q6).
        let mut confirming: Option<BoxFuture<'static, ()>> = None;
        self.machine.start(Instant::now());
        loop {
            while let Some(action) = self.machine.poll_action() {
                let reset = matches!(
                    action,
                    SessionAction::Lost {
                        reason: SessionLoss::BucketReset,
                        ..
                    }
                );
                if let SessionAction::Write(w) = &action
                    && w.kind == SessionWriteKind::Start
                {
                    self.start_timeout = w.timeout;
                    self.start_epoch = self.shared.bucket.epoch();
                }
                if let Some(action) = self.hold_unconfirmed(action, &mut confirming) {
                    self.execute(action, &mut ops);
                }
                if reset {
                    await_epoch_check(&self.shared).await;
                }
            }
            if self.machine.is_stopped() {
                return;
            }
            let timer = self.machine.poll_timeout();
            tokio::select! {
                biased;
                () = poll_opt(&mut confirming), if confirming.is_some() => {
                    confirming = None;
                    self.announce();
                }
                Some((op, result)) = ops.next(), if !ops.is_empty() => {
                    let now = Instant::now();
                    self.input_at = now;
                    match result {
                        OpResult::Write(kind, o, elapsed) => {
                            self.shared.tap.session(
                                &self.shared.instance,
                                SessionEvent::Written {
                                    key: &self.key,
                                    kind,
                                    outcome: o,
                                    elapsed,
                                },
                            );
                            if o == WriteOutcome::Failed(FailureKind::BucketNotFound) {
                                self.shared.bucket.ask_check();
                            }
                            if let WriteOutcome::Ok { revision } = o {
                                // P6: every revision this instance wrote is below any later
                                // write in this bucket (roles seed their high-water mark).
                                self.shared.bucket.saw_revision(revision);
                            }
                            self.machine.handle_write(op, o, now);
                        }
                        OpResult::Read(r) => self.machine.handle_read(op, r, now),
                    }
                }
                input = self.inbox.recv(), if inbox_open => {
                    let now = Instant::now();
                    self.input_at = now;
                    match input {
                        Some(SessionInput::Observed(state)) => self.machine.handle_observed(state, now),
                        Some(SessionInput::ReleaseTerm { uuid, role, revision }) => {
                            self.machine.handle_release_term(uuid, role, revision, now);
                            self.publish_released();
                        }
                        Some(SessionInput::RoleMoved { role, revision }) => {
                            self.machine.handle_role_moved(&role, revision);
                            self.publish_released();
                        }
                        Some(SessionInput::Probe(reply)) => {
                            let _ = reply.send(());
                        }
                        Some(SessionInput::Abandon) => {
                            error!(
                                "the session is abandoned (its role driver failed): its terms \
                                 end now, it is renewed no more, and its key expires on the \
                                 server (other instances then take its roles)"
                            );
                            for (role, term) in self.clock.abandon().await {
                                // The role's runner is gone: the manager says it (the events'
                                // followers: `run`'s stdout, long-polls, SSE).
                                self.shared.emit(crate::RoleEvent::Demoted {
                                    role,
                                    term,
                                    reason: crate::core::DemoteReason::Abandoned,
                                });
                            }
                            return;
                        }
                        Some(SessionInput::Stop) | None => {
                            inbox_open = false;
                            self.machine.handle_stop(now);
                        }
                    }
                }
                () = sleep_until_opt(timer) => {
                    self.input_at = Instant::now();
                    self.machine.handle_timeout(self.input_at);
                }
            }
        }
    }

    /// Tells the watcher which roles this session lists released terms of (it reports when
    /// their keys move, so that settled entries leave the list).
    fn publish_released(&self) {
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let listed: Vec<_> = self
            .machine
            .released()
            .iter()
            .map(|t| t.role.clone())
            .collect();
        self.shared.released.set(ttl_ms, &listed);
    }

    /// Keeps a started session from its roles until the bucket's epoch is confirmed (Q6):
    /// its `Up` starts the check and is held, its renewals meanwhile only update what will
    /// be announced, its loss ends the check. Every other action goes on to `execute`.
    fn hold_unconfirmed(
        &mut self,
        action: SessionAction,
        confirming: &mut Option<BoxFuture<'static, ()>>,
    ) -> Option<SessionAction> {
        match action {
            SessionAction::Up {
                uuid,
                acked_sent_at,
                revision,
            } => {
                debug!(%uuid, revision, "session start acknowledged; confirming the bucket's epoch");
                self.unannounced = Some(Unannounced {
                    uuid,
                    revision,
                    acked_sent_at,
                    acked_at: self.input_at,
                });
                *confirming = Some(Box::pin(confirm_epoch(
                    self.shared.clone(),
                    self.view.clone(),
                    self.start_timeout,
                    self.start_epoch,
                )));
                None
            }
            SessionAction::Renewed {
                uuid,
                acked_sent_at,
                ..
            } if self.unannounced.as_ref().is_some_and(|u| u.uuid == uuid) => {
                if let Some(u) = &mut self.unannounced {
                    u.acked_sent_at = acked_sent_at;
                    u.acked_at = self.input_at;
                }
                None
            }
            SessionAction::Lost { uuid, .. }
                if self.unannounced.as_ref().is_some_and(|u| u.uuid == uuid) =>
            {
                self.unannounced = None;
                *confirming = None;
                Some(action)
            }
            other => Some(other),
        }
    }

    /// The bucket's epoch was confirmed after the session's start: its roles hear of it now,
    /// with its last acknowledged write.
    fn announce(&mut self) {
        let Some(u) = self.unannounced.take() else {
            return;
        };
        info!(uuid = %u.uuid, revision = u.revision, "session started");
        let live = SessionUpdate::Live {
            uuid: u.uuid,
            acked_sent_at: u.acked_sent_at,
        };
        self.publish(live, None);
        self.renewed(live, u.acked_at);
    }

    fn execute(
        &mut self,
        action: SessionAction,
        ops: &mut FuturesUnordered<BoxFuture<'static, (u64, OpResult)>>,
    ) {
        match action {
            SessionAction::Write(w) => {
                // Through the role drivers' backend: the test-only negative controls decorate
                // session writes too (`drop-ttl` drops the session renewals' TTL).
                let backend = self.shared.backend.clone();
                let kind = match w.kind {
                    SessionWriteKind::Start => WriteKind::Acquire,
                    SessionWriteKind::Renew => WriteKind::Renew,
                    SessionWriteKind::End => WriteKind::Release,
                };
                let write = LeaseWrite {
                    kind,
                    expected: w.expected,
                    ttl: (kind != WriteKind::Release).then_some(self.ttl),
                    payload: w.value.map(|v| v.to_bytes()).unwrap_or_default(),
                };
                let (op, key, timeout, session_kind) = (w.op, self.key.clone(), w.timeout, w.kind);
                let span = tracing::debug_span!(
                    "kv",
                    op = "cas",
                    kind = w.kind.as_str(),
                    expected = w.expected
                );
                ops.push(Box::pin(
                    async move {
                        let sent = Instant::now();
                        let outcome = backend.write(key, write, timeout).await;
                        (op, OpResult::Write(session_kind, outcome, sent.elapsed()))
                    }
                    .instrument(span),
                ));
            }
            SessionAction::Read { op, timeout } => {
                let store = self.shared.store.clone();
                let key = self.key.clone();
                ops.push(Box::pin(async move {
                    (op, OpResult::Read(store.read_session(&key, timeout).await))
                }));
            }
            SessionAction::Up { .. } => {
                // Held by `hold_unconfirmed` until the epoch is confirmed.
            }
            SessionAction::Renewed {
                uuid,
                acked_sent_at,
                revision,
            } => {
                tracing::trace!(revision, "session renewed");
                // Wakes no role runner: the clock moves the terms' deadlines (Q4).
                self.renewed(
                    SessionUpdate::Live {
                        uuid,
                        acked_sent_at,
                    },
                    self.input_at,
                );
            }
            SessionAction::Lost { uuid, reason } => {
                self.publish_released();
                if reason == SessionLoss::BucketReset {
                    // The session key went back: the bucket was recreated (P1).
                    self.shared.bucket.ask_check();
                }
                if reason == SessionLoss::Ended {
                    info!(%uuid, "session ended");
                } else {
                    warn!(%uuid, reason = reason.as_str(), "session lost; every role of it demotes");
                }
                self.publish(
                    SessionUpdate::Lost {
                        uuid,
                        reason: reason.demote_reason(),
                    },
                    Some(reason),
                );
            }
            SessionAction::Duplicate { other_incarnation } => {
                error!(
                    %other_incarnation,
                    "another live process uses this instance id (it wrote this instance's \
                     session); instance ids must be unique. This process yields until that \
                     session is gone"
                );
                self.shared.note_duplicate();
            }
            SessionAction::Failed(kind) => {
                warn!(error = %self.shared.store.describe(kind), "session writes fail; retrying");
                self.view.send_modify(|v| v.failure = Some(kind));
            }
            SessionAction::Recovered => {
                info!("session writes succeed again");
                self.view.send_modify(|v| v.failure = None);
            }
            SessionAction::Stopped => debug!("session task stopped"),
        }
    }
}

impl SessionTask {
    /// An acknowledged write of the session (as the backend lets the roles hear it): published
    /// in the session's clock, and every held term of the session gets its new deadline and a
    /// renewal record (tap) in the same step (Q4, one deadline per session).
    fn renewed(&self, update: SessionUpdate, acked_at: Instant) {
        let Some(SessionUpdate::Live {
            uuid,
            acked_sent_at,
        }) = self.shared.backend.session_update(&self.key, update, None)
        else {
            return;
        };
        let renewal = super::session_link::Renewal {
            uuid,
            acked_sent_at,
            acked_at,
            wall: std::time::SystemTime::now(),
        };
        let backend = &self.shared.backend;
        self.clock
            .renewed_session(renewal, |deadline| backend.handed_deadline(deadline));
    }

    /// Tells the role runners of this session about `update` (through the backend: only the
    /// test-only `renew-after-loss` negative control changes what they hear).
    fn publish(&self, update: SessionUpdate, loss: Option<SessionLoss>) {
        if let Some(update) = self.shared.backend.session_update(&self.key, update, loss) {
            self.view.send_modify(|v| v.update = Some(update));
        }
    }
}

/// How long a session lost to a recreated bucket waits for the watcher's epoch check.
const EPOCH_CHECK_WAIT: Duration = Duration::from_secs(2);

/// How often an unanswered (or not yet applied) epoch check after a session start is repeated.
const EPOCH_CONFIRM_RETRY: Duration = Duration::from_millis(250);

/// Completes once the bucket's epoch, asked of the server now (after a session's start was
/// acknowledged), is `sent_epoch` — the one this instance knew when it sent the start: the
/// answer was sent after the start was stored, and a deleted stream never comes back, so the
/// start landed in that bucket (Q6). Another epoch is applied first (the watcher resets every
/// role and the session book: the young-bucket hold) and then confirmed in turn: the start
/// landed in the new bucket, or in the deleted one, whose session is renewed nowhere and ends
/// before the hold does. A failed check is repeated [`EPOCH_CONFIRM_RETRY`] after its answer
/// or timeout — the session's roles acquire nothing meanwhile, and report the failure (the
/// session view's, as a failing session write would; cleared once confirmed).
async fn confirm_epoch(
    shared: Arc<Shared>,
    view: watch::Sender<SessionView>,
    timeout: Duration,
    sent_epoch: u64,
) {
    let mut warned = false;
    let mut reported: Option<FailureKind> = None;
    let mut expected = sent_epoch;
    loop {
        let known = shared.bucket.epoch();
        match shared.store.epoch(timeout).await {
            Ok(epoch) if epoch == expected => {
                if let Some(kind) = reported {
                    view.send_if_modified(|v| {
                        let ours = v.failure == Some(kind);
                        if ours {
                            v.failure = None;
                        }
                        ours
                    });
                }
                return;
            }
            Ok(_) | Err(FailureKind::BucketNotFound) => {
                if !warned {
                    warn!("the bucket was recreated: the session's roles wait for its new epoch");
                }
                await_epoch_check(&shared).await;
                // From now on the epoch this instance works in is the one to confirm.
                expected = shared.bucket.epoch();
                if expected != known || expected != sent_epoch {
                    warned = true;
                    continue; // applied (now or before this check): confirm it
                }
            }
            Err(kind) => {
                if reported != Some(kind) {
                    reported = Some(kind);
                    view.send_modify(|v| v.failure = Some(kind));
                }
                if !warned {
                    warn!(
                        error = %shared.store.describe(kind),
                        "the bucket's epoch cannot be confirmed after the session's start; its \
                         roles acquire nothing until it is (retrying every 250 ms)"
                    );
                }
            }
        }
        warned = true;
        tokio::time::sleep(EPOCH_CONFIRM_RETRY).await;
    }
}

/// The session key went back (a recreated bucket), or a check found another epoch: before a
/// new session lets this instance's roles acquire again, give the watcher time to confirm
/// the bucket's new epoch (P1, P6), so that every new term carries it. At most
/// [`EPOCH_CHECK_WAIT`].
async fn await_epoch_check(shared: &Shared) {
    let before = shared.bucket.epoch();
    let mut checks = shared.bucket.checks.subscribe();
    let asked = checks.borrow_and_update().0;
    shared.bucket.ask_check();
    // The first check started after this request has seen the bucket as it is now (the key
    // went back already): a new epoch, or the same bucket (an aged-out marker, an operator's
    // purge) — then there is nothing to wait for.
    let checked = checks.wait_for(|(_, done)| *done > asked);
    let _ = tokio::time::timeout(EPOCH_CHECK_WAIT, checked).await;
    if shared.bucket.epoch() == before {
        debug!("the epoch check found the same bucket");
    }
}

/// Awaits the future in `slot` (never completes when there is none).
async fn poll_opt(slot: &mut Option<BoxFuture<'static, ()>>) {
    match slot {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
