//! Smoke tests for the test kit (`crates/testkit`): real nats-server processes, a KV bucket
//! with limit markers, restarts, pause/resume, an auth config and a 3-node cluster.

use std::time::{Duration, Instant};

use async_nats::Event;
use async_nats::jetstream::{self, kv};
use testkit::{
    NatsCluster, NatsServer, connect, connect_with, connect_with_events, create_kv, wait_event,
};

fn lease_bucket(name: &str, replicas: usize) -> kv::Config {
    kv::Config {
        bucket: name.to_owned(),
        history: 1,
        limit_markers: Some(Duration::from_secs(1)),
        num_replicas: replicas,
        ..Default::default()
    }
}

async fn get_string(store: &kv::Store, key: &str) -> Option<String> {
    store
        .get(key)
        .await
        .unwrap_or_else(|e| panic!("get {key}: {e}"))
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}

#[tokio::test]
async fn single_server_kv_survives_restart_and_client_reconnects() {
    let mut server = NatsServer::start().await;
    assert!(server.url().starts_with("nats://127.0.0.1:"));
    let pid_before = server.pid().expect("server running");
    let port_before = server.port();

    let (client, mut events) = connect_with_events(&server.url()).await;
    wait_event(&mut events, Duration::from_secs(5), |e| {
        matches!(e, Event::Connected)
    })
    .await;
    let js = jetstream::new(client);
    let store = create_kv(&js, lease_bucket("smoke", 1)).await;
    store.put("k", "v1".into()).await.expect("put");
    assert_eq!(get_string(&store, "k").await.as_deref(), Some("v1"));

    // Limit markers are on: the stream allows per-message TTLs.
    let info = js
        .get_stream("KV_smoke")
        .await
        .expect("stream")
        .cached_info()
        .clone();
    assert!(
        info.config.allow_message_ttl,
        "limit_markers should allow per-message TTLs"
    );

    let started = Instant::now();
    server.restart().await;
    let restart_took = started.elapsed();
    assert_eq!(server.port(), port_before, "restart keeps the client port");
    assert_ne!(server.pid(), Some(pid_before), "restart runs a new process");

    wait_event(&mut events, Duration::from_secs(5), |e| {
        matches!(e, Event::Disconnected)
    })
    .await;
    wait_event(&mut events, Duration::from_secs(5), |e| {
        matches!(e, Event::Connected)
    })
    .await;
    let reconnected = started.elapsed();
    eprintln!("restart ready after {restart_took:?}, client reconnected after {reconnected:?}");

    assert_eq!(
        get_string(&store, "k").await.as_deref(),
        Some("v1"),
        "key survives restart"
    );
    store
        .put("k", "v2".into())
        .await
        .expect("put after restart");
    assert_eq!(get_string(&store, "k").await.as_deref(), Some("v2"));

    let jsz = server.monitor_json("/jsz").await;
    assert_eq!(jsz["streams"], 1, "jsz: {jsz}");
}

#[tokio::test]
async fn pause_blocks_requests_until_resume() {
    let mut server = NatsServer::start().await;
    let client = connect(&server.url()).await;
    let store = jetstream::new(client)
        .create_key_value(lease_bucket("paused", 1))
        .await
        .expect("create bucket");
    store.put("k", "v".into()).await.expect("put");

    server.pause();
    assert!(server.is_paused());
    let stalled = tokio::time::timeout(Duration::from_millis(500), store.get("k")).await;
    assert!(stalled.is_err(), "a paused server answers nothing");
    server.resume();
    assert_eq!(get_string(&store, "k").await.as_deref(), Some("v"));

    server.kill();
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
}

#[tokio::test]
async fn extra_config_enables_authorization() {
    let server = NatsServer::start_with_config(
        r#"authorization {
  users = [
    { user: alice, password: secret }
  ]
}"#,
    )
    .await;
    let opts =
        || async_nats::ConnectOptions::with_user_and_password("alice".into(), "secret".into());
    let client = connect_with(&server.url(), opts).await;
    let store = jetstream::new(client)
        .create_key_value(lease_bucket("authz", 1))
        .await
        .expect("create bucket as alice");
    store.put("k", "v".into()).await.expect("put");

    // Without credentials the server rejects the connection.
    let anonymous = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(1))
        .connect(server.url())
        .await;
    assert!(anonymous.is_err(), "anonymous connect must fail");
}

#[tokio::test]
async fn cluster_r3_bucket_keeps_writing_with_a_node_down() {
    let started = Instant::now();
    let mut cluster = NatsCluster::start(3).await;
    eprintln!("3-node cluster ready after {:?}", started.elapsed());
    assert_eq!(cluster.len(), 3);
    assert_eq!(cluster.urls().len(), 3);
    assert_eq!(cluster.node(0).name(), "n1");

    let client = connect(&cluster.seed_urls()).await;
    let js = jetstream::new(client.clone());
    let store = create_kv(&js, lease_bucket("r3", 3)).await;
    store.put("k", "v1".into()).await.expect("put");
    assert_eq!(get_string(&store, "k").await.as_deref(), Some("v1"));

    let mut stream = js.get_stream("KV_r3").await.expect("stream");
    let info = stream.info().await.expect("stream info");
    assert_eq!(info.config.num_replicas, 3);
    let leader = info
        .cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .expect("R3 stream has a leader");
    let leader_idx = cluster.index_of(&leader).expect("leader is a cluster node");

    // Kill a follower of the stream that the client is not connected to: writes go on without
    // a failover. (Killing the client's own server loses a publish in flight: ack timeout.)
    let connected = client.server_info().server_name;
    let follower = (0..3)
        .find(|&i| i != leader_idx && cluster.node(i).name() != connected)
        .expect("a third node");
    cluster.kill(follower);
    store
        .put("k", "v2".into())
        .await
        .expect("put with one follower down");
    assert_eq!(get_string(&store, "k").await.as_deref(), Some("v2"));

    let started = Instant::now();
    cluster.restart(follower).await;
    eprintln!("node rejoined after {:?}", started.elapsed());
    store.put("k", "v3".into()).await.expect("put after rejoin");
}

#[tokio::test]
async fn cluster_survives_killing_the_stream_leader() {
    let mut cluster = NatsCluster::start(3).await;
    let client = connect(&cluster.seed_urls()).await;
    let js = jetstream::new(client);
    let store = create_kv(&js, lease_bucket("failover", 3)).await;
    store.put("k", "v1".into()).await.expect("put");

    let leader = js
        .get_stream("KV_failover")
        .await
        .expect("stream")
        .info()
        .await
        .expect("info")
        .cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .expect("stream leader");
    let idx = cluster.index_of(&leader).expect("leader index");
    cluster.kill(idx);
    let killed = Instant::now();

    // Writes fail until a new stream leader is elected: retry (bounded).
    let mut failures = 0;
    loop {
        match store.put("k", "v2".into()).await {
            Ok(_) => break,
            Err(e) => {
                failures += 1;
                assert!(
                    killed.elapsed() < Duration::from_secs(20),
                    "no write within 20 s after killing the stream leader: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    eprintln!(
        "write succeeded {:?} after killing stream leader {leader} ({failures} failed attempts)",
        killed.elapsed()
    );
    let meta = cluster.wait_ready().await;
    assert_ne!(meta, leader, "a killed node cannot be meta leader");
    assert_eq!(get_string(&store, "k").await.as_deref(), Some("v2"));
}
