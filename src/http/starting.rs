//! [`ApiServer`]: one HTTP listener for the whole life of an instance — the probes while its
//! manager is still starting (retrying a server or cluster that is not ready), then the
//! manager's [`Api`] on the same listener and the connections already open.

use std::sync::{Arc, OnceLock};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::error::ErrorBody;
use super::options::ApiOptions;
use super::probes::{self, Readiness};
use super::server;
use super::state::Api;
use crate::manager::{StartProgress, StartStep};

/// Serves one listener from before the manager exists until the process stops.
///
/// Until [`ready`](Self::ready) is called (the manager has started), it answers
/// `GET /healthz` 200 (the process is alive), `GET /readyz` 503 with a [`Readiness`] whose
/// `starting` is true and whose reason says where the start stands (`starting: cannot open
/// bucket "roles": … (attempt 4), retrying in 2s`, from the
/// [`StartProgress`] it is given), and every other request 503
/// `{"error": "starting: …", "code": "starting"}` with `Retry-After: 1`. From `ready` on,
/// every request — on new connections and on those already open — is answered by
/// [`Api::router`].
///
/// ```no_run
/// use std::sync::Arc;
/// use nats_roles::http::{Api, ApiOptions, ApiServer};
/// # async fn run(client: async_nats::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let builder = nats_roles::RoleManager::builder(client, nats_roles::InstanceId::new("node-a")?);
/// let server = ApiServer::new(ApiOptions::default(), builder.start_progress());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let serving = tokio::spawn({
///     let server = server.clone();
///     async move { server.serve(listener).await }
/// });
/// let manager = Arc::new(builder.start().await?);
/// server.ready(Api::new(manager, ApiOptions::default()));
/// // ... on shutdown:
/// server.stop();
/// serving.await??;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ApiServer {
    inner: Arc<Inner>,
}

struct Inner {
    options: ApiOptions,
    progress: watch::Receiver<Option<StartProgress>>,
    /// The manager's API and its router, once started.
    api: OnceLock<(Api, Router)>,
    /// What answers until then.
    starting: Router,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("ready", &self.inner.api.get().is_some())
            .finish_non_exhaustive()
    }
}

impl ApiServer {
    /// A server in the starting state, reporting `progress` (see
    /// [`RoleManagerBuilder::start_progress`](crate::RoleManagerBuilder::start_progress)).
    /// `options` sets its connection limits ([`ApiOptions::request_timeout`],
    /// [`ApiOptions::idle_timeout`], [`ApiOptions::max_connections`]) for its whole life.
    #[must_use]
    pub fn new(options: ApiOptions, progress: watch::Receiver<Option<StartProgress>>) -> Self {
        let starting = super::with_response_headers(
            Router::new()
                .route("/healthz", get(probes::healthz))
                .route("/readyz", get(readyz))
                .fallback(starting),
        )
        .with_state(progress.clone());
        Self {
            inner: Arc::new(Inner {
                options,
                progress,
                api: OnceLock::new(),
                starting,
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// The manager has started: from now on `api` answers every request. Returns `false` (and
    /// changes nothing) if an API was set before.
    pub fn ready(&self, api: Api) -> bool {
        let router = api.router();
        self.inner.api.set((api, router)).is_ok()
    }

    /// The API set by [`ready`](Self::ready), if any.
    #[must_use]
    pub fn api(&self) -> Option<&Api> {
        self.inner.api.get().map(|(api, _)| api)
    }

    /// What `GET /readyz` answers now.
    #[must_use]
    pub fn readiness(&self) -> Readiness {
        match self.api() {
            Some(api) => api.readiness(),
            None => starting_readiness(self.inner.progress.borrow().as_ref()),
        }
    }

    /// Stops [`serve`](Self::serve) (idle connections close, requests in flight finish) and
    /// ends the API's event streams ([`Api::shutdown_token`]).
    pub fn stop(&self) {
        self.inner.shutdown.cancel();
        if let Some(api) = self.api() {
            api.shutdown_token().cancel();
        }
    }

    /// Serves `listener` (HTTP/1.1, with the connection limits of the options) until
    /// [`stop`](Self::stop).
    ///
    /// # Errors
    /// None today; the `Result` leaves room for errors that stop the server.
    pub async fn serve(&self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        let inner = self.inner.clone();
        let routes: server::Routes = Arc::new(move || {
            inner
                .api
                .get()
                .map_or_else(|| inner.starting.clone(), |(_, router)| router.clone())
        });
        server::serve(
            listener,
            routes,
            self.inner.options.clone(),
            self.inner.shutdown.clone(),
        )
        .await;
        Ok(())
    }
}

/// The one-line reason of a start that is not done: `starting: <progress>`.
fn reason(progress: Option<&StartProgress>) -> String {
    match progress {
        Some(p) => format!("starting: {p}"),
        None => "starting".to_owned(),
    }
}

/// `/readyz` while starting: `connected` once the connect step is done.
fn starting_readiness(progress: Option<&StartProgress>) -> Readiness {
    let reason = reason(progress);
    Readiness {
        status: "not_ready".to_owned(),
        connected: progress.is_some_and(|p| p.step != StartStep::Connect),
        caught_up: false,
        draining: false,
        shutting_down: false,
        healthy: None,
        starting: true,
        error: Some(reason.clone()),
        code: Some("not_ready".to_owned()),
        reasons: vec![reason],
    }
}

/// `Retry-After: 1` on a response.
fn retry_soon(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// `GET /readyz` while starting: 503.
async fn readyz(State(progress): State<watch::Receiver<Option<StartProgress>>>) -> Response {
    let readiness = starting_readiness(progress.borrow().as_ref());
    retry_soon((StatusCode::SERVICE_UNAVAILABLE, Json(readiness)).into_response())
}

/// Every other request while starting: 503 `starting`.
async fn starting(State(progress): State<watch::Receiver<Option<StartProgress>>>) -> Response {
    let body = ErrorBody {
        error: reason(progress.borrow().as_ref()),
        code: "starting".to_owned(),
    };
    retry_soon((StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_starting_readiness_names_the_step() {
        let r = starting_readiness(None);
        assert!(r.starting && !r.is_ready() && !r.connected, "{r:?}");
        assert_eq!(r.reasons, ["starting"]);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["starting"], true);
        assert_eq!(json["code"], "not_ready");
    }
}
