//! Sites on loopback: a hub server holding the bucket (JetStream domain `hub`) and two leaf
//! node servers, one with a JetStream domain of its own (`site-a`) and one without JetStream
//! (`site-b`). Each leaf connects to the hub through a [`Proxy`], so a test can cut the link
//! (stall), add a WAN round trip (delay) or reset it while the leaf's own clients stay
//! connected to the leaf.

use std::net::SocketAddr;
use std::time::Duration;

use crate::proxy::Proxy;
use crate::server::{JetStream, NatsServer};

/// The JetStream domain of the hub (instances set `bucket.domain: hub`).
pub const HUB_DOMAIN: &str = "hub";

/// A hub and two leaf sites.
pub struct Sites {
    /// The hub: JetStream domain [`HUB_DOMAIN`], the bucket lives here.
    pub hub: NatsServer,
    /// Site A's leaf node: JetStream domain `site-a` of its own.
    pub site_a: NatsServer,
    /// Site B's leaf node: no JetStream.
    pub site_b: NatsServer,
    /// Site A's link to the hub.
    pub link_a: Proxy,
    /// Site B's link to the hub.
    pub link_b: Proxy,
}

impl Sites {
    /// Starts the hub, the two links and the two leaves, and waits until both leaf
    /// connections are up (panics after 15 s).
    pub async fn start() -> Sites {
        let leaf_port = crate::free_port();
        let hub = NatsServer::start_named(
            "hub",
            JetStream::Domain(HUB_DOMAIN.to_owned()),
            &format!("leafnodes {{\n  listen: \"127.0.0.1:{leaf_port}\"\n}}"),
        )
        .await;
        let upstream: SocketAddr = ([127, 0, 0, 1], leaf_port).into();
        let link_a = Proxy::start(upstream).await;
        let link_b = Proxy::start(upstream).await;
        let remote = |link: &Proxy| {
            format!(
                "leafnodes {{\n  reconnect: 1\n  remotes: [ {{ url: \"nats-leaf://{}\" }} ]\n}}",
                link.addr()
            )
        };
        let site_a = NatsServer::start_named(
            "site-a",
            JetStream::Domain("site-a".to_owned()),
            &remote(&link_a),
        )
        .await;
        let site_b = NatsServer::start_named("site-b", JetStream::Off, &remote(&link_b)).await;
        let sites = Sites {
            hub,
            site_a,
            site_b,
            link_a,
            link_b,
        };
        sites.wait_leaves(2, Duration::from_secs(15)).await;
        sites
    }

    /// Waits until the hub has `n` leaf node connections.
    pub async fn wait_leaves(&self, n: usize, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let leafz = self.hub.monitor_json("/leafz").await;
            let count = leafz["leafnodes"].as_u64().unwrap_or(0);
            if count == n as u64 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the hub has {count} leaf connections, not {n}, after {limit:?}: {leafz}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
