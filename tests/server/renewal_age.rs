//! In protocol v2 a holder renews its session, not its role keys: the renewal age that
//! `RoleManager::holders`, the API, the dashboard and `nats-roles status` show must come from
//! the session (it stays below one heartbeat or so), not from the role key's write (which only
//! grows with the term).

use std::time::{Duration, SystemTime};

use nats_roles::config::NatsConfig;
use nats_roles::tooling::inspect::Inspector;
use nats_roles::{InstanceId, RoleManager};
use testkit::NatsServer;
use testkit::roles::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_renewal_age_follows_session_renewals() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let manager = RoleManager::builder(client, InstanceId::new("node-a").expect("valid"))
        .bucket("renewal-age")
        .auto_create(1)
        .role(spec(&role("alpha")))
        .start()
        .await
        .expect("manager starts");
    let handle = manager.role(&role("alpha")).expect("role");
    tokio::time::timeout(Duration::from_secs(5), handle.wait_leader())
        .await
        .expect("leader")
        .expect("running");
    // Three TTLs: the role key is as old as the term, the session is renewed every 250 ms.
    tokio::time::sleep(TTL * 3).await;
    let age = |at: Option<SystemTime>| {
        SystemTime::now()
            .duration_since(at.expect("a renewal time"))
            .unwrap_or_default()
    };
    let info = manager
        .holders()
        .into_iter()
        .find(|h| h.role == role("alpha"))
        .expect("alpha is held");
    let seen = age(info.renewed_at);
    assert!(
        seen < TTL,
        "the watcher's holder view was renewed {seen:?} ago"
    );
    let config = NatsConfig {
        servers: vec![server.url()],
        ..NatsConfig::default()
    };
    let (client, errors) = nats_roles::connect(&config, "renewal-age")
        .await
        .expect("connect");
    let inspector = Inspector::open(&client, "renewal-age", &errors, Duration::from_secs(5))
        .await
        .expect("open");
    let listed = inspector.holders().await.expect("holders");
    let read = age(listed.first().and_then(|h| h.renewed_at));
    assert!(read < TTL, "status shows a renewal {read:?} ago");
    manager
        .shutdown(Duration::from_secs(5))
        .await
        .expect("stops");
}
