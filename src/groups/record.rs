//! The count record of a group, `control.group.<name>` (protocol Q14): the count every instance
//! configured with the group acts on, written by an operator (`nats-roles scale`,
//! `RoleManager::set_group_count`).

use serde::{Deserialize, Serialize};

use crate::names::RoleName;

/// The largest count of a group (in the configuration and in a count record): a member costs
/// what a role costs, so this bounds what a record written by anyone can make an instance
/// campaign for.
pub const MAX_GROUP_COUNT: u32 = 10_000;

/// Prefix of the count records' keys.
pub const GROUP_PREFIX: &str = "control.group.";

/// The record format written here; readers ignore others.
pub const GROUP_VERSION: u32 = 1;

/// The key of `group`'s count record.
#[must_use]
pub fn group_key(group: &RoleName) -> String {
    format!("{GROUP_PREFIX}{group}")
}

/// A group's count, set by an operator for every instance configured with the group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GroupRecord {
    /// Format version ([`GROUP_VERSION`]).
    pub v: u32,
    /// The group (also the key's last token).
    pub group: RoleName,
    /// The count: members `0 … count − 1`, 1 to [`MAX_GROUP_COUNT`].
    pub count: u32,
    /// Who wrote it (informational).
    #[serde(default)]
    pub by: String,
    /// When (RFC 3339; informational).
    #[serde(default)]
    pub at: String,
}

impl GroupRecord {
    /// Longest record accepted from the bucket, in bytes.
    pub const MAX_LEN: usize = 4096;

    /// A record setting `group`'s count to `count`, written by `by` now.
    #[must_use]
    pub fn new(group: &RoleName, count: u32, by: &str) -> Self {
        let mut end = by.len().min(128);
        while !by.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            v: GROUP_VERSION,
            group: group.clone(),
            count,
            by: by[..end].to_owned(),
            at: crate::value::now_rfc3339(),
        }
    }

    /// Parses the value stored under `key`; `None` for anything that is not a valid
    /// version-1 record of the group the key names with a count from 1 to
    /// [`MAX_GROUP_COUNT`] (a foreign or damaged value changes no count).
    #[must_use]
    pub fn parse(key: &str, bytes: &[u8]) -> Option<Self> {
        if bytes.len() > Self::MAX_LEN {
            return None;
        }
        let r: Self = serde_json::from_slice(bytes).ok()?;
        let valid = r.v == GROUP_VERSION
            && key.strip_prefix(GROUP_PREFIX) == Some(r.group.as_str())
            && (1..=MAX_GROUP_COUNT).contains(&r.count);
        valid.then_some(r)
    }

    /// Serialises the record to JSON bytes.
    #[must_use]
    pub fn to_bytes(&self) -> bytes::Bytes {
        // Strings and integers: serialising cannot fail.
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_under_its_own_key_only_and_damage_is_ignored() {
        let g = RoleName::new("shard").unwrap();
        let key = group_key(&g);
        assert_eq!(key, "control.group.shard");
        let r = GroupRecord::new(&g, 128, "alice@ops-1");
        assert_eq!(GroupRecord::parse(&key, &r.to_bytes()), Some(r.clone()));
        assert_eq!(
            GroupRecord::parse("control.group.other", &r.to_bytes()),
            None
        );
        for count in [0, MAX_GROUP_COUNT + 1, u32::MAX] {
            let mut bad = r.clone();
            bad.count = count;
            assert_eq!(GroupRecord::parse(&key, &bad.to_bytes()), None, "{count}");
        }
        let mut v2 = r.clone();
        v2.v = 2;
        assert_eq!(GroupRecord::parse(&key, &v2.to_bytes()), None);
        for bytes in [
            &b""[..],
            b"null",
            b"{}",
            b"128",
            br#"{"v":1,"group":"shard"}"#,
            br#"{"v":1,"group":"shard","count":-1}"#,
            br#"{"v":1,"group":"shard","count":1.5}"#,
            br#"{"v":1,"group":"sh.ard","count":1}"#,
            b"\xff",
        ] {
            assert_eq!(GroupRecord::parse(&key, bytes), None, "{bytes:?}");
        }
        assert!(GroupRecord::parse(&key, br#"{"v":1,"group":"shard","count":1}"#).is_some());
        let mut long = r;
        long.by = "b".repeat(GroupRecord::MAX_LEN);
        assert_eq!(GroupRecord::parse(&key, &long.to_bytes()), None);
        assert_eq!(GroupRecord::new(&g, 1, &"é".repeat(100)).by.len(), 128);
    }
}
