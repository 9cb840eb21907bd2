//! Role keys (`role.<name>`, protocol P2, Q2, Q10): the bytes of a lease ⇄ [`LeaseValue`] /
//! [`HolderValue`], and an entry → [`KeyState`] (a watched entry, or a message read from the
//! stream leader with its headers).

use async_nats::HeaderMap;
use async_nats::jetstream::kv::Entry;
use uuid::Uuid;

use super::EntryKind;
use super::headers::MESSAGE_TTL;
use crate::core::KeyState;
use crate::names::InstanceId;
use crate::value::{HolderValue, LeaseValue, MAX_TTL_MS, VALUE_VERSION, parse_session_key};

impl LeaseValue {
    /// Serialises the value to JSON bytes.
    #[must_use]
    pub fn to_bytes(&self) -> bytes::Bytes {
        // Serialising a struct of strings, integers and a string map cannot fail.
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }
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

/// A watched entry of a role key (the bucket watcher, `kv::Store::entry`): a value, or a
/// delete (an eviction) or purge/expiry marker (an expiry, P5). Its headers are not known
/// here, so a version 1 value is [`HolderValue::Older`] whether or not it carried `Nats-TTL`
/// (unlike [`stored`]).
pub(crate) fn watched(entry: &Entry) -> KeyState {
    match EntryKind::watched(entry.operation) {
        EntryKind::Value => KeyState::Held {
            revision: entry.revision,
            value: HolderValue::parse_at(&entry.value, entry.revision),
        },
        EntryKind::Marker { expired } => KeyState::Vacant {
            revision: entry.revision,
            expired,
        },
    }
}

/// A message of a role key read from the stream leader: its sequence, headers and payload
/// (`LeaseStore::read`). Markers as [`EntryKind::stored`] reads them; a version 1 value
/// stored without `Nats-TTL` is foreign (Q10).
pub(crate) fn stored(sequence: u64, headers: &HeaderMap, payload: &[u8]) -> KeyState {
    match EntryKind::stored(headers) {
        EntryKind::Marker { expired } => KeyState::Vacant {
            revision: sequence,
            expired,
        },
        EntryKind::Value => {
            let value = match HolderValue::parse_at(payload, sequence) {
                // A version 1 instance writes every lease with a per-key TTL (P3): a v1-shaped
                // value stored without one is another client's, not a live v1 holder's (it
                // would block the start of every instance for ever, Q10).
                HolderValue::Older { .. } if headers.get(MESSAGE_TTL).is_none() => {
                    HolderValue::Foreign
                }
                other => other,
            };
            KeyState::Held {
                revision: sequence,
                value,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use async_nats::jetstream::kv::Operation;

    use super::*;
    use crate::codec::headers::{KV_OPERATION, MARKER_REASON};
    use crate::codec::test_entry;
    use crate::value::{now_rfc3339, session_key};

    fn sample() -> LeaseValue {
        LeaseValue {
            v: VALUE_VERSION,
            holder: InstanceId::new("node-a").unwrap(),
            incarnation: Uuid::new_v4(),
            session: uuid::Uuid::nil(),
            session_key: session_key(&InstanceId::new("node-a").unwrap(), 3000),
            nonce: Uuid::new_v4(),
            term: Some(7),
            priority: 3,
            ttl_ms: 3000,
            meta: BTreeMap::from([("host".into(), "h".into())]),
            acquired_at: Some(now_rfc3339()),
            renewed_at: None,
        }
    }

    const V1: &[u8] = br#"{"v":1,"holder":"node-a","incarnation":"5b0e1c52-0000-4000-8000-0000000000aa","nonce":"5b0e1c52-0000-4000-8000-0000000000bb","ttl_ms":3000}"#;

    /// `sample()` as JSON with `field` replaced by the raw JSON `raw`.
    fn with(field: &str, raw: &str) -> Vec<u8> {
        let mut json: serde_json::Value = serde_json::from_slice(&sample().to_bytes()).unwrap();
        json[field] = serde_json::from_str(raw).unwrap();
        serde_json::to_vec(&json).unwrap()
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
        assert_eq!(
            HolderValue::parse(V1),
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
    fn term_absent_in_first_write() {
        let mut v = sample();
        v.term = None;
        let text = String::from_utf8(v.to_bytes().to_vec()).unwrap();
        assert!(!text.contains("term"));
    }

    #[test]
    fn empty_truncated_and_non_object_values_are_foreign() {
        let full = sample().to_bytes();
        for bytes in [
            &b""[..],
            b" ",
            b"null",
            b"2",
            b"[]",
            br#""v""#,
            b"{",
            &full[..full.len() - 1],
            &[0u8; 16][..],
        ] {
            assert_eq!(HolderValue::parse(bytes), HolderValue::Foreign, "{bytes:?}");
        }
        // Nesting deeper than serde_json's recursion limit is refused, not a stack overflow.
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(HolderValue::parse(deep.as_bytes()), HolderValue::Foreign);
        // A lease with trailing bytes is no lease.
        let mut trailing = full.to_vec();
        trailing.extend_from_slice(b" x");
        assert_eq!(HolderValue::parse(&trailing), HolderValue::Foreign);
    }

    #[test]
    fn fields_of_the_wrong_type_or_out_of_range_are_foreign() {
        for (field, raw) in [
            ("holder", "7"),
            ("holder", r#""node a""#),
            ("holder", r#""""#),
            ("nonce", r#""not-a-uuid""#),
            ("session", "null"),
            ("session_key", "null"),
            ("term", r#""7""#),
            ("term", "-1"),
            ("term", "7.5"),
            ("term", "18446744073709551616"),
            ("ttl_ms", "-3000"),
            ("ttl_ms", "3000.0"),
            ("ttl_ms", "1e3"),
            ("ttl_ms", "18446744073709551616"),
            ("priority", "2147483648"),
            ("meta", r#"{"host":7}"#),
            ("acquired_at", "[]"),
        ] {
            assert_eq!(
                HolderValue::parse(&with(field, raw)),
                HolderValue::Foreign,
                "{field}: {raw}"
            );
        }
        // Unknown fields are ignored (P2).
        assert!(matches!(
            HolderValue::parse(&with("unknown", r#"{"x":[1,2]}"#)),
            HolderValue::Lease(_)
        ));
    }

    #[test]
    fn hostile_versions_are_newer_or_foreign() {
        // Any numeric `v` above ours that fits a u64 is a newer protocol (never taken over by
        // the backstop: "Versioning"), even one a u32 cannot hold.
        assert_eq!(
            HolderValue::parse(&with("v", "4294967298")),
            HolderValue::Newer {
                version: 4_294_967_298
            }
        );
        assert_eq!(
            HolderValue::parse(br#"{"v":18446744073709551615}"#),
            HolderValue::Newer { version: u64::MAX }
        );
        for raw in [
            "18446744073709551616",
            "-2",
            "2.0",
            "3.5",
            "null",
            r#""3""#,
            "true",
        ] {
            assert_eq!(
                HolderValue::parse(&with("v", raw)),
                HolderValue::Foreign,
                "v: {raw}"
            );
        }
        // A version 1 lease claiming more than the largest TTL is foreign (P2).
        let v1_long = String::from_utf8(V1.to_vec())
            .unwrap()
            .replace("3000", "3600001");
        assert_eq!(HolderValue::parse(v1_long.as_bytes()), HolderValue::Foreign);
    }

    #[test]
    fn watched_entries_are_values_or_markers() {
        let bytes = sample().to_bytes();
        assert!(matches!(
            watched(&test_entry("role.r", 9, Operation::Put, &bytes)),
            KeyState::Held {
                revision: 9,
                value: HolderValue::Lease(_)
            }
        ));
        assert_eq!(
            watched(&test_entry("role.r", 9, Operation::Put, b"")),
            KeyState::Held {
                revision: 9,
                value: HolderValue::Foreign
            }
        );
        // A marker is a marker whatever bytes it carries.
        for (op, expired) in [(Operation::Delete, false), (Operation::Purge, true)] {
            for value in [&b""[..], &bytes] {
                assert_eq!(
                    watched(&test_entry("role.r", 10, op, value)),
                    KeyState::Vacant {
                        revision: 10,
                        expired
                    }
                );
            }
        }
        // Without headers, a version 1 value is a version 1 lease (see `stored`).
        assert_eq!(
            watched(&test_entry("role.r", 4, Operation::Put, V1)),
            KeyState::Held {
                revision: 4,
                value: HolderValue::Older {
                    version: 1,
                    ttl_ms: 3000
                }
            }
        );
    }

    #[test]
    fn markers_are_vacancies() {
        for (revision, header, value, expired) in [
            (5, KV_OPERATION, "DEL", false),
            (6, MARKER_REASON, "MaxAge", true),
        ] {
            let mut h = HeaderMap::new();
            h.insert(header, value);
            assert_eq!(
                stored(revision, &h, b""),
                KeyState::Vacant { revision, expired }
            );
            // A marker carrying a lease is still a marker.
            assert_eq!(
                stored(revision, &h, &sample().to_bytes()),
                KeyState::Vacant { revision, expired }
            );
        }
        let h = HeaderMap::new();
        assert!(matches!(
            stored(7, &h, b"junk"),
            KeyState::Held {
                revision: 7,
                value: HolderValue::Foreign
            }
        ));
    }

    #[test]
    fn a_version_1_value_without_a_ttl_is_foreign_on_a_read() {
        let mut with_ttl = HeaderMap::new();
        with_ttl.insert(MESSAGE_TTL, "3");
        assert_eq!(
            stored(4, &with_ttl, V1),
            KeyState::Held {
                revision: 4,
                value: HolderValue::Older {
                    version: 1,
                    ttl_ms: 3000
                }
            }
        );
        assert_eq!(
            stored(4, &HeaderMap::new(), V1),
            KeyState::Held {
                revision: 4,
                value: HolderValue::Foreign
            }
        );
        // The TTL rule concerns version 1 only: newer leases need no header.
        let newer = br#"{"v":3}"#;
        assert_eq!(
            stored(4, &HeaderMap::new(), newer),
            KeyState::Held {
                revision: 4,
                value: HolderValue::Newer { version: 3 }
            }
        );
    }
}
