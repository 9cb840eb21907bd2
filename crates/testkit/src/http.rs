//! A small HTTP client for tests (hyper-util's client, HTTP/1.1 over plain TCP) against servers
//! on `127.0.0.1`: status and body of one request, with a 2 s timeout.
//!
//! Tests that send deliberately malformed or slow bytes use [`crate::tcp`] instead.

use std::io;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// How long one request may take (connect, send, read the whole body).
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// One `method path` request to `127.0.0.1:port` with `headers` and `body`; returns the status
/// code and the body. Fails on connection errors or after [`TIMEOUT`] (e.g. a paused server).
/// Each request uses a new connection.
pub async fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> io::Result<(u16, String)> {
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(format!("http://127.0.0.1:{port}{path}"));
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let req = builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http::<Full<Bytes>>();
    let exchange = async {
        let response = client.request(req).await.map_err(io::Error::other)?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(io::Error::other)?
            .to_bytes();
        Ok::<_, io::Error>((status, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(TIMEOUT, exchange).await.map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{method} {path} on port {port} timed out"),
        )
    })?
}

/// `GET path` on `127.0.0.1:port`: status and body (see [`request`]).
pub async fn get(port: u16, path: &str) -> io::Result<(u16, String)> {
    request(port, "GET", path, &[], "").await
}

/// `GET path` as JSON, panicking on anything but 200 with JSON of type `T`.
pub async fn get_json<T: serde::de::DeserializeOwned>(port: u16, path: &str) -> T {
    let (status, body) = get(port, path)
        .await
        .unwrap_or_else(|e| panic!("GET {path} on port {port}: {e}"));
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("GET {path}: not the expected JSON ({e}): {body}"))
}
