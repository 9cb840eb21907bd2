//! `nats-roles run` started while the server or cluster is not ready (issue 24, B11): it
//! serves `/healthz` and a `/readyz` that says why it is still starting, retries what can heal
//! (no stream leader yet, a server that does not answer) until it works, exits 0 on SIGTERM
//! while starting, and still exits 1 at once for what retrying cannot change (a missing bucket
//! without `auto_create`, refused credentials).
#![cfg(feature = "http")]

use std::time::{Duration, Instant};

use async_nats::jetstream;
use testkit::http;
use testkit::instances::Deployment;
use testkit::proxy::{Mode, Proxy};
use testkit::{NatsCluster, NatsServer, create_kv, eventually};

/// `GET path`: status and JSON body.
async fn get(port: u16, path: &str) -> (u16, serde_json::Value) {
    let (status, body) = http::get(port, path)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    (status, json)
}

/// Whether instance `i` printed `promoted role=<role> `.
fn promoted(d: &Deployment, i: usize, role: &str) -> bool {
    let prefix = format!("promoted role={role} ");
    d.instances[i]
        .stdout()
        .iter()
        .any(|l| l.starts_with(&prefix))
}

/// The stream leader of `stream` as its info reports it (`None` while it has none).
async fn stream_leader(js: &jetstream::Context, stream: &str) -> Option<String> {
    let mut stream = js.get_stream(stream).await.ok()?;
    let info = stream.info().await.ok()?;
    info.cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .filter(|l| !l.is_empty())
}

