//! [`RoleInput`]: the messages a role task receives (from the watcher, the connection
//! monitor, the health task, placement and the manager). A leaf: it imports no other module
//! of the manager.

use std::time::Duration;

use crate::core::{KeyState, ReleaseReason};
use crate::placement::Preferred;

/// Messages to a role task.
#[derive(Debug)]
pub(crate) enum RoleInput {
    /// The watcher saw the role key change.
    Observed(KeyState),
    /// The session the holder at this revision of the role key rests on is gone (Q5).
    HolderGone(u64),
    /// Another live process uses this instance id (seen on the session key).
    DuplicateInstance,
    /// The connection went down or came back.
    Connection(bool),
    /// Give the role up and stay away for a while.
    Release(ReleaseReason, Duration),
    /// A targeted move of the term at this revision was accepted by its target (Q13): hand
    /// the role over gracefully if that term is still the one held here.
    MoveAccepted(u64),
    /// Stop taking part.
    Stop,
    /// The bucket was recreated.
    BucketReset(u64),
    /// Placement chose this instance to receive the role: prepare it (at most this long).
    Prepare(Duration),
    /// Placement: hold back campaigning for a vacancy this long; where the role is wanted.
    Placement {
        delay: Duration,
        preferred: Option<Preferred>,
    },
    /// A liveness probe: answer it from the task's loop (`RoleManager::probe`).
    Probe(tokio::sync::oneshot::Sender<()>),
}
