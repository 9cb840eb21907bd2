//! The system under test: servers, the fault proxies and the workload nodes, as one trial
//! sees them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use nats_roles::tooling::history::Phase;
use rand::Rng;
use rand::rngs::StdRng;
use tokio::time::Instant;

use testkit::faults::{HarnessLog, Node};
use testkit::process::{fd_count, rss_kib};
use testkit::proxy::Proxy;
use testkit::{NatsCluster, NatsServer};

use super::{BUCKET, Kind, RoundNote, ms};

/// The users of the protocol set-up's server, and how to revoke a node's permission.
pub(super) struct Auth {
    /// Node ids (each connects as the user of its id, password `p`).
    pub(super) nodes: Vec<String>,
}

impl Auth {
    /// The `authorization` block: `admin` (the harness) and one user per node, every user
    /// allowed everything except, for `denied` = `(node, subject)`, that node's publishes to
    /// `subject`.
    pub(super) fn config(&self, denied: Option<(&str, &str)>) -> String {
        let mut users = String::from("    { user: admin, password: a }\n");
        for id in &self.nodes {
            let deny = match denied {
                Some((node, subject)) if node == id => format!(", deny: [\"{subject}\"]"),
                _ => String::new(),
            };
            users += &format!(
                "    {{ user: {id}, password: p, permissions: {{ publish: {{ allow: [\">\"]{deny} }}, subscribe: {{ allow: [\">\"] }} }} }}\n"
            );
        }
        format!("authorization {{\n  users = [\n{users}  ]\n}}\n")
    }
}

pub(super) struct System {
    pub(super) kind: Kind,
    pub(super) server: Option<NatsServer>,
    pub(super) cluster: Option<NatsCluster>,
    pub(super) kv: kv::Store,
    pub(super) js: jetstream::Context,
    /// The bucket's configuration (a recreation uses it again).
    pub(super) bucket: kv::Config,
    /// Per node id: its proxy (single-server trials).
    pub(super) proxies: BTreeMap<String, Proxy>,
    pub(super) nodes: Vec<Node>,
    pub(super) log: HarnessLog,
    /// Every role of the trial (shared ones first, then private ones).
    pub(super) roles: Vec<String>,
    /// The roles every node campaigns for.
    pub(super) shared: usize,
    pub(super) ttl_ms: u64,
    /// Seeded rotation of the negative-control schedule (every fault type once per 3 rounds).
    pub(super) rotation: usize,
    /// The protocol set-up's users (`None` elsewhere).
    pub(super) auth: Option<Auth>,
    /// The protocol set-up's spare node (started by a bucket recreation), by index.
    pub(super) spare: Option<usize>,
    /// Nodes told to stop that may not have exited yet: neither candidates nor holders.
    pub(super) leaving: BTreeSet<usize>,
    /// The fault spans the checker will make of the faults logged so far (`Report::faults`:
    /// one per start, and one per end that closes nothing), as (target, still open): the
    /// index of the next one is `spans.len()`.
    pub(super) spans: Vec<(String, bool)>,
    /// The current round's note.
    pub(super) note: RoundNote,
    /// Per issue-24 round: the fault and how long after its end every role was held again.
    pub(super) reheld: Vec<(String, Option<Duration>)>,
    /// Problems the harness saw.
    pub(super) problems: Vec<String>,
}

