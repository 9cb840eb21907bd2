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

use super::balance::reach_quotas;
use super::hash::score;
use super::member::MemberRecord;
use super::quota::{Bounds, quotas_by_group};
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
pub struct Placement {
    /// Preferred holder per role; a role with no eligible candidate has none.
    pub preferred: BTreeMap<RoleName, Preferred>,
    /// The share of every eligible member: the roles the plan gives it (its weighted fair
    /// quota as far as the members' role sets allow it; a spreading release happens only above
    /// it plus the hysteresis). Priority roles included.
    pub quota: BTreeMap<InstanceId, usize>,
}

impl Placement {
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
pub fn plan(members: &[Candidate], holders: &BTreeMap<RoleName, InstanceId>) -> Placement {
    // 0: a role a member will not take now is planned as one it does not campaign for, so the
    // others absorb it (quotas included) and nothing is handed to it.
    let willing: Vec<Cow<'_, Candidate>> = members.iter().map(Candidate::willing).collect();
    let mut sorted: Vec<&Candidate> = willing.iter().map(AsRef::as_ref).collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    sorted.dedup_by(|a, b| a.id == b.id);
    let by_id: BTreeMap<&InstanceId, &Candidate> = sorted.iter().map(|c| (&c.id, *c)).collect();
    let roles: BTreeSet<&RoleName> = sorted.iter().flat_map(|c| c.roles.keys()).collect();

    // 1 + 2: eligibility and priority.
    let mut fixed: BTreeMap<&RoleName, (&InstanceId, PreferredReason)> = BTreeMap::new();
    let mut shared: Vec<(&RoleName, Vec<&InstanceId>)> = Vec::new();
    // Pinned roles whose holder is tied for them: they stay with it, but the quotas are
    // computed as while the role was shared, so that a plan handing a role to a member that
    // pins it is still its own plan once carried out.
    let mut pins: BTreeMap<&RoleName, &InstanceId> = BTreeMap::new();
    for &role in &roles {
        // A role held by an eligible member that pins it stays there.
        let pinned_by = holders
            .get(role)
            .and_then(|h| by_id.get(h))
            .filter(|h| h.eligible() && h.pinned.contains(role) && h.roles.contains_key(role));
        let cands: Vec<(&InstanceId, i32)> = sorted
            .iter()
            .filter(|c| c.eligible())
            .filter_map(|c| c.roles.get(role).map(|p| (&c.id, *p)))
            .collect();
        let Some(top) = cands.iter().map(|(_, p)| *p).max() else {
            continue;
        };
        let tied: Vec<&InstanceId> = cands
            .iter()
            .filter(|(_, p)| *p == top)
            .map(|(id, _)| *id)
            .collect();
        if let Some(h) = pinned_by {
            if tied.len() > 1 && tied.contains(&&h.id) {
                pins.insert(role, &h.id);
                shared.push((role, tied));
            } else {
                fixed.insert(role, (&h.id, PreferredReason::Pinned));
            }
            continue;
        }
        match (cands.len(), tied.as_slice()) {
            (1, [only]) => {
                fixed.insert(role, (only, PreferredReason::OnlyCandidate));
            }
            (_, [only]) => {
                fixed.insert(role, (only, PreferredReason::Priority));
            }
            _ => shared.push((role, tied)),
        }
    }

    // 3: quotas over every role with a preference, among the eligible members taking part.
    let pool: Vec<&Candidate> = sorted
        .iter()
        .copied()
        .filter(|c| {
            c.eligible()
                && (fixed.values().any(|(id, _)| *id == &c.id)
                    || shared.iter().any(|(_, t)| t.contains(&&c.id)))
        })
        .collect();
    let mut load: BTreeMap<&InstanceId, usize> = pool.iter().map(|c| (&c.id, 0)).collect();
    for (id, _) in fixed.values() {
        *load.entry(id).or_default() += 1;
    }
    let tied_for: BTreeMap<&RoleName, &Vec<&InstanceId>> =
        shared.iter().map(|(r, t)| (*r, t)).collect();
    let bounds: Vec<Bounds<'_>> = pool
        .iter()
        .map(|c| {
            let lower = load.get(&c.id).copied().unwrap_or(0);
            let tied = shared.iter().filter(|(_, t)| t.contains(&&c.id)).count();
            Bounds {
                id: &c.id,
                weight: c.weight.max(1),
                lower,
                upper: lower + tied,
                // Only roles it can keep: a role it holds that the plan fixes elsewhere
                // (priority) leaves anyway and must not win it a rounding tie.
                held: holders
                    .iter()
                    .filter(|(r, h)| {
                        **h == c.id
                            && match fixed.get(r) {
                                Some((to, _)) => *to == &c.id,
                                None => tied_for.get(r).is_some_and(|t| t.contains(&&c.id)),
                            }
                    })
                    .count(),
            }
        })
        .collect();
    let links: Vec<&[&InstanceId]> = shared.iter().map(|(_, t)| t.as_slice()).collect();
    let quota = quotas_by_group(&bounds, &links);

    // Keep current holders within quota (highest rendezvous scores first).
    let mut assigned: BTreeMap<&RoleName, &InstanceId> = BTreeMap::new();
    for (role, h) in &pins {
        assigned.insert(role, h);
        *load.entry(h).or_default() += 1;
    }
    let mut keep: BTreeMap<&InstanceId, Vec<&RoleName>> = BTreeMap::new();
    for (role, tied) in &shared {
        if pins.contains_key(role) {
            continue;
        }
        if let Some(h) = holders.get(*role)
            && let Some(h) = tied.iter().find(|t| **t == h)
        {
            keep.entry(h).or_default().push(role);
        }
    }
    for (h, mut rs) in keep {
        rs.sort_by_key(|r| std::cmp::Reverse(score(r.as_str(), h.as_str())));
        let spare = quota
            .get(h)
            .copied()
            .unwrap_or(0)
            .saturating_sub(load.get(h).copied().unwrap_or(0));
        for r in rs.into_iter().take(spare) {
            assigned.insert(r, h);
            *load.entry(h).or_default() += 1;
        }
    }
    // Everything else: spare quota by rendezvous score, else the current holder, else the
    // least loaded (per weight).
    for (role, tied) in &shared {
        if assigned.contains_key(role) {
            continue;
        }
        let holds = |id: &InstanceId| holders.get(*role) == Some(id);
        let spare = |id: &InstanceId| {
            quota.get(id).copied().unwrap_or(0) > load.get(id).copied().unwrap_or(0)
        };
        // No tied member has spare quota: the quotas cannot all be reached (members campaign
        // for different roles). The holder keeps the role, so a plan that has been carried out
        // stays its own plan; `balance` evens out what needs it.
        let best = tied
            .iter()
            .filter(|t| spare(t))
            .max_by_key(|t| score(role.as_str(), t.as_str()))
            .or_else(|| tied.iter().find(|t| holds(t)))
            .or_else(|| {
                tied.iter().min_by(|a, b| {
                    let la = load.get(*a).copied().unwrap_or(0) as u128;
                    let lb = load.get(*b).copied().unwrap_or(0) as u128;
                    let wa = u128::from(by_id.get(*a).map_or(1, |c| c.weight.max(1)));
                    let wb = u128::from(by_id.get(*b).map_or(1, |c| c.weight.max(1)));
                    (la * wb).cmp(&(lb * wa)).then_with(|| {
                        score(role.as_str(), b.as_str()).cmp(&score(role.as_str(), a.as_str()))
                    })
                })
            });
        if let Some(best) = best {
            assigned.insert(role, best);
            *load.entry(best).or_default() += 1;
        }
    }

    // Members campaigning for different roles: close the gaps the greedy pass left.
    let weights: BTreeMap<&InstanceId, u32> = pool.iter().map(|c| (&c.id, c.weight)).collect();
    shared.retain(|(role, _)| !pins.contains_key(role));
    reach_quotas(&shared, &quota, &weights, holders, &mut assigned, &mut load);

    let mut preferred = BTreeMap::new();
    let reason_for = |role: &RoleName, to: &InstanceId, base: PreferredReason| match holders
        .get(role)
        .and_then(|h| by_id.get(h))
    {
        Some(h) if &h.id != to && h.draining => PreferredReason::Draining,
        Some(h) if &h.id != to && !h.healthy => PreferredReason::Unhealthy,
        _ => base,
    };
    let shares = assigned.into_iter().map(|(role, id)| {
        let base = if pins.contains_key(role) {
            PreferredReason::Pinned
        } else {
            PreferredReason::Share
        };
        (role, (id, base))
    });
    for (role, (id, base)) in fixed.into_iter().chain(shares) {
        let reason = reason_for(role, id, base);
        preferred.insert(
            role.clone(),
            Preferred {
                instance: id.clone(),
                reason,
            },
        );
    }
    Placement {
        preferred,
        // What the plan gives each member: the quota where the role sets allow it.
        quota: load.into_iter().map(|(k, v)| (k.clone(), v)).collect(),
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
