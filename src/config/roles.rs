//! One role of the configuration ([`RoleConfig`]): name, campaign, priority, takeover and the
//! timing overrides written inline in the role's entry.

use std::sync::OnceLock;

use serde::de::MapAccess;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::exec::{ExecConfig, HookConfig};
use super::inline::{self, Extra, MainPart};
use super::instance::InstanceConfig;
use super::message::name_message;
use crate::core::TimingOverrides;
use crate::names::RoleName;
use crate::placement::Takeover;

/// The most slots a role may have (`roles[].slots`).
pub const MAX_SLOTS: u32 = 64;

/// One role this instance takes part in. Timing fields (`ttl`, `heartbeat`, ...) written in
/// the role's entry override the top-level [`Timing`](crate::core::Timing) for this role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct RoleConfig {
    /// The role's name. Required.
    #[serde(deserialize_with = "de_role_name")]
    pub name: RoleName,
    /// Human-readable description. Default: `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether this instance contends for the role; `false` only observes who
    /// holds it. Default: `true`.
    #[serde(default = "default_true")]
    pub campaign: bool,
    /// Priority for this role, overriding [`InstanceConfig::priority`].
    /// Default: `None` (use the instance priority).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Whether placement may hand this role over to a preferred instance.
    /// Default: `voluntary`.
    #[serde(default)]
    pub takeover: Takeover,
    /// The role's cost for placement: fair shares and `instance.capacity` count roles at
    /// their weight; 1 to 1000. Default: `1`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub weight: u32,
    /// How many instances may hold the role at once, each one slot (protocol Q15): slot `k`
    /// is the role `<name>.<k>`, and an instance holds at most one slot of a role. `1` (no
    /// slots) or 2 to [`MAX_SLOTS`]. Default: `1`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub slots: u32,
    /// A command the binary runs while this instance holds the role (docs/exec.md).
    /// Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecConfig>,
    /// A command run when this instance becomes the holder (before `exec` starts).
    /// Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_promote: Option<HookConfig>,
    /// A command run when this instance stopped being the holder (after `exec` ended).
    /// Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_demote: Option<HookConfig>,
    /// A command run when placement chose this instance to receive the role by a voluntary
    /// move (warm hand-over; the holder waits for it). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_prepare: Option<HookConfig>,
    /// Overrides of the top-level timing, written inline (`ttl: 5s` in the role's entry).
    /// Default: none (inherit every value).
    #[serde(flatten, skip_deserializing)]
    pub timing: TimingOverrides,
}

impl RoleConfig {
    /// A role named `name` that this instance contends for, with no priority
    /// or timing overrides.
    #[must_use]
    pub fn new(name: RoleName) -> Self {
        Self {
            name,
            description: None,
            campaign: true,
            priority: None,
            takeover: Takeover::Voluntary,
            weight: 1,
            slots: 1,
            exec: None,
            on_promote: None,
            on_demote: None,
            on_prepare: None,
            timing: TimingOverrides::default(),
        }
    }

    /// The roles this entry stands for: its name, or with `slots` (protocol Q15) one role
    /// per slot, `<name>.0` to `<name>.<slots-1>`.
    #[must_use]
    pub fn role_names(&self) -> Vec<RoleName> {
        if self.slots <= 1 {
            return vec![self.name.clone()];
        }
        (0..self.slots)
            .filter_map(|k| RoleName::for_slot(&self.name, k).ok())
            .collect()
    }

    /// This role's priority: its own `priority` if set, otherwise the
    /// instance's.
    #[must_use]
    pub fn effective_priority(&self, instance: &InstanceConfig) -> i32 {
        self.priority.unwrap_or(instance.priority)
    }
}

impl Serialize for RoleConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RoleConfig::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for RoleConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        static FIELDS: OnceLock<Vec<&'static str>> = OnceLock::new();
        let all = inline::joined(&FIELDS, || {
            vec![
                inline::fields(<RoleConfig as MainPart>::from),
                inline::fields(TimingOverrides::deserialize),
            ]
        });
        let mut timing = TimingOverrides::default();
        let role: RoleConfig = inline::split(d, "RoleConfig", &mut timing, all)?;
        Ok(RoleConfig { timing, ..role })
    }
}

impl<'de> MainPart<'de> for RoleConfig {
    fn from<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        RoleConfig::deserialize(d)
    }
}

impl<'de> Extra<'de> for TimingOverrides {
    fn take<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        if !inline::fields(TimingOverrides::deserialize).contains(&key) {
            return Ok(false);
        }
        let value: TimingOverrides = inline::one_entry(key, map)?;
        *self = value.or(*self);
        Ok(true)
    }
}

fn de_role_name<'de, D: Deserializer<'de>>(d: D) -> Result<RoleName, D::Error> {
    let name = String::deserialize(d)?;
    RoleName::new(name.as_str())
        .map_err(|e| serde::de::Error::custom(name_message("role name", &name, &e)))
}

fn default_true() -> bool {
    true
}

fn one() -> u32 {
    1
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_one(v: &u32) -> bool {
    *v == 1
}
