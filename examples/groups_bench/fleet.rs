//! The bench's fleet: `nats-roles run` processes (the test kit's `Deployment`) with one
//! configuration holding the group, restarted under the same instance id; the bench's
//! observer of the bucket; waits for an even spread; `nats-roles scale`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use testkit::instances::{Deployment, START_TIMEOUT};
use testkit::process::{SIGKILL, signal};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::measure::{self, GROUP};
use crate::observe::Observer;

/// How long no holder may change before a spread counts as settled.
pub const QUIET: Duration = Duration::from_secs(5);

/// The configuration: placement on with its defaults, the group [`GROUP`] with `count`
/// members (none: no group), TTL `ttl` (heartbeat a quarter of it).
pub fn config_yaml(bucket: &str, ttl: Duration, count: Option<usize>) -> String {
    let mut yaml = format!(
        "bucket:\n  name: {bucket}\n  replicas: 1\n  auto_create: true\n\
         timing:\n  ttl: {}ms\n  heartbeat: {}ms\n\
         placement:\n  enabled: true\n",
        ttl.as_millis(),
        ttl.as_millis() / 4
    );
    if let Some(count) = count {
        yaml.push_str(&format!("groups:\n  - name: {GROUP}\n    count: {count}\n"));
    }
    yaml
}

/// The processes, the observer and who is live.
pub struct Fleet {
    pub dep: Deployment,
    pub observer: Observer,
    /// Instance ids running now, in start order.
    pub live: Vec<String>,
    url: String,
}

impl Fleet {
    /// Writes the configuration, starts the observer and `ids` together (each spawned, then
    /// all waited for); returns the fleet and when the first process was spawned. Unless
    /// `fresh`, an instance without the group (`seed`) creates the bucket first and stops,
    /// and the start waits until the bucket is older than the young-bucket hold (TTL + a
    /// heartbeat, protocol Q6), as a fleet restarted on its bucket finds it.
    pub async fn start(
        url: &str,
        bucket: &str,
        ttl: Duration,
        count: usize,
        ids: &[String],
        fresh: bool,
    ) -> (Fleet, Instant) {
        let mut dep = Deployment::new(url, bucket, &[], "");
        if !fresh {
            std::fs::write(&dep.config, config_yaml(bucket, ttl, None))
                .unwrap_or_else(|e| panic!("write config: {e}"));
            let created = Instant::now();
            let seed = dep.start("seed").await;
            dep.terminate(seed);
            dep.wait_exit(seed, Duration::from_secs(30)).await;
            let hold = ttl + ttl / 4 + Duration::from_millis(500);
            tokio::time::sleep_until((created + hold).into()).await;
        }
        std::fs::write(&dep.config, config_yaml(bucket, ttl, Some(count)))
            .unwrap_or_else(|e| panic!("write config: {e}"));
        let client = testkit::connect(url).await;
        let observing = tokio::spawn({
            let bucket = bucket.to_owned();
            async move { Observer::start(&client, &bucket).await }
        });
        let t0 = Instant::now();
        let first = dep.instances.len();
        for id in ids {
            dep.spawn(id).await;
        }
        for inst in &dep.instances[first..] {
            if let Err(e) = testkit::instances::wait_started(inst.port, START_TIMEOUT * 3).await {
                panic!("{}: {e}\n{}", inst.id, dep.report());
            }
        }
        let observer = observing
            .await
            .unwrap_or_else(|e| panic!("observer task: {e}"));
        let fleet = Fleet {
            dep,
            observer,
            live: ids.to_vec(),
            url: url.to_owned(),
        };
        (fleet, t0)
    }

    /// The index in the deployment of the running process of `id`.
    fn index(&self, id: &str) -> usize {
        self.dep
            .instances
            .iter()
            .rposition(|i| i.id == id)
            .unwrap_or_else(|| panic!("no process {id}"))
    }

    /// Starts `id` (again), waits until its manager has started.
    pub async fn start_one(&mut self, id: &str) {
        self.dep.start(id).await;
        if !self.live.iter().any(|l| l == id) {
            self.live.push(id.to_owned());
        }
    }

