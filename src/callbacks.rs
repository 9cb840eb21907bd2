//! Callbacks for role code, and the per-role task that runs them in order (protocol P9).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::core::DemoteReason;
use crate::leadership::Leadership;

/// A boxed future returned by callbacks.
pub type BoxFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The future of [`RoleCallbacks::on_prepare`]: `Ok` once the role is prepared.
pub type PrepareFuture<'a> = Pin<Box<dyn Future<Output = Result<(), PrepareError>> + Send + 'a>>;

/// [`RoleCallbacks::on_prepare`] could not prepare the role. The receiver's membership record
/// says so (`prepare_failed`) and the holder hands the role over at once, without waiting for
/// a readiness that will not come: the receiver starts the role cold, as it would without a
/// warm hand-over (docs/placement.md).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot prepare the role: {reason}")]
#[non_exhaustive]
pub struct PrepareError {
    /// Why (logged by the manager).
    pub reason: String,
}

impl PrepareError {
    /// A preparation that failed for `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }
}

/// What ended a term, given to [`RoleCallbacks::on_demote`].
#[derive(Debug, Clone)]
pub struct Demotion {
    /// The term that ended (its token is already cancelled).
    pub leadership: Leadership,
    /// Why it ended.
    pub reason: DemoteReason,
}

/// Code run when this instance gains or loses a role.
///
/// Per role, calls are strictly ordered: `on_promote(n)`, `on_demote(n)`, `on_promote(n+1)`…
/// `on_demote` is called only after the term's cancellation token was cancelled, and the next
/// `on_promote` only after `on_demote` returned. Keep `on_promote` short: spawn the work and
/// let it stop on [`Leadership::cancelled`]. A graceful release waits for `on_demote` to return
/// (up to the drain timeout) before deleting the lease, so `on_demote` is the place to wait
/// for role work to finish.
pub trait RoleCallbacks: Send + Sync + 'static {
    /// This instance became the holder of a role.
    fn on_promote(&self, leadership: Leadership) -> BoxFuture<'_>;
    /// This instance stopped being the holder of a role.
    fn on_demote(&self, demotion: Demotion) -> BoxFuture<'_>;

    /// Warm hand-over (placement, docs/placement.md): whether [`RoleCallbacks::on_prepare`]
    /// does something. When `true`, a holder moving the role here voluntarily waits until this
    /// instance prepared it, or said its preparation failed, or `placement.prepare_timeout`
    /// passed, before releasing it. Default: `false`.
    fn prepares(&self) -> bool {
        false
    }

    /// Warm hand-over: placement chose this instance to receive `role` by a voluntary move;
    /// load state, warm caches, then return `Ok` (ready) or a [`PrepareError`] (not ready:
    /// the holder hands over without waiting). Runs in order with the other callbacks of the
    /// role, at most `placement.prepare_timeout` (running out of it counts as failed). It is
    /// never called while this instance holds the role, and a promotion abandons it: the
    /// future is dropped and `on_promote` runs at once (the term has started; its work must
    /// not wait for a preparation). Default: ready at once.
    fn on_prepare(&self, role: crate::names::RoleName) -> PrepareFuture<'_> {
        let _ = role;
        Box::pin(async { Ok(()) })
    }
}

/// Callbacks built from two closures.
pub struct FnCallbacks<P, D> {
    promote: P,
    demote: D,
}

impl<P, PF, D, DF> FnCallbacks<P, D>
where
    P: Fn(Leadership) -> PF + Send + Sync + 'static,
    PF: Future<Output = ()> + Send + 'static,
    D: Fn(Demotion) -> DF + Send + Sync + 'static,
    DF: Future<Output = ()> + Send + 'static,
{
    /// Callbacks from an `on_promote` and an `on_demote` closure.
    pub fn new(promote: P, demote: D) -> Self {
        Self { promote, demote }
    }
}

impl<P, PF, D, DF> RoleCallbacks for FnCallbacks<P, D>
where
    P: Fn(Leadership) -> PF + Send + Sync + 'static,
    PF: Future<Output = ()> + Send + 'static,
    D: Fn(Demotion) -> DF + Send + Sync + 'static,
    DF: Future<Output = ()> + Send + 'static,
{
    fn on_promote(&self, leadership: Leadership) -> BoxFuture<'_> {
        Box::pin((self.promote)(leadership))
    }

    fn on_demote(&self, demotion: Demotion) -> BoxFuture<'_> {
        Box::pin((self.demote)(demotion))
    }
}

/// Callbacks that do nothing (state is still visible through status channels).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCallbacks;

impl RoleCallbacks for NoCallbacks {
    fn on_promote(&self, _leadership: Leadership) -> BoxFuture<'_> {
        Box::pin(async {})
    }
    fn on_demote(&self, _demotion: Demotion) -> BoxFuture<'_> {
        Box::pin(async {})
    }
}

/// One callback invocation queued for a role.
pub(crate) enum CallbackCall {
    Promote(Leadership),
    Demote(Demotion, Option<oneshot::Sender<()>>),
    /// Prepare the role (at most `limit`; abandoned once `cancel` is cancelled), then answer.
    Prepare {
        role: crate::names::RoleName,
        limit: std::time::Duration,
        cancel: CancellationToken,
        done: oneshot::Sender<PrepareOutcome>,
    },
}

/// How one `on_prepare` call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PrepareOutcome {
    /// It returned `Ok`.
    Ready,
    /// It returned an error.
    Failed(String),
    /// It ran out of its time limit (dropped).
    TimedOut,
    /// A promotion abandoned it (dropped, or never started).
    Abandoned,
}

