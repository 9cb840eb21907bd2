//! JSON errors: `{"error": "<message>", "code": "<machine-readable code>"}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ErrorBody {
    /// What went wrong, for people.
    pub error: String,
    /// What went wrong, for programs (`unknown_role`, `unauthorized`, ...).
    pub code: String,
}

/// An error response: a status and an [`ErrorBody`].
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub(crate) fn unknown_role(role: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown_role",
            format!("no role {role:?} in the bucket"),
        )
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(ErrorBody {
                error: self.message,
                code: self.code.to_owned(),
            }),
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"nats-roles admin\""),
            );
        }
        response
    }
}

/// Fallback for paths that match no route.
pub(crate) async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no endpoint at {}", uri.path()))
}

/// Fallback for a known path with a method it does not support (the `Allow` header lists the
/// supported ones).
pub(crate) async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not supported on {}", uri.path()),
    )
}
