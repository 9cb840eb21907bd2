//! The values stored under `role.<name>` (protocol Q2) and `session.<instance>.<ttl_ms>`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::names::InstanceId;

/// The protocol version as a literal token, for `concat!` (`nats-roles --version`); the one
/// place the number is written.
macro_rules! protocol_version {
    () => {
        2
    };
}
#[cfg(feature = "otel")]
pub(crate) use protocol_version;

/// Version of the lease protocol (and of the values) written by this crate: 2, session leases
/// (`docs/protocol.md`, Q1–Q11).
pub const VALUE_VERSION: u32 = protocol_version!();

/// Key prefix of session keys (`session.<instance>.<ttl_ms>`, protocol Q1).
pub const SESSION_PREFIX: &str = "session.";

/// The session key of `instance` for roles with a TTL of `ttl_ms` milliseconds.
#[must_use]
pub fn session_key(instance: &InstanceId, ttl_ms: u64) -> String {
    format!("{SESSION_PREFIX}{instance}.{ttl_ms}")
}

/// The instance a session key belongs to, and its TTL class; `None` for anything that is not
/// a session key in its one canonical form (`session.<instance>.<ttl_ms>`, the TTL in decimal
/// digits without a sign or leading zeros): a look-alike such as `session.n1.+2000` or
/// `session.n1.02000` is another key and names no session (protocol Q1).
#[must_use]
pub fn parse_session_key(key: &str) -> Option<(InstanceId, u64)> {
    let rest = key.strip_prefix(SESSION_PREFIX)?;
    let (instance, ttl) = rest.rsplit_once('.')?;
    // `u64::from_str` accepts a leading `+`: only plain digits are the canonical form.
    if ttl.is_empty() || ttl.starts_with('0') || !ttl.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ttl_ms: u64 = ttl.parse().ok()?;
    if ttl_ms > MAX_TTL_MS {
        return None;
    }
    let instance = InstanceId::new(instance).ok()?;
    // The one spelling `session_key` writes, and nothing else.
    (session_key(&instance, ttl_ms) == key).then_some((instance, ttl_ms))
}

/// The largest `ttl_ms` a reader accepts in a lease (one hour, the largest TTL a role can be
/// configured with). A value claiming more was not written by nats-roles: it is foreign, and
/// followers judge it by their own TTL (protocol P2, P5), so a hostile value cannot block a
/// role for longer than the observed-expiry backstop. `Timing::MAX_TTL` is checked against it
/// at compile time.
pub const MAX_TTL_MS: u64 = 60 * 60 * 1000;

/// The JSON document a holder writes into its role key when a term starts (protocol Q2).
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
    /// The holder's session (its uuid): the term lasts while this session does.
    pub session: Uuid,
    /// The holder's session key (`session.<holder>.<ttl_ms>`).
    pub session_key: String,
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
            .field("session", &self.session)
            .field("session_key", &self.session_key)
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
    /// A lease written by nats-roles (protocol version 2).
    Lease(Box<LeaseValue>),
    /// A lease of an older protocol version (`"v": 1`): a version 1 instance runs on this
    /// bucket. Incompatible (protocol Q10): the role reports the mismatch. A version 1 holder
    /// renews its key every heartbeat, so such a value unchanged for the backstop period (on
    /// the holder's `ttl_ms`) is no live lease and is taken over (P5).
    Older {
        /// The version the value claims.
        version: u64,
        /// The holder's TTL the value claims (ms, at most [`MAX_TTL_MS`]).
        ttl_ms: u64,
    },
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
            Ok(v)
                if v.v == VALUE_VERSION
                    && v.ttl_ms <= MAX_TTL_MS
                    && parse_session_key(&v.session_key)
                        .is_some_and(|(i, t)| i == v.holder && t == v.ttl_ms) =>
            {
                Self::Lease(Box::new(v))
            }
            _ => match other_version(bytes) {
                Some(version) if version > u64::from(VALUE_VERSION) => Self::Newer { version },
                Some(1) => match v1_lease_ttl(bytes) {
                    Some(ttl_ms) => Self::Older { version: 1, ttl_ms },
                    None => Self::Foreign,
                },
                _ => Self::Foreign,
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
            Self::Older { .. } | Self::Newer { .. } | Self::Foreign => None,
        }
    }

    /// Whether this is a lease of another protocol version (older or newer): never taken
    /// over by a backstop, the role reports the mismatch (protocol Q10).
    #[must_use]
    pub fn other_protocol(&self) -> Option<u64> {
        match self {
            Self::Older { version, .. } | Self::Newer { version } => Some(*version),
            Self::Lease(_) | Self::Foreign => None,
        }
    }
}

/// The `"v"` of a JSON object with a numeric version other than ours.
fn other_version(bytes: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Versioned {
        v: u64,
    }
    serde_json::from_slice::<Versioned>(bytes)
        .ok()
        .map(|x| x.v)
        .filter(|v| *v != u64::from(VALUE_VERSION))
}

/// The TTL of `bytes` if it is a version 1 lease (P2: holder, incarnation, nonce, ttl_ms), as a
/// version 1 instance writes it. Anything less is foreign.
fn v1_lease_ttl(bytes: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct V1 {
        holder: InstanceId,
        incarnation: Uuid,
        nonce: Uuid,
        ttl_ms: u64,
    }
    serde_json::from_slice::<V1>(bytes)
        .ok()
        .filter(|v| v.ttl_ms <= MAX_TTL_MS)
        .map(|v| v.ttl_ms)
}

/// The most terms a session value lists in [`SessionValue::released`]; a value listing more is
/// not a session (foreign). An instance that would need more ends the session instead
/// (protocol Q5 rule 5).
pub const MAX_RELEASED: usize = 64;

