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
    /// How many holders at once, one slot each (`roles[].slots`; 1: no slots).
    pub(super) slots: u32,
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
            .field("slots", &self.slots)
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
            slots: 1,
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
            slots: role.slots,
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

    /// Up to `slots` instances hold the role at once, each one slot, an instance at most one
    /// (protocol Q15; `roles[].slots`). Default 1: one holder, no slots. With 2 to
    /// [`MAX_SLOTS`](crate::config::MAX_SLOTS) the manager takes part in the roles
    /// `<name>.0` … `<name>.<slots-1>` ([`RoleName::for_slot`]), each an ordinary role with
    /// this spec's settings and callbacks (shared by the slots: the [`Leadership`](crate::Leadership)
    /// handed to them names the slot), and campaigns for at most one of them at a time;
    /// [`RoleManager::slots_held`](super::RoleManager::slots_held) says which it holds.
    /// Checked when the role is started ([`Error::InvalidSlots`]).
    #[must_use]
    pub fn slots(mut self, slots: u32) -> Self {
        self.slots = slots;
        self
    }

    /// The slot roles this spec stands for: itself without slots, else one spec per slot.
    ///
    /// # Errors
    /// [`Error::InvalidSlots`] for 0 or more than [`MAX_SLOTS`](crate::config::MAX_SLOTS).
    pub(super) fn expand(self) -> Result<Vec<RoleSpec>, Error> {
        let invalid = || Error::InvalidSlots {
            role: self.name.clone(),
            slots: self.slots,
        };
        match self.slots {
            1 => Ok(vec![self]),
            n if n == 0 || n > crate::config::MAX_SLOTS || self.name.slot().is_some() => {
                Err(invalid())
            }
            n => (0..n)
                .map(|k| {
                    let name = RoleName::for_slot(&self.name, k).map_err(|_| invalid())?;
                    Ok(RoleSpec {
                        name,
                        slots: 1,
                        ..self.clone()
                    })
                })
                .collect(),
        }
    }

    /// Lease timing for this role. It is checked ([`Timing::validate`], the same rules as the
    /// YAML configuration) when the role is started: [`RoleManagerBuilder::start`](super::RoleManagerBuilder::start) and
    /// [`RoleManager::add_role`](super::RoleManager::add_role) return [`Error::InvalidTiming`] for a timing that breaks one.
    #[must_use]
    pub fn timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// Checks the role's timing ([`Timing::validate`]) and its number of slots.
    ///
    /// # Errors
    /// [`Error::InvalidTiming`] naming the role and the first rule broken;
    /// [`Error::InvalidSlots`] for a number of slots that is neither 1 nor 2 to
    /// [`MAX_SLOTS`](crate::config::MAX_SLOTS).
    pub fn validate(&self) -> Result<(), Error> {
        if self.slots != 1 && !(2..=crate::config::MAX_SLOTS).contains(&self.slots) {
            return Err(Error::InvalidSlots {
                role: self.name.clone(),
                slots: self.slots,
            });
        }
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
