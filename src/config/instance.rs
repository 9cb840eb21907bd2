//! The `instance` section: this manager instance's identity and defaults.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::message::name_message;
use crate::names::InstanceId;

/// Identity and defaults of this manager instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct InstanceConfig {
    /// This instance's id. Default: `None`, meaning it must come from the
    /// command line or `NATS_ROLES_INSTANCE_ID` (see
    /// [`Config::require_instance_id`](super::Config::require_instance_id)).
    #[serde(
        deserialize_with = "de_instance_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<InstanceId>,
    /// Priority of this instance for roles that do not set their own; higher
    /// wins. Default: `0`.
    pub priority: i32,
    /// This instance's zone (rack, availability zone, site): placement spreads roles across
    /// zones first. 1 to 64 letters, digits, `-`, `_` or `.`. Default: `None` — then
    /// `meta.zone` if set, else no zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Units of role cost (`roles[].weight`) this instance holds at most: placement never
    /// moves a role onto it beyond that. At least 1. Default: `None` (no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    /// Roles this instance holds at most (placement). At least 1. Default: `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_roles: Option<u32>,
    /// This instance's software version (e.g. `1.4.2`; `NATS_ROLES_VERSION` overrides it):
    /// during a rolling upgrade no role moves onto an instance older than the newest live
    /// one. Default: `None` (never counts as older).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// How long this instance's member record outlives it when nobody saw it die (protocol
    /// Q8: the last resort after its successors and second tier; the record is rewritten
    /// every third of it). At least 30 s; raised to 10 × the longest role TTL. Default:
    /// `None` (5 min).
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub presence_ttl: Option<std::time::Duration>,
    /// Free-form metadata published with held roles (e.g. `host`, an HTTP
    /// address); at most 32 entries, keys and values at most 256 bytes.
    /// Default: empty.
    pub meta: BTreeMap<String, String>,
}

impl InstanceConfig {
    /// The zone placement uses: `zone`, else `meta.zone`.
    #[must_use]
    pub fn effective_zone(&self) -> Option<&str> {
        self.zone
            .as_deref()
            .or_else(|| self.meta.get("zone").map(String::as_str))
    }
}

fn de_instance_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<InstanceId>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(id) => InstanceId::new(id.as_str())
            .map(Some)
            .map_err(|e| serde::de::Error::custom(name_message("instance id", &id, &e))),
    }
}
