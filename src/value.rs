//! The lease value stored under `role.<name>` (protocol P2).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::names::InstanceId;

/// Version of the lease value format written by this crate.
pub const VALUE_VERSION: u32 = 1;

/// The largest `ttl_ms` a reader accepts in a lease (one hour, the largest TTL a role can be
/// configured with). A value claiming more was not written by nats-roles: it is foreign, and
/// followers judge it by their own TTL (protocol P2, P5), so a hostile value cannot block a
/// role for longer than the observed-expiry backstop. `Timing::MAX_TTL` is checked against it
/// at compile time.
pub const MAX_TTL_MS: u64 = 60 * 60 * 1000;

/// The JSON document a holder writes into its role key.
///
/// `Debug` output redacts the nonce (the part of the fencing token that is not guessable).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseValue {
    /// Format version; readers treat other versions as foreign values.
    pub v: u32,
    /// Instance id of the holder.
    pub holder: InstanceId,
    /// Random id of the holder's process start.
    pub incarnation: Uuid,
    /// Random id of the term; recognises the holder's own late writes.
    pub nonce: Uuid,
    /// Term number this write continues; `None` in the write that starts a term.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// The holder's priority for this role (informational for placement).
    #[serde(default)]
    pub priority: i32,
    /// The holder's lease TTL in milliseconds.
    pub ttl_ms: u64,
    /// Free-form metadata of the holder (host, HTTP address, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: BTreeMap<String, String>,
    /// Wall-clock time the term started (RFC 3339); informational only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_at: Option<String>,
    /// Wall-clock time of this write (RFC 3339); informational only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewed_at: Option<String>,
}

impl std::fmt::Debug for LeaseValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseValue")
            .field("v", &self.v)
            .field("holder", &self.holder)
            .field("incarnation", &self.incarnation)
            .field("nonce", &"<redacted>")
            .field("term", &self.term)
            .field("priority", &self.priority)
            .field("ttl_ms", &self.ttl_ms)
            .field("meta", &self.meta)
            .field("acquired_at", &self.acquired_at)
            .field("renewed_at", &self.renewed_at)
            .finish()
    }
}

impl LeaseValue {
    /// Serialises the value to JSON bytes.
    #[must_use]
    pub fn to_bytes(&self) -> bytes::Bytes {
        // Serialising a struct of strings, integers and a string map cannot fail.
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    /// The holder's TTL as a duration.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

/// What a reader makes of the bytes in a role key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HolderValue {
    /// A lease written by nats-roles (protocol version 1).
    Lease(Box<LeaseValue>),
    /// A lease of a newer protocol version (`"v"` above [`VALUE_VERSION`], e.g. a version 2
    /// session lease, whose key does not change while its term lasts): never taken over after
    /// the follower backstop, since its holder may be renewing elsewhere (protocol P2,
    /// "Versioning"). The role waits until the key is deleted or expires.
    Newer {
        /// The version the value claims.
        version: u64,
    },
    /// Anything else: not JSON, an older version, missing fields.
    Foreign,
}

impl HolderValue {
    /// Parses the bytes of a role key; never fails, unknown content is [`HolderValue::Foreign`].
    /// Prefer [`HolderValue::parse_at`] where the entry's revision is known.
    #[must_use]
    pub fn parse(bytes: &[u8]) -> Self {
        match serde_json::from_slice::<LeaseValue>(bytes) {
            Ok(v) if v.v == VALUE_VERSION && v.ttl_ms <= MAX_TTL_MS => Self::Lease(Box::new(v)),
            _ => match newer_version(bytes) {
                Some(version) => Self::Newer { version },
                None => Self::Foreign,
            },
        }
    }

    /// Parses the entry stored at `revision` of a role key (protocol P2). Besides what
    /// [`HolderValue::parse`] refuses, a lease that claims a term above the revision it is
    /// stored at is foreign: a term is the revision of the write that began it, so a real
    /// renewal's term never exceeds its own revision. Such a value (written by another client)
    /// is shown as foreign, never as a term, so displayed terms never go back.
    #[must_use]
    pub fn parse_at(bytes: &[u8], revision: u64) -> Self {
        match Self::parse(bytes) {
            Self::Lease(v) if v.term.is_some_and(|t| t > revision) => Self::Foreign,
            other => other,
        }
    }

