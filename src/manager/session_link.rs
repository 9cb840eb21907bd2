//! How the manager, the watcher and role tasks talk to a session task (a leaf: no driver
//! code): its inbox messages and the state it publishes.

use crate::core::{FailureKind, SessionKeyState, SessionUpdate};

/// Messages to a session task.
#[derive(Debug)]
pub(crate) enum SessionInput {
    /// The watcher saw the session key change.
    Observed(SessionKeyState),
    /// Nobody acts on the term at `revision` of `role`, whose value names session `uuid`: list
    /// it as released (protocol Q5 rule 5).
    ReleaseTerm {
        /// The session the value names.
        uuid: uuid::Uuid,
        /// The role.
        role: crate::names::RoleName,
        /// The revision of the role value.
        revision: u64,
    },
    /// The key of `role` moved to `revision` (a role this session lists released terms of).
    RoleMoved {
        /// The role.
        role: crate::names::RoleName,
        /// Its key's new revision.
        revision: u64,
    },
    /// End the session (every role of it was released) and stop.
    Stop,
    /// A liveness probe: answer it from the task's loop (`RoleManager::probe`).
    Probe(tokio::sync::oneshot::Sender<()>),
}

/// The state of a session as role tasks see it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SessionView {
    /// The session's latest state; `None` before the first session started.
    pub(crate) update: Option<SessionUpdate>,
    /// Why session writes fail now (a server error code or a persistent failure): the roles of
    /// the session cannot campaign and report it.
    pub(crate) failure: Option<FailureKind>,
}
