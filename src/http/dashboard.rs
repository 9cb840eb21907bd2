//! `GET /`: the dashboard, one self-contained HTML page (inline CSS and JS, no external
//! assets) that reads `/api/roles` and `/api/instances` and follows `/api/events`.

use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse};

/// The page (embedded at build time).
const PAGE: &str = include_str!("dashboard.html");

/// Only this origin, inline code of the page itself, no frames, no forms.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

pub(crate) async fn page() -> impl IntoResponse {
    (
        [
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            ),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        ],
        Html(PAGE),
    )
}
