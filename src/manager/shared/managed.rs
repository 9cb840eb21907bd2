//! [`Managed`]: the roles and sessions of this instance. The manager's public API writes it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{mpsc, watch};

use crate::leadership::Leadership;
use crate::manager::role_input::{RoleDone, RoleInbox};
use crate::manager::session_link::{SessionClock, SessionInput, SessionView};
use crate::manager::status::RoleStatus;
use crate::names::RoleName;

/// What this instance takes part in. The manager is the writer of every field: `add_role`,
/// `remove_role` (and the task it leaves to wait for the role's end), `shutdown`, and the start
/// of a session with the first role of its TTL class. Every other task only reads it (to
/// reach a role or a session).
#[derive(Default)]
pub(crate) struct Managed {
    /// The managed roles. Its lock also orders the bucket's epoch
    /// ([`Shared::reset_epoch`](super::Shared::reset_epoch)).
    roles: Mutex<HashMap<RoleName, RoleSlot>>,
    /// Roles removed from `roles` whose tasks have not stopped yet (`remove_role`, shutdown):
    /// they may still hold a term, so a value of theirs naming this instance's session is not
    /// "nobody's" (the watcher must not release it through the session, Q5 rule 5). A role is
    /// added here under the `roles` lock, in the step that takes it out of `roles`: the watcher
    /// always finds a stopping role in one set or the other.
    stopping: Mutex<HashSet<RoleName>>,
    /// This instance's sessions, one per TTL class in milliseconds (protocol Q1); the manager
    /// adds them with the first role of a class, and takes them at shutdown.
    sessions: Mutex<HashMap<u64, SessionClass>>,
    /// Counts the session classes added (the member record's writer follows every class,
    /// protocol Q8 rule 1): bumped after a class is in `sessions`.
    classes_added: watch::Sender<u64>,
}

impl Managed {
    pub(crate) fn roles(&self) -> MutexGuard<'_, HashMap<RoleName, RoleSlot>> {
        self.roles.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Roles removed whose tasks have not stopped yet (they may still hold a term).
    pub(crate) fn stopping(&self) -> MutexGuard<'_, HashSet<RoleName>> {
        self.stopping.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn sessions(&self) -> MutexGuard<'_, HashMap<u64, SessionClass>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A session class was added to `sessions` (its first role): the followers of
    /// [`Managed::classes_added`] look again.
    pub(crate) fn class_added(&self) {
        self.classes_added.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Follows the session classes added ([`Managed::class_added`]).
    pub(crate) fn classes_added(&self) -> watch::Receiver<u64> {
        self.classes_added.subscribe()
    }
}

/// A role this manager takes part in (or observes).
pub(crate) struct RoleSlot {
    /// Its inbox (its driver's, tagged with the role).
    pub(crate) inbox: RoleInbox,
    /// The TTL class (ms) of the session the role campaigns on; `None` for an observer.
    pub(crate) class: Option<u64>,
    pub(crate) status: watch::Receiver<RoleStatus>,
    /// The current term (the role's runner is its only writer).
    pub(crate) current: watch::Receiver<Option<Leadership>>,
    /// Completes when the role has stopped (its last callback returned).
    pub(crate) task: RoleDone,
}

/// One of this instance's sessions.
pub(crate) struct SessionClass {
    pub(crate) inbox: mpsc::UnboundedSender<SessionInput>,
    pub(crate) view: watch::Receiver<SessionView>,
    /// The session's renewals and the terms resting on it (Q4, one deadline per session).
    pub(crate) clock: Arc<SessionClock>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}
