//! Transitions broadcast by the manager (for logs, dashboards and observers).

use std::time::SystemTime;

use crate::core::{DemoteReason, FailureKind};
use crate::names::{InstanceId, RoleName};

/// Who holds a role, as seen through the bucket watcher (any role in the bucket, including
/// roles this instance does not contend for).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The role.
    pub role: RoleName,
    /// The holder; `None` when the role is vacant or the value is foreign.
    pub holder: Option<InstanceId>,
    /// Whether the key holds a value nats-roles cannot read.
    pub foreign: bool,
    /// The holder's term.
    pub term: Option<u64>,
    /// Revision of the role key.
    pub revision: u64,
    /// The holder's priority.
    pub priority: i32,
    /// The holder's advertised metadata (host, HTTP address, ...).
    pub meta: std::collections::BTreeMap<String, String>,
    /// When this manager saw the current term begin (wall clock).
    pub since: SystemTime,
}

/// One transition.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RoleEvent {
    /// This instance became the holder of `role`.
    Promoted {
        /// The role.
        role: RoleName,
        /// The new term.
        term: u64,
    },
    /// This instance stopped holding `role`.
    Demoted {
        /// The role.
        role: RoleName,
        /// The term that ended.
        term: u64,
        /// Why.
        reason: DemoteReason,
    },
    /// The holder of a role changed (seen by the watcher; any role in the bucket).
    HolderChanged(HolderInfo),
    /// Another live process uses this instance id.
    DuplicateInstance {
        /// The role where it was seen.
        role: RoleName,
    },
    /// A role stopped because of a permanent error.
    Failed {
        /// The role.
        role: RoleName,
        /// The error.
        kind: FailureKind,
    },
}
