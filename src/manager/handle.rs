//! [`RoleHandle`]: one managed role, for code that cares about a single role.

use tokio::sync::watch;

use super::status::RoleStatus;
use crate::leadership::Leadership;
use crate::names::RoleName;

/// A handle on one role managed by a [`crate::RoleManager`]. Cheap to clone; it stays usable
/// (reporting the last status) after the role was removed or the manager stopped.
#[derive(Clone)]
pub struct RoleHandle {
    pub(crate) role: RoleName,
    pub(crate) status: watch::Receiver<RoleStatus>,
    /// The current term, as the role runner publishes it.
    pub(crate) current: watch::Receiver<Option<Leadership>>,
}

impl std::fmt::Debug for RoleHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoleHandle")
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl RoleHandle {
    /// The role.
    #[must_use]
    pub fn role(&self) -> &RoleName {
        &self.role
    }

    /// Whether this instance holds the role right now (term valid, deadline ahead).
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.leadership().is_some()
    }

    /// The current term, if held.
    #[must_use]
    pub fn leadership(&self) -> Option<Leadership> {
        self.current.borrow().clone().filter(Leadership::is_valid)
    }

    /// The latest status.
    #[must_use]
    pub fn status(&self) -> RoleStatus {
        super::status::current(&self.status)
    }

    /// Follows the role: a channel of its status (this instance's state, the current holder
    /// and term, the last failure). `changed().await` wakes on every transition and
    /// `wait_for(..)` waits for a condition; a slow reader skips to the latest status, never
    /// lags. This is the one way to follow a role besides its callbacks.
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<RoleStatus> {
        self.status.clone()
    }

    /// Waits until this instance holds the role and returns the term. Returns `None` if the
    /// role stopped first.
    ///
    /// It returns as soon as the term is won (the status turns `LEADER`, the same moment as
    /// [`RoleEvent::Promoted`](crate::RoleEvent::Promoted)), **not** after the role's
    /// [`on_promote`](crate::RoleCallbacks::on_promote): the callbacks run on the role's own
    /// task, concurrently, so `on_promote` may not have started or finished yet. To wait for
    /// what `on_promote` sets up, have it signal (a channel, a `Notify`). The returned term
    /// may also have ended already; check [`Leadership::is_valid`] before acting on it.
    pub async fn wait_leader(&self) -> Option<Leadership> {
        let mut rx = self.status.clone();
        loop {
            let state = rx.borrow_and_update().state;
            // The term is published before the status turns LEADER.
            if state == crate::RoleState::Leader
                && let Some(l) = self.leadership()
            {
                return Some(l);
            }
            if state == crate::RoleState::Stopped || rx.changed().await.is_err() {
                return None;
            }
        }
    }
}
