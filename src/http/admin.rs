//! Admin actions: `POST /api/roles/{role}/release`, `POST /api/roles/{role}/evict`,
//! `POST /api/roles/{role}/move` and
//! `POST /api/drain`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::auth::AdminCall;
use super::error::ApiError;
use super::roles::role_name;
use super::state::Api;
use crate::inspect::{EvictError, Evicted, Expect, evict as evict_lease};
use crate::names::RoleName;

/// Longest cooldown a release accepts.
const MAX_COOLDOWN: Duration = Duration::from_secs(24 * 3600);

/// Largest admin request body, in bytes: the bodies are small JSON objects.
pub(crate) const MAX_ADMIN_BODY: usize = 4 * 1024;

/// Body of `POST /api/roles/{role}/release` (optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseBody {
    /// How long this instance stays away from the role (`"30s"`, `"5m"`).
    cooldown: Option<String>,
}

/// Body of `POST /api/roles/{role}/evict` (optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EvictBody {
    /// Evict only if the lease is still at this revision.
    revision: Option<u64>,
    /// Evict only if the role is still in this term.
    term: Option<u64>,
}

/// Answer of a release.
#[derive(Debug, Serialize)]
pub(crate) struct Released {
    role: String,
    instance: String,
    term: u64,
    /// Whether this instance has left the role already (else it is still draining: 202).
    released: bool,
    cooldown_ms: u64,
}

/// Reads an admin request's body, only ever after [`AdminCall::admit`] accepted the caller: at most
/// [`MAX_ADMIN_BODY`] bytes (413 `body_too_large` otherwise, before reading anything when the
/// `Content-Length` says so), within the request timeout (408 `request_timeout`).
pub(super) async fn read_body(api: &Api, request: Request) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("admin request bodies are at most {MAX_ADMIN_BODY} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_ADMIN_BODY as u64) {
        return Err(too_large());
    }
    let body: Body = request.into_body();
    let timeout = api.options().request_timeout;
    match tokio::time::timeout(timeout, Limited::new(body, MAX_ADMIN_BODY).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(e)) => Err(ApiError::bad_request(format!(
            "cannot read the request body: {e}"
        ))),
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!("the request body did not arrive within {timeout:?}"),
        )),
    }
}

/// An empty body is the default; anything else must be a JSON object of `T`.
pub(super) fn parse_body<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))
}

pub(crate) async fn release(
    State(api): State<Api>,
    Path(role): Path<String>,
    connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    request: Request,
) -> Result<(StatusCode, Json<Released>), ApiError> {
    let call = AdminCall::admit(&api, connect, &request, "release", &role)?;
    let result = match read_body(&api, request).await {
        Ok(body) => do_release(&api, &role, &body).await,
        Err(e) => Err(e),
    };
    call.audited(result, |(_, Json(r))| {
        (
            if r.released { "released" } else { "releasing" },
            format!("term {}, cooldown {} ms", r.term, r.cooldown_ms),
        )
    })
}

async fn do_release(
    api: &Api,
    role: &str,
    body: &Bytes,
) -> Result<(StatusCode, Json<Released>), ApiError> {
    let name = role_name(role)?;
    let body: ReleaseBody = parse_body(body)?;
    let cooldown = match body.cooldown.as_deref() {
        None => api.options().release_cooldown,
        Some(text) => humantime::parse_duration(text)
            .ok()
            .filter(|d| *d <= MAX_COOLDOWN)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "cooldown {text:?} is not a duration of at most 24h (e.g. \"30s\", \"5m\")"
                ))
            })?,
    };
    let manager = api.manager();
    let Some(leadership) = manager.leadership(&name) else {
        return Err(not_leader(api, &name));
    };
    let mut status = manager
        .role(&name)
        .map(|h| h.watch())
        .ok_or_else(|| not_leader(api, &name))?;
    manager
        .release(&name, cooldown)
        .map_err(|_| not_leader(api, &name))?;
    let left = tokio::time::timeout(
        api.options().release_wait,
        status.wait_for(|s| !s.is_leader() || s.term != Some(leadership.term())),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    Ok((
        if left {
            StatusCode::OK
        } else {
            StatusCode::ACCEPTED
        },
        Json(Released {
            role: name.to_string(),
            instance: manager.instance_id().to_string(),
            term: leadership.term(),
            released: left,
            cooldown_ms: u64::try_from(cooldown.as_millis()).unwrap_or(u64::MAX),
        }),
    ))
}

/// 404 for a role nobody knows, 409 for one this instance does not hold.
fn not_leader(api: &Api, role: &RoleName) -> ApiError {
    let manager = api.manager();
    match api.role(role) {
        None => ApiError::unknown_role(role.as_str()),
        Some(view) => ApiError::new(
            StatusCode::CONFLICT,
            "not_leader",
            format!(
                "{} does not hold role {role} ({}); release it on its holder, or evict it",
                manager.instance_id(),
                view.holder
                    .map_or_else(|| "nobody does".to_owned(), |h| format!("{h} does")),
            ),
        ),
    }
}

