//! [`ApiOptions`]: the settings of an HTTP API.

use std::sync::Arc;
use std::time::Duration;

/// Settings of an [`Api`](super::Api).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ApiOptions {
    /// Bearer token enabling the admin actions; `None` turns them off.
    pub admin_token: Option<String>,
    /// Bearer token with which a loopback caller of `GET /api/self` gets whole fencing
    /// tokens; `None`: tokens are always redacted.
    pub local_token: Option<String>,
    /// Interval of SSE keep-alive comments. Default: 10 s.
    pub keep_alive: Duration,
    /// How long `release` waits for this instance to leave the role before answering
    /// `202 Accepted` instead of `200`. Default: 10 s.
    pub release_wait: Duration,
    /// Cooldown after a `release` without one in the body. Default: 10 s.
    pub release_cooldown: Duration,
    /// Timeout of the read and the delete of an `evict`. Default: 2 s.
    pub kv_timeout: Duration,
    /// `/readyz` reports a role whose deadline passed (renewals failed) for this long after
    /// the demotion. Default: 30 s.
    pub missed_deadline_window: Duration,
    /// What `GET /metrics` serves; `None` (the default): 404.
    pub metrics: Option<MetricsText>,
    /// A request's headers must arrive within this time of its first byte (else the
    /// connection is closed), and an admin request's body within this time of its headers
    /// (else `408`). Default: 10 s.
    pub request_timeout: Duration,
    /// A connection with no request in flight and no byte of a next one is closed after this
    /// long (idle keep-alive, or connected and silent). Default: 60 s.
    pub idle_timeout: Duration,
    /// Most connections served at once. [`Api::serve`](super::Api::serve) lowers it to half the process's
    /// open-file limit (`RLIMIT_NOFILE`). When it is reached, the connection idle the longest
    /// is closed to make room; when every connection has a request in flight, the new one is
    /// answered `503` and closed. At most half of the limit may be `GET /api/events` streams
    /// (`503 too_many_streams` beyond), so probes always find room. Default: 256.
    pub max_connections: usize,
}

impl Default for ApiOptions {
    fn default() -> Self {
        Self {
            admin_token: None,
            local_token: None,
            keep_alive: Duration::from_secs(10),
            release_wait: Duration::from_secs(10),
            release_cooldown: Duration::from_secs(10),
            kv_timeout: Duration::from_secs(2),
            missed_deadline_window: Duration::from_secs(30),
            metrics: None,
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 256,
        }
    }
}

impl ApiOptions {
    /// Sets the admin token (builder style).
    #[must_use]
    pub fn with_admin_token(mut self, token: Option<String>) -> Self {
        self.admin_token = token;
        self
    }

    /// Sets the local token of `GET /api/self` (builder style).
    #[must_use]
    pub fn with_local_token(mut self, token: Option<String>) -> Self {
        self.local_token = token;
        self
    }

    /// Serves `metrics` on `GET /metrics` (builder style).
    #[must_use]
    pub fn with_metrics(mut self, metrics: MetricsText) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Sets [`ApiOptions::request_timeout`] (builder style).
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets [`ApiOptions::idle_timeout`] (builder style).
    #[must_use]
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Sets [`ApiOptions::max_connections`] (builder style; at least 1 is used).
    #[must_use]
    pub fn with_max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }
}

/// Produces the body of `GET /metrics` (Prometheus text) on each scrape, or why it cannot.
#[derive(Clone)]
pub struct MetricsText(Arc<dyn Fn() -> Result<String, String> + Send + Sync>);

impl MetricsText {
    /// A source calling `render` per scrape.
    pub fn new(render: impl Fn() -> Result<String, String> + Send + Sync + 'static) -> Self {
        Self(Arc::new(render))
    }

    pub(super) fn render(&self) -> Result<String, String> {
        (self.0)()
    }
}

impl std::fmt::Debug for MetricsText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsText(..)")
    }
}
