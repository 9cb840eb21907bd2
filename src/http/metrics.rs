//! `GET /metrics`: the application's metrics as Prometheus text.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::Api;

pub use crate::metrics::PROMETHEUS_CONTENT_TYPE;

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
