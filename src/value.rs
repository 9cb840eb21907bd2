//! The values stored under `role.<name>` (protocol Q2) and `session.<instance>.<ttl_ms>`, and
//! the session key's one spelling; their bytes are read and written by `codec::role` and
//! `codec::session`.

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
}
