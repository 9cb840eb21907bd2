//! NATS clients for tests: connecting with fast reconnects, connection events, and KV buckets
//! that are ready for writes.

use std::time::{Duration, Instant};

/// How long [`connect`] keeps retrying the initial connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects to `url` (several servers may be given comma-separated, e.g.
/// [`NatsCluster::seed_urls`]), retrying for up to [`CONNECT_TIMEOUT`] while the server is not
/// reachable yet.
///
/// The client reconnects quickly (50 ms steps, at most 500 ms apart) and forever, so a
/// [`NatsServer::restart`] is picked up within about half a second. Panics if no connection
/// could be made in time.
pub async fn connect(url: &str) -> async_nats::Client {
    connect_with(url, async_nats::ConnectOptions::new).await
}

/// Like [`connect`], with options built by `options` (called once per attempt), e.g.
/// `|| ConnectOptions::with_user_and_password("a".into(), "a".into())`. The harness sets a
/// 1 s connection timeout and the fast reconnect delay on top of them.
pub async fn connect_with(
    url: &str,
    options: impl Fn() -> async_nats::ConnectOptions,
) -> async_nats::Client {
    let urls: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        let attempt = options()
            .connection_timeout(Duration::from_secs(1))
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((50 * attempts as u64).min(500))
            });
        match attempt.connect(urls.as_slice()).await {
            Ok(client) => return client,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("cannot connect to {url} within {CONNECT_TIMEOUT:?}: {e}"),
        }
    }
}

/// Like [`connect`], also returning the client's connection events (`Connected`,
/// `Disconnected`, `ServerError` such as permission violations, ...) for event-based waits
/// with [`wait_event`]. The first `Connected` of the initial connection is in the channel too.
pub async fn connect_with_events(
    url: &str,
) -> (
    async_nats::Client,
    tokio::sync::mpsc::UnboundedReceiver<async_nats::Event>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let client = connect_with(url, move || {
        let tx = tx.clone();
        async_nats::ConnectOptions::new().event_callback(move |event| {
            let tx = tx.clone();
            async move {
                // The receiver may be gone when the test no longer listens: fine.
                let _ = tx.send(event);
            }
        })
    })
    .await;
    (client, rx)
}

/// Receives events until one matches `pred` and returns it; panics after `timeout` (listing
/// the events that did arrive) or if the channel closes.
pub async fn wait_event(
    events: &mut tokio::sync::mpsc::UnboundedReceiver<async_nats::Event>,
    timeout: Duration,
    pred: impl Fn(&async_nats::Event) -> bool,
) -> async_nats::Event {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(event)) if pred(&event) => return event,
            Ok(Some(event)) => seen.push(event.to_string()),
            Ok(None) => panic!("event channel closed; events seen: {seen:?}"),
            Err(_) => panic!("no matching event within {timeout:?}; events seen: {seen:?}"),
        }
    }
}

/// How long [`create_kv`] tries to create a bucket (a cluster's meta leader election on a
/// loaded 2-core machine can take most of the servers' own 10 s start-up limit).
const CREATE_KV_TIMEOUT: Duration = Duration::from_secs(30);

/// One attempt of [`create_kv`]: a request that got no answer by then is sent again.
const CREATE_KV_ATTEMPT: Duration = Duration::from_secs(5);

/// Creates a KV bucket with `config` (panicking on failure; tried for [`CREATE_KV_TIMEOUT`])
/// and waits, within the same limit, until writes from this client reach the bucket's stream.
///
/// Right after `create_key_value` of a replicated bucket, the first put fails with
/// `StreamNotFound` (no responders) about once in 50 runs: the stream's subject interest has not
/// reached the client's server yet. The probe publishes to a probe key with
/// `Nats-Expected-Last-Subject-Sequence: u64::MAX`, which the stream always rejects
/// (`WrongLastSequence`): it proves the route without storing anything.
pub async fn create_kv(
    js: &async_nats::jetstream::Context,
    config: async_nats::jetstream::kv::Config,
) -> async_nats::jetstream::kv::Store {
    use async_nats::jetstream::context::PublishErrorKind;

    let bucket = config.bucket.clone();
    // A cluster that has only just formed (on a loaded machine, beside other tests) may not
    // answer the first JetStream requests in time — its meta leader may still be elected: the
    // create is retried, each attempt bounded, until the deadline (creating a stream that
    // exists with the same configuration succeeds, so a create whose answer was lost is no
    // problem). One CI run saw a first attempt time out past a 10 s deadline (no retry left).
    let deadline = Instant::now() + CREATE_KV_TIMEOUT;
    let store = loop {
        let attempt =
            tokio::time::timeout(CREATE_KV_ATTEMPT, js.create_key_value(config.clone())).await;
        match attempt {
            Ok(Ok(store)) => break store,
            Ok(Err(e)) if Instant::now() < deadline => {
                eprintln!("create KV bucket {bucket}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(_) if Instant::now() < deadline => {
                eprintln!(
                    "create KV bucket {bucket}: no answer within {CREATE_KV_ATTEMPT:?}; retrying"
                );
            }
            Ok(Err(e)) => {
                panic!("create KV bucket {bucket}: {e} (tried for {CREATE_KV_TIMEOUT:?})")
            }
            Err(_) => panic!(
                "create KV bucket {bucket}: no answer within {CREATE_KV_ATTEMPT:?} (tried for \
                 {CREATE_KV_TIMEOUT:?})"
            ),
        }
    };
    let prefix = store.put_prefix.as_ref().unwrap_or(&store.prefix);
    let subject = format!("{prefix}__harness_probe");
    loop {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            u64::MAX.to_string().as_str(),
        );
        let outcome = match js
            .publish_with_headers(subject.clone(), headers, "".into())
            .await
        {
            Ok(ack) => ack.await.map(|_| ()),
            Err(e) => Err(e),
        };
        match outcome {
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => return store,
            Ok(()) => panic!("probe write to {subject} was stored: expected a rejection"),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("KV bucket {bucket} not writable within {CREATE_KV_TIMEOUT:?}: {e}"),
        }
    }
}

/// A fresh standalone server (see [`NatsServer::start`](crate::NatsServer::start)) and a
/// client connected to it.
pub async fn server_and_client() -> (crate::NatsServer, async_nats::Client) {
    let server = crate::NatsServer::start().await;
    let client = connect(&server.url()).await;
    (server, client)
}