/// A term resting on a session that nobody acts on (protocol Q5 rule 5): the role value at
/// `revision` of `role` names the session, and the session's owner declares it released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedTerm {
    /// The role.
    pub role: crate::names::RoleName,
    /// The revision of the role value.
    pub revision: u64,
}

/// The JSON document of a session key (protocol Q2): the same bytes at every renewal, until
/// the list of released terms changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionValue {
    /// Format version (2).
    pub v: u32,
    /// The instance whose liveness this session is.
    pub instance: InstanceId,
    /// Random id of the instance's process start.
    pub incarnation: Uuid,
    /// Random id of this session (new at every session start).
    pub session: Uuid,
    /// The session's TTL in milliseconds (the key's `Nats-TTL`, rounded up to seconds there).
    pub ttl_ms: u64,
    /// How often the session is renewed, in milliseconds.
    pub heartbeat_ms: u64,
    /// Role values naming this session that nobody acts on (a refused release, a value
    /// another client wrote): vacant for every candidate (protocol Q5 rule 5). At most
    /// [`MAX_RELEASED`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<ReleasedTerm>,
}

impl SessionValue {
    /// Serialises the value to JSON bytes.
    #[must_use]
    pub fn to_bytes(&self) -> bytes::Bytes {
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Parses the bytes stored under session key `key`: `None` unless the value is a version 2
    /// session of the instance and TTL class the key names (anything else is foreign and never
    /// believed).
    #[must_use]
    pub fn parse(key: &str, bytes: &[u8]) -> Option<SessionValue> {
        let (instance, ttl_ms) = parse_session_key(key)?;
        serde_json::from_slice::<SessionValue>(bytes)
            .ok()
            .filter(|v| v.v == VALUE_VERSION && v.instance == instance && v.ttl_ms == ttl_ms)
            .filter(|v| v.heartbeat_ms > 0 && v.heartbeat_ms <= v.ttl_ms)
            .filter(|v| v.released.len() <= MAX_RELEASED)
    }

    /// Whether the value declares the term at `revision` of `role` released (Q5 rule 5).
    #[must_use]
    pub fn releases(&self, role: &crate::names::RoleName, revision: u64) -> bool {
        self.released
            .iter()
            .any(|t| t.revision == revision && t.role == *role)
    }

    /// The session's TTL.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
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
            v: VALUE_VERSION,
            holder: InstanceId::new("node-a").unwrap(),
            incarnation: Uuid::new_v4(),
            session: uuid::Uuid::nil(),
            session_key: crate::value::session_key(&InstanceId::new("node-a").unwrap(), 3000),
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
    fn other_protocol_versions_are_recognised() {
        let mut v = sample();
        v.v = 3;
        assert_eq!(
            HolderValue::parse(&v.to_bytes()),
            HolderValue::Newer { version: 3 }
        );
        let newer = br#"{"v":3,"holder":"node-a","anything":null}"#;
        assert_eq!(HolderValue::parse(newer), HolderValue::Newer { version: 3 });
        let v1 = br#"{"v":1,"holder":"node-a","incarnation":"5b0e1c52-0000-4000-8000-0000000000aa","nonce":"5b0e1c52-0000-4000-8000-0000000000bb","ttl_ms":3000}"#;
        assert_eq!(
            HolderValue::parse(v1),
            HolderValue::Older {
                version: 1,
                ttl_ms: 3000
            }
        );
        assert_eq!(HolderValue::parse(br#"{"v":"2"}"#), HolderValue::Foreign);
        assert_eq!(HolderValue::parse(br#"{"v":1}"#), HolderValue::Foreign);
        // A version 2 value whose session key does not name its holder and TTL is foreign.
        let mut v = sample();
        v.session_key = "session.node-b.3000".into();
        assert_eq!(HolderValue::parse(&v.to_bytes()), HolderValue::Foreign);
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
        v.session_key = session_key(&v.holder, MAX_TTL_MS);
        assert!(matches!(
            HolderValue::parse_at(&v.to_bytes(), 9),
            HolderValue::Lease(_)
        ));
    }

    #[test]
    fn only_the_canonical_session_key_names_a_session() {
        let n1 = InstanceId::new("n1").unwrap();
        assert_eq!(parse_session_key("session.n1.2000"), Some((n1, 2000)));
        for look_alike in [
            "session.n1.+2000",
            "session.n1.02000",
            "session.n1.-2000",
            "session.n1. 2000",
            "session.n1.2000 ",
            "session.n1.0",
            "session.n1.",
            "session.n1",
            "session..2000",
            "session.n 1.2000",
            "session.n1.2e3",
            "session.n1.3600001",
            "session.n1.99999999999999999999999",
        ] {
            assert_eq!(parse_session_key(look_alike), None, "{look_alike}");
        }
        // A value stored under a look-alike key is no session either.
        let v = SessionValue {
            v: VALUE_VERSION,
            instance: InstanceId::new("n1").unwrap(),
            incarnation: Uuid::new_v4(),
            session: Uuid::new_v4(),
            ttl_ms: 2000,
            heartbeat_ms: 500,
            released: Vec::new(),
        };
        assert!(SessionValue::parse("session.n1.2000", &v.to_bytes()).is_some());
        assert!(SessionValue::parse("session.n1.+2000", &v.to_bytes()).is_none());
    }

    #[test]
    fn term_absent_in_first_write() {
        let mut v = sample();
        v.term = None;
        let text = String::from_utf8(v.to_bytes().to_vec()).unwrap();
        assert!(!text.contains("term"));
    }
}
