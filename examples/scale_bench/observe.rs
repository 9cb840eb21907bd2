//! The bench's own view of the bucket: a KV watcher on `role.>` and `session.>` that stamps
//! every change of holder, and every end of a session (its delete or expiry marker), with the
//! bench's monotonic clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

/// One change of a role's holder (`None`: vacant).
#[derive(Debug, Clone)]
pub struct Change {
    pub at: Instant,
    pub role: String,
    pub holder: Option<String>,
}

#[derive(Default)]
struct State {
    holders: BTreeMap<String, Option<String>>,
    log: Vec<Change>,
    /// Session markers seen: (when, instance).
    session_ends: Vec<(Instant, String)>,
}

/// Follows every `role.<name>` key of one bucket.
#[derive(Clone)]
pub struct Observer {
    state: Arc<Mutex<State>>,
}

impl Observer {
    /// Starts watching `bucket` (which must exist) through `client`.
    pub async fn start(client: &async_nats::Client, bucket: &str) -> Observer {
        let js = async_nats::jetstream::new(client.clone());
        let kv = loop {
            match js.get_key_value(bucket).await {
                Ok(kv) => break kv,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let mut watch = kv
            .watch_many_with_history(["role.>", "session.>"])
            .await
            .unwrap_or_else(|e| panic!("watch {bucket}: {e}"));
        let state = Arc::new(Mutex::new(State::default()));
        let observer = Observer {
            state: state.clone(),
        };
        tokio::spawn(async move {
            // An error of the ordered consumer (a missed heartbeat on a loaded machine) is
            // reported and the watch goes on: it recreates its consumer from the last
            // delivered revision (ending here lost every later change, markers included).
            while let Some(next) = watch.next().await {
                let entry = match next {
                    Ok(entry) => entry,
                    Err(e) => {
                        eprintln!("bench observer: watch error (continuing): {e}");
                        continue;
                    }
                };
                let at = Instant::now();
                if let Some(rest) = entry.key.strip_prefix("session.") {
                    if entry.operation != async_nats::jetstream::kv::Operation::Put
                        && let Some((instance, _ttl)) = rest.rsplit_once('.')
                    {
                        state
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .session_ends
                            .push((at, instance.to_owned()));
                    }
                    continue;
                }
                let role = entry.key.trim_start_matches("role.").to_owned();
                let holder = match entry.operation {
                    async_nats::jetstream::kv::Operation::Put => {
                        serde_json::from_slice::<serde_json::Value>(&entry.value)
                            .ok()
                            .and_then(|v| v.get("holder")?.as_str().map(str::to_owned))
                    }
                    _ => None,
                };
                let mut s = state
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if s.holders.get(&role) != Some(&holder) {
                    s.holders.insert(role.clone(), holder.clone());
                    s.log.push(Change { at, role, holder });
                }
            }
        });
        observer
    }

    fn with<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The current holder of every role seen.
    pub fn holders(&self) -> BTreeMap<String, String> {
        self.with(|s| {
            s.holders
                .iter()
                .filter_map(|(r, h)| Some((r.clone(), h.clone()?)))
                .collect()
        })
    }

    /// How many roles have a holder.
    pub fn held(&self) -> usize {
        self.with(|s| s.holders.values().filter(|h| h.is_some()).count())
    }

    /// Changes seen at or after `since`.
    pub fn changes_since(&self, since: Instant) -> Vec<Change> {
        self.with(|s| s.log.iter().filter(|c| c.at >= since).cloned().collect())
    }

    /// Waits until `n` roles have a holder; returns when, or `None` after `timeout`.
    pub async fn wait_held(&self, n: usize, timeout: Duration) -> Option<Instant> {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if self.held() >= n {
                return Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    }

    /// Waits until no holder changed for `quiet` (at most `timeout`).
    pub async fn wait_quiet(&self, quiet: Duration, timeout: Duration) {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            let last = self.with(|s| s.log.last().map(|c| c.at));
            if last.is_none_or(|t| t.elapsed() >= quiet) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// When the first marker ending a session of `instance` was seen after `since` (waits up to
    /// `timeout`).
    pub async fn session_end(
        &self,
        instance: &str,
        since: Instant,
        timeout: Duration,
    ) -> Option<Instant> {
        let end = Instant::now() + timeout;
        loop {
            let seen = self.with(|s| {
                s.session_ends
                    .iter()
                    .find(|(at, i)| *at >= since && i == instance)
                    .map(|(at, _)| *at)
            });
            if seen.is_some() || Instant::now() >= end {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// For each of `roles`, how long after `since` its key was first seen with no holder (the
    /// old holder's release, or a marker); `None` where it was not (already re-held).
    pub fn vacated(&self, roles: &[String], since: Instant) -> Vec<Option<Duration>> {
        let changes = self.changes_since(since);
        roles
            .iter()
            .map(|r| {
                changes
                    .iter()
                    .find(|c| &c.role == r && c.holder.is_none())
                    .map(|c| c.at.duration_since(since))
            })
            .collect()
    }

    /// For each of `roles`, how long after `since` it was first held by someone other than
    /// `old`; waits up to `timeout` for all of them.
    pub async fn retaken(
        &self,
        roles: &[String],
        old: &str,
        since: Instant,
        timeout: Duration,
    ) -> Vec<Option<Duration>> {
        let end = Instant::now() + timeout;
        loop {
            let got: Vec<Option<Duration>> = {
                let changes = self.changes_since(since);
                roles
                    .iter()
                    .map(|r| {
                        changes
                            .iter()
                            .find(|c| &c.role == r && c.holder.as_deref().is_some_and(|h| h != old))
                            .map(|c| c.at.duration_since(since))
                    })
                    .collect()
            };
            if got.iter().all(Option::is_some) || Instant::now() >= end {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
