//! The placement plan: the preferred holder of every role, computed deterministically from
//! the membership and the current holders, so that every instance computes the same plan.
//!
//! Rules, strongest first (docs/placement.md):
//! 0. **Unavailable**: a role a member will not take now (it cools down, or cannot acquire
//!    it) is planned as one it does not campaign for.
//! 1. **Health**: draining or unhealthy members are preferred for nothing.
//! 2. **Pinned**: a role held by a member that never hands it over stays there (where the
//!    holder is tied for it, the quotas treat it as shared: see `pins` in [`plan`]).
//! 3. **Priority**: among the members that campaign for a role, the highest priority wins.
//! 4. **Share**: ties are spread by weighted fair share, per group of members connected by
//!    shared roles. Every member gets a quota of `R × w / W` roles (R roles of its group, W
//!    the group's sum of weights), bounded below by the roles fixed to it (rules 2 and 3) and
//!    above by the roles it can hold at all; what a bound takes or leaves is shared among the
//!    others (`quota`: water-filling). Fractions are rounded by largest remainder, then
//!    towards the members already holding more than their floor of roles they can keep (fewest
//!    moves), then by id.
//!    A role stays with its current holder while that holder is within quota (the roles it
//!    keeps are chosen by rendezvous score); the rest go, in name order, to the tied member
//!    with spare quota and the highest rendezvous score for the role, else stay with their
//!    holder. Where members campaign for different roles, that greedy pass can leave gaps;
//!    they are closed along augmenting paths of role shifts (`balance`). A plan applied as it
//!    is gives the same plan again (no moves).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::assign::{Open, Slot, assign};
use super::member::MemberRecord;
use super::version::Version;
use crate::names::{InstanceId, RoleName};

/// One member as the plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Instance id.
    pub id: InstanceId,
    /// Capacity weight (>= 1; 0 is treated as 1).
    pub weight: u32,
    /// Moving its roles away.
    pub draining: bool,
    /// Health check passes.
    pub healthy: bool,
    /// The roles it campaigns for, with its priority for each.
    pub roles: BTreeMap<RoleName, i32>,
    /// Roles it never hands over voluntarily (`takeover: never`).
    pub pinned: BTreeSet<RoleName>,
    /// Roles of `roles` it will not take now (cooldown, failure): planned exactly as if it
    /// did not campaign for them.
    pub unavailable: BTreeSet<RoleName>,
    /// Its zone (`instance.zone`); members without one share a zone.
    pub zone: Option<String>,
    /// Units of role cost it holds at most (`instance.capacity`).
    pub capacity: Option<u32>,
    /// Roles it holds at most (`instance.max_roles`).
    pub max_roles: Option<u32>,
    /// Its software version (`instance.version`): nothing moves onto a member older than the
    /// newest live one.
    pub version: Option<Version>,
    /// The cost of its roles that do not cost 1 (`roles[].weight`).
    pub costs: BTreeMap<RoleName, u32>,
    /// Roles it holds only because their home member left: role → home.
    pub parked: BTreeMap<RoleName, InstanceId>,
}

impl From<&MemberRecord> for Candidate {
    fn from(r: &MemberRecord) -> Self {
        Self {
            id: r.instance.clone(),
            weight: r.weight,
            draining: r.draining,
            healthy: r.healthy,
            roles: r.roles.clone(),
            pinned: r.pinned.clone(),
            unavailable: r.unavailable.clone(),
            zone: r.zone.clone(),
            capacity: r.capacity,
            max_roles: r.max_roles,
            version: r.version.as_deref().and_then(|v| Version::parse(v).ok()),
            costs: r.costs.clone(),
            parked: r.parked.clone(),
        }
    }
}

impl Candidate {
    /// A member campaigning for nothing yet: weight 1, healthy, no zone, limit or version.
    #[must_use]
    #[cfg(test)]
    pub fn new(id: InstanceId) -> Self {
        Self {
            id,
            weight: 1,
            draining: false,
            healthy: true,
            roles: BTreeMap::new(),
            pinned: BTreeSet::new(),
            unavailable: BTreeSet::new(),
            zone: None,
            capacity: None,
            max_roles: None,
            version: None,
            costs: BTreeMap::new(),
            parked: BTreeMap::new(),
        }
    }
}

impl Candidate {
    fn eligible(&self) -> bool {
        !self.draining && self.healthy
    }

