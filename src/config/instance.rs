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
    /// Free-form metadata published with held roles (e.g. `host`, an HTTP
    /// address); at most 32 entries, keys and values at most 256 bytes.
    /// Default: empty.
    pub meta: BTreeMap<String, String>,
}

fn de_instance_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<InstanceId>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(id) => InstanceId::new(id.as_str())
            .map(Some)
            .map_err(|e| serde::de::Error::custom(name_message("instance id", &id, &e))),
    }
}