impl System {
    /// Server name of the stream leader of the bucket's stream (`KV_chaos`), retried while the
    /// cluster has none (bounded).
    pub(super) async fn stream_leader(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut stream) = self.js.get_stream(format!("KV_{BUCKET}")).await
                && let Ok(info) = stream.info().await
                && let Some(leader) = info.cluster.as_ref().and_then(|c| c.leader.clone())
                && !leader.is_empty()
            {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no stream leader of KV_{BUCKET} within 20 s"
            );
            tokio::time::sleep(ms(100)).await;
        }
    }

    pub(super) fn node_index(&self, id: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.id() == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// Records a fault in the harness history.
    pub(super) fn fault(&mut self, what: &str, target: &str, phase: Phase) {
        self.log.fault(what, target, phase);
        // As the checker pairs them (`check::fault_spans`): an end closes the latest open
        // fault on its target (any, for a `heal`), else it is a span of its own.
        let open = match phase {
            Phase::Start => None,
            Phase::End => self
                .spans
                .iter_mut()
                .rev()
                .find(|(t, open)| *open && (t == target || what == "heal")),
        };
        match open {
            Some(span) => span.1 = false,
            None => self.spans.push((target.to_owned(), phase == Phase::Start)),
        }
    }

    /// Records the start of the round's primary fault: the one that must hit a holder (and,
    /// for most kinds, cost it its term: `verdict::must_fail_over`).
    pub(super) fn primary(&mut self, what: &str, target: &str) {
        self.note.primary = Some(self.spans.len());
        self.note.what = what.to_owned();
        target.clone_into(&mut self.note.target);
        self.fault(what, target, Phase::Start);
    }

    /// A problem the harness saw (fails a trial that must pass).
    pub(super) fn problem(&mut self, text: String) {
        eprintln!(
            "chaos: {} round {}: {text}",
            self.kind.name(),
            self.note.round
        );
        self.problems
            .push(format!("round {}: {text}", self.note.round));
    }

    /// The role value of `role` as the harness reads it: holder and revision (recorded as
    /// `observe`).
    pub(super) async fn read_role(&self, role: &str) -> (Option<String>, Option<u64>) {
        let key = format!("role.{role}");
        // A short timeout: a read stalled by a stream-leader change is retried by the callers'
        // polling instead of adding seconds to the times they measure.
        let entry = tokio::time::timeout(Duration::from_millis(500), self.kv.entry(key))
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        let (holder, revision) = match entry {
            Some(e) if e.operation == kv::Operation::Put => {
                let holder = serde_json::from_slice::<serde_json::Value>(&e.value)
                    .ok()
                    .and_then(|v| v["holder"].as_str().map(str::to_owned));
                (holder, Some(e.revision))
            }
            Some(e) => (None, Some(e.revision)),
            None => (None, None),
        };
        self.log.observe(role, holder.clone(), revision);
        (holder, revision)
    }

    /// Whether node `i` runs, is not paused and is not leaving.
    fn live_at(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        n.is_running() && !n.is_paused() && !self.leaving.contains(&i)
    }

    /// The running, unpaused node that holds `role`: the role value names it, and the term
    /// it last said it was promoted to (`promoted role=… term=…`, no `demoted` since) is the
    /// role value's revision. A value naming a node that does not hold it (a foreign write)
    /// is no holder.
    pub(super) async fn held_by(&self, role: &str) -> Option<String> {
        let (holder, revision) = self.read_role(role).await;
        let holder = holder?;
        let i = self.nodes.iter().position(|n| n.id() == holder)?;
        (self.live_at(i) && self.nodes[i].held_term(role) == revision).then_some(holder)
    }

    /// Whether some running, unpaused node campaigns for `role`.
    fn has_candidate(&self, role: &str) -> bool {
        (0..self.nodes.len())
            .any(|i| self.live_at(i) && self.nodes[i].cfg.roles.iter().any(|r| r == role))
    }

    /// Waits until every role that has a live candidate has a holder that is a running,
    /// unpaused node. Returns whether it happened within `timeout`.
    pub(super) async fn wait_all_held(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let mut all = true;
            for role in &self.roles {
                if !self.has_candidate(role) {
                    continue;
                }
                all &= self.held_by(role).await.is_some();
            }
            if all {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(ms(50)).await;
        }
    }

    /// [`wait_all_held`](Self::wait_all_held), noting a problem (`what` happened before) when
    /// it does not happen within `timeout`.
    pub(super) async fn expect_all_held(&mut self, timeout: Duration, what: &str) -> bool {
        let held = self.wait_all_held(timeout).await;
        if !held {
            let mut unheld = Vec::new();
            for role in &self.roles {
                if self.has_candidate(role) && self.held_by(role).await.is_none() {
                    let (h, rev) = self.read_role(role).await;
                    unheld.push(format!("{role} (value names {h:?} at revision {rev:?})"));
                }
            }
            self.problem(format!(
                "not every role had a live holder within {timeout:?} {what} (not held: {})",
                unheld.join(", ")
            ));
        }
        held
    }

    /// A running, unpaused node holding a random shared role, and that role; waits up to 10 s
    /// for one. `None` (noted as a problem: the round cannot aim its fault at a holder) when
    /// there is none.
    pub(super) async fn holder_target(&mut self, rng: &mut StdRng) -> Option<(usize, String)> {
        let first = rng.random_range(0..self.shared);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            for k in 0..self.shared {
                let role = self.roles[(first + k) % self.shared].clone();
                if let Some(h) = self.held_by(&role).await {
                    return Some((self.node_index(&h), role));
                }
            }
            if Instant::now() >= deadline {
                self.problem("no shared role had a running holder to aim the fault at".into());
                return None;
            }
            tokio::time::sleep(ms(50)).await;
        }
    }

    pub(super) fn proxy(&self, node: usize) -> &Proxy {
        let id = self.nodes[node].id();
        self.proxies
            .get(id)
            .unwrap_or_else(|| panic!("node {id} has no proxy"))
    }

    pub(super) async fn start_node(&mut self, i: usize) {
        self.nodes[i].spawn();
        self.nodes[i].wait_ready(Duration::from_secs(30)).await;
    }

    pub(super) fn ttl(&self) -> Duration {
        ms(self.ttl_ms)
    }

    /// Sleeps `factor` × TTL.
    pub(super) async fn ttls(&self, factor: f64) {
        tokio::time::sleep(self.ttl().mul_f64(factor)).await;
    }

    pub(super) fn sample_resources(&self, into: &mut BTreeMap<String, Vec<(u64, usize)>>) {
        for n in &self.nodes {
            if let Some(pid) = n.pid()
                && let (Some(rss), Some(fds)) = (rss_kib(pid), fd_count(pid))
            {
                into.entry(n.id().to_owned()).or_default().push((rss, fds));
            }
        }
    }
}