    /// The member as the plan sees it: without the roles it will not take now.
    fn willing(&self) -> Cow<'_, Candidate> {
        if self.unavailable.is_empty() {
            return Cow::Borrowed(self);
        }
        let mut c = self.clone();
        c.roles.retain(|r, _| !self.unavailable.contains(r));
        c.unavailable.clear();
        Cow::Owned(c)
    }
}

/// Why a member is preferred for a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PreferredReason {
    /// It has the strictly highest priority among the live candidates.
    Priority,
    /// Equal priorities: the role falls into its fair share.
    Share,
    /// The current holder is draining; this member takes over.
    Draining,
    /// The current holder is unhealthy; this member takes over.
    Unhealthy,
    /// It is the only live candidate.
    OnlyCandidate,
    /// It holds the role and never hands it over voluntarily (`takeover: never`).
    Pinned,
}

impl PreferredReason {
    /// A short machine-readable name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Priority => "priority",
            Self::Share => "share",
            Self::Draining => "draining",
            Self::Unhealthy => "unhealthy",
            Self::OnlyCandidate => "only_candidate",
            Self::Pinned => "pinned",
        }
    }
}

impl std::fmt::Display for PreferredReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The preferred holder of one role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preferred {
    /// The member that should hold the role.
    pub instance: InstanceId,
    /// Why.
    pub reason: PreferredReason,
}

/// The plan for every role some member campaigns for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Preferred holder per role; a role with no eligible candidate has none.
    pub preferred: BTreeMap<RoleName, Preferred>,
    /// The share of every eligible member: the roles the plan gives it (its weighted fair
    /// quota as far as the members' role sets allow it; a spreading release happens only above
    /// it plus the hysteresis). Priority roles included; in units of role cost.
    pub quota: BTreeMap<InstanceId, usize>,
    /// The cost of every role that does not cost 1 (`roles[].weight`).
    pub cost: BTreeMap<RoleName, u64>,
}

impl Plan {
    /// Units of `roles`, each counted at its cost.
    #[must_use]
    pub fn units<'r>(&self, roles: impl IntoIterator<Item = &'r RoleName>) -> usize {
        roles
            .into_iter()
            .map(|r| usize::try_from(self.cost.get(r).copied().unwrap_or(1)).unwrap_or(usize::MAX))
            .fold(0, usize::saturating_add)
    }

    /// Roles the plan gives to `id`.
    #[must_use]
    #[cfg(test)]
    pub fn load(&self, id: &InstanceId) -> usize {
        self.preferred
            .values()
            .filter(|p| &p.instance == id)
            .count()
    }
}

