//! The count records of role groups (`control.group.<name>`, protocol Q14) read and written
//! without a manager: `nats-roles scale`, `nats-roles status`; and the slot count records of
//! roles with slots (`control.slots.<role>`, Q15) read for `status`.

use std::collections::BTreeMap;

use super::bucket::{Inspector, guarded};
use crate::error::Error;
use crate::groups::{GROUP_PREFIX, GroupRecord, group_key};
use crate::names::RoleName;

impl Inspector {
    /// `group`'s count record, if the bucket holds a valid one.
    ///
    /// # Errors
    /// [`Error::JetStream`] when the read fails; [`Error::Timeout`];
    /// [`Error::PermissionDenied`].
    pub async fn group_record(&self, group: &RoleName) -> Result<Option<GroupRecord>, Error> {
        let key = group_key(group);
        let read = async {
            self.kv
                .entry(key.as_str())
                .await
                .map_err(|e| Error::JetStream(Box::new(e)))
        };
        let entry = guarded(&self.denials, async {
            tokio::time::timeout(self.timeout, read)
                .await
                .map_err(|_| Error::Timeout(self.timeout))?
        })
        .await?;
        Ok(entry.and_then(|e| crate::codec::control::group(&e).record()))
    }

    /// Every valid count record in the bucket, by group.
    ///
    /// # Errors
    /// As [`Inspector::group_record`], for listing the keys.
    pub async fn group_records(&self) -> Result<BTreeMap<RoleName, GroupRecord>, Error> {
        let records = self
            .read_keys(
                |key| {
                    key.strip_prefix(GROUP_PREFIX)
                        .and_then(|g| RoleName::new(g).ok())
                },
                |group, entry| {
                    crate::codec::control::group(&entry)
                        .record()
                        .map(|r| (group, r))
                },
            )
            .await?;
        Ok(records.into_iter().collect())
    }

    /// Sets `group`'s count for every instance configured with it (`Some(record)`) or
    /// deletes the record (`None`: the configured counts apply again). A plain write: the
    /// operator's last word wins.
    ///
    /// # Errors
    /// [`Error::JetStream`] when the write fails; [`Error::Timeout`];
    /// [`Error::PermissionDenied`].
    pub async fn set_group_record(
        &self,
        group: &RoleName,
        record: Option<&GroupRecord>,
    ) -> Result<(), Error> {
        self.put_or_delete(&group_key(group), record.map(GroupRecord::to_bytes))
            .await
    }
}

impl Inspector {
    /// Every live instance's groups with the count it acts on, from the member records
    /// (placement and presence records alike), by instance.
    ///
    /// # Errors
    /// As [`Inspector::group_record`], for listing and reading the keys.
    pub async fn member_groups(
        &self,
    ) -> Result<BTreeMap<crate::names::InstanceId, BTreeMap<RoleName, u32>>, Error> {
        use crate::codec::member::MemberEntry;
        let records = self
            .read_keys(
                |key| {
                    key.starts_with(crate::placement::MEMBER_PREFIX)
                        .then_some(())
                },
                |(), entry| match crate::codec::member::watched(&entry) {
                    MemberEntry::Record(record) => Some((record.instance, record.groups)),
                    MemberEntry::NotAnInstance
                    | MemberEntry::Foreign { .. }
                    | MemberEntry::Gone { .. } => None,
                },
            )
            .await?;
        Ok(records.into_iter().collect())
    }
}

impl Inspector {
    /// The slot count of every role with a valid slot count record (protocol Q15), by role.
    ///
    /// # Errors
    /// As [`Inspector::group_record`], for listing and reading the keys.
    pub async fn slot_counts(&self) -> Result<BTreeMap<RoleName, u32>, Error> {
        use crate::manager::slot_count::{SLOTS_PREFIX, SlotCountRecord};
        let records = self
            .read_keys(
                |key| {
                    key.strip_prefix(SLOTS_PREFIX)
                        .and_then(|r| RoleName::new(r).ok())
                },
                |role, entry| {
                    let value = matches!(
                        crate::codec::EntryKind::watched(entry.operation),
                        crate::codec::EntryKind::Value
                    );
                    let slots = SlotCountRecord::parse(&entry.key, &entry.value).ok();
                    value.then_some(slots).flatten().map(|n| (role, n))
                },
            )
            .await?;
        Ok(records.into_iter().collect())
    }
}
