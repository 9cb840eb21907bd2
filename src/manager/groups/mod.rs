//! Role groups in a running manager (protocol Q14): the groups and their counts
//! ([`GroupsLink`], told the count records by the watcher) and what a sharded worker watches
//! ([`GroupHandle`], [`GroupAssignment`]); the task that adds and removes members when a
//! count changes is `manager::group_task`.

mod spec;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_nats::jetstream::kv::Entry;
use tokio::sync::watch;
use tracing::warn;

pub use spec::{GroupCallbacks, GroupMember, GroupRevoke, GroupSpec, MemberCallbacks};

use crate::callbacks::{BoxFuture, Demotion, PrepareFuture, RoleCallbacks};
use crate::codec::control::Control;
use crate::groups::{GROUP_PREFIX, GroupRecord, effective_count};
use crate::leadership::Leadership;
use crate::names::RoleName;

/// The members of a group this instance holds, and the count it acts on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupAssignment {
    /// The count this instance acts on: the count record's, else the configured count.
    pub count: u32,
    /// The indexes of the members this instance holds (from promotion until the revoke
    /// returned).
    pub held: BTreeSet<u32>,
}

/// A handle on one group of a manager ([`RoleManager::group`](super::RoleManager::group)).
#[derive(Debug, Clone)]
pub struct GroupHandle {
    name: RoleName,
    configured: u32,
    assignment: watch::Receiver<GroupAssignment>,
}

impl GroupHandle {
    /// The group's name.
    #[must_use]
    pub fn name(&self) -> &RoleName {
        &self.name
    }

    /// The count configured for this instance (the count record, if any, overrides it).
    #[must_use]
    pub fn configured_count(&self) -> u32 {
        self.configured
    }

    /// The members held and the count now.
    #[must_use]
    pub fn current(&self) -> GroupAssignment {
        self.assignment.borrow().clone()
    }

    /// A watch of [`GroupAssignment`]: changes when a member is assigned, revoked, or the
    /// count changes.
    #[must_use]
    pub fn assigned(&self) -> watch::Receiver<GroupAssignment> {
        self.assignment.clone()
    }
}

/// One group as the manager runs it.
pub(crate) struct GroupEntry {
    pub(crate) spec: GroupSpec,
    pub(crate) assignment: watch::Sender<GroupAssignment>,
}

/// The manager's groups (fixed at start) and the count records the watcher delivered. The
/// watcher writes `records`; the group task reads it and writes each group's `count`.
pub(crate) struct GroupsLink {
    groups: BTreeMap<RoleName, GroupEntry>,
    records: watch::Sender<BTreeMap<RoleName, GroupRecord>>,
    /// The count each group acts on (written by the group task; the member record lists it).
    counts: watch::Sender<BTreeMap<RoleName, u32>>,
}

impl GroupsLink {
    /// The groups of `specs`, with the count records read at start (`records`).
    pub(crate) fn new(specs: Vec<GroupSpec>, records: BTreeMap<RoleName, GroupRecord>) -> Self {
        let groups = specs
            .into_iter()
            .map(|spec| {
                let count = effective_count(spec.count, records.get(spec.name()));
                let (assignment, _) = watch::channel(GroupAssignment {
                    count,
                    held: BTreeSet::new(),
                });
                (spec.name().clone(), GroupEntry { spec, assignment })
            })
            .collect::<BTreeMap<_, _>>();
        let counts = groups
            .iter()
            .map(|(name, g)| (name.clone(), g.assignment.borrow().count))
            .collect();
        Self {
            groups,
            records: watch::channel(records).0,
            counts: watch::channel(counts).0,
        }
    }

    /// Whether the manager has any group.
    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub(crate) fn entries(&self) -> &BTreeMap<RoleName, GroupEntry> {
        &self.groups
    }

    /// The count each group acts on now (the member record lists them, Q14).
    pub(crate) fn counts(&self) -> BTreeMap<RoleName, u32> {
        self.counts.borrow().clone()
    }

    /// Changes of [`GroupsLink::counts`].
    pub(crate) fn counts_changed(&self) -> watch::Receiver<BTreeMap<RoleName, u32>> {
        self.counts.subscribe()
    }

    /// `group` acts on `count` from now on (the group task, before it adds or removes
    /// members).
    pub(crate) fn set_count(&self, group: &RoleName, count: u32) {
        if let Some(g) = self.groups.get(group) {
            g.assignment.send_if_modified(|a| {
                let changed = a.count != count;
                a.count = count;
                changed
            });
        }
        self.counts
            .send_if_modified(|c| c.insert(group.clone(), count) != Some(count));
    }

