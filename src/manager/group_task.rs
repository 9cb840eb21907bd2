//! The group task (protocol Q14): when a group's count changes (its count record written,
//! replaced or deleted), adds the members above the old count and removes those at or above
//! the new one — each an ordinary role, removed by a graceful release.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::groups::effective_count;
use crate::names::RoleName;

use super::role_set::RoleSet;

/// Members added between two yields to the runtime.
const ADD_SLICE: u32 = 64;

/// Runs until `cancel`: follows the count records and resizes the groups.
pub(crate) async fn run(set: Arc<RoleSet>, cancel: CancellationToken) {
    let groups = set.shared.groups.clone();
    let mut records = groups.records();
    loop {
        let wanted: BTreeMap<RoleName, u32> = {
            let records = records.borrow_and_update();
            groups
                .entries()
                .iter()
                .map(|(name, g)| {
                    (
                        name.clone(),
                        effective_count(g.spec.count, records.get(name)),
                    )
                })
                .collect()
        };
        for (group, count) in wanted {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = resize(&set, &group, count, &records) => {}
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            changed = records.changed() => if changed.is_err() { return },
        }
        // A burst of records (an operator's retries, or another client flapping the count)
        // is acted on once: its last record, after a quiet moment.
        let burst = tokio::time::Instant::now();
        while burst.elapsed() < SETTLE_MAX {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(SETTLE) => break,
                changed = records.changed() => if changed.is_err() { return },
            }
        }
    }
}

/// How long the count records must stay unchanged before a change is acted on.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(50);

/// The longest a burst of count records delays acting on them.
const SETTLE_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// Adds or removes `group`'s members so that it has `count` of them. Adding stops early when
/// another count record arrives meanwhile (the count acted on is then where it stopped: the
/// next record decides from there).
async fn resize(
    set: &Arc<RoleSet>,
    group: &RoleName,
    count: u32,
    records: &tokio::sync::watch::Receiver<BTreeMap<RoleName, crate::groups::GroupRecord>>,
) {
    let groups = &set.shared.groups;
    let Some(entry) = groups.entries().get(group) else {
        return;
    };
    let current = entry.assignment.borrow().count;
    if current == count {
        return;
    }
    info!(group = %group, from = current, to = count, "group count changed");
    groups.set_count(group, count);
    if count > current {
        for index in current..count {
            if let Err(e) = groups
                .member(group, index)
                .and_then(|spec| set.add_role(spec))
            {
                warn!(group = %group, index, "cannot add the group's member: {e}");
            }
            // Thousands of members (a count record may ask for 10,000) are added in slices:
            // the runtime's workers also renew the sessions, whose deadlines do not wait.
            if (index - current) % ADD_SLICE == ADD_SLICE - 1 {
                tokio::task::yield_now().await;
                if records.has_changed().unwrap_or(false) && index + 1 < count {
                    info!(group = %group, at = index + 1, "group count changed again while members were added");
                    groups.set_count(group, index + 1);
                    return;
                }
            }
        }
        return;
    }
    let removals = (count..current).filter_map(|index| {
        let name = crate::groups::member_name(group, index).ok()?;
        Some(async move {
            // Not managed (it failed to be added): nothing to release.
            let _ = set.remove_role(&name).await;
        })
    });
    futures_util::future::join_all(removals).await;
}

/// The count records of `groups` as the bucket holds them at start (one read each, at most
/// `timeout`). A read that fails leaves the group on its configured count until the watcher
/// delivers the record (a count is no safety rule: Q14).
pub(super) async fn read_records(
    kv: &async_nats::jetstream::kv::Store,
    groups: &[super::groups::GroupSpec],
    timeout: std::time::Duration,
) -> BTreeMap<RoleName, crate::groups::GroupRecord> {
    let mut records = BTreeMap::new();
    for spec in groups {
        let key = crate::groups::group_key(spec.name());
        match tokio::time::timeout(timeout, kv.entry(key.clone())).await {
            Ok(Ok(Some(entry))) => match crate::codec::control::group(&entry) {
                crate::codec::control::Control::Set(r) => {
                    records.insert(spec.name().clone(), r);
                }
                crate::codec::control::Control::Cleared => {}
                crate::codec::control::Control::Foreign => warn!(
                    key = %key,
                    "ignoring a group count record that is not valid: the configured count \
                     applies"
                ),
            },
            Ok(Ok(None)) => {}
            Ok(Err(e)) => warn!(key = %key, "cannot read the group's count record: {e}"),
            Err(_) => warn!(key = %key, "reading the group's count record timed out"),
        }
    }
    records
}
