//! The operator's drain record (`control.drain.<instance>`, `nats-roles drain`): while the key
//! holds a valid record, the instance it names drains (docs/placement.md), as if
//! `POST /api/drain` had been called on it; deleting the key ends that drain.

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

    /// Parses the value stored under `key`; `None` for anything that is not a version-1
    /// record naming the key's instance (a foreign value drains nothing: it is reported, not
    /// trusted).
    #[must_use]
    pub fn parse(key: &str, bytes: &[u8]) -> Option<Self> {
        if bytes.len() > 4096 {
            return None;
        }
        let named = key.strip_prefix(DRAIN_PREFIX)?;
        let r: Self = serde_json::from_slice(bytes).ok()?;
        (r.v == DRAIN_VERSION && r.instance.as_str() == named).then_some(r)
    }

    /// Serialises the record to JSON bytes.
    #[must_use]
    pub fn to_bytes(&self) -> bytes::Bytes {
        // Strings and an integer: serialising cannot fail.
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_under_its_own_key_only() {
        let a = InstanceId::new("node-a").expect("id");
        let r = DrainRecord::new(&a, "kernel update", "ops@host");
        let key = drain_key(&a);
        assert_eq!(key, "control.drain.node-a");
        assert_eq!(DrainRecord::parse(&key, &r.to_bytes()), Some(r.clone()));
        assert_eq!(
            DrainRecord::parse("control.drain.node-b", &r.to_bytes()),
            None
        );
        assert_eq!(DrainRecord::parse(&key, b"yes"), None);
        let mut v2 = r;
        v2.v = 2;
        assert_eq!(DrainRecord::parse(&key, &v2.to_bytes()), None);
    }

    #[test]
    fn a_long_reason_is_cut() {
        let a = InstanceId::new("node-a").expect("id");
        let r = DrainRecord::new(&a, &"é".repeat(200), "x");
        assert!(r.reason.len() <= DrainRecord::MAX_REASON_LEN);
    }
}
