//! A 3-node cluster with an R3 bucket.

use super::*;

// ---------------------------------------------------------------------------------------------
// 11. 3-node cluster, R3 bucket
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_r3_hand_over_and_node_loss() {
    let mut cluster = NatsCluster::start(3).await;
    let timing = Timing {
        ttl: Duration::from_secs(2),
        heartbeat: Duration::from_millis(500),
        deadline_margin: 0.1,
        operation_timeout: Duration::from_secs(1),
        disconnect_grace: Duration::from_secs(2),
        campaign_jitter: Duration::from_millis(1),
    };
    let rs = roles(5);
    let start = |client: async_nats::Client, id: &'static str| {
        let rs = rs.clone();
        async move {
            let mut builder = RoleManager::builder(client, inst(id))
                .bucket("p_cluster")
                .auto_create(3);
            for r in &rs {
                builder = builder.role(RoleSpec::new(r.clone()).timing(timing));
            }
            builder
                .start()
                .await
                .unwrap_or_else(|e| panic!("{id} start: {e}"))
        }
    };
    let client_a = connect(&cluster.url(0)).await;
    let client_b = connect(&cluster.url(1)).await;
    let a = start(client_a.clone(), "node-a").await;
    let b = start(client_b.clone(), "node-b").await;
    wait_until(
        Duration::from_secs(10),
        "exactly one leader per role",
        || rs.iter().all(|r| leaders(&[&a, &b], r) == 1),
    )
    .await;

    // Hand-over on shutdown.
    let started = Instant::now();
    shutdown(&[&a]).await;
    wait_until(Duration::from_secs(5), "B holds every role", || {
        rs.iter().all(|r| b.is_leader(r))
    })
    .await;
    eprintln!("R3 hand-over of all roles took {:?}", started.elapsed());
    drop(a);
    drop(client_a);

    // Kill a node that is neither the stream leader nor B's server: nothing may change.
    let info = jetstream::new(client_b.clone())
        .get_stream("KV_p_cluster")
        .await
        .expect("stream")
        .info()
        .await
        .expect("stream info")
        .clone();
    let stream_leader = info
        .cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .expect("stream leader");
    assert_eq!(
        info.config.num_replicas, 3,
        "auto_create(3) makes an R3 bucket"
    );
    let b_server = client_b.server_info().server_name;
    let victim = (0..3)
        .find(|&i| {
            let n = cluster.node(i).name();
            n != stream_leader && n != b_server
        })
        .expect("a third node");
    let terms: Vec<u64> = rs
        .iter()
        .map(|r| b.leadership(r).expect("held").term())
        .collect();
    let mut events = b.events();
    cluster.kill(victim);
    let watch_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < watch_until {
        for r in &rs {
            assert!(
                b.is_leader(r),
                "B lost {r} after a follower node was killed"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while let Ok(e) = events.try_recv() {
        assert!(
            !matches!(e, RoleEvent::Demoted { .. }),
            "demotion after killing a follower: {e:?}"
        );
    }
    for (r, t) in rs.iter().zip(&terms) {
        let l = b.leadership(r).expect("still held");
        assert_eq!(l.term(), *t, "{r}: same term");
        assert!(
            l.deadline() > Instant::now() + TTL / 2,
            "{r}: session renewals continued on the R3 bucket"
        );
    }
    shutdown(&[&b]).await;
}
