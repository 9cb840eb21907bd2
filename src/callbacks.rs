//! Callbacks for role code, and the per-role runner that runs them in order (protocol P9).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::oneshot;
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
/// that lives only while callbacks are queued: the first call queued to an idle queue starts
/// it, and it ends when it finds the queue empty (at most one runs at a time, so the order
/// holds). A role that does not lead or prepare right now — most roles of a large fleet on
/// most instances, and every held role once its `on_promote` returned — costs no task, no
/// channel and no queue memory for it: one small shared record after its first callback.
pub(crate) struct CallbackQueue {
    callbacks: Arc<dyn RoleCallbacks>,
    /// Shared with the runner; `None` before the first callback.
    pending: Option<Arc<Pending>>,
}

/// What a queue and its runner share.
#[derive(Default)]
struct Pending {
    state: std::sync::Mutex<PendingState>,
    /// Told when a runner ends (`finish` waits for it).
    ended: tokio::sync::Notify,
}

#[derive(Default)]
struct PendingState {
    calls: std::collections::VecDeque<CallbackCall>,
    /// Whether a runner is running (it takes every call queued until it finds none).
    running: bool,
}

impl Pending {
    fn state(&self) -> std::sync::MutexGuard<'_, PendingState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl CallbackQueue {
    /// An empty queue for `callbacks` (nothing started yet).
    pub(crate) fn new(callbacks: Arc<dyn RoleCallbacks>) -> Self {
        Self {
            callbacks,
            pending: None,
        }
    }

    /// Queues `call` behind the ones queued before (starting a runner if none runs).
    pub(crate) fn send(&mut self, call: CallbackCall) {
        let pending = self.pending.get_or_insert_with(Arc::default);
        let start = {
            let mut state = pending.state();
            state.calls.push_back(call);
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            tokio::spawn(run_callbacks(self.callbacks.clone(), pending.clone()));
        }
    }

    /// Waits until the callbacks queued ran (the last demotion's); nothing can be queued after.
    pub(crate) async fn finish(self) {
        let Some(pending) = self.pending else {
            return;
        };
        loop {
            let ended = pending.ended.notified();
            if !pending.state().running {
                return;
            }
            ended.await;
        }
    }
}

/// Runs the callbacks of one role, one at a time, in the order queued, until it finds the
/// queue empty; then the queue is idle (its memory given back) and the next call starts a new
/// runner.
async fn run_callbacks(callbacks: Arc<dyn RoleCallbacks>, pending: Arc<Pending>) {
    loop {
        let call = {
            let mut state = pending.state();
            match state.calls.pop_front() {
                Some(call) => call,
                None => {
                    state.running = false;
                    state.calls = std::collections::VecDeque::new();
                    drop(state);
                    pending.ended.notify_waiters();
                    return;
                }
            }
        };
        run_callback(&*callbacks, call).await;
    }
}

/// Runs one callback.
async fn run_callback(callbacks: &dyn RoleCallbacks, call: CallbackCall) {
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
            // A promotion cancels the preparation (queued or running): the promotion queued
            // behind it must not wait.
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
        let mut queue = CallbackQueue::new(Arc::new(callbacks));
        let cancel = CancellationToken::new();
        let (done, answer) = oneshot::channel();
        let call = CallbackCall::Prepare {
            role: RoleName::new("r").expect("valid"),
            limit: Duration::from_secs(1),
            cancel: cancel.clone(),
            done,
        };
        queue.send(call);
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

    /// Records the order of its preparations (by role name), each taking `takes`.
    struct Recorder {
        seen: std::sync::Mutex<Vec<String>>,
        takes: Duration,
    }

    impl RoleCallbacks for Recorder {
        fn on_promote(&self, _l: Leadership) -> BoxFuture<'_> {
            Box::pin(async {})
        }
        fn on_demote(&self, _d: Demotion) -> BoxFuture<'_> {
            Box::pin(async {})
        }
        fn on_prepare(&self, role: RoleName) -> PrepareFuture<'_> {
            Box::pin(async move {
                tokio::time::sleep(self.takes).await;
                self.seen.lock().expect("lock").push(role.to_string());
                Ok(())
            })
        }
    }

    /// Callbacks run in the order queued although runners end whenever the queue is empty
    /// and the next call starts a new one (sent while the last one runs, ends or has ended),
    /// and no runner is left once everything ran.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callbacks_keep_their_order_across_runners_and_no_runner_stays_idle() {
        for takes in [Duration::ZERO, Duration::from_micros(50)] {
            let recorder = Arc::new(Recorder {
                seen: std::sync::Mutex::new(Vec::new()),
                takes,
            });
            let mut queue = CallbackQueue::new(recorder.clone());
            let mut answers = Vec::new();
            for i in 0..300_u32 {
                let (done, answer) = oneshot::channel();
                queue.send(CallbackCall::Prepare {
                    role: RoleName::new(format!("r{i}")).expect("valid"),
                    limit: Duration::from_secs(10),
                    cancel: CancellationToken::new(),
                    done,
                });
                answers.push(answer);
                // Sometimes a burst, sometimes a pause long enough for the runner to end.
                if i % 7 == 0 {
                    tokio::task::yield_now().await;
                }
                if i % 31 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            for answer in answers {
                assert_eq!(answer.await.expect("answered"), PrepareOutcome::Ready);
            }
            let seen = recorder.seen.lock().expect("lock").clone();
            let expected: Vec<String> = (0..300).map(|i| format!("r{i}")).collect();
            assert_eq!(seen, expected);
            tokio::time::sleep(Duration::from_millis(20)).await;
            let pending = queue.pending.clone().expect("a runner was started");
            let (running, capacity) = {
                let state = pending.state();
                (state.running, state.calls.capacity())
            };
            assert!(
                !running && capacity == 0,
                "the runner ends once its queue is empty, and the queue's memory is given back"
            );
            queue.finish().await;
        }
    }

    /// `finish` waits for the callback running and the ones queued behind it, and returns at
    /// once for a queue that never ran one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn finish_waits_for_the_callbacks_queued() {
        let recorder = Arc::new(Recorder {
            seen: std::sync::Mutex::new(Vec::new()),
            takes: Duration::from_millis(30),
        });
        CallbackQueue::new(recorder.clone()).finish().await;
        let mut queue = CallbackQueue::new(recorder.clone());
        for name in ["a", "b", "c"] {
            let (done, _answer) = oneshot::channel();
            queue.send(CallbackCall::Prepare {
                role: RoleName::new(name).expect("valid"),
                limit: Duration::from_secs(10),
                cancel: CancellationToken::new(),
                done,
            });
        }
        queue.finish().await;
        assert_eq!(*recorder.seen.lock().expect("lock"), ["a", "b", "c"]);
    }
}
