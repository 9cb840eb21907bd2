//! Session keys (`session.<instance>.<ttl_ms>`, protocol Q1, Q2): the bytes of a session ⇄
//! [`SessionValue`], and an entry → [`SessionKeyState`] (a watched entry, or a message read
//! from the stream leader with its headers).

use async_nats::HeaderMap;
use async_nats::jetstream::kv::Entry;

use super::EntryKind;
use crate::core::SessionKeyState;
use crate::value::{MAX_RELEASED, SessionValue, VALUE_VERSION, parse_session_key};

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
}

/// A watched entry of a session key (the bucket watcher, `kv::Store::entry`): a delete
/// marker, a purge or expiry marker (`expired`, P5), or a value (`None` inside when it is not
/// a session of the instance and TTL class the key names).
pub(crate) fn watched(entry: &Entry) -> SessionKeyState {
    state(
        &entry.key,
        entry.revision,
        EntryKind::watched(entry.operation),
        &entry.value,
    )
}

/// A message of session key `key` read from the stream leader: its sequence, headers and
/// payload (`LeaseStore::read_session`). Markers as [`EntryKind::stored`] reads them.
pub(crate) fn stored(
    key: &str,
    sequence: u64,
    headers: &HeaderMap,
    payload: &[u8],
) -> SessionKeyState {
    state(key, sequence, EntryKind::stored(headers), payload)
}

fn state(key: &str, revision: u64, kind: EntryKind, bytes: &[u8]) -> SessionKeyState {
    match kind {
        EntryKind::Value => SessionKeyState::Value {
            revision,
            value: SessionValue::parse(key, bytes),
        },
        EntryKind::Marker { expired } => SessionKeyState::Marker { revision, expired },
    }
}

#[cfg(test)]
mod tests {
    use async_nats::jetstream::kv::Operation;
    use uuid::Uuid;

    use super::*;
    use crate::codec::headers::{KV_OPERATION, MARKER_REASON};
    use crate::codec::test_entry;
    use crate::names::{InstanceId, RoleName};
    use crate::value::ReleasedTerm;

    const KEY: &str = "session.n1.2000";

    fn sample() -> SessionValue {
        SessionValue {
            v: VALUE_VERSION,
            instance: InstanceId::new("n1").unwrap(),
            incarnation: Uuid::new_v4(),
            session: Uuid::new_v4(),
            ttl_ms: 2000,
            heartbeat_ms: 500,
            released: Vec::new(),
        }
    }

    /// `sample()` as JSON with `field` replaced by the raw JSON `raw`.
    fn with(field: &str, raw: &str) -> Vec<u8> {
        let mut json: serde_json::Value = serde_json::from_slice(&sample().to_bytes()).unwrap();
        json[field] = serde_json::from_str(raw).unwrap();
        serde_json::to_vec(&json).unwrap()
    }

    #[test]
    fn a_session_round_trips_under_its_own_key_only() {
        let v = sample();
        assert_eq!(SessionValue::parse(KEY, &v.to_bytes()), Some(v.clone()));
        // `released` is left out while empty.
        assert!(!String::from_utf8_lossy(&v.to_bytes()).contains("released"));
        for other in [
            "session.n2.2000",
            "session.n1.3000",
            "session.n1.+2000",
            "session.n1.02000",
            "role.n1.2000",
            "n1.2000",
        ] {
            assert_eq!(SessionValue::parse(other, &v.to_bytes()), None, "{other}");
        }
    }

    #[test]
    fn hostile_session_values_are_not_sessions() {
        for bytes in [&b""[..], b"null", b"{}", b"[]", b"garbage\xff", b"{\"v\":2"] {
            assert_eq!(SessionValue::parse(KEY, bytes), None, "{bytes:?}");
        }
        for (field, raw) in [
            ("v", "1"),
            ("v", "3"),
            ("v", "4294967298"),
            ("v", r#""2""#),
            ("instance", r#""n 1""#),
            ("session", r#""nope""#),
            ("ttl_ms", "18446744073709551616"),
            ("ttl_ms", "-2000"),
            ("heartbeat_ms", "0"),
            ("heartbeat_ms", "2001"),
            ("heartbeat_ms", "500.5"),
            ("released", r#"[{"role":"r"}]"#),
            ("released", r#"[{"role":"a b","revision":3}]"#),
            ("released", "{}"),
        ] {
            assert_eq!(
                SessionValue::parse(KEY, &with(field, raw)),
                None,
                "{field}: {raw}"
            );
        }
        // Unknown fields are ignored; `released` up to the limit is a session.
        assert!(SessionValue::parse(KEY, &with("extra", "[1]")).is_some());
        let mut v = sample();
        let term = |i: usize| ReleasedTerm {
            role: RoleName::new(format!("r{i}")).unwrap(),
            revision: i as u64,
        };
        v.released = (0..MAX_RELEASED).map(term).collect();
        assert_eq!(SessionValue::parse(KEY, &v.to_bytes()), Some(v.clone()));
        v.released.push(term(MAX_RELEASED));
        assert_eq!(SessionValue::parse(KEY, &v.to_bytes()), None);
    }

    #[test]
    fn watched_entries_are_values_or_markers() {
        let v = sample();
        assert_eq!(
            watched(&test_entry(KEY, 3, Operation::Put, &v.to_bytes())),
            SessionKeyState::Value {
                revision: 3,
                value: Some(v.clone())
            }
        );
        assert_eq!(
            watched(&test_entry(KEY, 3, Operation::Put, b"")),
            SessionKeyState::Value {
                revision: 3,
                value: None
            }
        );
        // The value is judged by the entry's key: a look-alike key names no session.
        assert_eq!(
            watched(&test_entry(
                "session.n1.+2000",
                3,
                Operation::Put,
                &v.to_bytes()
            ))
            .uuid(),
            None
        );
        for (op, expired) in [(Operation::Delete, false), (Operation::Purge, true)] {
            assert_eq!(
                watched(&test_entry(KEY, 4, op, &v.to_bytes())),
                SessionKeyState::Marker {
                    revision: 4,
                    expired
                }
            );
        }
    }

    #[test]
    fn stored_entries_are_values_or_markers() {
        let v = sample();
        assert_eq!(
            stored(KEY, 3, &HeaderMap::new(), &v.to_bytes()).uuid(),
            Some(v.session)
        );
        for (header, value, expired) in [
            (KV_OPERATION, "DEL", false),
            // A reap (Q5 rule 4) read back from the stream leader: an expiry, as the watcher
            // reads it (`EntryKind`).
            (KV_OPERATION, "PURGE", true),
            (MARKER_REASON, "MaxAge", true),
        ] {
            let mut h = HeaderMap::new();
            h.insert(header, value);
            assert_eq!(
                stored(KEY, 5, &h, &v.to_bytes()),
                SessionKeyState::Marker {
                    revision: 5,
                    expired
                }
            );
        }
    }
}
