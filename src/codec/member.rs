//! Membership records (`member.<instance>`, protocol P10, Q9): the bytes of a record ⇄
//! [`MemberRecord`], and a watched entry → [`MemberEntry`].

use async_nats::jetstream::kv::Entry;

use super::EntryKind;
use crate::names::InstanceId;
use crate::placement::{MEMBER_PREFIX, MEMBER_VERSION, MEMBER_VERSION_HEARTBEATED, MemberRecord};

impl MemberRecord {
    /// Parses a stored record; `None` for anything that is not a record of a version this
    /// crate reads (2, or the heartbeated 1) of the instance named by `key`, with a weight of
    /// at least 1 (foreign values are ignored, never trusted).
    #[must_use]
    pub fn parse(key: &str, bytes: &[u8]) -> Option<Self> {
        let id = key.strip_prefix(MEMBER_PREFIX)?;
        let record: Self = serde_json::from_slice(bytes).ok()?;
        ((record.v == MEMBER_VERSION || record.v == MEMBER_VERSION_HEARTBEATED)
            && record.instance.as_str() == id
            && record.weight >= 1)
            .then_some(record)
    }

    /// Serialises the record to JSON bytes.
    #[must_use]
    pub fn to_bytes(&self) -> bytes::Bytes {
        // Strings, integers and maps of strings: serialising cannot fail.
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }
}

/// A record as presence reads it (protocol Q8): its revision and the sessions it lists.
// The follower side (the watcher feeding `core::presence`) is built on the Q8 branch.
#[cfg_attr(not(test), allow(dead_code))]
#[must_use]
pub(crate) fn present(
    record: &MemberRecord,
    revision: u64,
) -> crate::core::presence::PresentRecord {
    crate::core::presence::PresentRecord {
        revision,
        sessions: record.sessions.clone(),
    }
}

/// What one watched `member.` entry says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MemberEntry {
    /// The key's last token is no valid instance id.
    NotAnInstance,
    /// A value that is not a valid record of the instance the key names.
    Foreign {
        /// The instance the key names.
        id: InstanceId,
    },
    /// A valid record.
    Record(Box<MemberRecord>),
    /// A delete marker, or a purge or expiry marker (`expired`, as P5 reads it).
    Gone {
        /// The instance the key names.
        id: InstanceId,
        /// Whether the marker reads as an expiry.
        expired: bool,
    },
}

/// A watched entry of a `member.` key (the bucket watcher, `kv::Store::entry`).
pub(crate) fn watched(entry: &Entry) -> MemberEntry {
    let Some(id) = entry
        .key
        .strip_prefix(MEMBER_PREFIX)
        .and_then(|id| InstanceId::new(id).ok())
    else {
        return MemberEntry::NotAnInstance;
    };
    match EntryKind::watched(entry.operation) {
        EntryKind::Value => match MemberRecord::parse(&entry.key, &entry.value) {
            Some(record) => MemberEntry::Record(Box::new(record)),
            None => MemberEntry::Foreign { id },
        },
        EntryKind::Marker { expired } => MemberEntry::Gone { id, expired },
    }
}

#[cfg(test)]
mod tests {
    use async_nats::jetstream::kv::Operation;

    use super::*;
    use crate::codec::test_entry;
    use crate::names::RoleName;
    use crate::placement::test_record;

    fn record() -> MemberRecord {
        test_record("node-a", &[("r", 5)], 250)
    }

    /// `record()` as JSON with `field` replaced by the raw JSON `raw`.
    fn with(field: &str, raw: &str) -> Vec<u8> {
        let mut json: serde_json::Value = serde_json::from_slice(&record().to_bytes()).unwrap();
        json[field] = serde_json::from_str(raw).unwrap();
        serde_json::to_vec(&json).unwrap()
    }

    #[test]
    fn round_trips() {
        let r = record();
        assert_eq!(MemberRecord::parse("member.node-a", &r.to_bytes()), Some(r));
    }

