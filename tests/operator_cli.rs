//! The operator side against real nats-server processes: eviction racing the holder's
//! renewals, and the NATS permission sets of docs/operations.md (each one tested with a server
//! configured with exactly that set).

mod support;

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use nats_roles::config::NatsConfig;
use nats_roles::inspect::{Expect, Inspector};
use nats_roles::value::LeaseValue;
use nats_roles::{InstanceId, RoleName};
use support::NatsServer;
use uuid::Uuid;

fn role(name: &str) -> RoleName {
    RoleName::new(name).expect("valid role name")
}

fn lease_bucket(name: &str) -> kv::Config {
    kv::Config {
        bucket: name.to_owned(),
        history: 1,
        limit_markers: Some(Duration::from_secs(60)),
        ..Default::default()
    }
}

/// A lease value of `holder`'s term `nonce` (`term`: `None` in the write that starts it).
fn lease(holder: &str, nonce: Uuid, term: Option<u64>) -> bytes::Bytes {
    LeaseValue {
        v: nats_roles::value::VALUE_VERSION,
        holder: InstanceId::new(holder).expect("valid id"),
        incarnation: Uuid::nil(),
        nonce,
        term,
        priority: 0,
        ttl_ms: 10_000,
        meta: Default::default(),
        acquired_at: None,
        renewed_at: None,
    }
    .to_bytes()
}

// ---------------------------------------------------------------------------------------------
// Eviction vs. renewals (issue 17, item 7)
// ---------------------------------------------------------------------------------------------

/// A live holder renews every heartbeat, so a renewal can land between the eviction's read
/// and its conditional delete. That renewal keeps the term: the eviction must go ahead (on
/// the new revision), not answer "changed while it was being evicted".
///
/// The holder here renews every ~2 ms (a real one every heartbeat, hundreds of ms), which
/// makes the race happen in most tries instead of once in ~40.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_goes_ahead_when_the_holder_renews_the_same_term_meanwhile() {
    const TRIES: usize = 40;
    let server = NatsServer::start().await;
    let admin = support::connect(&server.url()).await;
    let kv = support::create_kv(&jetstream::new(admin), lease_bucket("op-evict")).await;
    let config = NatsConfig {
        servers: vec![server.url()],
        ..NatsConfig::default()
    };
    let (client, errors) = nats_roles::connect(&config, "evict-test")
        .await
        .expect("connect");
    let inspector = Inspector::open(&client, "op-evict", &errors, Duration::from_secs(5))
        .await
        .expect("open the bucket");
    let r = role("busy");
    let mut renewals_during_evictions = 0;
    for i in 0..TRIES {
        // A new term, renewed until the eviction makes the next renewal fail.
        let nonce = Uuid::new_v4();
        let first = kv
            .create("role.busy", lease("holder", nonce, None))
            .await
            .expect("start a term");
        let renewer = tokio::spawn({
            let kv = kv.clone();
            async move {
                let mut revision = first;
                let mut renewals = 0u32;
                while let Ok(next) = kv
                    .update("role.busy", lease("holder", nonce, Some(first)), revision)
                    .await
                {
                    revision = next;
                    renewals += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                renewals
            }
        });
        let evicted = match inspector.evict(&r, Expect::any()).await {
            Ok(evicted) => evicted,
            Err(e) => {
                renewer.abort();
                panic!("try {i}: eviction failed with only same-term renewals going on: {e}");
            }
        };
        renewals_during_evictions += renewer.await.expect("renewer");
        assert_eq!(evicted.term, Some(first), "try {i}: {evicted:?}");
        assert_eq!(evicted.holder.as_deref(), Some("holder"), "try {i}");
        let after = kv.entry("role.busy").await.expect("read");
        assert!(
            after.is_some_and(|e| e.operation != kv::Operation::Put),
            "try {i}: the lease is still there"
        );
    }
    eprintln!("{TRIES} evictions, {renewals_during_evictions} renewals in flight meanwhile");
}
