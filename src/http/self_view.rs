//! `GET /api/self`: the roles this instance holds, for a follower in any language (a sidecar's
//! application polling its own instance). `?since=<version>&wait=30s` blocks until the answer
//! differs from the one that had `version` (long-poll), at most [`MAX_WAIT`].
//!
//! Fencing tokens are redacted, unless the caller is on loopback and presents the local token
//! (`http.local_token`) as `Authorization: Bearer <token>`: then the full token is given, so
//! the local application can fence its writes with it.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{StatusCode, header};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;

use super::auth::constant_time_eq;
use super::error::ApiError;
use super::state::Api;
use crate::inspect::{format_time, redact_token};

/// Longest a `GET /api/self?wait=…` blocks.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Query of `GET /api/self`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SelfQuery {
    /// The `version` of the answer the caller has.
    since: Option<String>,
    /// How long to wait for a change (`30s`, `500ms`; at most [`MAX_WAIT`]).
    wait: Option<String>,
}

/// One role this instance holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SelfRole {
    /// The role.
    pub role: String,
    /// Its term.
    pub term: u64,
    /// The fencing token: redacted, or whole for a loopback caller with the local token.
    pub token: String,
    /// When this term began (this instance's clock, RFC 3339).
    pub held_since: Option<String>,
}

/// `GET /api/self`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SelfView {
    /// This instance.
    pub instance: String,
    /// Changes whenever the held roles or their terms change; pass it back as `since`.
    pub version: String,
    /// Whether `version` differs from the `since` asked with (always `true` without one).
    pub changed: bool,
    /// The roles this instance holds now, by name (group members included).
    pub roles: Vec<SelfRole>,
    /// The role groups this instance takes part in (protocol Q14): the count it acts on and
    /// the members it holds. Left out without groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<SelfGroup>,
}

/// One role group of this instance in `GET /api/self`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SelfGroup {
    /// The group.
    pub group: String,
    /// The count this instance acts on (the count record's, else the configured one).
    pub count: u32,
    /// The indexes of the members it holds (from promotion until the revoke returned).
    pub held: Vec<u32>,
}

/// The answer now; tokens whole when `whole`.
fn current(api: &Api, whole: bool, since: Option<&str>) -> SelfView {
    let manager = api.manager();
    let mut roles: Vec<SelfRole> = manager
        .statuses()
        .into_iter()
        .filter(|s| s.is_leader())
        .filter_map(|s| {
            let token = s.token?;
            Some(SelfRole {
                role: s.role.to_string(),
                term: token.term(),
                token: if whole {
                    token.expose()
                } else {
                    redact_token(&token)
                },
                held_since: s.held_since.map(format_time),
            })
        })
        .collect();
    roles.sort_by(|a, b| a.role.cmp(&b.role));
    let groups: Vec<SelfGroup> = manager
        .groups()
        .iter()
        .map(|g| {
            let now = g.current();
            SelfGroup {
                group: g.name().to_string(),
                count: now.count,
                held: now.held.into_iter().collect(),
            }
        })
        .collect();
    // FNV-1a over the (role, term) pairs and the groups' counts and members: the same
    // holdings give the same version.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |bytes: &mut dyn Iterator<Item = u8>| {
        for b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for r in &roles {
        mix(&mut r.role.bytes().chain([0xff]).chain(r.term.to_be_bytes()));
    }
    for g in &groups {
        mix(&mut g.group.bytes().chain([0xfe]).chain(g.count.to_be_bytes()));
        for i in &g.held {
            mix(&mut i.to_be_bytes().into_iter());
        }
    }
    let version = format!("{h:016x}");
    SelfView {
        instance: manager.instance_id().to_string(),
        changed: since != Some(version.as_str()),
        version,
        roles,
        groups,
    }
}

/// Whether the caller may see whole tokens: on loopback, with the configured local token.
fn local_caller(
    api: &Api,
    connect: Option<&ConnectInfo<SocketAddr>>,
    request: &Request,
) -> Result<bool, ApiError> {
    let Some(expected) = api.options().local_token.as_deref() else {
        return Ok(false);
    };
    let Some(given) = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return Ok(false);
    };
    let loopback = connect.is_some_and(|c| c.0.ip().is_loopback());
    if !loopback || !constant_time_eq(given.trim().as_bytes(), expected.as_bytes()) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the local token is wrong or the request does not come from loopback",
        ));
    }
    Ok(true)
}

/// `GET /api/self[?since=V&wait=30s]`.
pub(crate) async fn get(
    State(api): State<Api>,
    connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    query: Result<Query<SelfQuery>, QueryRejection>,
    request: Request,
) -> Result<Json<SelfView>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let whole = local_caller(&api, connect.as_ref().map(|c| &c.0), &request)?;
    let wait = match query.wait.as_deref() {
        None => Duration::ZERO,
        Some(w) => humantime::parse_duration(w)
            .map_err(|e| ApiError::bad_request(format!("wait {w:?} is not a duration: {e}")))?,
    };
    if wait > MAX_WAIT {
        return Err(ApiError::bad_request(format!(
            "wait is at most {}s",
            MAX_WAIT.as_secs()
        )));
    }
    let since = query.since.as_deref();
    // Subscribe before the first look: no change falls in between.
    let mut events = api.manager().events();
    let now = current(&api, whole, since);
    if now.changed || wait.is_zero() {
        return Ok(Json(now));
    }
    let Some(_slot) = api.open_event_stream() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            "too many waiting requests and event streams are open; retry later",
        ));
    };
    let deadline = tokio::time::Instant::now() + wait;
    let shutdown = api.shutdown_token();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep_until(deadline) => break,
            event = events.recv() => match event {
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    let view = current(&api, whole, since);
                    if view.changed {
                        return Ok(Json(view));
                    }
                }
                Err(RecvError::Closed) => break,
            },
        }
    }
    Ok(Json(current(&api, whole, since)))
}