/// Computes the plan. `members` may come in any order (duplicates: the first of each id in
/// sorted order counts); `holders` maps roles to their current holder.
#[must_use]
pub fn plan(members: &[Candidate], holders: &BTreeMap<RoleName, InstanceId>) -> Plan {
    // 0: a role a member will not take now is planned as one it does not campaign for, so the
    // others absorb it (shares included) and nothing is handed to it.
    let willing: Vec<Cow<'_, Candidate>> = members.iter().map(Candidate::willing).collect();
    let mut sorted: Vec<&Candidate> = willing.iter().map(AsRef::as_ref).collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    sorted.dedup_by(|a, b| a.id == b.id);
    let by_id: BTreeMap<&InstanceId, &Candidate> = sorted.iter().map(|c| (&c.id, *c)).collect();
    let roles: BTreeSet<&RoleName> = sorted.iter().flat_map(|c| c.roles.keys()).collect();
    let cost = role_costs(&sorted);
    let cost_of = |r: &RoleName| cost.get(r).copied().unwrap_or(1);
    // Rollout: roles do not move onto a member older than the newest live version.
    let newest = sorted
        .iter()
        .filter(|c| c.eligible())
        .filter_map(|c| c.version.as_ref())
        .max();
    let receives = |c: &Candidate| match (&c.version, newest) {
        (Some(v), Some(n)) => v >= n,
        _ => true,
    };

    // The eligible members, as slots of the assignment (sorted by id).
    let eligible: Vec<&Candidate> = sorted.iter().copied().filter(|c| c.eligible()).collect();
    let zone_names: BTreeSet<Option<&str>> = eligible.iter().map(|c| c.zone.as_deref()).collect();
    let zone_index = |c: &Candidate| {
        zone_names
            .iter()
            .position(|z| *z == c.zone.as_deref())
            .unwrap_or(0)
    };
    let mut slots: Vec<Slot<'_>> = eligible
        .iter()
        .map(|c| Slot {
            id: &c.id,
            weight: u64::from(c.weight.max(1)),
            zone: zone_index(c),
            capacity: c.capacity.map(u64::from),
            max_roles: c.max_roles.map(u64::from),
            receives: receives(c),
            fixed_units: 0,
            fixed_count: 0,
            fixed_classes: Vec::new(),
        })
        .collect();
    let slot_of: BTreeMap<&InstanceId, usize> = eligible
        .iter()
        .enumerate()
        .map(|(i, c)| (&c.id, i))
        .collect();

    // 1 + 2 + 3: eligibility, pinning and priority, in name order; a role fixed to a member
    // without room (or that does not receive it) is shared among all its eligible candidates.
    let mut fixed: BTreeMap<&RoleName, (&InstanceId, PreferredReason)> = BTreeMap::new();
    let mut open: Vec<Open<'_>> = Vec::new();
    // Q15: the slots of one role are an exclusive class (a member holds at most one of them).
    let bases: BTreeMap<RoleName, usize> = roles
        .iter()
        .filter(|r| r.slot().is_some())
        .map(|r| r.base_role())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .enumerate()
        .map(|(i, b)| (b, i))
        .collect();
    let classes: BTreeMap<&RoleName, usize> = roles
        .iter()
        .filter(|r| r.slot().is_some())
        .filter_map(|r| bases.get(&r.base_role()).map(|c| (*r, *c)))
        .collect();
    // Per class, the slots planned so far that are shared among several members.
    let mut shared_slots: BTreeMap<usize, usize> = BTreeMap::new();
    for &role in &roles {
        let c = cost_of(role);
        let class = classes.get(role).copied();
        let holder = holders.get(role).and_then(|h| by_id.get(h));
        // A member a sibling slot is fixed to (priority, pinned) is no candidate for this one.
        let sibling_fixed = |m: &InstanceId| {
            class.is_some_and(|k| {
                slot_of
                    .get(m)
                    .is_some_and(|&s| slots[s].fixed_classes.contains(&k))
            })
        };
        let cands: Vec<(&InstanceId, i32)> = eligible
            .iter()
            .filter(|m| !sibling_fixed(&m.id))
            .filter_map(|m| m.roles.get(role).map(|p| (&m.id, *p)))
            .collect();
        let Some(top) = cands.iter().map(|(_, p)| *p).max() else {
            continue;
        };
        // A role held by an eligible member that pins it stays there.
        if let Some(h) = holder.filter(|h| {
            h.eligible()
                && h.pinned.contains(role)
                && h.roles.contains_key(role)
                && !sibling_fixed(&h.id)
        }) {
            fix(
                &mut slots,
                &slot_of,
                &mut fixed,
                role,
                &h.id,
                PreferredReason::Pinned,
                (c, class),
            );
            continue;
        }
        // The top priority ties; for a slot, as many tiers from the top as it takes to have
        // a member for it besides one for each sibling slot shared before it (a member holds
        // one slot of a role: the second slot goes down the priorities, not unplanned).
        let floor = match class {
            Some(k) => {
                let mut prios: Vec<i32> = cands.iter().map(|(_, p)| *p).collect();
                prios.sort_unstable_by(|a, b| b.cmp(a));
                let earlier = shared_slots.get(&k).copied().unwrap_or(0);
                prios.get(earlier).or(prios.last()).copied().unwrap_or(top)
            }
            None => top,
        };
        let tied: Vec<&InstanceId> = cands
            .iter()
            .filter(|(_, p)| *p >= floor)
            .map(|(id, _)| *id)
            .collect();
        if let [only] = tied.as_slice() {
            let s = slot_of.get(only).copied().unwrap_or(0);
            let holds = holders.get(role) == Some(*only);
            let fits = slots[s].receives
                && slots[s]
                    .capacity
                    .is_none_or(|cap| slots[s].fixed_units + c <= cap)
                && slots[s].max_roles.is_none_or(|m| slots[s].fixed_count < m);
            if holds || fits {
                let reason = if cands.len() == 1 {
                    PreferredReason::OnlyCandidate
                } else {
                    PreferredReason::Priority
                };
                fix(
                    &mut slots,
                    &slot_of,
                    &mut fixed,
                    role,
                    only,
                    reason,
                    (c, class),
                );
                continue;
            }
            // No room at the preferred member: every eligible candidate shares it.
            if let Some(k) = class {
                *shared_slots.entry(k).or_default() += 1;
            }
            open.push(open_role(
                (role, c, class),
                cands.iter().map(|(id, _)| *id),
                &slot_of,
                holders,
                &by_id,
            ));
            continue;
        }
        if let Some(k) = class {
            *shared_slots.entry(k).or_default() += 1;
        }
        open.push(open_role(
            (role, c, class),
            tied.into_iter(),
            &slot_of,
            holders,
            &by_id,
        ));
    }

    // 4: share.
    let at = assign(&slots, &open);
    let mut units: BTreeMap<&InstanceId, u64> = slots
        .iter()
        .filter(|s| {
            s.fixed_count > 0
                || open
                    .iter()
                    .any(|o| o.tied.iter().any(|t| slots[*t].id == s.id))
        })
        .map(|s| (s.id, s.fixed_units))
        .collect();
    let mut preferred = BTreeMap::new();
    let reason_for = |role: &RoleName, to: &InstanceId, base: PreferredReason| match holders
        .get(role)
        .and_then(|h| by_id.get(h))
    {
        Some(h) if &h.id != to && h.draining => PreferredReason::Draining,
        Some(h) if &h.id != to && !h.healthy => PreferredReason::Unhealthy,
        _ => base,
    };
    let shares = open.iter().zip(&at).filter_map(|(o, s)| {
        let s = (*s)?;
        *units.entry(slots[s].id).or_default() += o.cost;
        Some((o.role, (slots[s].id, PreferredReason::Share)))
    });
    let chosen: Vec<_> = fixed.into_iter().chain(shares).collect();
    for (role, (id, base)) in chosen {
        preferred.insert(
            role.clone(),
            Preferred {
                instance: id.clone(),
                reason: reason_for(role, id, base),
            },
        );
    }
    Plan {
        preferred,
        // What the plan gives each member, in units of role cost.
        quota: units
            .into_iter()
            .map(|(k, v)| (k.clone(), usize::try_from(v).unwrap_or(usize::MAX)))
            .collect(),
        cost: cost
            .into_iter()
            .filter(|(_, c)| *c != 1)
            .map(|(r, c)| (r.clone(), c))
            .collect(),
    }
}

