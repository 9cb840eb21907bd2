//! One role group to take part in ([`GroupSpec`], protocol Q14) and the assignment API of a
//! sharded worker: [`GroupCallbacks`] (`on_assign` / `on_revoke`), given each member this
//! instance gains or gives up.

use std::sync::Arc;

use crate::callbacks::{BoxFuture, Demotion, NoCallbacks, PrepareFuture, RoleCallbacks};
use crate::config::{Config, GroupConfig};
use crate::error::Error;
use crate::groups::{MAX_GROUP_COUNT, member_name};
use crate::leadership::Leadership;
use crate::names::RoleName;

use super::super::spec::RoleSpec;

/// Makes the callbacks of member `index` of a group.
pub type MemberCallbacks = dyn Fn(u32) -> Arc<dyn RoleCallbacks> + Send + Sync;

/// A member this instance now holds, given to [`GroupCallbacks::on_assign`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GroupMember {
    /// The group.
    pub group: RoleName,
    /// The member's index (`0 … count − 1`); its role is `<group>-<index>`.
    pub index: u32,
    /// The member's term (its token fences the member's writes; cancelled when it ends).
    pub leadership: Leadership,
}

/// A member this instance gave up, given to [`GroupCallbacks::on_revoke`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GroupRevoke {
    /// The group.
    pub group: RoleName,
    /// The member's index.
    pub index: u32,
    /// The term that ended and why.
    pub demotion: Demotion,
}

/// Code run when this instance gains or gives up a member of a group: a sharded worker
/// starts and stops the work of one shard.
///
/// They are the members' `on_promote` and `on_demote` ([`RoleCallbacks`]), with their order
/// and their guarantee: per member, `on_assign(n)`, `on_revoke(n)`, `on_assign(n+1)`… and a
/// member released (a hand-over, a move, a count lowered, a shutdown) is promoted on its next
/// holder only after `on_revoke` returned (up to the drain timeout): cooperative rebalancing.
/// A member lost without a release (this instance cut off or stopped) is revoked at this
/// instance's own deadline, before anyone else's term can begin.
pub trait GroupCallbacks: Send + Sync + 'static {
    /// This instance became the holder of a member. Keep it short: spawn the work and let it
    /// stop on [`Leadership::cancelled`].
    fn on_assign(&self, member: GroupMember) -> BoxFuture<'_>;
    /// This instance stopped holding a member: stop its work, and return when it stopped.
    fn on_revoke(&self, member: GroupRevoke) -> BoxFuture<'_>;
}

/// One group's callbacks for one member: a [`RoleCallbacks`] over [`GroupCallbacks`].
struct MemberOf {
    group: RoleName,
    index: u32,
    callbacks: Arc<dyn GroupCallbacks>,
}

impl RoleCallbacks for MemberOf {
    fn on_promote(&self, leadership: Leadership) -> BoxFuture<'_> {
        self.callbacks.on_assign(GroupMember {
            group: self.group.clone(),
            index: self.index,
            leadership,
        })
    }

    fn on_demote(&self, demotion: Demotion) -> BoxFuture<'_> {
        self.callbacks.on_revoke(GroupRevoke {
            group: self.group.clone(),
            index: self.index,
            demotion,
        })
    }

    fn prepares(&self) -> bool {
        false
    }

    fn on_prepare(&self, _role: RoleName) -> PrepareFuture<'_> {
        Box::pin(async { Ok(()) })
    }
}

/// A role group to take part in: the roles `<name>-0` … `<name>-<count − 1>`, each with the
/// settings of one [`RoleSpec`] (protocol Q14).
#[derive(Clone)]
pub struct GroupSpec {
    pub(crate) template: RoleSpec,
    pub(crate) count: u32,
    pub(crate) members: Arc<MemberCallbacks>,
}

impl std::fmt::Debug for GroupSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupSpec")
            .field("name", self.template.name())
            .field("count", &self.count)
            .field("settings", &self.template)
            .finish_non_exhaustive()
    }
}

impl GroupSpec {
    /// The group named like `settings` (its name is the group's) with `count` members, each
    /// a role with `settings`' priority, timing, takeover, cost and campaign; no callbacks.
    #[must_use]
    pub fn new(settings: RoleSpec, count: u32) -> Self {
        Self {
            template: settings,
            count,
            members: Arc::new(|_| Arc::new(NoCallbacks) as Arc<dyn RoleCallbacks>),
        }
    }

    /// A group as declared in the configuration.
    #[must_use]
    pub fn from_config(group: &GroupConfig, config: &Config) -> Self {
        Self::new(RoleSpec::from_config(&group.role, config), group.count)
    }

    /// The group's name.
    #[must_use]
    pub fn name(&self) -> &RoleName {
        self.template.name()
    }

    /// The configured count (a count record in the bucket overrides it, protocol Q14).
    #[must_use]
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The assignment callbacks: `on_assign` / `on_revoke` for each member gained or given up.
    #[must_use]
    pub fn callbacks(mut self, callbacks: impl GroupCallbacks) -> Self {
        let callbacks: Arc<dyn GroupCallbacks> = Arc::new(callbacks);
        let group = self.template.name().clone();
        self.members = Arc::new(move |index| {
            Arc::new(MemberOf {
                group: group.clone(),
                index,
                callbacks: callbacks.clone(),
            }) as Arc<dyn RoleCallbacks>
        });
        self
    }

    /// Role callbacks of each member, made by `make(index)` when the member is added (the
    /// binary's `exec` groups: a command per member).
    #[must_use]
    pub fn member_callbacks(
        mut self,
        make: impl Fn(u32) -> Arc<dyn RoleCallbacks> + Send + Sync + 'static,
    ) -> Self {
        self.members = Arc::new(make);
        self
    }

    /// Checks the count, the members' names and the settings' timing.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for a count outside 1 to
    /// [`MAX_GROUP_COUNT`](crate::groups::MAX_GROUP_COUNT) or a name too long for its last
    /// member, or settings with slots; [`Error::InvalidTiming`] as [`RoleSpec::validate`].
    pub fn validate(&self) -> Result<(), Error> {
        self.check_count(self.count)?;
        if self.template.slots != 1 {
            return Err(Error::InvalidSetting(crate::SettingError::new(
                "groups.slots",
                format!(
                    "the group {} has slots: a group's members have one holder each (slots are \
                     for a role)",
                    self.name()
                ),
            )));
        }
        self.template.validate()
    }

    pub(crate) fn check_count(&self, count: u32) -> Result<(), Error> {
        if !(1..=MAX_GROUP_COUNT).contains(&count) {
            return Err(Error::InvalidSetting(crate::SettingError::new(
                "groups.count",
                format!(
                    "{count} is out of range for the group {}: a group has 1 to \
                     {MAX_GROUP_COUNT} members",
                    self.name()
                ),
            )));
        }
        member_name(self.name(), count - 1).map_err(|e| {
            Error::InvalidSetting(crate::SettingError::new(
                "groups.name",
                format!(
                    "the name of member {} of the group {} {e}",
                    count - 1,
                    self.name()
                ),
            ))
        })?;
        Ok(())
    }

    /// Member `index` as a role to add (its callbacks made now).
    pub(crate) fn member(&self, index: u32) -> Result<RoleSpec, Error> {
        let name = member_name(self.name(), index).map_err(|e| {
            Error::InvalidSetting(crate::SettingError::new(
                "groups.name",
                format!(
                    "the name of member {index} of the group {} {e}",
                    self.name()
                ),
            ))
        })?;
        let mut spec = self.template.clone();
        spec.name = name;
        spec.callbacks = (self.members)(index);
        Ok(spec)
    }
}
