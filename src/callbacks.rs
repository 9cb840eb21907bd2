//! Callbacks for role code, and the per-role task that runs them in order (protocol P9).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::core::DemoteReason;
use crate::leadership::Leadership;

/// A boxed future returned by callbacks.
pub type BoxFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

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
    /// instance prepared it (or `placement.prepare_timeout` passed) before releasing it.
    /// Default: `false`.
    fn prepares(&self) -> bool {
        false
    }

    /// Warm hand-over: placement chose this instance to receive `role` by a voluntary move;
    /// load state, warm caches, then return. Runs in order with the other callbacks of the
    /// role (a promotion that follows waits for it), at most `placement.prepare_timeout`.
    /// Default: nothing.
    fn on_prepare(&self, role: crate::names::RoleName) -> BoxFuture<'_> {
        let _ = role;
        Box::pin(async {})
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
    /// Prepare the role (at most this long), then answer.
    Prepare(
        crate::names::RoleName,
        std::time::Duration,
        oneshot::Sender<()>,
    ),
}

/// Runs the callbacks of one role, one at a time, in the order queued.
pub(crate) async fn run_callbacks(
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
            CallbackCall::Prepare(role, limit, done) => {
                let _ = tokio::time::timeout(limit, callbacks.on_prepare(role)).await;
                let _ = done.send(());
            }
        }
    }
}