    #[test]
    fn unavailable_roles_are_optional_and_round_trip() {
        // A record without the field (an older writer) has none.
        let old =
            br#"{"v":1,"instance":"node-a","incarnation":"00000000-0000-0000-0000-000000000000",
            "weight":1,"priority":0,"roles":{"r":5},"heartbeat_ms":250}"#;
        let parsed = MemberRecord::parse("member.node-a", old).expect("a version-1 record");
        assert!(parsed.unavailable.is_empty());
        // The field is left out while empty, so older readers see the same bytes as before.
        assert!(!String::from_utf8_lossy(&record().to_bytes()).contains("unavailable"));
        let mut r = record();
        r.unavailable = [RoleName::new("r").expect("valid")].into();
        let bytes = r.to_bytes();
        assert!(String::from_utf8_lossy(&bytes).contains(r#""unavailable":["r"]"#));
        assert_eq!(MemberRecord::parse("member.node-a", &bytes), Some(r));
    }

    #[test]
    fn sessions_and_the_placement_flag_round_trip() {
        let mut r = record();
        // Left out while empty (sessions) and true (placement): the bytes older readers know.
        let plain = String::from_utf8_lossy(&r.to_bytes()).into_owned();
        assert!(
            !plain.contains("sessions") && !plain.contains("placement"),
            "{plain}"
        );
        let a = uuid::Uuid::from_u128(0xA);
        let b = uuid::Uuid::from_u128(0xB);
        r.sessions = [(2000, a), (10_000, b)].into();
        let bytes = r.to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        assert!(
            text.contains(&format!(r#""sessions":{{"2000":"{a}","10000":"{b}"}}"#)),
            "{text}"
        );
        assert_eq!(
            MemberRecord::parse("member.node-a", &bytes),
            Some(r.clone())
        );
        // A presence record (no placement, no roles).
        r.placement = false;
        r.roles.clear();
        let bytes = r.to_bytes();
        assert!(String::from_utf8_lossy(&bytes).contains(r#""placement":false"#));
        let parsed = MemberRecord::parse("member.node-a", &bytes).expect("a presence record");
        assert!(!parsed.placement);
        assert_eq!(parsed, r);
        assert_eq!(
            present(&parsed, 17),
            crate::core::presence::PresentRecord {
                revision: 17,
                sessions: [(2000, a), (10_000, b)].into(),
            }
        );
    }

    #[test]
    fn records_without_sessions_or_placement_flag_are_placement_records_without_sessions() {
        let old =
            br#"{"v":2,"instance":"node-a","incarnation":"00000000-0000-0000-0000-000000000000",
            "weight":1,"priority":0,"roles":{"r":5},"heartbeat_ms":250}"#;
        let parsed = MemberRecord::parse("member.node-a", old).expect("a version-2 record");
        assert!(parsed.placement);
        assert!(parsed.sessions.is_empty());
        assert!(present(&parsed, 3).sessions.is_empty());
        // Sessions that are not TTL → uuid are not a record.
        for raw in [
            r#"{"x":"00000000-0000-0000-0000-00000000000a"}"#,
            r#"{"2000":"nope"}"#,
            "[]",
        ] {
            assert_eq!(
                MemberRecord::parse("member.node-a", &with("sessions", raw)),
                None,
                "{raw}"
            );
        }
        assert_eq!(
            MemberRecord::parse("member.node-a", &with("placement", r#""no""#)),
            None
        );
    }

    #[test]
    fn foreign_values_are_ignored() {
        let r = record();
        assert_eq!(MemberRecord::parse("member.node-b", &r.to_bytes()), None);
        assert_eq!(MemberRecord::parse("role.node-a", &r.to_bytes()), None);
        assert_eq!(MemberRecord::parse("member.node-a", b"not json"), None);
        let mut v3 = r.clone();
        v3.v = 3;
        assert_eq!(MemberRecord::parse("member.node-a", &v3.to_bytes()), None);
        // The heartbeated format 1 is still read.
        let mut v1 = r.clone();
        v1.v = MEMBER_VERSION_HEARTBEATED;
        assert_eq!(
            MemberRecord::parse("member.node-a", &v1.to_bytes()),
            Some(v1)
        );
        let mut w0 = r;
        w0.weight = 0;
        assert_eq!(MemberRecord::parse("member.node-a", &w0.to_bytes()), None);
    }

    #[test]
    fn hostile_member_values_are_ignored() {
        let key = "member.node-a";
        for bytes in [&b""[..], b"null", b"{}", b"[]", b"\xff\xfe", b"{\"v\":2,"] {
            assert_eq!(MemberRecord::parse(key, bytes), None, "{bytes:?}");
        }
        for (field, raw) in [
            ("v", "0"),
            ("v", "4294967298"),
            ("v", r#""2""#),
            ("instance", r#""node a""#),
            ("weight", "-1"),
            ("weight", "4294967296"),
            ("weight", "1.5"),
            ("priority", "2147483648"),
            ("roles", r#"{"a b":1}"#),
            ("roles", r#"{"r":"high"}"#),
            ("roles", "[]"),
            ("heartbeat_ms", "18446744073709551616"),
            ("heartbeat_ms", "null"),
            ("healthy", r#""yes""#),
            ("capacity", "-5"),
            ("parked", r#"{"r":"a b"}"#),
        ] {
            assert_eq!(
                MemberRecord::parse(key, &with(field, raw)),
                None,
                "{field}: {raw}"
            );
        }
        // Unknown fields are ignored (P10); a version that does not parse is ignored.
        assert!(MemberRecord::parse(key, &with("future", r#"{"a":1}"#)).is_some());
        let odd = with("version", r#""not.a.version""#);
        assert!(MemberRecord::parse(key, &odd).is_some());
    }

    #[test]
    fn watched_member_entries() {
        let r = record();
        assert_eq!(
            watched(&test_entry(
                "member.node-a",
                4,
                Operation::Put,
                &r.to_bytes()
            )),
            MemberEntry::Record(Box::new(r.clone()))
        );
        let id = InstanceId::new("node-a").unwrap();
        assert_eq!(
            watched(&test_entry("member.node-a", 4, Operation::Put, b"{}")),
            MemberEntry::Foreign { id: id.clone() }
        );
        // Another instance's record under this key is foreign.
        assert_eq!(
            watched(&test_entry(
                "member.node-b",
                4,
                Operation::Put,
                &r.to_bytes()
            )),
            MemberEntry::Foreign {
                id: InstanceId::new("node-b").unwrap()
            }
        );
        for (op, expired) in [(Operation::Delete, false), (Operation::Purge, true)] {
            assert_eq!(
                watched(&test_entry("member.node-a", 5, op, &r.to_bytes())),
                MemberEntry::Gone {
                    id: id.clone(),
                    expired
                }
            );
        }
        for key in ["member.", "member.a b", "member.a.b", "members.node-a"] {
            assert_eq!(
                watched(&test_entry(key, 6, Operation::Put, &r.to_bytes())),
                MemberEntry::NotAnInstance,
                "{key}"
            );
        }
    }
}