pub(crate) async fn evict(
    State(api): State<Api>,
    Path(role): Path<String>,
    connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    request: Request,
) -> Result<Json<Evicted>, ApiError> {
    let call = AdminCall::admit(&api, connect, &request, "evict", &role)?;
    let result = match read_body(&api, request).await {
        Ok(body) => do_evict(&api, &role, &body).await,
        Err(e) => Err(e),
    };
    call.audited(result, |Json(e)| {
        (
            "evicted",
            format!(
                "holder {}, term {}, revision {}",
                e.holder.as_deref().unwrap_or("<foreign value>"),
                e.term.map_or_else(|| "?".to_owned(), |t| t.to_string()),
                e.revision
            ),
        )
    })
}

async fn do_evict(api: &Api, role: &str, body: &Bytes) -> Result<Json<Evicted>, ApiError> {
    let name = role_name(role)?;
    let body: EvictBody = parse_body(body)?;
    let store = api.manager().store();
    let expect = Expect {
        revision: body.revision,
        term: body.term,
    };
    evict_lease(store, &name, expect, api.options().kv_timeout)
        .await
        .map(Json)
        .map_err(|e| {
            let message = e.to_string();
            match e {
                EvictError::UnknownRole { .. } => ApiError::unknown_role(role),
                EvictError::NotHeld { .. } => {
                    ApiError::new(StatusCode::CONFLICT, "not_held", message)
                }
                EvictError::RevisionMismatch { .. } => {
                    ApiError::new(StatusCode::CONFLICT, "revision_mismatch", message)
                }
                EvictError::TermMismatch { .. } => {
                    ApiError::new(StatusCode::CONFLICT, "term_mismatch", message)
                }
                EvictError::Changed { .. } => {
                    ApiError::new(StatusCode::CONFLICT, "changed", message)
                }
                EvictError::Timeout { .. } => {
                    ApiError::new(StatusCode::GATEWAY_TIMEOUT, "outcome_unknown", message)
                }
                _ => ApiError::new(StatusCode::BAD_GATEWAY, "kv_error", message),
            }
        })
}

/// Body of `POST /api/drain` (optional; default `{"draining": true}`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DrainBody {
    /// Start (`true`) or end (`false`) draining.
    draining: bool,
}

impl Default for DrainBody {
    fn default() -> Self {
        Self { draining: true }
    }
}

/// Answer of a drain request.
#[derive(Debug, Serialize)]
pub(crate) struct Drained {
    instance: String,
    /// Whether the instance drains now: the flag just set OR an operator's drain record.
    draining: bool,
    /// Who asked for the drain record naming this instance (`nats-roles drain`), if there is
    /// one: `{"draining": false}` does not end that drain.
    #[serde(skip_serializing_if = "Option::is_none")]
    drain_record_by: Option<String>,
}

/// `POST /api/drain`: placement moves every role of this instance away by graceful hand-over
/// (docs/placement.md); `{"draining": false}` ends it. 409 when placement is off.
pub(crate) async fn drain(
    State(api): State<Api>,
    connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    request: Request,
) -> Result<Json<Drained>, ApiError> {
    let call = AdminCall::admit(&api, connect, &request, "drain", "-")?;
    let body = read_body(&api, request).await;
    let result = body
        .and_then(|body| parse_body::<DrainBody>(&body))
        .and_then(|b| {
            let manager = api.manager();
            if manager.set_draining(b.draining) {
                Ok(Json(Drained {
                    instance: manager.instance_id().to_string(),
                    draining: manager.is_draining(),
                    drain_record_by: manager.drain_record().map(|r| r.by),
                }))
            } else {
                Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "placement_disabled",
                    "placement is not enabled on this instance",
                ))
            }
        });
    call.audited(result, |Json(d)| ("ok", format!("draining {}", d.draining)))
}

/// Longest wait a move request over HTTP may ask for.
const MAX_MOVE_WAIT: Duration = Duration::from_secs(60);

/// Body of `POST /api/roles/{role}/move`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MoveBody {
    /// The instance that should hold the role.
    to: String,
    /// How long to wait for the target to hold it (`"10s"`, default 10 s, at most 60 s).
    timeout: Option<String>,
    /// How long placement keeps it on the target (`"10m"` default, `"0s"`: not at all).
    hold: Option<String>,
    /// How long the other candidates hold back at the vacancy (`"1s"` default; at most the
    /// role's TTL).
    grace: Option<String>,
}

/// Answer of a move: what came of it.
#[derive(Debug, Serialize)]
pub(crate) struct Moved {
    role: String,
    to: String,
    /// `moved` or `already_there`.
    outcome: &'static str,
    /// The target's term.
    term: u64,
    /// From the request to the target's lease (ms), for `moved`.
    #[serde(skip_serializing_if = "Option::is_none")]
    took_ms: Option<u64>,
}