/// The queue of one role's callbacks, run one at a time in the order queued by a runner task
/// started with the first callback: a role that never leads or prepares (most roles of a
/// large fleet, on most instances) costs no task and no channel for it.
pub(crate) struct CallbackQueue {
    callbacks: Arc<dyn RoleCallbacks>,
    calls: Option<mpsc::UnboundedSender<CallbackCall>>,
    runner: Option<tokio::task::JoinHandle<()>>,
}

impl CallbackQueue {
    /// An empty queue for `callbacks` (nothing started yet).
    pub(crate) fn new(callbacks: Arc<dyn RoleCallbacks>) -> Self {
        Self {
            callbacks,
            calls: None,
            runner: None,
        }
    }

    /// Queues `call` behind the ones queued before (starting the runner the first time).
    pub(crate) fn send(&mut self, call: CallbackCall) {
        let calls = self.calls.get_or_insert_with(|| {
            let (calls, queued) = mpsc::unbounded_channel();
            self.runner = Some(tokio::spawn(run_callbacks(self.callbacks.clone(), queued)));
            calls
        });
        // The runner ends only when the queue is closed (`finish`).
        let _ = calls.send(call);
    }

    /// Closes the queue and waits until the callbacks queued ran (the last demotion's).
    pub(crate) async fn finish(mut self) {
        drop(self.calls.take());
        if let Some(runner) = self.runner.take() {
            let _ = runner.await;
        }
    }
}

/// Runs the callbacks of one role, one at a time, in the order queued.
async fn run_callbacks(
    callbacks: Arc<dyn RoleCallbacks>,
    mut calls: mpsc::UnboundedReceiver<CallbackCall>,
) {
    while let Some(call) = calls.recv().await {
        match call {
            CallbackCall::Promote(l) => callbacks.on_promote(l).await,
            CallbackCall::Demote(d, done) => {
                callbacks.on_demote(d).await;
                if let Some(done) = done {
                    let _ = done.send(());
                }
            }
            CallbackCall::Prepare {
                role,
                limit,
                cancel,
                done,
            } => {
                // A promotion cancels the preparation (queued or running): the promotion
                // queued behind it must not wait.
                let outcome = if cancel.is_cancelled() {
                    PrepareOutcome::Abandoned
                } else {
                    tokio::select! {
                        () = cancel.cancelled() => PrepareOutcome::Abandoned,
                        r = tokio::time::timeout(limit, callbacks.on_prepare(role)) => match r {
                            Ok(Ok(())) => PrepareOutcome::Ready,
                            Ok(Err(e)) => PrepareOutcome::Failed(e.reason),
                            Err(_) => PrepareOutcome::TimedOut,
                        },
                    }
                };
                let _ = done.send(outcome);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::names::RoleName;

    /// `on_prepare` answers `answer` after `takes` (never when `None`).
    struct Prep {
        takes: Option<Duration>,
        answer: Result<(), PrepareError>,
    }

    impl RoleCallbacks for Prep {
        fn on_promote(&self, _l: Leadership) -> BoxFuture<'_> {
            Box::pin(async {})
        }
        fn on_demote(&self, _d: Demotion) -> BoxFuture<'_> {
            Box::pin(async {})
        }
        fn on_prepare(&self, _role: RoleName) -> PrepareFuture<'_> {
            Box::pin(async move {
                match self.takes {
                    Some(t) => tokio::time::sleep(t).await,
                    None => std::future::pending().await,
                }
                self.answer.clone()
            })
        }
    }

    /// Runs one preparation of `callbacks` (limit 1 s); `cancel_after` cancels it then.
    async fn prepare(callbacks: Prep, cancel_after: Option<Duration>) -> PrepareOutcome {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run_callbacks(Arc::new(callbacks), rx));
        let cancel = CancellationToken::new();
        let (done, answer) = oneshot::channel();
        let call = CallbackCall::Prepare {
            role: RoleName::new("r").expect("valid"),
            limit: Duration::from_secs(1),
            cancel: cancel.clone(),
            done,
        };
        assert!(tx.send(call).is_ok());
        if let Some(after) = cancel_after {
            tokio::time::sleep(after).await;
            cancel.cancel();
        }
        answer.await.expect("answered")
    }

    /// Ready, failed, timed out (the limit) and abandoned (a promotion) are told apart: only
    /// `Ok` is ready.
    #[tokio::test(start_paused = true)]
    async fn a_preparation_ends_ready_failed_timed_out_or_abandoned() {
        let ms = Duration::from_millis;
        let ok = || Ok(());
        let fails = || Err(PrepareError::new("no cache"));
        let prep = |takes, answer| Prep { takes, answer };
        assert_eq!(
            prepare(prep(Some(ms(10)), ok()), None).await,
            PrepareOutcome::Ready
        );
        assert_eq!(
            prepare(prep(Some(ms(10)), fails()), None).await,
            PrepareOutcome::Failed("no cache".into())
        );
        assert_eq!(
            prepare(prep(None, ok()), None).await,
            PrepareOutcome::TimedOut
        );
        assert_eq!(
            prepare(prep(None, ok()), Some(ms(100))).await,
            PrepareOutcome::Abandoned
        );
        // Cancelled at once (queued or just started): abandoned too.
        assert_eq!(
            prepare(prep(Some(ms(10)), ok()), Some(Duration::ZERO)).await,
            PrepareOutcome::Abandoned
        );
    }
}
