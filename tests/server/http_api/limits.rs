//! The server's connection limits: slow requests, idle connections, a full server (raw
//! sockets: these requests are deliberately slow or incomplete).

use std::sync::Arc;
use std::time::Duration;

use nats_roles::RoleManager;
use nats_roles::http::{Api, ApiOptions};
use testkit::NatsServer;
use tokio::time::Instant;

use super::*;

/// Serves `options` for `manager` on a free loopback port; the port and the serving task.
pub(super) async fn serve(
    manager: &Arc<RoleManager>,
    options: ApiOptions,
) -> (Api, u16, tokio::task::JoinHandle<std::io::Result<()>>) {
    let api = Api::new(manager.clone(), options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let serving = tokio::spawn({
        let api = api.clone();
        async move { api.serve(listener).await }
    });
    (api, port, serving)
}

/// Shuts `api` down and asserts that its `serving` task returns `Ok` within 3 s (`when` says
/// what else was going on).
pub(super) async fn stop_serving(
    api: &Api,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
    when: &str,
) {
    api.shutdown_token().cancel();
    tokio::time::timeout(Duration::from_secs(3), serving)
        .await
        .unwrap_or_else(|_| panic!("serve did not return within 3 s of shutdown {when}"))
        .expect("task")
        .expect("serve");
}

/// Reads from `stream` until the server closes it (EOF or reset), at most `limit`; what was
/// read, or `None` if it is still open.
async fn until_closed(stream: &mut tokio::net::TcpStream, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    testkit::tcp::read_to_close(stream, &mut got, limit)
        .await
        .then(|| String::from_utf8_lossy(&got).into_owned())
}

/// `GET /healthz` on a new connection: the status line, or what went wrong.
async fn healthz(port: u16) -> String {
    use tokio::io::AsyncWriteExt;
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return "connect failed".to_owned();
    };
    // A refused connection may be closed (and reset) before the request is written: its
    // answer is still there to read.
    let _ = stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    match until_closed(&mut stream, Duration::from_secs(2)).await {
        Some(reply) => reply
            .lines()
            .next()
            .unwrap_or("closed without an answer")
            .to_owned(),
        None => "no answer within 2 s".to_owned(),
    }
}

/// Slowloris: a request whose headers trickle in is closed `request_timeout` after its first
/// byte; an idle keep-alive connection (and a silent new one) after `idle_timeout`, not at the
/// request timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_requests_and_idle_connections_are_closed() {
    use tokio::io::AsyncWriteExt;
    let server = NatsServer::start().await;
    let a = manager(&server.url(), "node-a", "slow", &["alpha"], &[]).await;
    let request = Duration::from_millis(400);
    let idle = Duration::from_millis(1500);
    let (api, port, serving) = serve(
        &a,
        ApiOptions::default()
            .with_request_timeout(request)
            .with_idle_timeout(idle),
    )
    .await;

    // One header line every 50 ms, never the blank line that ends them.
    let mut slow = testkit::tcp::connect(port).await;
    let started = Instant::now();
    slow.write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .expect("request line");
    let trickle = async {
        for i in 0.. {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if slow
                .write_all(format!("X-Slow-{i}: 1\r\n").as_bytes())
                .await
                .is_err()
            {
                return Instant::now();
            }
        }
        Instant::now()
    };
    let cut = tokio::time::timeout(Duration::from_secs(3), trickle)
        .await
        .expect("a trickling request is cut off within 3 s")
        - started;
    assert!(
        cut >= request && cut < request + Duration::from_millis(800),
        "the slow request was cut after {cut:?}"
    );

    // Keep-alive: one request answered, then silence.
    let mut kept = testkit::tcp::connect(port).await;
    let mut silent = testkit::tcp::connect(port).await;
    let opened = Instant::now();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    let mut head = [0u8; 12];
    tokio::io::AsyncReadExt::read_exact(&mut kept, &mut head)
        .await
        .expect("the answer");
    assert_eq!(&head, b"HTTP/1.1 200");
    let answered = Instant::now();
    for (what, stream, since) in [
        ("idle keep-alive", &mut kept, answered),
        ("silent", &mut silent, opened),
    ] {
        until_closed(stream, Duration::from_secs(4))
            .await
            .unwrap_or_else(|| panic!("the {what} connection is still open after 4 s"));
        let after = since.elapsed();
        assert!(
            after >= idle - Duration::from_millis(50) && after < idle + Duration::from_secs(1),
            "the {what} connection was closed after {after:?}"
        );
    }
    assert_eq!(healthz(port).await, "HTTP/1.1 200 OK");
    stop_serving(&api, serving, "").await;
    a.shutdown(WAIT).await.expect("clean shutdown");
}

