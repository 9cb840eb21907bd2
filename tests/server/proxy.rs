//! The chaos suite's TCP proxy (`testkit::proxy`, crates/testkit/src/proxy.rs) against a plain TCP upstream that
//! records what it receives and echoes it back: pass, stall (bytes held, delivered after
//! healing), one-way, delay and reset behave as the fault injection assumes.

use std::time::Duration;

use testkit::proxy::{Dir, Mode, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// An upstream on a free port: every byte it receives goes to the channel and back to the
/// sender.
async fn echo_upstream() -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("upstream address");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    let _ = tx.send(buf[..n].to_vec());
                    if s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

/// Reads exactly `n` bytes within `timeout`, or `None`.
async fn read_n(s: &mut TcpStream, n: usize, timeout: Duration) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; n];
    match tokio::time::timeout(timeout, s.read_exact(&mut buf)).await {
        Ok(Ok(_)) => Some(buf),
        _ => None,
    }
}

const WAIT: Duration = Duration::from_secs(5);
const QUIET: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_stall_and_heal_deliver_held_bytes_in_order() {
    let (upstream, mut seen) = echo_upstream().await;
    let proxy = Proxy::start(upstream).await;
    let mut c = TcpStream::connect(proxy.addr()).await.expect("connect");

    c.write_all(b"a").await.expect("write");
    assert_eq!(read_n(&mut c, 1, WAIT).await.as_deref(), Some(&b"a"[..]));
    assert_eq!(seen.recv().await.as_deref(), Some(&b"a"[..]));

    proxy.set_mode(Mode::Stall);
    c.write_all(b"bc").await.expect("write while stalled");
    assert!(
        read_n(&mut c, 1, QUIET).await.is_none(),
        "a stalled link delivered bytes"
    );
    assert!(
        seen.try_recv().is_err(),
        "upstream got bytes during a stall"
    );

    proxy.set_mode(Mode::Pass);
    assert_eq!(
        read_n(&mut c, 2, WAIT).await.as_deref(),
        Some(&b"bc"[..]),
        "held bytes must arrive after healing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_holds_only_one_direction() {
    let (upstream, mut seen) = echo_upstream().await;
    let proxy = Proxy::start(upstream).await;
    let mut c = TcpStream::connect(proxy.addr()).await.expect("connect");

    // Replies held: the request reaches the server (a write "commits"), the answer does not.
    proxy.set_mode(Mode::OneWay(Dir::Down));
    c.write_all(b"x").await.expect("write");
    let got = tokio::time::timeout(WAIT, seen.recv())
        .await
        .expect("upstream got the request");
    assert_eq!(got.as_deref(), Some(&b"x"[..]));
    assert!(
        read_n(&mut c, 1, QUIET).await.is_none(),
        "reply passed a held direction"
    );
    proxy.set_mode(Mode::Pass);
    assert_eq!(read_n(&mut c, 1, WAIT).await.as_deref(), Some(&b"x"[..]));

    // Requests held: nothing reaches the server until healed.
    proxy.set_mode(Mode::OneWay(Dir::Up));
    c.write_all(b"y").await.expect("write");
    assert!(
        tokio::time::timeout(QUIET, seen.recv()).await.is_err(),
        "request passed a held direction"
    );
    proxy.set_mode(Mode::Pass);
    assert_eq!(read_n(&mut c, 1, WAIT).await.as_deref(), Some(&b"y"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_applies_to_each_direction() {
    let (upstream, _seen) = echo_upstream().await;
    let proxy = Proxy::start(upstream).await;
    let mut c = TcpStream::connect(proxy.addr()).await.expect("connect");
    let delay = Duration::from_millis(150);
    proxy.set_mode(Mode::Delay(delay));
    let sent = Instant::now();
    c.write_all(b"d").await.expect("write");
    assert_eq!(read_n(&mut c, 1, WAIT).await.as_deref(), Some(&b"d"[..]));
    let rtt = sent.elapsed();
    // A lower bound only: the machine may be slow, never faster than the injected delay.
    assert!(rtt >= delay * 2, "round trip {rtt:?} < 2 × {delay:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_breaks_live_connections_and_new_ones_work() {
    let (upstream, _seen) = echo_upstream().await;
    let proxy = Proxy::start(upstream).await;
    let mut c = TcpStream::connect(proxy.addr()).await.expect("connect");
    c.write_all(b"1").await.expect("write");
    assert!(read_n(&mut c, 1, WAIT).await.is_some());

    proxy.reset();
    let mut buf = [0u8; 1];
    let r = tokio::time::timeout(WAIT, c.read(&mut buf))
        .await
        .expect("a reset connection must not hang");
    assert!(
        matches!(r, Ok(0) | Err(_)),
        "read after reset returned data: {r:?}"
    );

    let mut c2 = TcpStream::connect(proxy.addr()).await.expect("reconnect");
    c2.write_all(b"2").await.expect("write");
    assert_eq!(read_n(&mut c2, 1, WAIT).await.as_deref(), Some(&b"2"[..]));
}
