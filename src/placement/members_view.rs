//! [`MemberList`]: the JSON shape of `GET /api/members` — every placement member (those that
//! hold nothing included) with its zone, weight, limits, version, health, draining and frozen
//! state, the roles the plan gives it and the roles it holds, plus why voluntary moves are
//! frozen and where members disagree on placement settings.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{Frozen, MemberRecord, Preferred};
use crate::names::{InstanceId, RoleName};

/// One member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MemberView {
    /// Instance id.
    pub id: String,
    /// Zone, if it has one.
    pub zone: Option<String>,
    /// Placement weight.
    pub weight: u32,
    /// Units of role cost it holds at most.
    pub capacity: Option<u32>,
    /// Roles it holds at most.
    pub max_roles: Option<u32>,
    /// Software version.
    pub version: Option<String>,
    /// Its health check passes.
    pub healthy: bool,
    /// It moves its roles away.
    pub draining: bool,
    /// Its configuration freezes voluntary moves.
    pub frozen: bool,
    /// Its record is current (not silent, not expired).
    pub live: bool,
    /// Roles the plan gives it.
    pub planned: Vec<String>,
    /// Roles it holds now.
    pub held: Vec<String>,
    /// Units (role cost) the plan gives it.
    pub planned_units: u64,
    /// Units it holds now.
    pub held_units: u64,
    /// Roles it will not take now (cooldown, failure).
    pub unavailable: Vec<String>,
    /// Its dashboard address, if advertised.
    pub http: Option<String>,
    /// Its placement knobs in short.
    pub settings: Option<String>,
    /// Its role groups with the count it acts on (protocol Q14).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, u32>,
}

/// `GET /api/members`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MemberList {
    /// The instance that answered.
    pub instance: Option<String>,
    /// Whether placement is enabled on the answering instance.
    pub placement: bool,
    /// Every member present in the membership table, sorted by id.
    pub members: Vec<MemberView>,
    /// Why voluntary moves are frozen (`null`: they are not).
    pub frozen: Option<serde_json::Value>,
    /// Settings the members disagree on, one sentence each (empty: they agree).
    pub disagreements: Vec<String>,
}

/// Builds the list from the membership records (with whether each is live), the plan and the
/// holders.
#[must_use]
pub fn member_list(
    instance: Option<&InstanceId>,
    placement: bool,
    records: &[(MemberRecord, bool)],
    preferred: &BTreeMap<RoleName, Preferred>,
    holders: &BTreeMap<RoleName, InstanceId>,
    frozen: Option<&Frozen>,
) -> MemberList {
    let cost = |r: &RoleName| {
        records
            .iter()
            .filter_map(|(m, _)| m.costs.get(r))
            .copied()
            .max()
            .map_or(1, u64::from)
    };
    let mut members: Vec<MemberView> = records
        .iter()
        .map(|(r, live)| {
            let planned: Vec<&RoleName> = preferred
                .iter()
                .filter(|(_, p)| p.instance == r.instance)
                .map(|(role, _)| role)
                .collect();
            let held: Vec<&RoleName> = holders
                .iter()
                .filter(|(_, h)| **h == r.instance)
                .map(|(role, _)| role)
                .collect();
            MemberView {
                id: r.instance.to_string(),
                zone: r.zone.clone(),
                weight: r.weight,
                capacity: r.capacity,
                max_roles: r.max_roles,
                version: r.version.clone(),
                healthy: r.healthy,
                draining: r.draining,
                frozen: r.frozen,
                live: *live,
                planned_units: planned.iter().map(|x| cost(x)).sum(),
                held_units: held.iter().map(|x| cost(x)).sum(),
                planned: planned.iter().map(ToString::to_string).collect(),
                held: held.iter().map(ToString::to_string).collect(),
                unavailable: r.unavailable.iter().map(ToString::to_string).collect(),
                http: r.http.clone(),
                settings: r.settings.clone(),
                groups: r.groups.iter().map(|(g, c)| (g.to_string(), *c)).collect(),
            }
        })
        .collect();
    members.sort_by(|a, b| a.id.cmp(&b.id));
    MemberList {
        instance: instance.map(ToString::to_string),
        placement,
        members,
        frozen: frozen.and_then(|f| serde_json::to_value(f).ok()),
        disagreements: disagreements(records.iter().map(|(r, _)| r)),
    }
}

