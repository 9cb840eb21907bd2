//! The system under test: servers, the fault proxies and the workload nodes, as one trial
//! sees them.

use super::*;

pub(super) struct System {
    pub(super) server: Option<NatsServer>,
    pub(super) cluster: Option<NatsCluster>,
    pub(super) kv: kv::Store,
    pub(super) js: jetstream::Context,
    /// Per node id: its proxy (single-server trials).
    pub(super) proxies: BTreeMap<String, Proxy>,
    pub(super) nodes: Vec<Node>,
    pub(super) log: HarnessLog,
    pub(super) roles: Vec<String>,
    pub(super) ttl_ms: u64,
    /// Seeded rotation of the negative-control schedule (every fault type once per 3 rounds).
    pub(super) rotation: usize,
}

impl System {
    pub(super) fn node_index(&self, id: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.id() == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// The holder of `role` as the harness reads it (recorded as `observe`).
    pub(super) async fn holder(&self, role: &str) -> Option<String> {
        let key = format!("role.{role}");
        let entry = tokio::time::timeout(Duration::from_secs(2), self.kv.entry(key))
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
        holder
    }

    /// Waits until every role has a holder that is a running, unpaused node (bounded; the
    /// checker judges liveness, this only paces the schedule). Returns whether it happened.
    pub(super) async fn wait_all_held(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let mut all = true;
            for role in &self.roles {
                let live = match self.holder(role).await {
                    Some(h) => self
                        .nodes
                        .iter()
                        .any(|n| n.id() == h && n.is_running() && !n.is_paused()),
                    None => false,
                };
                all &= live;
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

    /// The running node holding a random role (falls back to a random running node).
    pub(super) async fn holder_target(&self, rng: &mut StdRng) -> usize {
        let role = &self.roles[rng.random_range(0..self.roles.len())];
        if let Some(h) = self.holder(role).await
            && let Some(i) = self
                .nodes
                .iter()
                .position(|n| n.id() == h && n.is_running())
        {
            return i;
        }
        let running: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_running())
            .collect();
        running[rng.random_range(0..running.len())]
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
