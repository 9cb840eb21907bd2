//! The role groups of [`RoleManager`]: handles on them and the operator's count (protocol Q14).

use std::time::Duration;

use super::groups::GroupHandle;
use crate::error::Error;
use crate::groups::{GroupRecord, MAX_GROUP_COUNT, group_key};
use crate::manager::RoleManager;
use crate::names::RoleName;

/// How long a count record's write may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

impl RoleManager {
    /// A handle on the group `name`: the members this instance holds and the count
    /// ([`GroupHandle::assigned`]).
    #[must_use]
    pub fn group(&self, name: &RoleName) -> Option<GroupHandle> {
        self.shared.groups.handle(name)
    }

    /// Handles on every group of this manager, by name.
    #[must_use]
    pub fn groups(&self) -> Vec<GroupHandle> {
        self.shared
            .groups
            .entries()
            .keys()
            .filter_map(|name| self.shared.groups.handle(name))
            .collect()
    }

    /// Sets the count of the group `name` for every instance configured with it, by writing
    /// its count record `control.group.<name>` (`nats-roles scale`): each adds the members
    /// below the new count and releases those at or above it when its watcher delivers the
    /// record. `count = None` deletes the record: the configured counts apply again.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for a count outside 1 to
    /// [`MAX_GROUP_COUNT`]; [`Error::Timeout`] when the
    /// write's outcome is unknown; [`Error::JetStream`] when it failed.
    pub async fn set_group_count(&self, name: &RoleName, count: Option<u32>) -> Result<(), Error> {
        let key = group_key(name);
        let write = async {
            match count {
                Some(count) => {
                    if !(1..=MAX_GROUP_COUNT).contains(&count) {
                        return Err(Error::InvalidSetting(crate::SettingError::new(
                            "groups.count",
                            format!(
                                "{count} is out of range for the group {name}: a group has 1 to \
                                 {MAX_GROUP_COUNT} members"
                            ),
                        )));
                    }
                    let record = GroupRecord::new(name, count, self.shared.instance.as_str());
                    self.kv
                        .put(key.as_str(), record.to_bytes())
                        .await
                        .map(|_| ())
                        .map_err(|e| Error::JetStream(Box::new(e)))
                }
                None => self
                    .kv
                    .delete(key.as_str())
                    .await
                    .map_err(|e| Error::JetStream(Box::new(e))),
            }
        };
        tokio::time::timeout(WRITE_TIMEOUT, write)
            .await
            .map_err(|_| Error::Timeout(WRITE_TIMEOUT))?
    }
}
