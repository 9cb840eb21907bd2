//! The operator's control records (protocol P10, Q13): the bytes of the freeze record
//! (`control.freeze`), a drain record (`control.drain.<instance>`) and a move record
//! (`control.move.<role>`) ⇄ [`FreezeRecord`], [`DrainRecord`], [`MoveRecord`], and a watched
//! entry of one → [`Control`].

use async_nats::jetstream::kv::Entry;

use super::EntryKind;
use crate::moves::{MOVE_PREFIX, MOVE_VERSION, MoveRecord, MoveState};
use crate::placement::{DRAIN_PREFIX, DRAIN_VERSION, DrainRecord, FREEZE_VERSION, FreezeRecord};

/// Longest freeze or drain record accepted from the bucket, in bytes.
const MAX_RECORD_LEN: usize = 4096;

impl FreezeRecord {
    /// Parses a stored value; `None` for anything that is not a version-1 record (a foreign
    /// value freezes nothing: it is reported, not trusted).
    #[must_use]
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() > MAX_RECORD_LEN {
            return None;
        }
        let r: Self = serde_json::from_slice(bytes).ok()?;
        (r.v == FREEZE_VERSION).then_some(r)
    }

    /// Serialises the record to JSON bytes.
    #[must_use]
    pub fn to_bytes(&self) -> bytes::Bytes {
        // Strings and an integer: serialising cannot fail.
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }
}

