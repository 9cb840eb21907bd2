//! `GET /metrics`: the application's metrics as Prometheus text.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::Api;
use super::error::ApiError;

pub use crate::metrics::PROMETHEUS_CONTENT_TYPE;

/// Produces the body of `GET /metrics` (Prometheus text) on each scrape, or why it cannot.
#[derive(Clone)]
pub struct MetricsText(Arc<dyn Fn() -> Result<String, String> + Send + Sync>);

impl MetricsText {
    /// A source calling `render` per scrape.
    pub fn new(render: impl Fn() -> Result<String, String> + Send + Sync + 'static) -> Self {
        Self(Arc::new(render))
    }

    fn render(&self) -> Result<String, String> {
        (self.0)()
    }
}

impl std::fmt::Debug for MetricsText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsText(..)")
    }
}

pub(super) async fn scrape(State(api): State<Api>) -> Response {
    let Some(source) = &api.options().metrics else {
        return ApiError::not_found("metrics are not served by this instance").into_response();
    };
    match source.render() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(PROMETHEUS_CONTENT_TYPE),
            )],
            text,
        )
            .into_response(),
        Err(why) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics_unavailable",
            format!("cannot collect metrics: {why}"),
        )
        .into_response(),
    }
}
