//! One role group of the configuration ([`GroupConfig`], protocol Q14): a name, a count and
//! every setting of a role, written in one entry; its members are the roles `<name>-<i>`.

use std::sync::OnceLock;

use serde::de::MapAccess;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::inline::{self, Extra, MainPart};
use super::roles::RoleConfig;
use crate::core::TimingOverrides;
use crate::names::{NameError, RoleName};

/// A group of roles `<name>-0` … `<name>-<count − 1>`, each with the role settings written in
/// the entry (`priority`, `takeover`, `weight`, `exec`, hooks, timing, …). The count can be
/// changed while the instances run by the group's count record (`nats-roles scale`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct GroupConfig {
    /// How many members: 1 to [`MAX_GROUP_COUNT`](crate::groups::MAX_GROUP_COUNT). Required.
    pub count: u32,
    /// The group's name (`role.name`, a role name) and the settings of every member.
    pub role: RoleConfig,
}

impl GroupConfig {
    /// A group of `count` members named `<name>-<i>` with default settings.
    #[must_use]
    pub fn new(name: RoleName, count: u32) -> Self {
        Self {
            count,
            role: RoleConfig::new(name),
        }
    }

    /// The group's name.
    #[must_use]
    pub fn name(&self) -> &RoleName {
        &self.role.name
    }

    /// Member `index` as a role of the configuration: the group's settings under the
    /// member's name.
    ///
    /// # Errors
    /// [`NameError`] when the member's name is too long for a role name.
    pub fn member(&self, index: u32) -> Result<RoleConfig, NameError> {
        let mut role = self.role.clone();
        role.name = crate::groups::member_name(&self.role.name, index)?;
        Ok(role)
    }
}

impl Serialize for GroupConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Written<'a> {
            count: u32,
            #[serde(flatten)]
            role: &'a RoleConfig,
        }
        Written {
            count: self.count,
            role: &self.role,
        }
        .serialize(s)
    }
}

/// The entries of a group's map that are not a role's: `count` and the inline timing.
#[derive(Default)]
struct GroupExtra {
    count: Option<u32>,
    timing: TimingOverrides,
}

impl<'de> Extra<'de> for GroupExtra {
    fn take<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        if key == "count" {
            self.count = Some(map.next_value()?);
            return Ok(true);
        }
        self.timing.take(key, map)
    }
}

impl<'de> Deserialize<'de> for GroupConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        static FIELDS: OnceLock<Vec<&'static str>> = OnceLock::new();
        let all = inline::joined(&FIELDS, || {
            vec![
                &["count"][..],
                inline::fields(<RoleConfig as MainPart>::from),
                inline::fields(TimingOverrides::deserialize),
            ]
        });
        let mut extra = GroupExtra::default();
        let role: RoleConfig = inline::split(d, "GroupConfig", &mut extra, all)?;
        let count = extra
            .count
            .ok_or_else(|| serde::de::Error::missing_field("count"))?;
        Ok(GroupConfig {
            count,
            role: RoleConfig {
                timing: extra.timing,
                ..role
            },
        })
    }
}