/// `POST /api/roles/{role}/move` (admin): hands the role to the instance named in the body,
/// and to nobody else (protocol Q13; `nats-roles move`). 200 when the target holds it; 409
/// with the outcome as the error code when it did not happen (`vacant`, `target_not_live`,
/// `in_progress`, `refused`: the message names the reason); 504 `timed_out` naming the
/// holder then.
pub(crate) async fn move_role(
    State(api): State<Api>,
    Path(role): Path<String>,
    connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    request: Request,
) -> Result<Json<Moved>, ApiError> {
    let call = AdminCall::admit(&api, connect, &request, "move", &role)?;
    let result = match read_body(&api, request).await {
        Ok(body) => do_move(&api, &role, &body).await,
        Err(e) => Err(e),
    };
    call.audited(result, |Json(m)| {
        (m.outcome, format!("to {}, term {}", m.to, m.term))
    })
}

fn duration_field(
    name: &str,
    value: Option<&str>,
    default: Duration,
) -> Result<Duration, ApiError> {
    match value {
        None => Ok(default),
        Some(v) => humantime::parse_duration(v).map_err(|e| {
            ApiError::bad_request(format!(
                "{name}: {v:?} is not a duration such as \"10s\": {e}"
            ))
        }),
    }
}

async fn do_move(api: &Api, role: &str, body: &Bytes) -> Result<Json<Moved>, ApiError> {
    use crate::moves::{MoveOptions, MoveOutcome};
    let name = role_name(role)?;
    if name.slot().is_some() {
        // Q13's move records name roles, not slots, and a target holding another slot of the
        // role could not take it (Q15).
        return Err(ApiError::bad_request(format!(
            "{role} is a slot of role {}: slots are not moved (release it instead)",
            name.base_role()
        )));
    }
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "a JSON body naming the target is needed: {\"to\": \"INSTANCE\"}",
        ));
    }
    let body: MoveBody = parse_body(body)?;
    let to = crate::names::InstanceId::new(body.to.as_str()).map_err(|e| {
        ApiError::bad_request(format!(
            "to: {:?} is not a valid instance id: it {e}",
            body.to
        ))
    })?;
    let defaults = MoveOptions::default();
    let mut options = MoveOptions::default()
        .with_timeout(duration_field(
            "timeout",
            body.timeout.as_deref(),
            defaults.timeout,
        )?)
        .with_hold(duration_field("hold", body.hold.as_deref(), defaults.hold)?)
        .with_grace(duration_field(
            "grace",
            body.grace.as_deref(),
            defaults.grace,
        )?);
    if options.timeout.is_zero() || options.timeout > MAX_MOVE_WAIT {
        return Err(ApiError::bad_request(format!(
            "timeout: must be above zero and at most {}",
            crate::core::fmt_duration(MAX_MOVE_WAIT)
        )));
    }
    if options.hold > MoveOptions::MAX_HOLD {
        return Err(ApiError::bad_request(format!(
            "hold: must be at most {}",
            crate::core::fmt_duration(MoveOptions::MAX_HOLD)
        )));
    }
    let manager = api.manager();
    options.by = format!("http ({})", manager.instance_id());
    let outcome = manager
        .move_role(&name, &to, &options)
        .await
        .map_err(|e| match e {
            crate::Error::Timeout(_) => ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "outcome_unknown",
                e.to_string(),
            ),
            crate::Error::InvalidSetting(_) => ApiError::bad_request(e.to_string()),
            e => ApiError::new(StatusCode::BAD_GATEWAY, "kv_error", e.to_string()),
        })?;
    let conflict = |message: String| ApiError::new(StatusCode::CONFLICT, outcome.as_str(), message);
    match &outcome {
        MoveOutcome::Moved { term, took } => Ok(Json(Moved {
            role: name.to_string(),
            to: to.to_string(),
            outcome: outcome.as_str(),
            term: *term,
            took_ms: Some(u64::try_from(took.as_millis()).unwrap_or(u64::MAX)),
        })),
        MoveOutcome::AlreadyThere { term } => Ok(Json(Moved {
            role: name.to_string(),
            to: to.to_string(),
            outcome: outcome.as_str(),
            term: *term,
            took_ms: None,
        })),
        MoveOutcome::Vacant => Err(conflict(format!("{name} is not held by anyone"))),
        MoveOutcome::TargetNotLive => Err(conflict(format!(
            "{to} has no live session for {name}'s TTL"
        ))),
        MoveOutcome::InProgress { to: other, state } => Err(conflict(format!(
            "another move of {name} (to {other}) is {}",
            state.as_str()
        ))),
        MoveOutcome::Refused(reason) => Err(conflict(format!(
            "{to} refused ({reason}): {}",
            reason.describe()
        ))),
        MoveOutcome::TimedOut { holder } => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timed_out",
            format!(
                "{to} did not hold {name} within {} (the request was withdrawn); {}",
                crate::core::fmt_duration(options.timeout),
                holder.as_ref().map_or_else(
                    || "nobody holds it now".to_owned(),
                    |h| format!("held by {h} now")
                )
            ),
        )),
    }
}
