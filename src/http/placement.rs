//! Placement endpoints: `GET /api/members`, `POST /api/placement/freeze` (admin) and
//! `POST /api/plan/simulate` (admin).

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::admin::{parse_body, read_body};
use super::auth::AdminCall;
use super::error::ApiError;
use super::state::Api;
use crate::inspect::MemberList;
use crate::placement::{FreezeRecord, Simulation, WhatIf};

/// `GET /api/members`: every placement member, planned and held roles, freeze, disagreements.
pub(crate) async fn members(State(api): State<Api>) -> Json<MemberList> {
    Json(api.manager().member_list())
}

/// Body of `POST /api/placement/freeze` (optional; default `{"frozen": true}`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FreezeBody {
    /// Freeze (`true`) or unfreeze (`false`).
    #[serde(default = "yes")]
    frozen: bool,
    /// Why (shown on every dashboard), at most 256 bytes.
    #[serde(default)]
    reason: Option<String>,
}

fn yes() -> bool {
    true
}

impl Default for FreezeBody {
    fn default() -> Self {
        Self {
            frozen: true,
            reason: None,
        }
    }
}

/// Answer of a freeze request.
#[derive(Debug, Serialize)]
pub(crate) struct FreezeAnswer {
    frozen: bool,
    reason: Option<String>,
}

/// `POST /api/placement/freeze`: freezes (or with `{"frozen": false}` unfreezes) the voluntary
/// moves of every instance by writing (deleting) the bucket's freeze record. Vacant roles are
/// still taken.
pub(crate) async fn freeze(
    State(api): State<Api>,
    connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    request: Request,
) -> Result<Json<FreezeAnswer>, ApiError> {
    let call = AdminCall::admit(&api, connect, &request, "freeze", "-")?;
    let result = match read_body(&api, request)
        .await
        .and_then(|body| parse_body::<FreezeBody>(&body))
    {
        Err(e) => Err(e),
        Ok(b)
            if b.reason
                .as_ref()
                .is_some_and(|r| r.len() > FreezeRecord::MAX_REASON_LEN) =>
        {
            Err(ApiError::bad_request(format!(
                "reason is longer than {} bytes",
                FreezeRecord::MAX_REASON_LEN
            )))
        }
        Ok(b) => {
            let reason = b.frozen.then(|| b.reason.clone().unwrap_or_default());
            api.manager()
                .set_freeze(reason.as_deref())
                .await
                .map(|()| {
                    Json(FreezeAnswer {
                        frozen: b.frozen,
                        reason,
                    })
                })
                .map_err(|e| {
                    ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        "kv_error",
                        format!("cannot write the freeze record: {e}"),
                    )
                })
        }
    };
    call.audited(result, |Json(a)| {
        (
            "ok",
            if a.frozen {
                format!("frozen: {}", a.reason.as_deref().unwrap_or(""))
            } else {
                "unfrozen".to_owned()
            },
        )
    })
}

/// `POST /api/plan/simulate`: the moves placement would make from this instance's view after
/// `{"drain": [ids], "leave": [ids], "join": [{"id", "weight", "zone"}]}`. Changes nothing.
pub(crate) async fn simulate(
    State(api): State<Api>,
    connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    request: Request,
) -> Result<Json<Simulation>, ApiError> {
    let call = AdminCall::admit(&api, connect, &request, "simulate", "-")?;
    let result = read_body(&api, request)
        .await
        .and_then(|body| parse_body::<WhatIf>(&body))
        .and_then(|changes| {
            api.manager()
                .simulate(&changes)
                .map(Json)
                .map_err(ApiError::bad_request)
        });
    call.audited(result, |Json(s)| {
        (
            "ok",
            format!("{} moves, {} fills", s.moves.len(), s.fills.len()),
        )
    })
}