/// Role groups whose members act on different counts (protocol Q14: each campaigns for its
/// own members, nobody fights; the extra members are held only by those with the larger
/// count), one sentence per group.
fn group_disagreements<'a>(records: impl Iterator<Item = &'a MemberRecord>) -> Vec<String> {
    let mut counts: BTreeMap<&RoleName, BTreeMap<u32, Vec<&str>>> = BTreeMap::new();
    for r in records {
        for (group, count) in &r.groups {
            counts
                .entry(group)
                .or_default()
                .entry(*count)
                .or_default()
                .push(r.instance.as_str());
        }
    }
    counts
        .into_iter()
        .filter(|(_, by_count)| by_count.len() > 1)
        .map(|(group, by_count)| {
            let parts: Vec<String> = by_count
                .iter()
                .map(|(count, ids)| format!("{count} on {}", ids.join(", ")))
                .collect();
            format!(
                "group {group}: the members act on different counts ({}); each campaigns only \
                 for the members below its own count (a count record, `nats-roles scale`, \
                 sets one count for all)",
                parts.join("; ")
            )
        })
        .collect()
}

/// Where members disagree: placement knobs, role costs, zones used by some members only.
fn disagreements<'a>(records: impl Iterator<Item = &'a MemberRecord> + Clone) -> Vec<String> {
    let mut out = group_disagreements(records.clone());
    let mut by_settings: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in records.clone() {
        if let Some(s) = &r.settings {
            by_settings.entry(s).or_default().push(r.instance.as_str());
        }
    }
    if by_settings.len() > 1 {
        let groups: Vec<String> = by_settings
            .iter()
            .map(|(s, ids)| format!("{} ({s})", ids.join(", ")))
            .collect();
        out.push(format!("placement settings differ: {}", groups.join("; ")));
    }
    let mut costs: BTreeMap<&RoleName, BTreeSet<u32>> = BTreeMap::new();
    for r in records.clone() {
        for role in r.roles.keys() {
            costs
                .entry(role)
                .or_default()
                .insert(r.costs.get(role).copied().unwrap_or(1));
        }
    }
    for (role, set) in costs.iter().filter(|(_, s)| s.len() > 1) {
        let list: Vec<String> = set.iter().map(ToString::to_string).collect();
        out.push(format!(
            "role {role} has different weights: {} (the largest counts)",
            list.join(", ")
        ));
    }
    let zoned = records.clone().filter(|r| r.zone.is_some()).count();
    let total = records.clone().count();
    if zoned > 0 && zoned < total {
        let missing: Vec<&str> = records
            .filter(|r| r.zone.is_none())
            .map(|r| r.instance.as_str())
            .collect();
        out.push(format!(
            "members without a zone count as one zone of their own: {}",
            missing.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::PreferredReason;

    #[test]
    fn lists_members_holding_nothing_and_the_disagreements() {
        let mut a = crate::placement::MemberRecord::parse(
            "member.a",
            br#"{"v":1,"instance":"a","incarnation":"00000000-0000-0000-0000-000000000000","weight":2,"priority":0,"roles":{"r1":0,"r2":0},"heartbeat_ms":250,"zone":"z1","settings":"sw=5s"}"#,
        )
        .expect("a record");
        let mut b = a.clone();
        b.instance = InstanceId::new("b").expect("valid");
        b.zone = None;
        b.settings = Some("sw=1s".to_owned());
        b.costs.insert(RoleName::new("r1").expect("valid"), 3);
        a.weight = 2;
        let r1 = RoleName::new("r1").expect("valid");
        let preferred = BTreeMap::from([(
            r1.clone(),
            Preferred {
                instance: a.instance.clone(),
                reason: PreferredReason::Share,
            },
        )]);
        let holders = BTreeMap::from([(r1, a.instance.clone())]);
        let list = member_list(
            None,
            true,
            &[(a, true), (b, false)],
            &preferred,
            &holders,
            None,
        );
        assert_eq!(list.members.len(), 2);
        assert_eq!(list.members[0].planned_units, 3);
        assert!(list.members[1].held.is_empty() && !list.members[1].live);
        assert_eq!(list.disagreements.len(), 3, "{:?}", list.disagreements);
    }
}
