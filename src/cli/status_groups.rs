//! `nats-roles status`'s role groups (protocol Q14): one line per group — the count the
//! instances act on (a disagreement shown), how many members are held, by whom — instead of
//! a row per member.

use std::collections::{BTreeMap, BTreeSet};

use crate::groups::GroupRecord;
use crate::inspect::RoleView;
use crate::names::{InstanceId, RoleName};

use super::table::render;

/// The groups the bucket tells of: the counts in the live instances' member records and the
/// count records.
pub(super) struct Groups {
    /// Group → instance → the count it acts on.
    counts: BTreeMap<RoleName, BTreeMap<InstanceId, u32>>,
    records: BTreeMap<RoleName, GroupRecord>,
}

impl Groups {
    pub(super) fn new(
        members: &BTreeMap<InstanceId, BTreeMap<RoleName, u32>>,
        records: &BTreeMap<RoleName, GroupRecord>,
    ) -> Self {
        let mut counts: BTreeMap<RoleName, BTreeMap<InstanceId, u32>> = BTreeMap::new();
        for (id, groups) in members {
            for (group, count) in groups {
                counts
                    .entry(group.clone())
                    .or_default()
                    .insert(id.clone(), *count);
            }
        }
        for group in records.keys() {
            counts.entry(group.clone()).or_default();
        }
        Self {
            counts,
            records: records.clone(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    pub(super) fn names(&self) -> impl Iterator<Item = &RoleName> {
        self.counts.keys()
    }

    /// The GROUP table: a line per group.
    pub(super) fn table(&self, roles: &[RoleView]) -> String {
        let rows: Vec<Vec<String>> = self
            .counts
            .iter()
            .map(|(group, counts)| {
                let members: Vec<&RoleView> = roles
                    .iter()
                    .filter(|v| v.group.as_deref() == Some(group.as_str()))
                    .collect();
                let mut by_holder: BTreeMap<&str, usize> = BTreeMap::new();
                for v in &members {
                    if let Some(h) = &v.holder {
                        *by_holder.entry(h.as_str()).or_default() += 1;
                    }
                }
                let holders: Vec<String> =
                    by_holder.iter().map(|(h, n)| format!("{h} {n}")).collect();
                vec![
                    group.to_string(),
                    count_text(counts),
                    self.records.get(group).map_or_else(
                        || "configured".to_owned(),
                        |r| format!("record ({})", r.count),
                    ),
                    members.len().to_string(),
                    if holders.is_empty() {
                        "-".to_owned()
                    } else {
                        holders.join(", ")
                    },
                ]
            })
            .collect();
        render(
            &["GROUP", "COUNT", "SET BY", "HELD", "HOLDERS"],
            &[false, false, false, true, false],
            &rows,
        )
    }
}

/// The count the instances act on; a disagreement as every count with its instances.
fn count_text(counts: &BTreeMap<InstanceId, u32>) -> String {
    let distinct: BTreeSet<u32> = counts.values().copied().collect();
    match distinct.len() {
        0 => "-".to_owned(),
        1 => distinct.iter().map(ToString::to_string).collect(),
        _ => {
            let parts: Vec<String> = distinct
                .iter()
                .map(|c| {
                    let ids: Vec<&str> = counts
                        .iter()
                        .filter(|(_, n)| *n == c)
                        .map(|(id, _)| id.as_str())
                        .collect();
                    format!("{c} ({})", ids.join(", "))
                })
                .collect();
            format!("disagree: {}", parts.join(" / "))
        }
    }
}
