//! `GET /`: the dashboard, one HTML page with its script (`GET /dashboard.js`) and style
//! (`GET /dashboard.css`), no external assets; it reads `/api/roles`, `/api/instances` and
//! `/api/members`, lists the recent transitions of the journal (`/api/events?since=0`) and
//! follows `/api/events`. Its admin buttons (release, evict, drain, freeze) send the admin
//! token the operator typed in (kept in `sessionStorage`) after a confirmation.

use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse};

/// The page (embedded at build time).
const PAGE: &str = include_str!("dashboard.html");
/// Its script.
const SCRIPT: &str = include_str!("dashboard.js");
/// Its style.
const STYLE: &str = include_str!("dashboard.css");

/// Only this origin's script, style and API (no inline code at all), no frames, no forms.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                              connect-src 'self'; img-src data:; base-uri 'none'; \
                              form-action 'none'; frame-ancestors 'none'";

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

pub(crate) async fn script() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/javascript; charset=utf-8"),
        )],
        SCRIPT,
    )
}

pub(crate) async fn style() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/css; charset=utf-8"),
        )],
        STYLE,
    )
}