    /// SIGKILL to `id` (the time of the signal), then reaps it.
    pub async fn kill(&mut self, id: &str) -> Instant {
        let i = self.index(id);
        let t = Instant::now();
        signal(self.dep.instances[i].pid(), SIGKILL);
        self.dep.wait_exit(i, Duration::from_secs(10)).await;
        self.live.retain(|l| l != id);
        t
    }

    /// SIGTERM to `id` (the time of the signal); its exit is awaited by [`Fleet::reap`].
    pub fn terminate(&mut self, id: &str) -> Instant {
        let i = self.index(id);
        let t = Instant::now();
        self.dep.terminate(i);
        self.live.retain(|l| l != id);
        t
    }

    /// Waits for the terminated `id` to exit; panics unless it exits cleanly.
    pub async fn reap(&mut self, id: &str) {
        let i = self.index(id);
        let status = self.dep.wait_exit(i, Duration::from_secs(30)).await;
        assert!(status.success(), "{id} exited with {status}");
    }

    /// Members below `count` held by each live instance.
    pub fn counts(&self, count: usize) -> BTreeMap<String, usize> {
        measure::counts(&self.observer.holders(), &self.live, count)
    }

    /// The busiest live instance and the members it holds.
    pub fn busiest(&self) -> (String, Vec<String>) {
        let holders = self.observer.holders();
        let per = self.counts(usize::MAX);
        let (id, _) = per
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .unwrap_or_else(|| panic!("no live instance"));
        let roles = holders
            .iter()
            .filter(|(_, h)| *h == id)
            .map(|(r, _)| r.clone())
            .collect();
        (id.clone(), roles)
    }

    /// Waits (at most `limit`) until [`measure::balanced`] holds for the live instances and
    /// `count` members and no holder changed for [`QUIET`]; returns the time of the last
    /// holder change after `since` (or `since` when none), `None` after `limit`.
    pub async fn settle(&self, count: usize, since: Instant, limit: Duration) -> Option<Instant> {
        let end = Instant::now() + limit;
        loop {
            let holders = self.observer.holders();
            let last = self.observer.changes_since(since).last().map(|c| c.at);
            let quiet = last.is_none_or(|t| t.elapsed() >= QUIET);
            if quiet && measure::balanced(&holders, &self.live, count) {
                return Some(last.unwrap_or(since));
            }
            if Instant::now() >= end {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// For each live instance, how long after `since` (wall clock) its log says the group's
    /// count changed to `to` (the group task acting on the count record); `None`: not logged.
    pub fn acted(&self, since: OffsetDateTime, to: usize) -> Vec<Option<Duration>> {
        let needle = format!("to={to}");
        self.live
            .iter()
            .map(|id| {
                let stderr = self.dep.instances[self.index(id)].stderr();
                stderr
                    .lines()
                    .filter(|l| l.contains("group count changed") && l.contains(&needle))
                    .filter_map(|l| l.split_whitespace().next())
                    .filter_map(|ts| OffsetDateTime::parse(ts, &Rfc3339).ok())
                    .find(|ts| *ts >= since)
                    .map(|ts| (ts - since).unsigned_abs())
            })
            .collect()
    }

    /// Runs `nats-roles scale shard COUNT --wait`; returns how long it ran and its output line.
    pub async fn scale(&self, count: usize, timeout: Duration) -> (Duration, String) {
        let n = count.to_string();
        let limit = format!("{}s", timeout.as_secs());
        let out = testkit::cli::run(
            &[
                "scale",
                GROUP,
                &n,
                "--wait",
                "--timeout",
                &limit,
                "--server",
                &self.url,
                "--bucket",
                &self.dep.bucket,
            ],
            &[],
            timeout + Duration::from_secs(30),
        )
        .await;
        let line = if out.code == Some(0) {
            out.stdout.trim().to_owned()
        } else {
            format!("FAILED: {}", out.text().replace('\n', " "))
        };
        (out.took, line)
    }
}
