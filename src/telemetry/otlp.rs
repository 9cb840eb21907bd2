//! The HTTP client of the OTLP exporters: plain HTTP/1.1 over hyper, run on the application's
//! tokio runtime.
//!
//! The SDK exports from its own threads (outside any runtime), so each request is spawned onto
//! the runtime whose handle the client keeps and awaited through its join handle, which any
//! executor can poll.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
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
}

impl std::fmt::Debug for RuntimeHttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeHttpClient")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RuntimeHttpClient {
    /// A client running its requests on `runtime`, each bounded by `timeout`.
    pub(crate) fn new(runtime: tokio::runtime::Handle, timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        Self {
            runtime,
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout,
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

#[async_trait::async_trait]
impl HttpClient for RuntimeHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let timeout = self.timeout;
        let task = self.runtime.spawn(async move {
            tokio::time::timeout(timeout, Self::send(client, request))
                .await
                .map_err(|_| -> HttpError { format!("no answer within {timeout:?}").into() })?
        });
        task.await?
    }
}