/// Each role's cost: the largest any member states for it (1 when none does).
fn role_costs<'a>(members: &[&'a Candidate]) -> BTreeMap<&'a RoleName, u64> {
    let mut cost: BTreeMap<&RoleName, u64> = BTreeMap::new();
    for m in members {
        for r in m.roles.keys() {
            let c = u64::from(m.costs.get(r).copied().unwrap_or(1).max(1));
            let e = cost.entry(r).or_insert(c);
            *e = (*e).max(c);
        }
    }
    cost
}

fn fix<'a>(
    slots: &mut [Slot<'_>],
    slot_of: &BTreeMap<&InstanceId, usize>,
    fixed: &mut BTreeMap<&'a RoleName, (&'a InstanceId, PreferredReason)>,
    role: &'a RoleName,
    to: &'a InstanceId,
    reason: PreferredReason,
    (cost, class): (u64, Option<usize>),
) {
    if let Some(&s) = slot_of.get(to) {
        slots[s].fixed_units += cost;
        slots[s].fixed_count += 1;
        slots[s].fixed_classes.extend(class);
    }
    fixed.insert(role, (to, reason));
}

fn open_role<'a, 'b>(
    (role, cost, class): (&'a RoleName, u64, Option<usize>),
    tied: impl Iterator<Item = &'b InstanceId>,
    slot_of: &BTreeMap<&InstanceId, usize>,
    holders: &BTreeMap<RoleName, InstanceId>,
    by_id: &BTreeMap<&InstanceId, &Candidate>,
) -> Open<'a> {
    let mut tied: Vec<usize> = tied.filter_map(|id| slot_of.get(id).copied()).collect();
    tied.sort_unstable();
    let holder = holders
        .get(role)
        .and_then(|h| slot_of.get(h).copied())
        .filter(|h| tied.contains(h));
    let home = holders
        .get(role)
        .and_then(|h| by_id.get(h))
        .and_then(|h| h.parked.get(role))
        .and_then(|home| slot_of.get(home).copied())
        .filter(|home| tied.contains(home) && Some(*home) != holder);
    Open {
        role,
        cost,
        tied,
        holder,
        home,
        class,
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "plan_rollout_tests.rs"]
mod rollout_tests;

#[cfg(test)]
#[path = "plan_slot_tests.rs"]
mod slot_tests;