/// The item itself: on a 3-node cluster with an R3 bucket, the stream leader's server is
/// SIGKILLed and `run` is started at once, while the stream (and maybe the meta) leader is
/// being elected. Before the fix it exited 1 after `nats.request_timeout` (`failed to get the
/// bucket: … timed out`). Now it stays up, serves `/healthz` 200 and a 503 `/readyz` that says
/// what it is retrying, logs each retry, and once the two remaining nodes have elected a leader
/// it becomes ready and holds its roles; SIGTERM then exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_started_during_a_stream_leader_election_waits_for_the_leader_and_holds_its_roles() {
    const BUCKET: &str = "b11";
    let mut cluster = NatsCluster::start(3).await;
    let setup = testkit::connect(&cluster.seed_urls()).await;
    let js = jetstream::new(setup.clone());
    let mut config = testkit::roles::lease_bucket(BUCKET);
    config.num_replicas = 3;
    create_kv(&js, config).await;
    let leader = eventually(
        "the R3 stream has a leader",
        Duration::from_secs(10),
        || stream_leader(&js, "KV_b11"),
    )
    .await;
    let victim = cluster.index_of(&leader).expect("the leader is a node");
    drop(setup);

    // Every node's URL, the dead one first: the client tries it and moves on.
    let mut d = Deployment::new(&cluster.url(victim), BUCKET, &["alpha", "beta"], "");
    for n in (0..3).filter(|&n| n != victim) {
        d.arg("--server");
        d.arg(&cluster.url(n));
    }
    d.env("RUST_LOG", "info,async_nats=error");
    cluster.kill(victim);
    let killed = Instant::now();
    let i = d.spawn("node-a").await;
    let port = d.instances[i].port;

    // A client of the survivors notes when the stream has a leader again.
    let survivors: Vec<String> = (0..3)
        .filter(|&n| n != victim)
        .map(|n| cluster.url(n))
        .collect();
    let watcher = tokio::spawn(async move {
        let client = async_nats::ConnectOptions::new()
            .request_timeout(Some(Duration::from_millis(500)))
            .connect(survivors)
            .await
            .expect("connect to the surviving nodes");
        let js = jetstream::new(client);
        loop {
            if let Some(leader) = stream_leader(&js, "KV_b11").await {
                return (Instant::now(), leader);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });

    // While no leader answers: alive, 200 on /healthz, 503 `starting` everywhere else.
    let (status, health) = get(port, "/healthz").await;
    assert_eq!(status, 200, "{health}");
    let (status, roles) = get(port, "/api/roles").await;
    assert_eq!(
        (status, roles["code"].as_str()),
        (503, Some("starting")),
        "{roles}"
    );
    let mut reasons = Vec::new();
    let ready_at = loop {
        if let Some(status) = d.try_exit(i) {
            panic!(
                "run exited with {status} {:?} after the kill while the cluster elected a \
                 leader\n{}",
                killed.elapsed(),
                d.report()
            );
        }
        let (status, ready) = get(port, "/readyz").await;
        if status == 200 {
            break Instant::now();
        }
        if ready["starting"] == true {
            reasons.push(ready["error"].as_str().unwrap_or_default().to_owned());
        }
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "not ready 60 s after the kill: {ready}\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Which step waits depends on the cluster: the bucket lookup times out until the
    // followers notice that the leader is gone (then they answer stream info themselves), the
    // reads of the role keys until a new leader is elected.
    let failed: Vec<&String> = reasons
        .iter()
        .filter(|r| {
            (r.contains("cannot open bucket \"b11\"")
                || r.contains("cannot read the role keys of bucket \"b11\""))
                && r.contains("(attempt ")
        })
        .collect();
    assert!(
        !failed.is_empty(),
        "/readyz never named a failed attempt while starting: {reasons:?}\n{}",
        d.report()
    );
    assert!(
        failed[0].starts_with("starting: "),
        "the reason says it is starting: {}",
        failed[0]
    );
    let stderr = d.instances[i].stderr();
    assert!(
        stderr.contains("start-up failed; retrying") && stderr.contains("attempt=1"),
        "no WARN line for the failed attempt:\n{stderr}"
    );
    assert!(
        stderr.contains("start-up step succeeded after retrying"),
        "no INFO line for the start after retries:\n{stderr}"
    );
    eventually("node-a holds both roles", Duration::from_secs(20), || {
        let held = promoted(&d, i, "alpha") && promoted(&d, i, "beta");
        async move { held.then_some(()) }
    })
    .await;
    let held_at = Instant::now();
    let (leader_at, new_leader) = tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .expect("the watcher saw the new leader")
        .expect("watcher task");
    eprintln!(
        "stream leader {leader} killed; new leader {new_leader} after {:?}; node-a ready after \
         {:?}, both roles held after {:?} ({:?} after the stream had a leader again); {} \
         /readyz answers said starting",
        leader_at - killed,
        ready_at - killed,
        held_at - killed,
        held_at.saturating_duration_since(leader_at),
        reasons.len()
    );
    d.terminate(i);
    let status = d.wait_exit(i, Duration::from_secs(15)).await;
    assert!(status.success(), "exit {status}\n{}", d.report());
}

/// The faster single-server case, through the test kit's proxy in stall mode: the server
/// accepts the TCP connection but no byte comes back, so every connect attempt times out
/// (`nats.connect_timeout`). Both instances keep retrying with `/healthz` 200, `/readyz` 503
/// naming the failed attempt, `/api/roles` and `/` 503 `starting`; the one that gets SIGTERM
/// exits 0 at once (nothing to release), the other starts and takes the role once the proxy
/// passes traffic again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_retries_a_server_that_does_not_answer_and_exits_0_on_sigterm_while_starting() {
    let server = NatsServer::start().await;
    let upstream = format!("127.0.0.1:{}", server.port())
        .parse()
        .expect("socket address");
    let proxy = Proxy::start(upstream).await;
    proxy.set_mode(Mode::Stall);
    let mut d = Deployment::new(
        &proxy.url(),
        "stalled",
        &["alpha"],
        "nats:\n  connect_timeout: 300ms\n",
    );
    d.env("RUST_LOG", "info,async_nats=error");
    let a = d.spawn("node-a").await;
    let b = d.spawn("node-b").await;
    for i in [a, b] {
        let port = d.instances[i].port;
        let ready = eventually(
            "/readyz names a failed connect attempt",
            Duration::from_secs(10),
            || async move {
                let (status, ready) = get(port, "/readyz").await;
                assert_eq!(status, 503, "{ready}");
                let error = ready["error"].as_str().unwrap_or_default().to_owned();
                error.contains("(attempt ").then_some(ready)
            },
        )
        .await;
        assert_eq!(ready["starting"], true, "{ready}");
        assert_eq!(ready["connected"], false, "{ready}");
        let error = ready["error"].as_str().expect("a reason");
        assert!(
            error.starts_with("starting: cannot connect to NATS: ") && error.contains("retrying"),
            "{ready}"
        );
        assert_eq!(get(port, "/healthz").await.0, 200);
        for path in ["/api/roles", "/api/self", "/"] {
            let (status, body) = get(port, path).await;
            assert_eq!(
                (status, body["code"].as_str()),
                (503, Some("starting")),
                "{path}: {body}"
            );
            assert!(
                body["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("starting: ")),
                "{path}: {body}"
            );
        }
    }
    eventually("a second WARN line", Duration::from_secs(10), || {
        let stderr = d.instances[a].stderr();
        async move {
            (stderr.contains("start-up failed; retrying") && stderr.contains("attempt=2"))
                .then_some(())
        }
    })
    .await;

    // SIGTERM while starting: exit 0, quickly, having held nothing.
    let signalled = Instant::now();
    d.terminate(b);
    let status = d.wait_exit(b, Duration::from_secs(5)).await;
    let took = signalled.elapsed();
    assert!(status.success(), "exit {status}\n{}", d.report());
    // Measured: a few milliseconds (nothing to release, the HTTP server closes at once);
    // 2 s leaves room for a loaded CI machine.
    assert!(
        took < Duration::from_secs(2),
        "SIGTERM while starting took {took:?} to exit"
    );
    assert!(
        !d.instances[b]
            .stdout()
            .iter()
            .any(|l| l.starts_with("promoted ")),
        "{}",
        d.report()
    );

    // The network heals: node-a starts, becomes ready and takes the role.
    proxy.set_mode(Mode::Pass);
    let healed = Instant::now();
    let port = d.instances[a].port;
    eventually("node-a ready", Duration::from_secs(15), || async move {
        (get(port, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    eventually("node-a holds alpha", Duration::from_secs(10), || {
        let held = promoted(&d, a, "alpha");
        async move { held.then_some(()) }
    })
    .await;
    eprintln!(
        "node-a held alpha {:?} after the proxy passed traffic again; SIGTERM while starting \
         exited in {took:?}",
        healed.elapsed()
    );
    assert!(
        d.instances[a]
            .stderr()
            .contains("start-up step succeeded after retrying"),
        "{}",
        d.report()
    );
    assert!(d.try_exit(a).is_none(), "{}", d.report());
    d.terminate(a);
    let status = d.wait_exit(a, Duration::from_secs(15)).await;
    assert!(status.success(), "exit {status}\n{}", d.report());
}

/// What retrying cannot change still ends `run` at once with exit 1 and a clear message: a
/// missing bucket without `auto_create`, refused credentials, and a permission violation on
/// the bucket's JetStream API or on the reply inbox (requests that can never be answered
/// would otherwise time out for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exits_1_at_once_for_a_missing_bucket_refused_credentials_and_denied_permissions() {
    let server = NatsServer::start_with_config(
        r#"authorization { users = [
  { user: app, password: right }
  { user: noinfo, password: right, permissions: { publish: { deny: ["$JS.API.STREAM.INFO.>"] } } }
  { user: noinbox, password: right, permissions: { subscribe: { deny: ["_INBOX.>"] } } }
  { user: nocreate, password: right, permissions: { publish: { deny: ["$JS.API.INFO"] } } }
] }"#,
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let url = server.url();
    for (user, password, auto_create, expected) in [
        (
            "app",
            "right",
            false,
            "KV bucket \"nowhere\" does not exist",
        ),
        ("app", "wrong", false, "authorization violation"),
        (
            "noinfo",
            "right",
            false,
            "permission denied by the NATS server: cannot open bucket \"nowhere\" (publish to \
             \"$JS.API.STREAM.INFO.KV_nowhere\")",
        ),
        (
            "noinbox",
            "right",
            false,
            "permission denied by the NATS server: cannot open bucket \"nowhere\" (subscribe to \
             \"_INBOX.",
        ),
        // `auto_create` without the account-info request that creating needs.
        (
            "nocreate",
            "right",
            true,
            "permission denied by the NATS server: cannot open bucket \"nowhere\" (publish to \
             \"$JS.API.INFO\")",
        ),
    ] {
        let config = dir.path().join(format!("{user}-{password}.yaml"));
        std::fs::write(
            &config,
            format!(
                "nats:\n  user: {user}\n  password: {password}\nbucket:\n  name: nowhere\n  \
                 auto_create: {auto_create}\nroles:\n  - name: alpha\n"
            ),
        )
        .expect("write config");
        let config = config.to_str().expect("utf-8 path");
        let args = [
            "run",
            "--config",
            config,
            "--instance-id",
            "a",
            "--server",
            &url,
            "--no-http",
        ];
        let out = testkit::cli::run(&args, &[], Duration::from_secs(20)).await;
        assert_eq!(out.code, Some(1), "{user}/{password}: {}", out.text());
        assert!(
            out.stderr.contains(expected),
            "{user}/{password}: {}",
            out.text()
        );
        assert!(
            !out.stderr.contains("retrying"),
            "{user}/{password}: {}",
            out.text()
        );
        assert!(
            out.took < Duration::from_secs(3),
            "{user}/{password}: exit 1 took {:?}: {}",
            out.took,
            out.text()
        );
    }
}
