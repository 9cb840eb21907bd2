//! The reaper (protocol Q5 rule 4): every [`TICK`] it asks the session book for the session
//! keys due for a reap, sends each reap (a purge-marker CAS on the revision the book knew
//! unchanged for the backstop period), and hands the outcomes — and the leader read after a
//! refused reap — back to the book; roles whose holder's session is gone become vacant. A
//! task of its own: the bucket watcher is recreated after errors, reaps in flight are not.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::shared::Shared;
use super::watcher::holders_gone;
use crate::core::{FailureKind, Reap, SessionKeyState, WriteOutcome};

/// How often the book is asked for reaps that are due.
const TICK: Duration = Duration::from_millis(250);

/// Timeout of one reap or leader read.
const IO_TIMEOUT: Duration = Duration::from_secs(1);

/// A reap or a leader read that finished.
enum Done {
    Reaped(Reap, WriteOutcome),
    Read(String, Result<SessionKeyState, FailureKind>),
}

/// Runs the reaper until `cancel`, answering liveness probes (`RoleManager::probe`).
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut probes: super::probe::Inbox,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut io: FuturesUnordered<BoxFuture<'static, Done>> = FuturesUnordered::new();
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            Some(done) = io.next(), if !io.is_empty() => finished(&shared, done, &mut io),
            Some(reply) = probes.recv() => {
                let _ = reply.send(());
            }
            _ = tick.tick() => {
                let due = shared.reports.book().due_reaps(tokio::time::Instant::now());
                for reap in due {
                    let store = shared.store.clone();
                    io.push(Box::pin(async move {
                        let outcome = store.reap(&reap.key, reap.expected, IO_TIMEOUT).await;
                        Done::Reaped(reap, outcome)
                    }));
                }
            }
        }
    }
}

/// Hands a finished reap or read to the session book; a refused reap asks for a leader read.
fn finished(shared: &Shared, done: Done, io: &mut FuturesUnordered<BoxFuture<'static, Done>>) {
    let now = tokio::time::Instant::now();
    match done {
        Done::Reaped(reap, outcome) => {
            let result = shared.reports.book().reap_done(&reap, outcome, now);
            match outcome {
                WriteOutcome::Ok { revision } => info!(
                    key = %reap.key,
                    expected = reap.expected,
                    revision,
                    "reaped a session key unchanged for the backstop period (protocol Q5 rule 4)"
                ),
                WriteOutcome::Failed(kind) => debug!(
                    key = %reap.key,
                    error = %shared.store.describe(kind),
                    "reap refused"
                ),
                _ => {}
            }
            holders_gone(shared, result.gone);
            if result.read {
                let store = shared.store.clone();
                io.push(Box::pin(async move {
                    let r = store.read_session(&reap.key, IO_TIMEOUT).await;
                    Done::Read(reap.key, r)
                }));
            }
        }
        Done::Read(key, Ok(state)) => {
            let gone = shared.reports.book().leader_read(&key, state, now);
            holders_gone(shared, gone);
        }
        Done::Read(_, Err(_)) => {}
    }
}
