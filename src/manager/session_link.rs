//! How the manager, the watcher and role tasks talk to a session task (a leaf: no driver
//! code): its inbox messages and the state it publishes.

use crate::core::{FailureKind, SessionKeyState, SessionUpdate};

/// Messages to a session task.
#[derive(Debug)]
pub(crate) enum SessionInput {
    /// The watcher saw the session key change.
    Observed(SessionKeyState),
    /// End the session (every role of it was released) and stop.
    Stop,
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
