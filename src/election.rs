//! [`Election`]: the one-role convenience over [`RoleManager`].

use std::time::Duration;

use tokio::sync::watch;

use crate::error::Error;
use crate::leadership::Leadership;
use crate::manager::{RoleHandle, RoleManager, RoleManagerBuilder, RoleSpec, RoleStatus};
use crate::names::RoleName;

/// A single role election: a [`RoleManager`] with exactly one role.
///
/// ```no_run
/// # async fn demo() -> Result<(), nats_roles::Error> {
/// use nats_roles::{Election, InstanceId, RoleManager, RoleName, RoleSpec};
/// let client = async_nats::connect("127.0.0.1:4222").await.map_err(|e| nats_roles::Error::Connect(e.into()))?;
/// let role = RoleName::new("scheduler").expect("valid name");
/// let builder = RoleManager::builder(client, InstanceId::new("node-a").expect("valid id"));
/// let election = Election::start(builder, RoleSpec::new(role)).await?;
/// let mut status = election.watch();
/// status.wait_for(|s| s.is_leader()).await.ok();
/// election.shutdown(std::time::Duration::from_secs(5)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Election {
    manager: RoleManager,
    handle: RoleHandle,
}

impl Election {
    /// Starts a manager with `builder` and the single role `spec`.
    ///
    /// # Errors
    /// As [`RoleManagerBuilder::start`].
    pub async fn start(builder: RoleManagerBuilder, spec: RoleSpec) -> Result<Self, Error> {
        let role = spec.name().clone();
        let manager = builder.role(spec).start().await?;
        let handle = manager.role(&role).ok_or(Error::Stopped)?;
        Ok(Self { manager, handle })
    }

    /// The role's handle: `is_leader()`, `leadership()`, `status()`, `wait_leader()` and
    /// [`watch()`](RoleHandle::watch), the way to follow the role.
    #[must_use]
    pub fn handle(&self) -> &RoleHandle {
        &self.handle
    }

    /// The role.
    #[must_use]
    pub fn role(&self) -> &RoleName {
        self.handle.role()
    }

    /// Whether this instance holds the role right now.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.handle.is_leader()
    }

    /// The current term, if held.
    #[must_use]
    pub fn leadership(&self) -> Option<Leadership> {
        self.handle.leadership()
    }

    /// Follows the role (see [`RoleHandle::watch`]).
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<RoleStatus> {
        self.handle.watch()
    }

    /// Gives the role up for `cooldown` (graceful hand-over).
    ///
    /// Not `async`: it only asks the role's task and returns at once, before the hand-over
    /// (`on_demote`, then the lease delete) has happened; wait on [`Election::watch`]
    /// (`wait_for(|s| !s.is_leader())`) to know it is done.
    ///
    /// # Errors
    /// [`Error::UnknownRole`] after shutdown.
    pub fn release(&self, cooldown: Duration) -> Result<(), Error> {
        self.manager.release(self.handle.role(), cooldown)
    }

    /// The underlying manager.
    #[must_use]
    pub fn manager(&self) -> &RoleManager {
        &self.manager
    }

    /// Releases the role if held, waits for the demote callback, stops.
    ///
    /// # Errors
    /// [`Error::ShutdownTimeout`] when it did not finish within `timeout`.
    pub async fn shutdown(&self, timeout: Duration) -> Result<(), Error> {
        self.manager.shutdown(timeout).await
    }
}