/// At the connection limit the connection idle the longest makes room for a new one, so a
/// probe gets through however many idle connections are open; at most half the connections
/// may be event streams; when every connection has a request in flight, a new one is
/// answered 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_closes_idle_connections_and_refuses_when_all_are_busy() {
    use tokio::io::AsyncReadExt;
    let server = NatsServer::start().await;
    let a = manager(&server.url(), "node-a", "full", &["alpha"], &[]).await;
    let request_timeout = Duration::from_secs(1);
    let (api, port, serving) = serve(
        &a,
        ApiOptions::default()
            .with_max_connections(4)
            .with_request_timeout(request_timeout)
            .with_admin_token(Some(TOKEN.to_owned())),
    )
    .await;

    let mut idle = Vec::new();
    for _ in 0..10 {
        idle.push(testkit::tcp::connect(port).await);
    }
    assert_eq!(healthz(port).await, "HTTP/1.1 200 OK");
    // The oldest were closed for the newer ones (the three newest may still be open).
    for (i, stream) in idle.iter_mut().enumerate().take(7) {
        assert!(
            until_closed(stream, Duration::from_secs(2)).await.is_some(),
            "idle connection {i} is still open"
        );
    }
    drop(idle);

    // Two event streams (half the limit) ...
    let mut streams = Vec::new();
    for _ in 0..2 {
        let mut s = testkit::tcp::send(port, b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n").await;
        testkit::tcp::read_until(&mut s, &mut Vec::new(), testkit::tcp::HELLO, WAIT).await;
        streams.push(s);
    }
    // ... and no more.
    let mut third = testkit::tcp::send(
        port,
        b"GET /api/events HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    let reply = until_closed(&mut third, Duration::from_secs(2))
        .await
        .expect("the third stream is refused");
    assert!(
        reply.starts_with("HTTP/1.1 503") && reply.contains("too_many_streams"),
        "{reply}"
    );
    assert_eq!(healthz(port).await, "HTTP/1.1 200 OK");

    // Two admin uploads in flight (their bodies stall) fill the rest: a new connection is
    // refused until they time out.
    let mut uploads = Vec::new();
    for _ in 0..2 {
        let request = format!(
            "POST /api/drain HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Length: 20\r\nExpect: 100-continue\r\n\r\n"
        );
        let mut s = testkit::tcp::send(port, request.as_bytes()).await;
        // The handler reads the body: the request is in flight.
        let mut head = [0u8; 25];
        tokio::time::timeout(WAIT, s.read_exact(&mut head))
            .await
            .expect("100 Continue")
            .expect("read");
        assert!(head.starts_with(b"HTTP/1.1 100 Continue"));
        uploads.push(s);
    }
    let refused_at = Instant::now();
    assert_eq!(healthz(port).await, "HTTP/1.1 503 Service Unavailable");
    for mut upload in uploads {
        let reply = until_closed(&mut upload, WAIT)
            .await
            .expect("the stalled upload ends");
        assert!(reply.contains("408 Request Timeout"), "{reply}");
    }
    assert!(refused_at.elapsed() < request_timeout + Duration::from_secs(1));
    assert_eq!(healthz(port).await, "HTTP/1.1 200 OK");
    stop_serving(&api, serving, "with event streams open").await;
    drop(streams);
    a.shutdown(WAIT).await.expect("clean shutdown");
}
