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
                () = resize(&set, &group, count) => {}
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            changed = records.changed() => if changed.is_err() { return },
        }
    }
}

/// Adds or removes `group`'s members so that it has `count` of them.
async fn resize(set: &Arc<RoleSet>, group: &RoleName, count: u32) {
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
            Ok(Ok(Some(entry))) => {
                let value = matches!(
                    crate::codec::EntryKind::watched(entry.operation),
                    crate::codec::EntryKind::Value
                );
                if !value {
                    continue;
                }
                match crate::groups::GroupRecord::parse(&key, &entry.value) {
                    Some(r) => {
                        records.insert(spec.name().clone(), r);
                    }
                    None => warn!(
                        key = %key,
                        "ignoring a group count record that is not valid: the configured count \
                         applies"
                    ),
                }
            }
            Ok(Ok(None)) => {}
            Ok(Err(e)) => warn!(key = %key, "cannot read the group's count record: {e}"),
            Err(_) => warn!(key = %key, "reading the group's count record timed out"),
        }
    }
    records
}
