//! Role groups (protocol Q14): a family of ordinary roles `<group>-<i>`, their names, the
//! operator's count record `control.group.<name>` and the count an instance acts on.

mod record;

pub use record::{GROUP_PREFIX, GROUP_VERSION, GroupRecord, MAX_GROUP_COUNT, group_key};

use crate::names::{NameError, RoleName};

/// The role name of member `index` of `group`: `<group>-<index>`.
///
/// # Errors
/// [`NameError`] when the name is longer than a role name may be.
pub fn member_name(group: &RoleName, index: u32) -> Result<RoleName, NameError> {
    RoleName::new(format!("{group}-{index}"))
}

/// The index of `role` in `group` when `role` is `<group>-<i>` with `i` written in decimal
/// without leading zeros (any `i`, also one at or above the group's count).
#[must_use]
pub fn member_index(group: &RoleName, role: &RoleName) -> Option<u32> {
    let digits = role
        .as_str()
        .strip_prefix(group.as_str())?
        .strip_prefix('-')?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

/// The count an instance acts on: the count record's when there is a valid one, else the
/// configured count (protocol Q14).
#[must_use]
pub fn effective_count(configured: u32, record: Option<&GroupRecord>) -> u32 {
    record.map_or(configured, |r| r.count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> RoleName {
        RoleName::new(s).unwrap()
    }

    #[test]
    fn member_names_round_trip_and_other_names_are_no_members() {
        let g = name("shard");
        for i in [0, 7, 10, 63, 9_999] {
            let m = member_name(&g, i).unwrap();
            assert_eq!(m.as_str(), format!("shard-{i}"));
            assert_eq!(member_index(&g, &m), Some(i));
        }
        for other in [
            "shard",
            "shard-",
            "shard-01",
            "shard-1x",
            "shard-1-0",
            "shards-1",
            "shard_1",
            "sharD-1",
            "x-shard-1",
        ] {
            assert_eq!(member_index(&g, &name(other)), None, "{other}");
        }
        // A group whose name ends like another group's member: the members stay apart.
        assert_eq!(member_index(&name("shard-1"), &name("shard-1-0")), Some(0));
        assert_eq!(member_index(&g, &name("shard-10")), Some(10));
        assert_eq!(member_index(&g, &name("shard-99999999999")), None);
        let long = name(&"g".repeat(crate::names::MAX_NAME_LEN - 2));
        assert!(member_name(&long, 9).is_ok());
        assert!(member_name(&long, 10).is_err());
    }

    #[test]
    fn the_record_s_count_wins_over_the_configured_one() {
        let g = name("shard");
        assert_eq!(effective_count(64, None), 64);
        let r = GroupRecord::new(&g, 128, "ops");
        assert_eq!(effective_count(64, Some(&r)), 128);
    }
}
