//! The driver of one session (protocol Q1–Q4): runs a [`SessionMachine`] for this instance
//! and one TTL class, performs its writes and reads, and publishes the session's state to the
//! role tasks of that class on a `watch` channel (the only writer).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{Instrument, debug, error, info, warn};

use super::shared::Shared;
use crate::core::{
    DemoteReason, FailureKind, SessionAction, SessionKeyState, SessionLoss, SessionMachine,
    SessionUpdate, SessionWriteKind, WriteOutcome,
};

/// Messages to a session task.
#[derive(Debug)]
pub(crate) enum SessionInput {
    /// The watcher saw the session key change.
    Observed(SessionKeyState),
    /// End the session (every role of it was released) and stop.
    Stop,
}

/// The state of a session as role tasks see it: `None` before the first session started.
pub(crate) type SessionView = Option<SessionUpdate>;

enum OpResult {
    Write(WriteOutcome),
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
}

impl SessionTask {
    /// Runs until the machine stopped (after [`SessionInput::Stop`]).
    pub(crate) async fn run(mut self) {
        let span = tracing::info_span!("session", key = %self.key, instance = %self.shared.instance);
        async move { self.drive().await }.instrument(span).await;
    }

    async fn drive(&mut self) {
        let mut ops: FuturesUnordered<BoxFuture<'static, (u64, OpResult)>> =
            FuturesUnordered::new();
        let mut inbox_open = true;
        self.machine.start(Instant::now());
        loop {
            while let Some(action) = self.machine.poll_action() {
                self.execute(action, &mut ops);
            }
            if self.machine.is_stopped() {
                return;
            }
            let timer = self.machine.poll_timeout();
            tokio::select! {
                biased;
                Some((op, result)) = ops.next(), if !ops.is_empty() => {
                    let now = Instant::now();
                    match result {
                        OpResult::Write(o) => {
                            if o == WriteOutcome::Failed(FailureKind::BucketNotFound) {
                                self.shared.bucket_check.notify_one();
                            }
                            self.machine.handle_write(op, o, now);
                        }
                        OpResult::Read(r) => self.machine.handle_read(op, r, now),
                    }
                }
                input = self.inbox.recv(), if inbox_open => {
                    let now = Instant::now();
                    match input {
                        Some(SessionInput::Observed(state)) => self.machine.handle_observed(state, now),
                        Some(SessionInput::Stop) | None => {
                            inbox_open = false;
                            self.machine.handle_stop(now);
                        }
                    }
                }
                () = sleep_until_opt(timer) => self.machine.handle_timeout(Instant::now()),
            }
        }
    }

    fn execute(
        &mut self,
        action: SessionAction,
        ops: &mut FuturesUnordered<BoxFuture<'static, (u64, OpResult)>>,
    ) {
        match action {
            SessionAction::Write(w) => {
                let store = self.shared.store.clone();
                let key = self.key.clone();
                let delete = w.kind == SessionWriteKind::End;
                let ttl = (!delete).then_some(self.ttl);
                let payload = w.value.map(|v| v.to_bytes()).unwrap_or_default();
                let (op, expected, timeout) = (w.op, w.expected, w.timeout);
                let span = tracing::debug_span!("kv", op = "cas", kind = w.kind.as_str(), expected);
                ops.push(Box::pin(
                    async move {
                        let outcome = store.cas(&key, expected, ttl, payload, delete, timeout).await;
                        (op, OpResult::Write(outcome))
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
            SessionAction::Up {
                uuid,
                acked_sent_at,
                revision,
            } => {
                info!(%uuid, revision, "session started");
                self.view.send_replace(Some(SessionUpdate::Live {
                    uuid,
                    acked_sent_at,
                }));
            }
            SessionAction::Renewed {
                uuid,
                acked_sent_at,
                revision,
            } => {
                tracing::trace!(revision, "session renewed");
                self.view.send_replace(Some(SessionUpdate::Live {
                    uuid,
                    acked_sent_at,
                }));
            }
            SessionAction::Lost { uuid, reason } => {
                if reason == SessionLoss::Ended {
                    info!(%uuid, "session ended");
                } else {
                    warn!(%uuid, reason = reason.as_str(), "session lost; every role of it demotes");
                }
                self.view.send_replace(Some(SessionUpdate::Lost {
                    uuid,
                    reason: demote_reason(reason),
                }));
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
            }
            SessionAction::Recovered => info!("session writes succeed again"),
            SessionAction::Stopped => debug!("session task stopped"),
        }
    }
}

/// The demotion reason a term resting on a session gets when the session ends.
fn demote_reason(loss: SessionLoss) -> DemoteReason {
    match loss {
        SessionLoss::DeadlineExpired => DemoteReason::DeadlineExpired,
        SessionLoss::Expired => DemoteReason::Expired,
        SessionLoss::Evicted => DemoteReason::Evicted,
        SessionLoss::BucketReset => DemoteReason::BucketReset,
        SessionLoss::Superseded | SessionLoss::Ended => DemoteReason::Superseded,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
