//! Evicting a role's holder: a CAS delete of its lease at the holder's current revision, so a
//! newer term can never be evicted by accident (protocol P3).

use std::time::Duration;

use bytes::Bytes;

use crate::core::{FailureKind, KeyState, WriteOutcome};
use crate::names::RoleName;
use crate::store::{LeaseStore, ROLE_PREFIX};

/// A successful eviction.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Evicted {
    /// The role.
    pub role: String,
    /// The holder that was evicted (`None`: a foreign value).
    pub holder: Option<String>,
    /// Its term.
    pub term: Option<u64>,
    /// The revision of the lease that was deleted.
    pub revision: u64,
    /// The revision of the delete marker written.
    pub marker_revision: u64,
}

/// What the lease must still be for an eviction to go ahead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expect {
    /// The exact revision of the lease (every renewal moves it).
    pub revision: Option<u64>,
    /// The term (stays the same across renewals: what a person confirms).
    pub term: Option<u64>,
}

impl Expect {
    /// No expectation: evict whatever holds the role right now.
    #[must_use]
    pub fn any() -> Self {
        Self::default()
    }

    /// The lease must be at `revision`.
    #[must_use]
    pub fn revision(revision: u64) -> Self {
        Self {
            revision: Some(revision),
            term: None,
        }
    }

    /// The lease must still be in `term`.
    #[must_use]
    pub fn term(term: u64) -> Self {
        Self {
            revision: None,
            term: Some(term),
        }
    }
}

/// Why nothing was evicted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EvictError {
    /// The role has never been written to the bucket (or its marker is gone).
    #[error("role {role} is not in the bucket")]
    UnknownRole {
        /// The role.
        role: RoleName,
    },
    /// Nobody holds the role.
    #[error("role {role} is vacant; nothing to evict")]
    NotHeld {
        /// The role.
        role: RoleName,
    },
    /// The caller named a revision and the lease is at another one (a renewal or a new term
    /// since the caller looked).
    #[error(
        "role {role} is at revision {current} (holder {}, term {}), not {expected}; nothing \
         evicted (a renewal moves the revision: read it again)",
        holder.as_deref().unwrap_or("<foreign value>"),
        term.map_or_else(|| "?".to_owned(), |t| t.to_string())
    )]
    RevisionMismatch {
        /// The role.
        role: RoleName,
        /// The revision the caller gave.
        expected: u64,
        /// The lease's revision now.
        current: u64,
        /// The holder now.
        holder: Option<String>,
        /// The term now.
        term: Option<u64>,
    },
    /// The caller named a term and the role is in another one (it changed hands).
    #[error(
        "role {role} is in term {} (holder {}), not {expected}; nothing evicted",
        current.map_or_else(|| "?".to_owned(), |t| t.to_string()),
        holder.as_deref().unwrap_or("<foreign value>")
    )]
    TermMismatch {
        /// The role.
        role: RoleName,
        /// The term the caller gave.
        expected: u64,
        /// The term now.
        current: Option<u64>,
        /// The holder now.
        holder: Option<String>,
    },
    /// The lease changed between reading it and deleting it (a renewal or a new term).
    #[error("role {role} changed while it was being evicted; nothing evicted (try again)")]
    Changed {
        /// The role.
        role: RoleName,
    },
    /// The delete was sent but not confirmed in time: it may or may not have happened.
    #[error("evicting role {role} timed out after {timeout:?}; the outcome is unknown")]
    Timeout {
        /// The role.
        role: RoleName,
        /// The timeout.
        timeout: Duration,
    },
    /// Reading or writing the bucket failed.
    #[error("evicting role {role} failed: {}", kind.as_str())]
    Kv {
        /// The role.
        role: RoleName,
        /// What failed.
        kind: FailureKind,
    },
}

/// Deletes `role`'s lease if it is as `expect`ed (at that revision, in that term; with no
/// expectation, whatever holds it now): reads the lease from the stream leader, then deletes
/// it with a conditional delete at the revision read, which fails if anything was written
/// since.
///
/// The evicted holder learns of it through its watcher and stops at once
/// (`DemoteReason::Evicted`); every candidate, the evicted instance included, may then take
/// the role. To move a role away from a live instance, release it on that instance instead.
///
/// # Errors
/// See [`EvictError`]: nothing was deleted unless the error is [`EvictError::Timeout`].
pub async fn evict(
    store: &LeaseStore,
    role: &RoleName,
    expect: Expect,
    timeout: Duration,
) -> Result<Evicted, EvictError> {
    let key = format!("{ROLE_PREFIX}{role}");
    let state = store
        .read(&key, timeout)
        .await
        .map_err(|kind| EvictError::Kv {
            role: role.clone(),
            kind,
        })?;
    let (revision, value) = match state {
        KeyState::Held { revision, value } => (revision, value),
        KeyState::Vacant { .. } => return Err(EvictError::NotHeld { role: role.clone() }),
        KeyState::Absent | KeyState::Unknown { .. } => {
            return Err(EvictError::UnknownRole { role: role.clone() });
        }
    };
    let lease = value.lease();
    let holder = lease.map(|l| l.holder.to_string());
    let term = lease.map(|l| l.term.unwrap_or(revision));
    if let Some(expected) = expect.term
        && Some(expected) != term
    {
        return Err(EvictError::TermMismatch {
            role: role.clone(),
            expected,
            current: term,
            holder,
        });
    }
    if let Some(expected) = expect.revision
        && expected != revision
    {
        return Err(EvictError::RevisionMismatch {
            role: role.clone(),
            expected,
            current: revision,
            holder,
            term,
        });
    }
    match store
        .cas(&key, revision, None, Bytes::new(), true, timeout)
        .await
    {
        WriteOutcome::Ok {
            revision: marker_revision,
        } => Ok(Evicted {
            role: role.to_string(),
            holder,
            term,
            revision,
            marker_revision,
        }),
        WriteOutcome::Conflict | WriteOutcome::Retry => {
            Err(EvictError::Changed { role: role.clone() })
        }
        WriteOutcome::Unknown => Err(EvictError::Timeout {
            role: role.clone(),
            timeout,
        }),
        WriteOutcome::Failed(kind) => Err(EvictError::Kv {
            role: role.clone(),
            kind,
        }),
    }
}
