//! `RoleManagerBuilder::start` against a server that does not answer (the test kit's proxy in
//! stall mode): it retries with backoff and reports where it stands on `start_progress`,
//! succeeds once the server answers, and gives up with `Error::StartTimeout` (the last failure
//! inside) when its deadline passes first.

use std::time::Duration;

use async_nats::jetstream;
use nats_roles::manager::StartStep;
use nats_roles::{Error, RoleManager, StartRetry};
use testkit::proxy::{Mode, Proxy};
use testkit::roles::{inst, lease_bucket, role, spec};
use testkit::{NatsServer, connect, connect_with, create_kv, eventually};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_retries_a_stalled_server_until_it_answers_or_the_deadline_passes() {
    let server = NatsServer::start().await;
    create_kv(
        &jetstream::new(connect(&server.url()).await),
        lease_bucket("s_retry"),
    )
    .await;
    let proxy = Proxy::start(
        format!("127.0.0.1:{}", server.port())
            .parse()
            .expect("socket address"),
    )
    .await;
    let client = connect_with(&proxy.url(), || {
        async_nats::ConnectOptions::new().request_timeout(Some(Duration::from_millis(300)))
    })
    .await;
    let builder = |id: &str| {
        RoleManager::builder(client.clone(), inst(id))
            .bucket("s_retry")
            .role(spec(&role("alpha")))
    };
    proxy.set_mode(Mode::Stall);

    // A deadline: the start gives up with the last failure.
    let started = Instant::now();
    let result = builder("node-a")
        .start_retry(StartRetry::default().with_deadline(Some(Duration::from_millis(1500))))
        .start()
        .await;
    let took = started.elapsed();
    match &result {
        Err(Error::StartTimeout { attempts, last, .. }) => {
            assert!(*attempts >= 2, "{attempts} attempts");
            assert!(last.is_transient(), "{last}");
            assert!(
                matches!(**last, Error::JetStream(_)),
                "the bucket lookup timed out: {last}"
            );
        }
        other => panic!("expected StartTimeout, got {other:?}"),
    }
    assert!(
        took < Duration::from_millis(1500) + Duration::from_millis(300) + Duration::from_secs(1),
        "gave up after {took:?} (deadline 1.5 s, one request 300 ms)"
    );

    // Without a deadline: it retries, says so, and starts once the server answers.
    let b = builder("node-b").start_retry(StartRetry::until_started());
    let progress = b.start_progress();
    let start = tokio::spawn(b.start());
    let seen = eventually(
        "two failed attempts reported",
        Duration::from_secs(10),
        || {
            let p = progress.borrow().clone();
            async move { p.filter(|p| p.failed_attempts >= 2) }
        },
    )
    .await;
    assert_eq!(
        seen.step,
        StartStep::OpenBucket {
            bucket: "s_retry".into()
        }
    );
    let text = seen.to_string();
    assert!(
        text.starts_with("cannot open bucket \"s_retry\": JetStream request failed")
            && text.contains("(attempt "),
        "{text}"
    );
    assert!(!start.is_finished(), "start returned while stalled");
    proxy.set_mode(Mode::Pass);
    let manager = tokio::time::timeout(Duration::from_secs(10), start)
        .await
        .expect("start returns once the server answers")
        .expect("start task")
        .expect("start succeeds");
    assert!(
        progress.borrow().is_none(),
        "progress cleared after the start"
    );
    eventually("node-b holds alpha", Duration::from_secs(10), || {
        let held = manager.is_leader(&role("alpha"));
        async move { held.then_some(()) }
    })
    .await;
    manager
        .shutdown(Duration::from_secs(5))
        .await
        .expect("clean shutdown");
}
