//! [`Election`]: the one-role convenience over [`RoleManager`].

use std::time::Duration;

use tokio::sync::watch;

use crate::error::Error;
use crate::leadership::Leadership;
use crate::manager::{RoleManager, RoleManagerBuilder, RoleSpec, RoleStatus};
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
    role: RoleName,
    status: watch::Receiver<RoleStatus>,
}

impl Election {
    /// Starts a manager with `builder` and the single role `spec`.
    ///
    /// # Errors
    /// As [`RoleManagerBuilder::start`].
    pub async fn start(builder: RoleManagerBuilder, spec: RoleSpec) -> Result<Self, Error> {
        let role = spec.name().clone();
        let manager = builder.role(spec).start().await?;
        let status = manager.status_watch(&role).ok_or(Error::Stopped)?;
        Ok(Self {
            manager,
            role,
            status,
        })
    }

    /// The role.
    #[must_use]
    pub fn role(&self) -> &RoleName {
        &self.role
    }

    /// Whether this instance holds the role right now.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.manager.is_leader(&self.role)
    }

    /// The current term, if held.
    #[must_use]
    pub fn leadership(&self) -> Option<Leadership> {
        self.manager.leadership(&self.role)
    }

    /// The current status.
    #[must_use]
    pub fn status(&self) -> RoleStatus {
        self.status.borrow().clone()
    }

    /// Follows the role: a channel of its status (see [`RoleHandle::watch`](crate::RoleHandle::watch)).
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<RoleStatus> {
        self.status.clone()
    }

    /// Gives the role up for `cooldown` (graceful hand-over).
    ///
    /// Not `async`: it only asks the role's task and returns at once, before the hand-over
    /// (`on_demote`, then the lease delete) has happened; wait on [`Election::subscribe`]
    /// (`wait_for(|s| !s.is_leader())`) to know it is done.
    ///
    /// # Errors
    /// [`Error::UnknownRole`] after shutdown.
    pub fn release(&self, cooldown: Duration) -> Result<(), Error> {
        self.manager.release(&self.role, cooldown)
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
