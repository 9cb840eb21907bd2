//! `GET /healthz` and `GET /readyz`.

use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::state::Api;
use crate::core::DemoteReason;

/// What `/readyz` answers (200 when `ready`, else 503).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Readiness {
    /// `ready` or `not_ready`.
    pub status: String,
    /// Whether the NATS connection is up.
    pub connected: bool,
    /// Whether the bucket watcher has delivered the bucket's current state.
    pub caught_up: bool,
    /// Whether the instance drains (placement: it hands its roles over and takes none another
    /// member is preferred for) — [`RoleManager::is_draining`](crate::RoleManager::is_draining),
    /// the flag its membership record and `GET /api/members` show. A draining instance is
    /// still ready: it serves and holds roles until they are handed over.
    pub draining: bool,
    /// Whether the instance is shutting down ([`Api::drain`]): not ready.
    #[serde(default)]
    pub shutting_down: bool,
    /// Whether the manager is still starting (`nats-roles run` and [`ApiServer`](super::ApiServer)
    /// serve `/readyz` before the manager exists; the reason says what it is retrying).
    /// Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub starting: bool,
    /// Whether the health checker finds the instance fit to hold roles
    /// ([`HealthState::healthy`](crate::health::HealthState::healthy)); absent without a
    /// health checker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
    /// Why it is not ready (empty when ready).
    pub reasons: Vec<String>,
    /// The reasons in one line (present when not ready), like every error body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `not_ready` when not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl Readiness {
    /// Whether the instance is ready.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.reasons.is_empty()
    }
}

impl Api {
    /// The readiness of this instance: connected to NATS, bucket watcher caught up, healthy
    /// (no release for ill health in force, see
    /// [`RoleManager::health`](crate::RoleManager::health)), no held role past its deadline,
    /// no role that missed its deadline (renewals failing) within
    /// [`missed_deadline_window`](super::ApiOptions::missed_deadline_window), no role that
    /// cannot campaign or renew because of a failure (it keeps retrying; see
    /// [`RoleStatus::last_error`](crate::RoleStatus::last_error)), and not shutting down.
    #[must_use]
    pub fn readiness(&self) -> Readiness {
        let manager = self.manager();
        let connected = manager.is_connected();
        let caught_up = manager.is_caught_up();
        let shutting_down = self.is_draining();
        let draining = manager.is_draining();
        let mut reasons = Vec::new();
        if shutting_down {
            reasons.push("shutting down".to_owned());
        }
        if !connected {
            reasons.push("not connected to NATS".to_owned());
        }
        if !caught_up {
            reasons.push("the bucket watcher has not caught up yet".to_owned());
        }
        let health = manager.health();
        if let Some(reason) = health.as_ref().and_then(crate::health::HealthState::reason) {
            reasons.push(reason);
        }
        let now = SystemTime::now();
        let window = self.options().missed_deadline_window;
        for status in manager.statuses() {
            let role = &status.role;
            if status.is_leader() && !manager.is_leader(role) {
                reasons.push(format!(
                    "role {role}: still marked leader past its deadline"
                ));
            }
            let ago = now
                .duration_since(status.last_transition)
                .unwrap_or(Duration::ZERO);
            if !status.is_leader()
                && status.last_demote_reason == Some(DemoteReason::DeadlineExpired)
                && ago < window
            {
                reasons.push(format!(
                    "role {role}: missed its deadline {} s ago (renewals failed)",
                    ago.as_secs()
                ));
            }
            if let Some(err) = &status.last_error {
                if status.state == crate::status::RoleState::Stopped {
                    // Nothing retries a stopped role (an abandoned one: its driver failed).
                    reasons.push(format!("role {role}: {err}"));
                } else {
                    reasons.push(format!(
                        "role {role} cannot campaign or renew: {err} (retrying)"
                    ));
                }
            }
        }
        let ready = reasons.is_empty();
        Readiness {
            status: if ready { "ready" } else { "not_ready" }.to_owned(),
            connected,
            caught_up,
            draining,
            shutting_down,
            starting: false,
            healthy: health.map(|h| h.healthy),
            error: (!ready).then(|| reasons.join("; ")),
            code: (!ready).then(|| "not_ready".to_owned()),
            reasons,
        }
    }
}

/// `GET /healthz`: the process is alive and serving.
pub(crate) async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// `GET /readyz`.
pub(crate) async fn readyz(State(api): State<Api>) -> Response {
    let readiness = api.readiness();
    let status = if readiness.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(readiness)).into_response()
}
