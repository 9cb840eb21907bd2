//! [`RoleInput`]: the messages a role receives (from the watcher, the connection monitor,
//! the health task, placement and the manager), the [`RoleInbox`] they go through (its
//! driver's) and the [`RoleDone`] that says it stopped. A leaf: it imports no other module of
//! the manager.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::core::{KeyState, ReleaseReason};
use crate::placement::Preferred;

/// A role inside its driver (never reused while the manager runs).
pub(crate) type RoleId = u64;

/// Messages to a role.
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
    BucketReset {
        /// The new epoch.
        epoch: u64,
        /// The longest TTL of the sessions this instance knew in the old bucket (Q6: the
        /// young-bucket hold lasts at least that long).
        old_ttl: std::time::Duration,
    },
    /// Placement chose this instance to receive the role: prepare it (at most this long).
    Prepare(Duration),
    /// Placement: hold back campaigning for a vacancy this long; where the role is wanted.
    Placement {
        delay: Duration,
        /// This instance is the plan's target: no herd wait (Q7).
        first: bool,
        preferred: Option<Preferred>,
    },
    /// A liveness probe: answered from the loop of the role's driver (`RoleManager::probe`).
    Probe(tokio::sync::oneshot::Sender<()>),
    /// Drop the role at once, whatever it is doing (a shutdown it did not finish in time):
    /// nothing more of it runs and its term is not released (it expires).
    Abort,
}

/// Where a role's inputs go: its driver's inbox, each message tagged with the role.
#[derive(Debug, Clone)]
pub(crate) struct RoleInbox {
    id: RoleId,
    tx: mpsc::UnboundedSender<(RoleId, RoleInput)>,
}

impl RoleInbox {
    /// The inbox of role `id` of the driver behind `tx`.
    pub(crate) fn new(id: RoleId, tx: mpsc::UnboundedSender<(RoleId, RoleInput)>) -> Self {
        Self { id, tx }
    }

    /// Sends `input` to the role; gives it back if the driver has ended.
    pub(crate) fn send(&self, input: RoleInput) -> Result<(), RoleInput> {
        self.tx.send((self.id, input)).map_err(|e| e.0.1)
    }
}

/// Completes when a role has stopped and its last callback returned (or when its driver
/// ended without it).
#[derive(Debug)]
pub(crate) struct RoleDone {
    done: oneshot::Receiver<()>,
    inbox: RoleInbox,
}

impl RoleDone {
    /// The end of the role behind `inbox`, told through `done`.
    pub(crate) fn new(done: oneshot::Receiver<()>, inbox: RoleInbox) -> Self {
        Self { done, inbox }
    }

    /// Drops the role at once ([`RoleInput::Abort`]); waiting for it then completes.
    pub(crate) fn abort(&self) {
        let _ = self.inbox.send(RoleInput::Abort);
    }
}

impl Future for RoleDone {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.done).poll(cx).map(|_| ())
    }
}
