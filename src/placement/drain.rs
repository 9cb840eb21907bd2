//! The operator's drain record (`control.drain.<instance>`, `nats-roles drain`): while the key
//! holds a valid record, the instance it names drains (docs/placement.md), as if
//! `POST /api/drain` had been called on it; deleting the key ends that drain. Its bytes are
//! read and written by `codec::control`.

use serde::{Deserialize, Serialize};

use crate::names::InstanceId;

/// Key prefix of drain records: `control.drain.<instance>`.
pub const DRAIN_PREFIX: &str = "control.drain.";

/// Version of the drain record written by this crate.
pub(crate) const DRAIN_VERSION: u32 = 1;

/// The key of `instance`'s drain record.
#[must_use]
#[cfg(any(feature = "tooling", feature = "http", test))]
pub fn drain_key(instance: &InstanceId) -> String {
    format!("{DRAIN_PREFIX}{instance}")
}

/// An operator's request that one instance drain: hand every role over gracefully and take
/// none another live member is preferred for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainRecord {
    /// Format version.
    pub v: u32,
    /// The instance that drains (must match the key's last token).
    pub instance: InstanceId,
    /// Why (free text, at most [`DrainRecord::MAX_REASON_LEN`] bytes).
    #[serde(default)]
    pub reason: String,
    /// Who asked (`user@host` from the CLI), informational.
    #[serde(default)]
    pub by: String,
    /// When (RFC 3339), informational.
    #[serde(default)]
    pub at: String,
}

impl DrainRecord {
    /// Longest reason kept, in bytes.
    pub const MAX_REASON_LEN: usize = 256;

    /// A record asking `instance` to drain now, by `by` for `reason` (cut to
    /// [`DrainRecord::MAX_REASON_LEN`] bytes).
    #[must_use]
    pub fn new(instance: &InstanceId, reason: &str, by: &str) -> Self {
        Self {
            v: DRAIN_VERSION,
            instance: instance.clone(),
            reason: super::freeze::cut(reason, Self::MAX_REASON_LEN),
            by: super::freeze::cut(by, 128),
            at: crate::value::now_rfc3339(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reason_is_cut() {
        let a = InstanceId::new("node-a").expect("id");
        let r = DrainRecord::new(&a, &"é".repeat(200), "x");
        assert!(r.reason.len() <= DrainRecord::MAX_REASON_LEN);
    }
}