    pub(crate) fn handle(&self, name: &RoleName) -> Option<GroupHandle> {
        self.groups.get(name).map(|g| GroupHandle {
            name: name.clone(),
            configured: g.spec.count,
            assignment: g.assignment.subscribe(),
        })
    }

    pub(crate) fn records(&self) -> watch::Receiver<BTreeMap<RoleName, GroupRecord>> {
        self.records.subscribe()
    }

    /// The watcher delivered an entry of a `control.group.*` key: a valid record of one of
    /// this manager's groups sets its count; a marker or a foreign value clears it (the
    /// configured count applies; a foreign value is logged).
    pub(crate) fn observe(&self, entry: &Entry) {
        let Some(named) = entry.key.strip_prefix(GROUP_PREFIX) else {
            return;
        };
        let Some((group, _)) = self.groups.iter().find(|(n, _)| n.as_str() == named) else {
            return;
        };
        let record = match crate::codec::control::group(entry) {
            Control::Set(record) => Some(record),
            Control::Cleared => None,
            Control::Foreign => {
                warn!(
                    key = %entry.key,
                    revision = entry.revision,
                    "ignoring a group count record that is not valid (a version-1 record of \
                     this group with a count from 1 to {}): the configured count applies",
                    crate::groups::MAX_GROUP_COUNT
                );
                None
            }
        };
        self.records.send_if_modified(|records| match record {
            Some(r) => records.insert(group.clone(), r.clone()).as_ref() != Some(&r),
            None => records.remove(group).is_some(),
        });
    }

    /// The bucket was recreated: its count records are gone (the new bucket's are delivered
    /// by the watcher's new watch).
    pub(crate) fn forget_records(&self) {
        self.records.send_if_modified(|records| {
            let had = !records.is_empty();
            records.clear();
            had
        });
    }

    /// A bucket check found the same bucket after a write failed (a session key went back: an
    /// operator's purge of the stream, protocol Q5): a purge removes the count records without
    /// a marker, so the watcher never tells. Each record this manager obeys is read again; one
    /// the bucket no longer holds (or holds only a marker of) is forgotten — the configured
    /// count applies, as after a delete — unless the watcher delivered another meanwhile.
    pub(crate) async fn refresh(
        &self,
        store: &crate::store::LeaseStore,
        timeout: std::time::Duration,
    ) {
        let obeyed = self.records.borrow().clone();
        for (group, record) in obeyed {
            let key = crate::groups::group_key(&group);
            // A leader read: a lagging replica's "no entry" must not drop a record. A failed
            // read leaves the record.
            let gone = store.holds_value(&key, timeout).await == Ok(false);
            if gone {
                warn!(
                    key = %key,
                    "the group's count record is gone without a marker (a purge?): the \
                     configured count applies"
                );
                self.records.send_if_modified(|records| {
                    let same = records.get(&group) == Some(&record);
                    if same {
                        records.remove(&group);
                    }
                    same
                });
            }
        }
    }

    /// Member `index` of `group` as a role to add: the group's settings under the member's
    /// name, with callbacks that keep the group's assignment while they run the group's.
    pub(crate) fn member(
        &self,
        group: &RoleName,
        index: u32,
    ) -> Result<super::spec::RoleSpec, crate::error::Error> {
        let Some(g) = self.groups.get(group) else {
            return Err(crate::error::Error::UnknownRole(group.clone()));
        };
        let mut spec = g.spec.member(index)?;
        spec.callbacks = Arc::new(Tracked {
            inner: spec.callbacks.clone(),
            index,
            assignment: g.assignment.clone(),
        });
        Ok(spec)
    }
}

/// A member's callbacks that keep the group's [`GroupAssignment`]: held from the promotion
/// until the demote callback returned.
struct Tracked {
    inner: Arc<dyn RoleCallbacks>,
    index: u32,
    assignment: watch::Sender<GroupAssignment>,
}

impl RoleCallbacks for Tracked {
    fn on_promote(&self, leadership: Leadership) -> BoxFuture<'_> {
        self.assignment
            .send_if_modified(|a| a.held.insert(self.index));
        self.inner.on_promote(leadership)
    }

    fn on_demote(&self, demotion: Demotion) -> BoxFuture<'_> {
        Box::pin(async move {
            self.inner.on_demote(demotion).await;
            self.assignment
                .send_if_modified(|a| a.held.remove(&self.index));
        })
    }

    fn prepares(&self) -> bool {
        self.inner.prepares()
    }

    fn on_prepare(&self, role: RoleName) -> PrepareFuture<'_> {
        self.inner.on_prepare(role)
    }
}
