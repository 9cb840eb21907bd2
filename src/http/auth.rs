//! Admin bearer tokens and the audit log.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, StatusCode, header};

use super::error::ApiError;
use super::state::Api;

/// Who called, for the audit log: the peer address (and an `X-Forwarded-For` header, logged
/// as given, not trusted).
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub(crate) addr: String,
    pub(crate) forwarded_for: Option<String>,
}

impl Caller {
    pub(crate) fn new(
        connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
        headers: &HeaderMap,
    ) -> Self {
        Self {
            addr: connect.map_or_else(|| "unknown".to_owned(), |c| c.0.0.to_string()),
            forwarded_for: headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
                .map(|v| v.chars().take(200).collect()),
        }
    }
}

/// One admin request on its way: who asked for which action on which role (`-` for none),
/// once [`authorize`] accepted them; [`AdminCall::audited`] writes its audit line.
#[derive(Debug)]
pub(crate) struct AdminCall<'a> {
    caller: Caller,
    action: &'static str,
    role: &'a str,
}

impl<'a> AdminCall<'a> {
    /// Admits `request` for `action` on `role` if it carries `api`'s admin token (an audit
    /// line and the error response otherwise).
    pub(crate) fn admit(
        api: &Api,
        connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
        request: &Request,
        action: &'static str,
        role: &'a str,
    ) -> Result<Self, ApiError> {
        let headers = request.headers();
        let caller = Caller::new(connect, headers);
        authorize(
            api.options().admin_token.as_deref(),
            headers,
            &caller,
            action,
            role,
        )?;
        Ok(Self {
            caller,
            action,
            role,
        })
    }

    /// Writes the audit line of `result` (its outcome and detail from `done` when it
    /// worked, the error's code and message otherwise) and gives it back.
    pub(crate) fn audited<T>(
        &self,
        result: Result<T, ApiError>,
        done: impl FnOnce(&T) -> (&'static str, String),
    ) -> Result<T, ApiError> {
        match &result {
            Ok(answer) => {
                let (outcome, detail) = done(answer);
                audit(&self.caller, self.action, self.role, outcome, &detail);
            }
            Err(e) => audit(&self.caller, self.action, self.role, e.code, &e.message),
        }
        result
    }
}

/// Checks the `Authorization: Bearer <token>` header against the configured admin token;
/// writes an audit line for refusals.
fn authorize(
    configured: Option<&str>,
    headers: &HeaderMap,
    caller: &Caller,
    action: &str,
    role: &str,
) -> Result<(), ApiError> {
    let Some(expected) = configured else {
        audit_refused(caller, action, role, "admin_disabled");
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "admin_disabled",
            "admin actions are off: configure http.admin_token (or NATS_ROLES_ADMIN_TOKEN)",
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    match given {
        None => {
            audit_refused(caller, action, role, "missing_token");
            Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "admin actions need an `Authorization: Bearer <admin token>` header",
            ))
        }
        Some(token) if !constant_time_eq(token.as_bytes(), expected.as_bytes()) => {
            audit_refused(caller, action, role, "wrong_token");
            Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the admin token is wrong",
            ))
        }
        Some(_) => Ok(()),
    }
}

/// One audit line (target `audit`) at `$level` with the fields of docs/observability.md:
/// `action`, `role`, `caller`, `forwarded_for`, `outcome` and any further ones given.
macro_rules! audit_line {
    ($level:ident, $message:literal, $caller:expr, $action:expr, $role:expr, $outcome:expr
     $(, $field:ident = $value:expr)*) => {
        tracing::$level!(
            target: "audit",
            action = $action,
            role = $role,
            caller = %$caller.addr,
            forwarded_for = $caller.forwarded_for.as_deref().unwrap_or("-"),
            outcome = $outcome,
            $($field = $value,)*
            $message
        )
    };
}

/// Writes the audit line of a refused admin request.
fn audit_refused(caller: &Caller, action: &str, role: &str, outcome: &str) {
    audit_line!(warn, "admin request refused", caller, action, role, outcome);
}

/// Writes the audit line of an authorised admin action.
fn audit(caller: &Caller, action: &str, role: &str, outcome: &str, detail: &str) {
    audit_line!(
        info,
        "admin action",
        caller,
        action,
        role,
        outcome,
        detail = detail
    );
}

/// Compares in time independent of where the inputs differ (the length is not secret).
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
