//! What a watched `member.` entry says about presence (protocol Q8 rule 1): a record listing
//! the member's live sessions, or its end. Only what the follower needs; the full record is
//! `member.rs`'s.

use async_nats::jetstream::kv::Entry;

use super::member::{MemberEntry, present, watched};
use crate::core::PresentRecord;
use crate::names::InstanceId;

/// A presence change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PresenceEntry {
    /// The key names no instance: nothing to do.
    Ignored,
    /// A record of `id` at the entry's revision.
    Record(InstanceId, PresentRecord),
    /// `id`'s record was deleted, purged, expired or replaced by something that is not a
    /// record, at `revision`.
    Gone(InstanceId, u64),
}

/// A watched `member.` entry, as presence reads it.
pub(crate) fn presence(entry: &Entry) -> PresenceEntry {
    match watched(entry) {
        MemberEntry::NotAnInstance => PresenceEntry::Ignored,
        MemberEntry::Foreign { id } | MemberEntry::Gone { id, .. } => {
            PresenceEntry::Gone(id, entry.revision)
        }
        MemberEntry::Record(record) => {
            PresenceEntry::Record(record.instance.clone(), present(&record, entry.revision))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use async_nats::jetstream::kv::Operation;
    use uuid::Uuid;

    use super::*;
    use crate::codec::test_entry;
    use crate::placement::test_record;

    #[test]
    fn a_record_lists_its_sessions_and_an_older_one_none() {
        let u = Uuid::new_v4();
        let mut json: serde_json::Value =
            serde_json::from_slice(&test_record("n1", &[("r", 0)], 250).to_bytes()).unwrap();
        let old = serde_json::to_vec(&json).unwrap();
        json["sessions"] = serde_json::json!({ "3000": u.to_string() });
        let new = serde_json::to_vec(&json).unwrap();
        let id = InstanceId::new("n1").unwrap();
        assert_eq!(
            presence(&test_entry("member.n1", 7, Operation::Put, &new)),
            PresenceEntry::Record(
                id.clone(),
                PresentRecord {
                    revision: 7,
                    sessions: BTreeMap::from([(3000, u)]),
                }
            )
        );
        assert_eq!(
            presence(&test_entry("member.n1", 8, Operation::Put, &old)),
            PresenceEntry::Record(
                id.clone(),
                PresentRecord {
                    revision: 8,
                    sessions: BTreeMap::new(),
                }
            )
        );
        assert_eq!(
            presence(&test_entry("member.n1", 9, Operation::Delete, b"")),
            PresenceEntry::Gone(id.clone(), 9)
        );
        assert_eq!(
            presence(&test_entry("member.n1", 10, Operation::Put, b"garbage")),
            PresenceEntry::Gone(id, 10)
        );
        assert_eq!(
            presence(&test_entry("member.a b", 11, Operation::Put, b"x")),
            PresenceEntry::Ignored
        );
    }
}
