//! [`WhileLeader`]: callbacks that run a piece of work for exactly as long as a term lasts.

use std::future::Future;
use std::sync::Mutex;

use tokio::task::JoinHandle;

use crate::callbacks::{BoxFuture, Demotion, RoleCallbacks};
use crate::leadership::Leadership;

/// Runs `work(leadership)` as a task for each term and stops it when the term ends.
///
/// The task is started on promotion. When the term ends — loss, local deadline, release or
/// shutdown — the work future is dropped at its next `.await` (it never runs past the term's
/// cancellation), and `on_demote` waits for the task to be gone, so a graceful release deletes
/// the lease only after the work stopped. Work that needs a clean stop can watch
/// [`Leadership::cancelled`] itself and finish before the term ends.
///
/// ```no_run
/// use nats_roles::{RoleName, RoleSpec, run_while_leader};
/// let spec = RoleSpec::new(RoleName::new("sweeper").expect("valid")).callbacks(
///     run_while_leader(|leadership| async move {
///         loop {
///             // one sweep, persisted with a fenced write
///             let _ = leadership.fenced_put("last-sweep", "done").await;
///             tokio::time::sleep(std::time::Duration::from_secs(1)).await;
///         }
///     }),
/// );
/// # let _ = spec;
/// ```
pub struct WhileLeader<F> {
    work: F,
    running: Mutex<Option<JoinHandle<()>>>,
}

/// Callbacks running `work` while this instance holds the role (see [`WhileLeader`]).
pub fn run_while_leader<F, Fut>(work: F) -> WhileLeader<F>
where
    F: Fn(Leadership) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    WhileLeader {
        work,
        running: Mutex::new(None),
    }
}

impl<F> WhileLeader<F> {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<JoinHandle<()>>> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<F, Fut> RoleCallbacks for WhileLeader<F>
where
    F: Fn(Leadership) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn on_promote(&self, leadership: Leadership) -> BoxFuture<'_> {
        let work = (self.work)(leadership.clone());
        let task = tokio::spawn(async move {
            tokio::select! {
                biased;
                () = leadership.cancelled() => {}
                () = work => {}
            }
        });
        if let Some(previous) = self.slot().replace(task) {
            // Cannot happen (callbacks are ordered), but never leave work running.
            previous.abort();
        }
        Box::pin(async {})
    }

    fn on_demote(&self, _demotion: Demotion) -> BoxFuture<'_> {
        let task = self.slot().take();
        Box::pin(async move {
            if let Some(task) = task {
                let _ = task.await;
            }
        })
    }
}
