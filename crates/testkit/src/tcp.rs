//! Reading raw HTTP answers from a TCP connection: up to a marker (an SSE `hello` event), or
//! until the server closes it.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What an event stream sends first (`/api/events`).
pub const HELLO: &str = "\"type\":\"hello\"";

/// Reads from `stream` into `got` until it contains `marker`; panics (naming `marker`) if the
/// connection closes first or no such bytes arrive within `limit`.
pub async fn read_until(stream: &mut TcpStream, got: &mut Vec<u8>, marker: &str, limit: Duration) {
    let mut chunk = [0u8; 4096];
    let found = tokio::time::timeout(limit, async {
        while !String::from_utf8_lossy(got).contains(marker) {
            let n = stream
                .read(&mut chunk)
                .await
                .unwrap_or_else(|e| panic!("reading up to {marker}: {e}"));
            assert!(n > 0, "the connection closed before {marker}");
            got.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    assert!(found.is_ok(), "no {marker} within {limit:?}");
}

/// Reads from `stream` into `got` until the server closes it (EOF or an error such as a
/// reset), at most `limit`; true if it closed, false if it is still open.
pub async fn read_to_close(stream: &mut TcpStream, got: &mut Vec<u8>, limit: Duration) -> bool {
    let mut chunk = [0u8; 4096];
    tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .is_ok()
}

/// A new connection to `127.0.0.1:port`; panics if it is refused.
pub async fn connect(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"))
}

/// A new connection to `127.0.0.1:port` on which `request` (raw bytes) has been written;
/// panics if either fails.
pub async fn send(port: u16, request: &[u8]) -> TcpStream {
    let mut stream = connect(port).await;
    stream
        .write_all(request)
        .await
        .unwrap_or_else(|e| panic!("write a request to 127.0.0.1:{port}: {e}"));
    stream
}
