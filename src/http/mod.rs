//! The HTTP dashboard, JSON API and health probes of a [`RoleManager`] (cargo feature `http`,
//! on by default; `nats-roles run` serves it).
//!
//! | method and path                 | what                                                     |
//! |---------------------------------|----------------------------------------------------------|
//! | `GET /`                         | the dashboard (one HTML page, live through SSE)          |
//! | `GET /dashboard.js`, `/dashboard.css` | the dashboard's script and style                   |
//! | `GET /healthz`                  | 200 while the process runs                               |
//! | `GET /readyz`                   | 200 when connected, caught up and no deadline was missed; 503 with reasons |
//! | `GET /api/roles`                | every role in the bucket ([`RoleList`]) |
//! | `GET /api/roles/{role}`         | one role ([`RoleView`]); 404 if unknown |
//! | `GET /api/instances`            | instances and what each holds ([`InstanceList`]) |
//! | `GET /metrics`                  | Prometheus text, when [`ApiOptions::metrics`] is set (404 otherwise) |
//! | `GET /api/events`               | server-sent events, one JSON [`EventView`] per transition |
//! | `POST /api/roles/{role}/release`| admin: give up a role this instance holds                |
//! | `POST /api/roles/{role}/evict`  | admin: CAS-delete the role's lease (`{"revision": N}` optional) |
//!
//! Errors are JSON `{"error": "...", "code": "..."}` ([`ErrorBody`]). Admin actions are off
//! unless an admin token is configured; they need `Authorization: Bearer <token>` and write an
//! audit line (tracing target `audit`). Fencing tokens only appear redacted.
//!
//! Embedding it in an application that runs its own manager:
//!
//! ```no_run
//! use std::sync::Arc;
//! use nats_roles::http::{Api, ApiOptions};
//! # async fn run(manager: nats_roles::RoleManager) -> std::io::Result<()> {
//! let api = Api::new(Arc::new(manager), ApiOptions::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let stop = api.shutdown_token();
//! tokio::spawn(async move { tokio::signal::ctrl_c().await.ok(); stop.cancel() });
//! api.serve(listener).await?; // returns once the token is cancelled and connections closed
//! # Ok(()) }
//! ```

mod admin;
mod auth;
mod dashboard;
mod error;
mod events;
mod metrics;
mod probes;
mod roles;
mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderName, HeaderValue, header};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;
use tower_http::set_header::SetResponseHeaderLayer;

/// The JSON bodies of the API (`docs/http-api.md`).
pub use crate::inspect::{
    EventView, HeldRole, HolderState, InstanceList, InstanceView, LocalView, RoleList, RoleView,
};
use crate::manager::RoleManager;
pub use error::ErrorBody;
pub use metrics::{MetricsText, PROMETHEUS_CONTENT_TYPE};
pub use probes::Readiness;

/// Settings of an [`Api`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ApiOptions {
    /// Bearer token enabling the admin actions; `None` turns them off.
    pub admin_token: Option<String>,
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
    /// Most connections served at once. [`Api::serve`] lowers it to half the process's
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

/// Headers set on every response that has none of its own.
const RESPONSE_HEADERS: [(HeaderName, &str); 3] = [
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::CACHE_CONTROL, "no-store"),
    (header::REFERRER_POLICY, "no-referrer"),
];

/// The HTTP API of one manager. Cheap to clone.
#[derive(Clone)]
pub struct Api {
    inner: Arc<Inner>,
}

struct Inner {
    manager: Arc<RoleManager>,
    options: ApiOptions,
    shutdown: CancellationToken,
    draining: AtomicBool,
    /// Open `GET /api/events` streams.
    event_streams: AtomicUsize,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("manager", &self.inner.manager)
            .field("admin", &self.inner.options.admin_token.is_some())
            .finish_non_exhaustive()
    }
}

impl Api {
    /// The API of `manager`.
    #[must_use]
    pub fn new(manager: Arc<RoleManager>, options: ApiOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                manager,
                options,
                shutdown: CancellationToken::new(),
                draining: AtomicBool::new(false),
                event_streams: AtomicUsize::new(0),
            }),
        }
    }

    /// The manager.
    #[must_use]
    pub fn manager(&self) -> &Arc<RoleManager> {
        &self.inner.manager
    }

    /// Cancelling this token ends every SSE stream and makes [`Api::serve`] stop accepting
    /// connections and return once the open ones are done.
    #[must_use]
    pub fn shutdown_token(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    /// Marks the instance as shutting down: `/readyz` answers 503 from now on (call it before
    /// [`RoleManager::shutdown`], so load balancers stop sending traffic first).
    pub fn drain(&self) {
        self.inner.draining.store(true, Ordering::Relaxed);
    }

    /// Whether [`Api::drain`] was called.
    #[must_use]
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::Relaxed)
    }

    /// The router with every endpoint (state included).
    pub fn router(&self) -> Router {
        let router = Router::new()
            .route("/", get(dashboard::page))
            .route("/dashboard.js", get(dashboard::script))
            .route("/dashboard.css", get(dashboard::style))
            .route("/healthz", get(probes::healthz))
            .route("/readyz", get(probes::readyz))
            .route("/api/roles", get(roles::list))
            .route("/api/roles/{role}", get(roles::one))
            .route("/api/roles/{role}/release", post(admin::release))
            .route("/api/roles/{role}/evict", post(admin::evict))
            .route("/api/drain", post(admin::drain))
            .route("/api/instances", get(roles::instances))
            .route("/api/events", get(events::stream))
            .route("/metrics", get(metrics::scrape))
            .fallback(error::no_route)
            // After the routes: it applies to the routes present.
            .method_not_allowed_fallback(error::wrong_method);
        RESPONSE_HEADERS
            .into_iter()
            .fold(router, |router, (name, value)| {
                router.layer(SetResponseHeaderLayer::if_not_present(
                    name,
                    HeaderValue::from_static(value),
                ))
            })
            .with_state(self.clone())
    }

    /// Serves [`Api::router`] (HTTP/1.1) on `listener` until the
    /// [shutdown token](Api::shutdown_token) is cancelled (graceful: idle connections close
    /// and open SSE streams end at once, other requests finish).
    ///
    /// Connections are limited: see [`ApiOptions::request_timeout`],
    /// [`ApiOptions::idle_timeout`] and [`ApiOptions::max_connections`]. `accept` errors
    /// (such as running out of file descriptors) are logged and retried, never returned.
    ///
    /// # Errors
    /// None today; the `Result` leaves room for errors that stop the server.
    pub async fn serve(&self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        server::serve(
            listener,
            self.router(),
            self.inner.options.clone(),
            self.inner.shutdown.clone(),
        )
        .await;
        Ok(())
    }

    /// Counts an event stream in, unless half the connection limit is streaming already.
    fn open_event_stream(&self) -> Option<EventStreamSlot> {
        let max = (server::connection_limit(&self.inner.options) / 2).max(1);
        self.inner
            .event_streams
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| EventStreamSlot(self.clone()))
    }

    fn options(&self) -> &ApiOptions {
        &self.inner.options
    }
}

/// One open event stream, counted until dropped.
struct EventStreamSlot(Api);

impl Drop for EventStreamSlot {
    fn drop(&mut self) {
        self.0.inner.event_streams.fetch_sub(1, Ordering::AcqRel);
    }
}
