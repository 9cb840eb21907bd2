//! One role to take part in ([`RoleSpec`]): name, campaign or observe only, priority,
//! timing, takeover and callbacks.

use crate::callbacks::{NoCallbacks, RoleCallbacks};
use crate::config::{Config, RoleConfig, Takeover};
use crate::core::Timing;
use crate::error::Error;
use crate::names::RoleName;
use std::sync::Arc;

/// One role to take part in.
#[derive(Clone)]
pub struct RoleSpec {
    pub(super) name: RoleName,
    pub(super) campaign: bool,
    /// `None`: the manager's default priority.
    pub(super) priority: Option<i32>,
    pub(super) timing: Timing,
    pub(super) takeover: Takeover,
    /// Cost for placement (`roles[].weight`), at least 1.
    pub(super) cost: u32,
    pub(super) callbacks: Arc<dyn RoleCallbacks>,
}

impl std::fmt::Debug for RoleSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoleSpec")
            .field("name", &self.name)
            .field("campaign", &self.campaign)
            .field("priority", &self.priority)
            .field("timing", &self.timing)
            .field("takeover", &self.takeover)
            .field("cost", &self.cost)
            .finish_non_exhaustive()
    }
}

impl RoleSpec {
    /// A role with default timing, priority 0, campaigning, no callbacks.
    #[must_use]
    pub fn new(name: RoleName) -> Self {
        Self {
            name,
            campaign: true,
            priority: None,
            timing: Timing::default(),
            takeover: Takeover::Voluntary,
            cost: 1,
            callbacks: Arc::new(NoCallbacks),
        }
    }

    /// A role as declared in the configuration (timing overrides applied).
    #[must_use]
    pub fn from_config(role: &RoleConfig, config: &Config) -> Self {
        Self {
            name: role.name.clone(),
            campaign: role.campaign,
            priority: Some(role.effective_priority(&config.instance)),
            timing: config.timing.with(&role.timing),
            takeover: role.takeover,
            cost: role.weight.max(1),
            callbacks: Arc::new(NoCallbacks),
        }
    }

    /// The role name.
    #[must_use]
    pub fn name(&self) -> &RoleName {
        &self.name
    }

    /// Only observe the role: never campaign for it.
    #[must_use]
    pub fn observe_only(mut self) -> Self {
        self.campaign = false;
        self
    }

    /// Priority written into the lease (placement uses it); default: the manager's priority.
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Whether placement may hand this role over to a preferred instance (default
    /// [`Takeover::Voluntary`]; only with [`RoleManagerBuilder::placement`](super::RoleManagerBuilder::placement)).
    #[must_use]
    pub fn takeover(mut self, takeover: Takeover) -> Self {
        self.takeover = takeover;
        self
    }

    /// The role's cost for placement (default 1, at least 1): fair shares and instance
    /// capacities count roles at their cost (docs/placement.md).
    #[must_use]
    pub fn cost(mut self, cost: u32) -> Self {
        self.cost = cost.max(1);
        self
    }

    /// Lease timing for this role. It is checked ([`Timing::validate`], the same rules as the
    /// YAML configuration) when the role is started: [`RoleManagerBuilder::start`](super::RoleManagerBuilder::start) and
    /// [`RoleManager::add_role`](super::RoleManager::add_role) return [`Error::InvalidTiming`] for a timing that breaks one.
    #[must_use]
    pub fn timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// Checks the role's timing ([`Timing::validate`]).
    ///
    /// # Errors
    /// [`Error::InvalidTiming`] naming the role and the first rule broken.
    pub fn validate(&self) -> Result<(), Error> {
        self.timing
            .validate()
            .map_err(|source| Error::InvalidTiming {
                role: self.name.clone(),
                source,
            })
    }

    /// Callbacks run on promotion and demotion.
    #[must_use]
    pub fn callbacks(mut self, callbacks: impl RoleCallbacks) -> Self {
        self.callbacks = Arc::new(callbacks);
        self
    }

    /// Callbacks shared with other roles.
    #[must_use]
    pub fn shared_callbacks(mut self, callbacks: Arc<dyn RoleCallbacks>) -> Self {
        self.callbacks = callbacks;
        self
    }
}
