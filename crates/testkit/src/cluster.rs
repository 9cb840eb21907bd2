//! A JetStream cluster of `nats-server` processes on loopback.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::http;
use crate::ports::free_ports;
use crate::server::{NatsServer, POLL_INTERVAL, StartError};

/// How long a cluster (or a node rejoining it) may take to become ready, including the
/// election of a JetStream meta leader (Raft election timeout is 4-9 s after a leader loss).
pub const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A JetStream cluster on 127.0.0.1: nodes `n1`..`nN`, cluster name `c`, each with its own
/// client, monitoring and cluster (route) port and store directory, and routes to all nodes.
///
/// Nodes are addressed by 0-based index: `node(0)` is `n1`.
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts `n` nodes (use 3) and waits until every node's `/healthz` is 200 and all agree
    /// on a JetStream meta leader (panics after 20 s with the log tails). Retries with new
    /// ports if a node fails to start (e.g. a picked port was taken meanwhile).
    pub async fn start(n: usize) -> NatsCluster {
        assert!(n >= 1, "a cluster needs at least one node");
        const ATTEMPTS: u32 = 3;
        let mut attempt = 1;
        loop {
            match Self::try_start(n).await {
                Ok(cluster) => return cluster,
                Err(StartError::Exited(msg)) if attempt < ATTEMPTS => {
                    eprintln!(
                        "testkit: cluster start attempt {attempt} failed, retrying with new ports:\n{msg}"
                    );
                    attempt += 1;
                }
                Err(e) => panic!("cluster of {n} did not start: {}", e.message()),
            }
        }
    }

    async fn try_start(n: usize) -> Result<NatsCluster, StartError> {
        let ports = free_ports(3 * n);
        let (client, rest) = ports.split_at(n);
        let (monitor, route) = rest.split_at(n);
        let routes = route
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let name = format!("n{}", i + 1);
            let dir = tempfile::Builder::new()
                .prefix(&format!("nats-roles-test-{name}-"))
                .tempdir()
                .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
            let cluster_block = format!(
                "cluster {{\n  name: c\n  listen: \"127.0.0.1:{}\"\n  routes: [{routes}]\n}}",
                route[i]
            );
            nodes.push(NatsServer::new(
                &name,
                dir,
                client[i],
                monitor[i],
                Some(cluster_block),
                "",
                CLUSTER_READY_TIMEOUT,
            ));
        }
        let mut cluster = NatsCluster { nodes };
        for node in &mut cluster.nodes {
            node.spawn()?;
        }
        cluster.wait_ready_inner(CLUSTER_READY_TIMEOUT).await?;
        Ok(cluster)
    }

    /// Whether the cluster has no nodes (never true for a started cluster).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Client URLs of all nodes, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(NatsServer::url).collect()
    }

    /// All client URLs comma-separated, for [`connect`] (the client fails over between them).
    pub fn seed_urls(&self) -> String {
        self.urls().join(",")
    }

    /// Client URL of node `i` (0-based).
    pub fn url(&self, i: usize) -> String {
        self.node(i).url()
    }

    /// Node `i` (0-based; `node(0)` is `n1`).
    pub fn node(&self, i: usize) -> &NatsServer {
        self.nodes
            .get(i)
            .unwrap_or_else(|| panic!("no node {i}: the cluster has {} nodes", self.nodes.len()))
    }

    /// Mutable access to node `i`, e.g. for [`NatsServer::terminate`].
    pub fn node_mut(&mut self, i: usize) -> &mut NatsServer {
        let len = self.nodes.len();
        self.nodes
            .get_mut(i)
            .unwrap_or_else(|| panic!("no node {i}: the cluster has {len} nodes"))
    }

    /// 0-based index of the node with `server_name` `name` (as reported by `/jsz` or stream
    /// info `cluster.leader`).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// SIGKILLs node `i` and reaps it.
    pub fn kill(&mut self, i: usize) {
        self.node_mut(i).kill();
    }

    /// Restarts node `i` with the same ports and store and waits until its `/healthz` is 200,
    /// which in a cluster means it is current with the meta leader (needs a quorum of running
    /// nodes), then until all running nodes agree on a live meta leader.
    pub async fn restart(&mut self, i: usize) {
        self.node_mut(i).restart().await;
        self.wait_ready().await;
    }

    /// Cold restart of the whole cluster: SIGKILLs every node still running, starts all of them
    /// together with their stores, and waits as in [`start`](Self::start) (a meta leader
    /// election takes ~6 s here).
    pub async fn restart_all(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        for node in &mut self.nodes {
            if let Err(e) = node.spawn() {
                panic!("restart_all: {}", e.message());
            }
        }
        self.wait_ready().await;
    }

    /// Starts the (killed) nodes `which` again together, with their ports and stores, without
    /// waiting for them: when they are a majority (quorum loss) no single one becomes ready
    /// before its peers are back. Wait with [`wait_ready`](Self::wait_ready) or for what the
    /// test needs (a stream leader).
    pub fn spawn_together(&mut self, which: &[usize]) {
        for &i in which {
            let node = &mut self.nodes[i];
            node.kill();
            if let Err(e) = node.spawn() {
                panic!("spawn_together: {}", e.message());
            }
        }
    }

    /// SIGSTOPs node `i`.
    pub fn pause(&mut self, i: usize) {
        self.node_mut(i).pause();
    }

    /// SIGCONTs node `i`.
    pub fn resume(&mut self, i: usize) {
        self.node_mut(i).resume();
    }

    /// Waits (up to 20 s, else panics with log tails) until every running, unpaused node
    /// answers `/healthz` 200 and all of them report the same JetStream meta leader
    /// (`/jsz` → `meta_cluster.leader`), which must itself be a running, unpaused node.
    /// Returns the leader's server name.
    ///
    /// The leader must be checked against the live nodes: after the leader is killed, the
    /// others keep reporting it in `/jsz` (and `/healthz` stays 200) for about a second, and
    /// go on reporting it until a new leader is elected (~4-5 s).
    pub async fn wait_ready(&mut self) -> String {
        match self.wait_ready_inner(CLUSTER_READY_TIMEOUT).await {
            Ok(leader) => leader,
            Err(e) => panic!("cluster not ready: {}", e.message()),
        }
    }

    async fn wait_ready_inner(&mut self, timeout: Duration) -> Result<String, StartError> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.check_ready().await {
                Ok(leader) => return Ok(leader),
                Err(StartError::Exited(m)) => return Err(StartError::Exited(m)),
                Err(StartError::Timeout(m)) => m,
            };
            if Instant::now() >= deadline {
                let mut msg = format!("not ready within {timeout:?} (last: {last})");
                for node in &self.nodes {
                    let _ = write!(msg, "\n{}", node.failure("log"));
                }
                return Err(StartError::Timeout(msg));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// One readiness probe: `Ok(leader)`, `Err(Timeout(reason))` for "not yet", or
    /// `Err(Exited)` if a node died.
    async fn check_ready(&mut self) -> Result<String, StartError> {
        for node in &mut self.nodes {
            if node.is_running() {
                node.check_alive()?;
            }
        }
        let live: Vec<&NatsServer> = self
            .nodes
            .iter()
            .filter(|n| n.is_running() && !n.is_paused())
            .collect();
        if live.is_empty() {
            return Err(StartError::Exited("no running, unpaused node".into()));
        }
        let mut leader: Option<String> = None;
        for node in &live {
            match http::get(node.monitor_port, "/healthz").await {
                Ok((200, _)) => {}
                Ok((status, body)) => {
                    return Err(StartError::Timeout(format!(
                        "{} /healthz {status}: {}",
                        node.name,
                        body.trim()
                    )));
                }
                Err(e) => return Err(StartError::Timeout(format!("{} /healthz: {e}", node.name))),
            }
            let jsz = match http::get(node.monitor_port, "/jsz").await {
                Ok((200, body)) => {
                    serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default()
                }
                Ok((status, _)) => {
                    return Err(StartError::Timeout(format!("{} /jsz {status}", node.name)));
                }
                Err(e) => return Err(StartError::Timeout(format!("{} /jsz: {e}", node.name))),
            };
            let Some(this) = jsz["meta_cluster"]["leader"]
                .as_str()
                .filter(|l| !l.is_empty())
            else {
                return Err(StartError::Timeout(format!(
                    "{} knows no meta leader",
                    node.name
                )));
            };
            if !live.iter().any(|n| n.name == this) {
                return Err(StartError::Timeout(format!(
                    "{} reports meta leader {this}, which is not running",
                    node.name
                )));
            }
            match &leader {
                None => leader = Some(this.to_owned()),
                Some(l) if l == this => {}
                Some(l) => {
                    return Err(StartError::Timeout(format!(
                        "nodes disagree on the meta leader ({l} vs {this} at {})",
                        node.name
                    )));
                }
            }
        }
        leader.ok_or_else(|| StartError::Timeout("no meta leader".into()))
    }
}
