//! The orchestrator's own KV watcher: every change of the role and session keys, timestamped
//! when seen.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub(crate) struct KvChange {
    pub(crate) at: Instant,
    pub(crate) key: String,
    pub(crate) op: kv::Operation,
    pub(crate) revision: u64,
    pub(crate) holder: Option<String>,
}

/// Records every change of the role keys, timestamped when the orchestrator's watcher gets it.
pub(crate) struct KvLog {
    pub(crate) changes: Arc<Mutex<Vec<KvChange>>>,
    /// Bumped on every change, to wait for the next renewal.
    pub(crate) tick: watch::Receiver<u64>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl KvLog {
    pub(crate) async fn start(store: &kv::Store) -> Result<KvLog, String> {
        let mut watch = store
            .watch_many(["role.>", "session.>"])
            .await
            .map_err(|e| format!("watch role.> and session.>: {e}"))?;
        let changes: Arc<Mutex<Vec<KvChange>>> = Arc::default();
        let (tick_tx, tick) = watch::channel(0u64);
        let log = changes.clone();
        let task = tokio::spawn(async move {
            while let Some(next) = watch.next().await {
                // An error is reported and the watch goes on (async-nats recreates its
                // consumer): ending here would silently drop every later change.
                let entry = match next {
                    Ok(entry) => entry,
                    Err(e) => {
                        eprintln!("failover_bench: KV watch error (continuing): {e}");
                        continue;
                    }
                };
                let at = Instant::now();
                let holder = serde_json::from_slice::<serde_json::Value>(&entry.value)
                    .ok()
                    // Role values name their holder, session values (protocol v2) their instance.
                    .and_then(|v| {
                        v["holder"]
                            .as_str()
                            .or(v["instance"].as_str())
                            .map(str::to_owned)
                    });
                lock(&log).push(KvChange {
                    at,
                    key: entry.key.clone(),
                    op: entry.operation,
                    revision: entry.revision,
                    holder,
                });
                tick_tx.send_modify(|n| *n += 1);
            }
        });
        Ok(KvLog {
            changes,
            tick,
            task,
        })
    }

    pub(crate) fn since(&self, t: Instant) -> Vec<KvChange> {
        lock(&self.changes)
            .iter()
            .filter(|c| c.at >= t)
            .cloned()
            .collect()
    }

    /// The last put of `key` by `holder` seen at or before `t`.
    pub(crate) fn last_put_by(&self, holder: &str, key: &str, t: Instant) -> Option<KvChange> {
        lock(&self.changes)
            .iter()
            .rev()
            .find(|c| c.at <= t && c.key == key && c.is_put_by(holder))
            .cloned()
    }

    /// Waits for the next put of `key` by `holder` (a renewal) and returns when it was seen.
    pub(crate) async fn next_put_by(
        &mut self,
        holder: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<Instant, String> {
        let start = Instant::now();
        let deadline = start + timeout;
        loop {
            if let Some(c) = self
                .since(start)
                .into_iter()
                .find(|c| c.key == key && c.is_put_by(holder))
            {
                return Ok(c.at);
            }
            match tokio::time::timeout_at(deadline, self.tick.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err("KV watcher ended".into()),
                Err(_) => return Err(format!("no renewal by {holder} within {timeout:?}")),
            }
        }
    }
}

impl KvChange {
    pub(crate) fn is_put_by(&self, holder: &str) -> bool {
        self.op == kv::Operation::Put && self.holder.as_deref() == Some(holder)
    }
}

impl Drop for KvLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
