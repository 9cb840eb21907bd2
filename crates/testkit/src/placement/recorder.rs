//! The bucket as ground truth: a KV watcher on `role.>` and what it saw.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures_util::StreamExt;
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct Change {
    /// When the test's watcher saw it.
    pub at: Instant,
    pub role: String,
    /// `None`: a delete or expiry marker.
    pub holder: Option<String>,
    pub expired: bool,
}

#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<Change>>>);

impl Recorder {
    pub async fn start(url: &str, bucket: &str) -> (Recorder, tokio::task::JoinHandle<()>) {
        Recorder::start_on(crate::connect(url).await, bucket).await
    }

    /// [`Recorder::start`], then waits until the fleet started at `t0` converged: every one of
    /// `n_roles` roles held by a member of `live`, the spread at most 1, quiet for 1 s (at most
    /// 20 s; see [`converge`]).
    pub async fn start_converged(
        url: &str,
        bucket: &str,
        n_roles: usize,
        live: &[&str],
        t0: Instant,
    ) -> (Recorder, tokio::task::JoinHandle<()>) {
        let (rec, watch) = Recorder::start(url, bucket).await;
        let quiet = Duration::from_secs(1);
        converge(&rec, n_roles, live, t0, quiet, Duration::from_secs(20)).await;
        (rec, watch)
    }

    /// [`Recorder::start`] on a connected client (e.g. one with credentials).
    pub async fn start_on(
        client: async_nats::Client,
        bucket: &str,
    ) -> (Recorder, tokio::task::JoinHandle<()>) {
        let js = jetstream::new(client);
        let store = loop {
            // The first instance creates the bucket.
            if let Ok(s) = js.get_key_value(bucket).await {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let mut watch = store
            .watch_with_history("role.>")
            .await
            .expect("watch role keys");
        let rec = Recorder::default();
        let log = rec.0.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(e)) = watch.next().await {
                let at = Instant::now();
                let role = e.key.trim_start_matches("role.").to_owned();
                let (holder, expired) = match e.operation {
                    kv::Operation::Put => {
                        let v: serde_json::Value =
                            serde_json::from_slice(&e.value).unwrap_or_default();
                        (v["holder"].as_str().map(str::to_owned), false)
                    }
                    kv::Operation::Delete => (None, false),
                    kv::Operation::Purge => (None, true),
                };
                log.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(Change {
                        at,
                        role,
                        holder,
                        expired,
                    });
            }
        });
        (rec, task)
    }

    pub fn changes(&self) -> Vec<Change> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Holder of every role at the end of the log (`None`: vacant).
    pub fn holders(&self) -> BTreeMap<String, Option<String>> {
        let mut h = BTreeMap::new();
        for c in self.changes() {
            h.insert(c.role, c.holder);
        }
        h
    }

    /// Ownership changes since `since`: puts whose holder differs from the role's last holder,
    /// and markers.
    pub fn moves_since(&self, since: Instant) -> Vec<Change> {
        let mut last: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut out = Vec::new();
        for c in self.changes() {
            let prev = last.insert(c.role.clone(), c.holder.clone());
            if c.at < since {
                continue;
            }
            let owner_changed = match (&c.holder, prev.as_ref().and_then(Option::as_ref)) {
                (Some(h), Some(p)) => h != p,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if owner_changed {
                out.push(c);
            }
        }
        out
    }

    /// Any change of ownership at all (new holder, delete, expiry) since `since`.
    pub fn churn_since(&self, since: Instant) -> usize {
        let mut last: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut n = 0;
        for c in self.changes() {
            let prev = last.insert(c.role.clone(), c.holder.clone());
            if c.at >= since && prev.as_ref() != Some(&c.holder) {
                n += 1;
            }
        }
        n
    }

    /// Vacancies since `since`: (marker was an expiry, time until the next put).
    pub fn gaps_since(&self, since: Instant) -> Vec<(String, bool, Duration)> {
        let mut open: BTreeMap<String, (Instant, bool)> = BTreeMap::new();
        let mut out = Vec::new();
        for c in self.changes() {
            if c.at < since {
                continue;
            }
            match &c.holder {
                None => {
                    open.insert(c.role.clone(), (c.at, c.expired));
                }
                Some(_) => {
                    if let Some((at, expired)) = open.remove(&c.role) {
                        out.push((c.role.clone(), expired, c.at - at));
                    }
                }
            }
        }
        for (role, (at, expired)) in open {
            out.push((role, expired, Instant::now() - at));
        }
        out
    }
}

/// Roles per live instance; panics on a role held by someone not in `live` or vacant.
pub fn loads(
    holders: &BTreeMap<String, Option<String>>,
    live: &[&str],
) -> Option<BTreeMap<String, usize>> {
    let mut per: BTreeMap<String, usize> = live.iter().map(|i| ((*i).to_owned(), 0)).collect();
    for h in holders.values() {
        let h = h.as_ref()?;
        *per.get_mut(h)? += 1;
    }
    Some(per)
}

pub fn spread(l: &BTreeMap<String, usize>) -> usize {
    l.values().max().copied().unwrap_or(0) - l.values().min().copied().unwrap_or(0)
}

/// Waits until every one of `n_roles` roles is held by a member of `live`, the spread is
/// at most 1 and nothing changed for `quiet`. Returns the time of the last ownership change
/// (convergence), or panics after `timeout`.
pub async fn converge(
    rec: &Recorder,
    n_roles: usize,
    live: &[&str],
    since: Instant,
    quiet: Duration,
    timeout: Duration,
) -> Instant {
    let deadline = Instant::now() + timeout;
    loop {
        let holders = rec.holders();
        // Ownership changes only (renewals are puts by the same holder).
        let moved = rec.moves_since(since).iter().map(|c| c.at).max();
        let vacated = rec
            .changes()
            .iter()
            .filter(|c| c.at >= since && c.holder.is_none())
            .map(|c| c.at)
            .max();
        let last = moved.max(vacated).unwrap_or(since);
        let ok = holders.len() == n_roles && loads(&holders, live).is_some_and(|l| spread(&l) <= 1);
        if ok && last.elapsed() >= quiet {
            return last;
        }
        assert!(
            Instant::now() < deadline,
            "no convergence within {timeout:?} on {live:?}: loads {:?}",
            loads(&holders, live).map_or_else(
                || format!("(not all held by live: {holders:?})"),
                |l| format!("{l:?}")
            )
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn counts(holders: &BTreeMap<String, Option<String>>) -> BTreeMap<String, usize> {
    let mut c = BTreeMap::new();
    for h in holders.values().flatten() {
        *c.entry(h.clone()).or_default() += 1;
    }
    c
}

/// Fewest moves to reach spread <= 1 on `live` from `before` (roles of instances not in
/// `live` must all move).
pub fn minimum_moves(before: &BTreeMap<String, Option<String>>, live: &[&str]) -> usize {
    let c = counts(before);
    let total = before.len();
    let (q, extra) = (total / live.len(), total % live.len());
    let mut held: Vec<usize> = live
        .iter()
        .map(|i| c.get(*i).copied().unwrap_or(0))
        .collect();
    held.sort_unstable_by(|a, b| b.cmp(a));
    let over: usize = held
        .iter()
        .enumerate()
        .map(|(i, h)| h.saturating_sub(q + usize::from(i < extra)))
        .sum();
    let orphans = before
        .values()
        .filter(|h| h.as_ref().is_none_or(|h| !live.contains(&h.as_str())))
        .count();
    over + orphans
}
