//! The HTTP client of the OTLP exporters: plain HTTP/1.1 over hyper, run on the application's
//! tokio runtime.
//!
//! The SDK exports from its own threads (outside any runtime), so each request is spawned onto
//! the runtime whose handle the client keeps and awaited through its join handle, which any
//! executor can poll.
//!
//! The SDK itself reports export errors nowhere (its internal logs are off), so the client logs
//! when exports start failing (with the reason) and when they work again: once per change, not
//! once per export.
//!
//! The client also sets the configured request headers on every request, over what the SDK put
//! there: the SDK adds `OTEL_EXPORTER_OTLP_HEADERS` from the environment over the headers it is
//! given, and the configuration's headers must win (docs/observability.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderName, HeaderValue};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};

/// Largest response body read from a collector.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// An OTLP/HTTP client bound to a tokio runtime.
#[derive(Clone)]
pub(crate) struct RuntimeHttpClient {
    runtime: tokio::runtime::Handle,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
    /// `metrics` or `traces` (for the log).
    signal: &'static str,
    /// Whether the last export failed.
    failing: Arc<AtomicBool>,
    /// Why the last export failed (`None` once one worked).
    last_error: LastError,
    /// Set on every request, replacing a header of the same name.
    headers: Arc<Vec<(HeaderName, HeaderValue)>>,
}

/// Why the latest export of one signal failed, shared with [`super::Telemetry`] so that a
/// failed shutdown can say what could not be sent and why.
#[derive(Debug, Clone, Default)]
pub(crate) struct LastError(Arc<Mutex<Option<String>>>);

impl LastError {
    fn set(&self, error: Option<String>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = error;
    }

    /// The reason of the latest failed export, if the latest export failed.
    pub(crate) fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl std::fmt::Debug for RuntimeHttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeHttpClient")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RuntimeHttpClient {
    /// A client running its requests on `runtime`, each bounded by `timeout`, setting
    /// `headers` on every request (over the SDK's). A name or value HTTP cannot carry is left
    /// out (the configuration was validated before).
    pub(crate) fn new<'a>(
        runtime: tokio::runtime::Handle,
        timeout: Duration,
        signal: &'static str,
        headers: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Self {
        let headers = headers
            .into_iter()
            .filter_map(|(name, value)| {
                Some((
                    HeaderName::from_bytes(name.as_bytes()).ok()?,
                    HeaderValue::from_bytes(value.as_bytes()).ok()?,
                ))
            })
            .collect();
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        Self {
            runtime,
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout,
            signal,
            failing: Arc::default(),
            last_error: LastError::default(),
            headers: Arc::new(headers),
        }
    }

    /// Why its latest export failed, kept up to date as it exports.
    pub(crate) fn last_error(&self) -> LastError {
        self.last_error.clone()
    }

    /// Logs a change between working and failing exports.
    fn note(&self, uri: &str, result: &Result<Response<Bytes>, HttpError>) {
        let problem = match result {
            Ok(r) if r.status().is_success() => None,
            Ok(r) => Some(format!("the collector answered {}", r.status())),
            Err(e) => Some(chain(e.as_ref())),
        };
        self.last_error.set(problem.clone());
        match problem {
            Some(error) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(signal = self.signal, url = uri, %error, "OTLP export failed");
                }
            }
            None => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(signal = self.signal, url = uri, "OTLP export works again");
                }
            }
        }
    }

    async fn send(
        client: Client<HttpConnector, Full<Bytes>>,
        request: Request<Bytes>,
    ) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let response = client
            .request(Request::from_parts(parts, Full::new(body)))
            .await?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_RESPONSE_BYTES)
            .collect()
            .await?
            .to_bytes();
        Ok(Response::from_parts(parts, body))
    }
}

/// An error and its causes, `: `-separated (hyper's own message is only "client error").
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[async_trait::async_trait]
impl HttpClient for RuntimeHttpClient {
    async fn send_bytes(&self, mut request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        for (name, value) in self.headers.iter() {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        let client = self.client.clone();
        let timeout = self.timeout;
        let uri = request.uri().to_string();
        let task = self.runtime.spawn(async move {
            tokio::time::timeout(timeout, Self::send(client, request))
                .await
                .map_err(|_| -> HttpError { format!("no answer within {timeout:?}").into() })?
        });
        let result = match task.await {
            Ok(result) => result,
            Err(e) => Err(e.into()),
        };
        self.note(&uri, &result);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{Captured, free_port, runtime};
    use super::*;

    fn request(port: u16) -> Request<Bytes> {
        Request::post(format!("http://127.0.0.1:{port}/v1/traces"))
            .body(Bytes::from_static(b"{}"))
            .expect("request")
    }

    /// The configured headers replace what the SDK set (it adds `OTEL_EXPORTER_OTLP_HEADERS`
    /// over the headers it is given); the SDK's other headers stay.
    #[test]
    fn configured_headers_replace_the_sdks() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let runtime = runtime();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        let (tx, rx) = std::sync::mpsc::channel();
        runtime.spawn(async move {
            if let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = vec![0u8; 8192];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let _ = tx.send(String::from_utf8_lossy(&buf[..n]).to_lowercase());
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let configured = std::collections::BTreeMap::from([(
            "Authorization".to_owned(),
            "Bearer from-config".to_owned(),
        )]);
        let client = RuntimeHttpClient::new(
            runtime.handle().clone(),
            Duration::from_secs(2),
            "traces",
            &configured,
        );
        let mut req = request(port);
        req.headers_mut()
            .insert("authorization", HeaderValue::from_static("Bearer from-env"));
        req.headers_mut()
            .insert("x-tenant", HeaderValue::from_static("env"));
        let r = futures_executor::block_on(client.send_bytes(req));
        assert_eq!(r.expect("answered").status(), 200);
        let sent = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("request seen");
        assert!(sent.contains("authorization: bearer from-config"), "{sent}");
        assert!(!sent.contains("from-env"), "{sent}");
        assert!(sent.contains("x-tenant: env"), "{sent}");
    }

    /// Requests are sent from a thread outside the runtime (as the SDK's export threads do);
    /// a failure is logged once, and the recovery once.
    #[test]
    fn works_outside_the_runtime_and_logs_changes_once() {
        let runtime = runtime();
        let port = free_port();
        let client = RuntimeHttpClient::new(
            runtime.handle().clone(),
            Duration::from_secs(2),
            "traces",
            std::iter::empty(),
        );
        let logs = Captured::default();
        logs.during(|| {
            // Nothing listens: refused twice, logged once.
            for _ in 0..2 {
                let r = futures_executor::block_on(client.send_bytes(request(port)));
                assert!(r.is_err(), "{r:?}");
            }
            assert_eq!(
                logs.text().matches("OTLP export failed").count(),
                1,
                "{}",
                logs.text()
            );
            // A collector appears on that port and answers 200.
            let listener = runtime
                .block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))
                .expect("bind the port again");
            runtime.spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                while let Ok((mut stream, _)) = listener.accept().await {
                    let mut buf = [0u8; 4096];
                    let _ = stream.read(&mut buf).await;
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        .await;
                }
            });
            let r = futures_executor::block_on(client.send_bytes(request(port)));
            assert_eq!(r.expect("answered").status(), 200);
            assert_eq!(
                logs.text().matches("OTLP export works again").count(),
                1,
                "{}",
                logs.text()
            );
        });
    }
}
