//! Reaching the quotas when members campaign for different roles.
//!
//! The plan first keeps current holders and then gives each remaining role, in name order,
//! to a tied member with spare quota. When members campaign for different subsets of the
//! roles, that greedy pass can leave a member above its quota while another is below it,
//! because the roles that could have filled the second went to a third member early on.
//! Such a gap is closed along an *augmenting path*: a chain of role shifts
//! `over → m1 → … → under`, where each member gives one of its shared roles to the next one,
//! which campaigns for it at the same (top) priority. Every shift moves one unit of excess
//! to a member with a deficit, so the loop ends after at most the total excess.
//!
//! Deterministic: sources by largest excess then id, a breadth-first search visiting roles
//! not held now by the member that gives them first (they move at no cost), then by name, and
//! candidates by id. Paths are shortest, so few roles change their preferred holder.

use std::collections::{BTreeMap, VecDeque};

use crate::names::{InstanceId, RoleName};

/// Roles with more than one top-priority candidate, and those candidates.
pub(crate) type Shared<'a> = [(&'a RoleName, Vec<&'a InstanceId>)];

/// The preferred member of each role so far.
type Assigned<'a> = BTreeMap<&'a RoleName, &'a InstanceId>;

/// How many roles each member is assigned (or its quota).
type Load<'a> = BTreeMap<&'a InstanceId, usize>;

/// Shifts roles in `assigned` (and the matching `load`) along augmenting paths: from members
/// above their quota to members below it, and — where the quotas cannot be reached because
/// the members campaign for different roles — from a member to one that holds clearly less
/// per weight (no more than it after the shift), until neither finds anything more. The second
/// kind never applies to quotas that have been reached, so without differing role sets
/// nothing changes.
pub(crate) fn reach_quotas<'a>(
    shared: &Shared<'a>,
    quota: &Load<'a>,
    weight: &BTreeMap<&'a InstanceId, u32>,
    holders: &BTreeMap<RoleName, InstanceId>,
    assigned: &mut Assigned<'a>,
    load: &mut Load<'a>,
) {
    let g = Graph {
        candidates: shared.iter().map(|(r, t)| (*r, t)).collect(),
        quota,
        weight,
        holders,
    };
    // A few rounds reach the fixed point in every case the property tests build; the bound
    // only keeps a pathological input from spinning (the result is deterministic either way).
    for _ in 0..8 {
        let towards = g.towards_quotas(assigned, load);
        let evened = g.even_out(assigned, load);
        if !towards && !evened {
            break;
        }
    }
}

/// The candidate graph and the targets.
struct Graph<'g, 'a> {
    candidates: BTreeMap<&'a RoleName, &'g Vec<&'a InstanceId>>,
    quota: &'g Load<'a>,
    weight: &'g BTreeMap<&'a InstanceId, u32>,
    holders: &'g BTreeMap<RoleName, InstanceId>,
}

