//! The follower (protocol Q8 rule 3): one consumer per followed instance on
//! `session.<instance>.>`, delivering the last entry per key first, whose entries go to the
//! session book and this instance's own session tasks as the shared watcher's once did. The
//! session book says whom to follow ([`SessionBook::wanted`](crate::core::SessionBook::wanted));
//! this task starts and stops the consumers, tells the book whom it follows, and starts them
//! all again in a new bucket.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::Store;
use futures_util::StreamExt;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::shared::Shared;
use super::watcher::dispatch_session;
use crate::names::InstanceId;
use crate::value::SESSION_PREFIX;

/// The shortest pause between two re-evaluations of whom to follow (a burst of role values at
/// start-up rings the bell thousands of times).
const SETTLE: Duration = Duration::from_millis(20);

/// Runs the follower until `cancel`.
pub(crate) async fn run(shared: Arc<Shared>, kv: Store, cancel: CancellationToken) {
    let mut running: HashMap<InstanceId, JoinHandle<()>> = HashMap::new();
    let mut epoch = shared.bucket.epoch();
    let mut checks = shared.bucket.checks.subscribe();
    loop {
        let now = Instant::now();
        if shared.bucket.epoch() != epoch {
            // A new bucket: every consumer starts again and replays its keys' last entries
            // after the reset (an entry of the new bucket delivered before it was noticed
            // is ignored by the old book).
            epoch = shared.bucket.epoch();
            for (_, task) in running.drain() {
                task.abort();
            }
        }
        let wanted = shared.reports.book().wanted(now);
        let Some(wanted) = wanted else {
            return; // the book follows every key: nothing to do here
        };
        let recheck_at = wanted.recheck_at;
        apply(&shared, &kv, &mut running, &wanted.follow, epoch, &cancel);
        tokio::select! {
            biased;
            () = cancel.cancelled() => break,
            () = shared.reports.follow.notified() => {}
            Ok(()) = checks.changed() => {}
            () = sleep_until_opt(recheck_at) => {}
        }
        tokio::time::sleep(SETTLE).await;
    }
    for (_, task) in running.drain() {
        task.abort();
    }
}

/// Follows exactly `follow`: stops the consumers of the others (the book forgets their keys
/// first), starts the missing ones (after the book knows it follows them, so their first
/// entries count).
fn apply(
    shared: &Arc<Shared>,
    kv: &Store,
    running: &mut HashMap<InstanceId, JoinHandle<()>>,
    follow: &BTreeSet<InstanceId>,
    epoch: u64,
    cancel: &CancellationToken,
) {
    let stopped: Vec<InstanceId> = running
        .keys()
        .filter(|i| !follow.contains(*i))
        .cloned()
        .collect();
    let started: Vec<InstanceId> = follow
        .iter()
        .filter(|i| !running.contains_key(*i) || running[*i].is_finished())
        .cloned()
        .collect();
    if stopped.is_empty() && started.is_empty() {
        return;
    }
    for id in &stopped {
        if let Some(task) = running.remove(id) {
            task.abort();
        }
        debug!(instance = %id, "no longer following its sessions");
    }
    shared
        .reports
        .book()
        .follow_only(follow.clone(), Instant::now());
    // The renewal ages of the instances no longer followed are not known any more.
    shared.bucket.renewals().retain(|i, _| follow.contains(i));
    for id in started {
        debug!(instance = %id, "following its sessions");
        let task = tokio::spawn(consume(
            shared.clone(),
            kv.clone(),
            id.clone(),
            epoch,
            cancel.child_token(),
        ));
        running.insert(id, task);
    }
}

/// One consumer on `session.<id>.>`, recreated after errors (it replays the keys' last
/// entries; the book ignores what it already knows). Ends when the bucket's epoch is no longer
/// `epoch` (the follower starts a new one).
async fn consume(
    shared: Arc<Shared>,
    kv: Store,
    id: InstanceId,
    epoch: u64,
    cancel: CancellationToken,
) {
    let filter = format!("{SESSION_PREFIX}{id}.>");
    let mut backoff = Duration::from_millis(100);
    loop {
        let watch = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            w = kv.watch_with_history(filter.clone()) => w,
        };
        match watch {
            Ok(mut entries) => {
                backoff = Duration::from_millis(100);
                loop {
                    let next = tokio::select! {
                        biased;
                        () = cancel.cancelled() => return,
                        n = entries.next() => n,
                    };
                    if shared.bucket.epoch() != epoch {
                        return;
                    }
                    match next {
                        Some(Ok(entry)) => {
                            shared.bucket.saw_revision(entry.revision);
                            dispatch_session(&shared, &entry);
                        }
                        Some(Err(err)) => {
                            debug!(instance = %id, error = %err, "session consumer failed; recreating it");
                            break;
                        }
                        None => break,
                    }
                }
            }
            Err(err) => {
                warn!(instance = %id, error = %err, "cannot follow the sessions of an instance; retrying");
            }
        }
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
