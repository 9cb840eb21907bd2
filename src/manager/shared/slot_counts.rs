//! The slot counts this instance checked against the bucket's slot count records (protocol
//! Q15, `manager/slot_count.rs`): the public API and the start write them, the watcher's
//! re-assertion reads and renews them.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::names::RoleName;

/// The slot counts this instance checked against the bucket's records, with the bucket epoch
/// each was checked in (a recreated bucket has not seen them).
#[derive(Debug, Default)]
pub(crate) struct SlotCounts(Mutex<BTreeMap<RoleName, (u64, u32)>>);

impl SlotCounts {
    fn counts(&self) -> std::sync::MutexGuard<'_, BTreeMap<RoleName, (u64, u32)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `role`'s `slots` agreed with the record of the bucket of `epoch`.
    pub(crate) fn checked(&self, role: &RoleName, epoch: u64, slots: u32) {
        self.counts().insert(role.clone(), (epoch, slots));
    }

    /// Whether `role`'s `slots` agreed with the record of the bucket of `epoch`.
    pub(crate) fn is_checked(&self, role: &RoleName, epoch: u64, slots: u32) -> bool {
        self.counts().get(role) == Some(&(epoch, slots))
    }

    /// The count checked for `role`, in any bucket.
    pub(crate) fn of(&self, role: &RoleName) -> Option<u32> {
        self.counts().get(role).map(|(_, slots)| *slots)
    }
}