impl DrainRecord {
    /// Parses the value stored under `key`; `None` for anything that is not a version-1
    /// record naming the key's instance (a foreign value drains nothing: it is reported, not
    /// trusted).
    #[must_use]
    pub fn parse(key: &str, bytes: &[u8]) -> Option<Self> {
        if bytes.len() > MAX_RECORD_LEN {
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

impl MoveRecord {
    /// Parses the value stored under `key`; `None` for anything that is not a valid version-1
    /// record of the role the key names (a foreign or damaged value moves nothing and holds
    /// nobody back).
    #[must_use]
    pub fn parse(key: &str, bytes: &[u8]) -> Option<Self> {
        if bytes.len() > Self::MAX_LEN {
            return None;
        }
        let r: Self = serde_json::from_slice(bytes).ok()?;
        let valid = r.v == MOVE_VERSION
            && key.strip_prefix(MOVE_PREFIX) == Some(r.role.as_str())
            && r.from != r.to
            && r.term > 0
            && (r.state != MoveState::Accepted || r.session.is_some());
        valid.then_some(r)
    }

    /// Serialises the record to JSON bytes.
    #[must_use]
    pub fn to_bytes(&self) -> bytes::Bytes {
        // Strings, integers and uuids: serialising cannot fail.
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }
}

/// What one watched entry of a control key says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Control<T> {
    /// A valid record.
    Set(T),
    /// A delete, purge or expiry marker: no record.
    Cleared,
    /// A value that is not a valid record for the key: it counts as no record (and is
    /// reported by whoever acts on the key).
    Foreign,
}

impl<T> Control<T> {
    /// The record, if the entry holds a valid one.
    pub(crate) fn record(self) -> Option<T> {
        match self {
            Self::Set(r) => Some(r),
            Self::Cleared | Self::Foreign => None,
        }
    }
}

fn watched<T>(entry: &Entry, parse: impl FnOnce(&[u8]) -> Option<T>) -> Control<T> {
    match EntryKind::watched(entry.operation) {
        EntryKind::Value => parse(&entry.value).map_or(Control::Foreign, Control::Set),
        EntryKind::Marker { .. } => Control::Cleared,
    }
}

/// A watched entry of `control.freeze`.
pub(crate) fn freeze(entry: &Entry) -> Control<FreezeRecord> {
    watched(entry, FreezeRecord::parse)
}

/// A watched entry of a drain key (`control.drain.<instance>`): valid only when it names the
/// key's instance.
pub(crate) fn drain(entry: &Entry) -> Control<DrainRecord> {
    watched(entry, |bytes| DrainRecord::parse(&entry.key, bytes))
}

/// An entry of a group's count key (`control.group.<group>`, protocol Q14): valid only for
/// the key's group.
pub(crate) fn group(entry: &Entry) -> Control<crate::groups::GroupRecord> {
    watched(entry, |bytes| {
        crate::groups::GroupRecord::parse(&entry.key, bytes)
    })
}

/// A watched entry of a move key (`control.move.<role>`): valid only for the key's role.
pub(crate) fn move_record(entry: &Entry) -> Control<MoveRecord> {
    watched(entry, |bytes| MoveRecord::parse(&entry.key, bytes))
}

#[cfg(test)]
mod tests {
    use async_nats::jetstream::kv::Operation;

    use super::*;
    use crate::codec::test_entry;
    use crate::names::InstanceId;
    use crate::placement::drain_key;

    /// `bytes` (a JSON object) with `field` replaced by the raw JSON `raw`.
    fn with(bytes: &[u8], field: &str, raw: &str) -> Vec<u8> {
        let mut json: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        json[field] = serde_json::from_str(raw).unwrap();
        serde_json::to_vec(&json).unwrap()
    }

    #[test]
    fn freeze_records_round_trip_and_foreign_values_are_ignored() {
        let r = FreezeRecord::new(&"x".repeat(1000), "cli");
        assert_eq!(r.reason.len(), FreezeRecord::MAX_REASON_LEN);
        assert_eq!(FreezeRecord::parse(&r.to_bytes()), Some(r.clone()));
        assert_eq!(FreezeRecord::parse(b"frozen"), None);
        assert_eq!(FreezeRecord::parse(br#"{"v":2}"#), None);
        assert_eq!(FreezeRecord::parse(&vec![b' '; 10_000]), None);
        for bytes in [&b""[..], b"null", b"{}", b"[]", b"\xff"] {
            assert_eq!(FreezeRecord::parse(bytes), None, "{bytes:?}");
        }
        // The optional fields default; the version is required and exact.
        assert!(FreezeRecord::parse(br#"{"v":1}"#).is_some());
        for (field, raw) in [
            ("v", "4294967297"),
            ("v", "1.0"),
            ("v", r#""1""#),
            ("reason", "7"),
            ("by", "null"),
        ] {
            assert_eq!(
                FreezeRecord::parse(&with(&r.to_bytes(), field, raw)),
                None,
                "{field}: {raw}"
            );
        }
        // At the length limit and above it.
        let mut long = r;
        long.reason = String::new();
        long.by = String::new();
        let room = MAX_RECORD_LEN - long.to_bytes().len();
        long.by = "b".repeat(room);
        assert!(FreezeRecord::parse(&long.to_bytes()).is_some());
        long.by.push('b');
        assert_eq!(FreezeRecord::parse(&long.to_bytes()), None);
    }

    #[test]
    fn a_drain_record_round_trips_under_its_own_key_only() {
        let a = InstanceId::new("node-a").expect("id");
        let r = DrainRecord::new(&a, "kernel update", "ops@host");
        let key = drain_key(&a);
        assert_eq!(key, "control.drain.node-a");
        assert_eq!(DrainRecord::parse(&key, &r.to_bytes()), Some(r.clone()));
        assert_eq!(
            DrainRecord::parse("control.drain.node-b", &r.to_bytes()),
            None
        );
        assert_eq!(DrainRecord::parse("control.freeze", &r.to_bytes()), None);
        assert_eq!(DrainRecord::parse(&key, b"yes"), None);
        let mut v2 = r.clone();
        v2.v = 2;
        assert_eq!(DrainRecord::parse(&key, &v2.to_bytes()), None);
        for bytes in [&b""[..], b"null", b"{}", br#"{"v":1}"#] {
            assert_eq!(DrainRecord::parse(&key, bytes), None, "{bytes:?}");
        }
        for (field, raw) in [
            ("instance", r#""node a""#),
            ("instance", "null"),
            ("v", "-1"),
        ] {
            assert_eq!(
                DrainRecord::parse(&key, &with(&r.to_bytes(), field, raw)),
                None,
                "{field}: {raw}"
            );
        }
        let mut huge = r;
        huge.by = "x".repeat(MAX_RECORD_LEN);
        assert_eq!(DrainRecord::parse(&key, &huge.to_bytes()), None);
    }

    #[test]
    fn a_move_record_round_trips() {
        for state in [
            MoveState::Requested,
            MoveState::Accepted,
            MoveState::Refused,
            MoveState::Done,
        ] {
            let r = MoveRecord::sample(state);
            assert_eq!(
                MoveRecord::parse("control.move.scheduler", &r.to_bytes()),
                Some(r)
            );
        }
    }

    #[test]
    fn foreign_and_inconsistent_move_records_are_ignored() {
        let ok = MoveRecord::sample(MoveState::Requested);
        let key = "control.move.scheduler";
        assert_eq!(
            MoveRecord::parse("control.move.other", &ok.to_bytes()),
            None
        );
        for bad in [
            &b"not json"[..],
            b"",
            b"{}",
            b"null",
            br#"{"v":2}"#,
            &[0xff, 0xfe, 0x00][..],
        ] {
            assert_eq!(MoveRecord::parse(key, bad), None);
        }
        let mut v2 = ok.clone();
        v2.v = 2;
        assert_eq!(MoveRecord::parse(key, &v2.to_bytes()), None);
        let mut same = ok.clone();
        same.to = same.from.clone();
        assert_eq!(MoveRecord::parse(key, &same.to_bytes()), None);
        let mut no_session = MoveRecord::sample(MoveState::Accepted);
        no_session.session = None;
        assert_eq!(MoveRecord::parse(key, &no_session.to_bytes()), None);
        let mut huge = ok.clone();
        huge.by = "x".repeat(MoveRecord::MAX_LEN);
        assert_eq!(MoveRecord::parse(key, &huge.to_bytes()), None);
        for (field, raw) in [
            ("term", "0"),
            ("term", "-1"),
            ("term", "18446744073709551616"),
            ("state", r#""moving""#),
            ("state", r#""Accepted""#),
            ("reason", r#""bored""#),
            ("grace_ms", "-1"),
            ("hold_ms", "1e9"),
            ("to", r#""node b""#),
        ] {
            assert_eq!(
                MoveRecord::parse(key, &with(&ok.to_bytes(), field, raw)),
                None,
                "{field}: {raw}"
            );
        }
        // A grace beyond any TTL parses: `MoveRecord::grace` bounds it.
        let long = with(&ok.to_bytes(), "grace_ms", "18446744073709551615");
        assert!(MoveRecord::parse(key, &long).is_some());
    }

    /// Why the manager hands `MoveBook` the record it decoded, not bytes encoded again: a
    /// record another client wrote without the optional `at` is accepted at `MAX_LEN` bytes,
    /// but encoding it again adds `"at":""` and makes it too long to be read back (the book
    /// used to decode such bytes again and so dropped a record the manager acted on).
    #[test]
    fn a_record_at_the_length_limit_can_grow_when_encoded_again() {
        let without_at = |r: &MoveRecord| {
            let mut json: serde_json::Value = serde_json::from_slice(&r.to_bytes()).unwrap();
            json.as_object_mut().unwrap().remove("at");
            serde_json::to_vec(&json).unwrap()
        };
        let mut r = MoveRecord::sample(MoveState::Requested);
        r.at = String::new();
        r.by = String::new();
        r.by = "b".repeat(MoveRecord::MAX_LEN - without_at(&r).len());
        let stored = without_at(&r);
        assert_eq!(stored.len(), MoveRecord::MAX_LEN);
        let key = "control.move.scheduler";
        assert_eq!(MoveRecord::parse(key, &stored), Some(r.clone()));
        assert!(r.to_bytes().len() > MoveRecord::MAX_LEN);
        assert_eq!(MoveRecord::parse(key, &r.to_bytes()), None);
    }

    #[test]
    fn watched_control_entries() {
        let f = FreezeRecord::new("r", "cli");
        let put = |key: &str, bytes: &[u8]| test_entry(key, 3, Operation::Put, bytes);
        assert_eq!(
            freeze(&put("control.freeze", &f.to_bytes())),
            Control::Set(f.clone())
        );
        assert_eq!(freeze(&put("control.freeze", b"frozen")), Control::Foreign);
        assert_eq!(freeze(&put("control.freeze", b"")), Control::Foreign);
        for op in [Operation::Delete, Operation::Purge] {
            let marker = test_entry("control.freeze", 4, op, &f.to_bytes());
            assert_eq!(freeze(&marker), Control::Cleared);
        }
        let a = InstanceId::new("node-a").unwrap();
        let d = DrainRecord::new(&a, "r", "ops");
        assert_eq!(
            drain(&put("control.drain.node-a", &d.to_bytes())),
            Control::Set(d.clone())
        );
        assert_eq!(
            drain(&put("control.drain.node-b", &d.to_bytes())),
            Control::Foreign
        );
        let m = MoveRecord::sample(MoveState::Requested);
        assert_eq!(
            move_record(&put("control.move.scheduler", &m.to_bytes())),
            Control::Set(m.clone())
        );
        assert_eq!(
            move_record(&put("control.move.other", &m.to_bytes())),
            Control::Foreign
        );
        let gone = test_entry("control.move.scheduler", 5, Operation::Purge, &m.to_bytes());
        assert_eq!(move_record(&gone), Control::Cleared);
        assert_eq!(Control::Set(1).record(), Some(1));
        assert_eq!(Control::<u8>::Cleared.record(), None);
        assert_eq!(Control::<u8>::Foreign.record(), None);
    }
}