    /// The lease, if this is one.
    #[must_use]
    pub fn lease(&self) -> Option<&LeaseValue> {
        match self {
            Self::Lease(l) => Some(l),
            Self::Newer { .. } | Self::Foreign => None,
        }
    }
}

/// The `"v"` of a JSON object whose version is above ours.
fn newer_version(bytes: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Versioned {
        v: u64,
    }
    serde_json::from_slice::<Versioned>(bytes)
        .ok()
        .map(|x| x.v)
        .filter(|v| *v > u64::from(VALUE_VERSION))
}

/// Current wall-clock time formatted as RFC 3339 (informational fields only).
#[must_use]
pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LeaseValue {
        LeaseValue {
            v: 1,
            holder: InstanceId::new("node-a").unwrap(),
            incarnation: Uuid::new_v4(),
            nonce: Uuid::new_v4(),
            term: Some(7),
            priority: 3,
            ttl_ms: 3000,
            meta: BTreeMap::from([("host".into(), "h".into())]),
            acquired_at: Some(now_rfc3339()),
            renewed_at: None,
        }
    }

    #[test]
    fn round_trips() {
        let v = sample();
        assert_eq!(
            HolderValue::parse(&v.to_bytes()),
            HolderValue::Lease(Box::new(v))
        );
    }

    #[test]
    fn a_newer_protocol_version_is_recognised_whatever_its_fields() {
        let mut v = sample();
        v.v = 2;
        assert_eq!(
            HolderValue::parse(&v.to_bytes()),
            HolderValue::Newer { version: 2 }
        );
        let session = br#"{"v":2,"holder":"node-a","session":"s-1","term":null}"#;
        assert_eq!(
            HolderValue::parse(session),
            HolderValue::Newer { version: 2 }
        );
        assert_eq!(HolderValue::parse(br#"{"v":"2"}"#), HolderValue::Foreign);
        assert_eq!(HolderValue::parse(br#"{"v":1}"#), HolderValue::Foreign);
    }

    #[test]
    fn foreign_values_are_recognised() {
        assert_eq!(HolderValue::parse(b"garbage\xff"), HolderValue::Foreign);
        assert_eq!(HolderValue::parse(b"{}"), HolderValue::Foreign);
        let mut v = sample();
        v.v = 0;
        assert_eq!(HolderValue::parse(&v.to_bytes()), HolderValue::Foreign);
        assert_eq!(
            HolderValue::parse(br#"{"v":1,"holder":"a b"}"#),
            HolderValue::Foreign
        );
    }

    #[test]
    fn hostile_terms_and_ttls_are_foreign() {
        let mut v = sample();
        v.term = Some(u64::MAX);
        assert_eq!(
            HolderValue::parse_at(&v.to_bytes(), 9),
            HolderValue::Foreign
        );
        v.term = Some(9);
        assert!(matches!(
            HolderValue::parse_at(&v.to_bytes(), 9),
            HolderValue::Lease(_)
        ));
        v.term = None;
        assert!(matches!(
            HolderValue::parse_at(&v.to_bytes(), 1),
            HolderValue::Lease(_)
        ));
        v.ttl_ms = 1 << 63;
        assert_eq!(
            HolderValue::parse_at(&v.to_bytes(), 9),
            HolderValue::Foreign
        );
        v.ttl_ms = MAX_TTL_MS;
        assert!(matches!(
            HolderValue::parse_at(&v.to_bytes(), 9),
            HolderValue::Lease(_)
        ));
    }

    #[test]
    fn term_absent_in_first_write() {
        let mut v = sample();
        v.term = None;
        let text = String::from_utf8(v.to_bytes().to_vec()).unwrap();
        assert!(!text.contains("term"));
    }
}