impl<'a> Graph<'_, 'a> {
    fn quota_of(&self, id: &InstanceId) -> usize {
        self.quota.get(id).copied().unwrap_or(0)
    }

    fn weight_of(&self, id: &InstanceId) -> u128 {
        u128::from(self.weight.get(id).copied().unwrap_or(1).max(1))
    }

    /// Moves excess over quotas to members below quota; whether anything moved.
    fn towards_quotas(&self, assigned: &mut Assigned<'a>, load: &mut Load<'a>) -> bool {
        let mut moved = false;
        // Each shift lowers the excess over quotas by one.
        for _ in 0..=self.candidates.len() {
            let mut sources: Vec<(&InstanceId, usize)> = load
                .iter()
                .filter_map(|(id, l)| l.checked_sub(self.quota_of(id)).map(|e| (*id, e)))
                .filter(|(_, excess)| *excess > 0)
                .collect();
            sources.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            let loads = &*load;
            let deficit = |id: &InstanceId| loads.get(id).copied().unwrap_or(0) < self.quota_of(id);
            if !loads.keys().any(|id| deficit(id)) {
                break;
            }
            let path = sources.iter().find_map(|(source, _)| {
                path_to(source, &self.candidates, assigned, self.holders, deficit)
            });
            let Some(path) = path else { break };
            shift(&path, assigned, load);
            moved = true;
        }
        moved
    }

    /// Moves roles from members holding clearly more per weight to members holding less;
    /// whether anything moved.
    fn even_out(&self, assigned: &mut Assigned<'a>, load: &mut Load<'a>) -> bool {
        let mut moved = false;
        // Each shift lowers Σ load² / weight by at least 2 / (w_s × w_t); the cap is a safety
        // net above that bound.
        let roles = self.candidates.len() as u128 + 1;
        let max_w = load.keys().map(|id| self.weight_of(id)).max().unwrap_or(1);
        let cap = (roles * roles * max_w * max_w).min(1_000_000);
        for _ in 0..cap {
            let mut sources: Vec<(&InstanceId, u128)> = load
                .iter()
                .filter(|(_, l)| **l > 0)
                .map(|(id, l)| (*id, *l as u128))
                .collect();
            // Most loaded per weight first: l_a / w_a > l_b / w_b.
            sources.sort_by(|a, b| {
                (b.1 * self.weight_of(a.0))
                    .cmp(&(a.1 * self.weight_of(b.0)))
                    .then(a.0.cmp(b.0))
            });
            let loads = &*load;
            let path = sources.iter().find_map(|(source, l)| {
                let ws = self.weight_of(source);
                // (l_t + 1) / w_t <= (l_s - 1) / w_s
                let target = |id: &InstanceId| {
                    let lt = loads.get(id).copied().unwrap_or(0) as u128;
                    (lt + 1) * ws <= (l - 1) * self.weight_of(id)
                };
                // Balanced (the common case): no search at all.
                if !loads.keys().any(|id| target(id)) {
                    return None;
                }
                path_to(source, &self.candidates, assigned, self.holders, target)
            });
            let Some(path) = path else { break };
            shift(&path, assigned, load);
            moved = true;
        }
        moved
    }
}

/// Carries out a path: every role goes one member on, the first member has one role less
/// and the last one more.
fn shift<'a>(path: &[Step<'a>], assigned: &mut Assigned<'a>, load: &mut Load<'a>) {
    let (Some(first), Some(last)) = (path.first(), path.last()) else {
        return;
    };
    for (role, _, next) in path {
        assigned.insert(role, next);
    }
    if let Some(l) = load.get_mut(first.1) {
        *l = l.saturating_sub(1);
    }
    *load.entry(last.2).or_default() += 1;
}

/// One step of a path: `role` goes from the first member to the second.
type Step<'a> = (&'a RoleName, &'a InstanceId, &'a InstanceId);

/// Breadth-first search from `source` over "a role assigned to x that y campaigns for" to the
/// first member that is a `target`; the steps in order from `source`.
fn path_to<'a>(
    source: &'a InstanceId,
    candidates: &BTreeMap<&'a RoleName, &Vec<&'a InstanceId>>,
    assigned: &Assigned<'a>,
    holders: &BTreeMap<RoleName, InstanceId>,
    target: impl Fn(&InstanceId) -> bool,
) -> Option<Vec<Step<'a>>> {
    let mut by_member: BTreeMap<&InstanceId, Vec<&RoleName>> = BTreeMap::new();
    for (r, h) in assigned {
        if candidates.contains_key(*r) {
            by_member.entry(*h).or_default().push(*r);
        }
    }
    let mut reached: BTreeMap<&InstanceId, Option<Step<'a>>> = BTreeMap::from([(source, None)]);
    let mut queue = VecDeque::from([source]);
    while let Some(x) = queue.pop_front() {
        let mut gives = by_member.remove(x).unwrap_or_default();
        gives.sort_by_key(|r| (holders.get(*r) == Some(x), *r));
        for role in gives {
            let Some(tied) = candidates.get(role) else {
                continue;
            };
            for y in tied.iter().copied() {
                if reached.contains_key(y) {
                    continue;
                }
                reached.insert(y, Some((role, x, y)));
                if target(y) {
                    let mut steps = Vec::new();
                    let mut at = y;
                    while let Some(Some(step)) = reached.get(at) {
                        steps.push(*step);
                        at = step.1;
                    }
                    steps.reverse();
                    return Some(steps);
                }
                queue.push_back(y);
            }
        }
    }
    None
}
