//! Errors of the public API.

use std::time::Duration;

use crate::core::FailureKind;
use crate::names::RoleName;

/// Errors returned by the role manager and leadership handles.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid (see the problems listed).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Connecting to NATS failed.
    #[error("cannot connect to NATS: {0}")]
    Connect(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The bucket does not exist and `auto_create` is off, or it disappeared.
    #[error("KV bucket {bucket:?} does not exist (create it, or enable bucket.auto_create)")]
    BucketNotFound {
        /// Bucket name.
        bucket: String,
    },
    /// The bucket expires entries by `max_age` (no per-key TTLs) and its `max_age` is shorter
    /// than a role's TTL: the server would delete a live lease before its holder's deadline.
    #[error(
        "bucket {bucket:?} has max_age {max_age:?}, shorter than the TTL {ttl:?} of role {role}: \
         leases would vanish while held (raise max_age or lower the TTL)"
    )]
    BucketMaxAgeTooShort {
        /// Bucket name.
        bucket: String,
        /// The bucket's `max_age`.
        max_age: Duration,
        /// The role's TTL.
        ttl: Duration,
        /// The role.
        role: RoleName,
    },
    /// The NATS user lacks a permission the manager needs.
    #[error("permission denied by the NATS server: {detail}")]
    PermissionDenied {
        /// What was denied.
        detail: String,
    },
    /// A JetStream request failed (transient: retry later).
    #[error("JetStream request failed: {0}")]
    JetStream(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A KV operation failed for a classified reason.
    #[error("KV operation failed: {}", .0.as_str())]
    Kv(FailureKind),
    /// The operation did not finish in time; its effect is unknown.
    #[error("operation timed out after {0:?}; its outcome is unknown")]
    Timeout(Duration),
    /// A fenced write was rejected: this term is over (or its deadline has passed).
    #[error("fenced write rejected: the term of role {role} is no longer current")]
    Fenced {
        /// The role.
        role: RoleName,
    },
    /// The role is not managed by this manager.
    #[error("role {0} is not managed here")]
    UnknownRole(RoleName),
    /// The role is already managed.
    #[error("role {0} is already managed")]
    RoleExists(RoleName),
    /// The manager has been shut down.
    #[error("the role manager has stopped")]
    Stopped,
    /// Graceful shutdown did not finish in time; the listed roles may still be held until
    /// their TTL expires.
    #[error("shutdown timed out after {timeout:?}; roles not released: {roles:?}")]
    ShutdownTimeout {
        /// The timeout.
        timeout: Duration,
        /// Roles still held or still running their demote callback.
        roles: Vec<RoleName>,
    },
}

impl Error {
    /// Whether retrying the same call later can succeed.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Connect(_) | Self::JetStream(_) | Self::Timeout(_) => true,
            Self::Kv(kind) => !kind.is_permanent(),
            _ => false,
        }
    }
}
