//! The HTTP dashboard, JSON API and health probes of a [`RoleManager`](crate::RoleManager) (cargo feature `http`,
//! on by default; `nats-roles run` serves it).
//!
//! | method and path                 | what                                                     |
//! |---------------------------------|----------------------------------------------------------|
//! | `GET /`                         | the dashboard (one HTML page, live through SSE)          |
//! | `GET /dashboard.js`, `/dashboard.css` | the dashboard's script and style                   |
//! | `GET /healthz`                  | 200 while the process runs                               |
//! | `GET /readyz`                   | 200 when connected, caught up and no deadline was missed; 503 with reasons (also while the manager starts, with [`ApiServer`]) |
//! | `GET /api/roles`                | every role in the bucket ([`RoleList`]) |
//! | `GET /api/roles/{role}`         | one role ([`RoleView`]); 404 if unknown |
//! | `GET /api/instances`            | instances and what each holds ([`InstanceList`]) |
//! | `GET /metrics`                  | Prometheus text, when [`ApiOptions::metrics`] is set (404 otherwise) |
//! | `GET /api/events`               | server-sent events, one JSON [`EventView`] per transition, numbered by the [`EventJournal`] (SSE `id`) |
//! | `GET /api/events?since=N`       | the journal's events after `N` ([`EventPage`]): the last [`JOURNAL_CAPACITY`] transitions, `truncated` when some after `N` were dropped; 400 for a malformed cursor |
//! | `POST /api/roles/{role}/release`| admin: give up a role this instance holds                |
//! | `POST /api/roles/{role}/evict`  | admin: CAS-delete the role's lease (`{"revision": N}` optional) |
//! | `POST /api/roles/{role}/move`   | admin: hand the role to the instance `{"to": …}` names, and to nobody else (protocol Q13) |
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
mod journal;
mod metrics;
mod options;
mod placement;
mod probes;
mod roles;
mod self_view;
mod server;
mod starting;
mod state;

use axum::Router;
use axum::http::{HeaderName, HeaderValue, header};
use axum::routing::{get, post};
use tower_http::set_header::SetResponseHeaderLayer;

/// The JSON bodies of the API (`docs/http-api.md`).
pub use crate::inspect::{
    Candidates, EventView, HeldRole, HolderState, InstanceList, InstanceView, LocalView,
    MemberList, MemberView, RoleList, RoleView,
};
pub use error::ErrorBody;
pub use journal::{EventJournal, EventPage, JOURNAL_CAPACITY, JournalEntry, MAX_EVENT_TEXT};
pub use metrics::PROMETHEUS_CONTENT_TYPE;
pub use options::{ApiOptions, MetricsText};
pub use probes::Readiness;
pub use self_view::{MAX_WAIT, SelfGroup, SelfRole, SelfView};
pub use starting::ApiServer;
pub use state::Api;

/// Headers set on every response that has none of its own.
const RESPONSE_HEADERS: [(HeaderName, &str); 3] = [
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::CACHE_CONTROL, "no-store"),
    (header::REFERRER_POLICY, "no-referrer"),
];

/// `router` with the [`RESPONSE_HEADERS`] on every response that has none of its own.
fn with_response_headers<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    RESPONSE_HEADERS
        .into_iter()
        .fold(router, |router, (name, value)| {
            router.layer(SetResponseHeaderLayer::if_not_present(
                name,
                HeaderValue::from_static(value),
            ))
        })
}

impl Api {
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
            .route("/api/roles/{role}/move", post(admin::move_role))
            .route("/api/drain", post(admin::drain))
            .route("/api/instances", get(roles::instances))
            .route("/api/members", get(placement::members))
            .route("/api/self", get(self_view::get))
            .route("/api/placement/freeze", post(placement::freeze))
            .route("/api/plan/simulate", post(placement::simulate))
            .route("/api/events", get(events::get))
            .route("/metrics", get(metrics::scrape))
            .fallback(error::no_route)
            // After the routes: it applies to the routes present.
            .method_not_allowed_fallback(error::wrong_method);
        with_response_headers(router).with_state(self.clone())
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
        let router = self.router();
        server::serve(
            listener,
            std::sync::Arc::new(move || router.clone()),
            self.options().clone(),
            self.shutdown_token(),
        )
        .await;
        Ok(())
    }
}
