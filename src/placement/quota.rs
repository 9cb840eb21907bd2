//! Weighted fair-share quotas with per-member bounds ("water-filling").
//!
//! Every member gets `λ × weight` roles for one common level `λ`, clamped to what it must
//! hold (`lower`: roles fixed to it by pin, priority or sole candidacy) and to what it can
//! hold at all (`upper`: those plus every tied role it campaigns for). `λ` is chosen so the
//! quotas add up to the number of roles. A member that cannot take its plain share (it
//! campaigns for few roles) leaves the rest to the others instead of leaving a gap that the
//! plan would have to fill by moving roles around; a member with many fixed roles lowers
//! everyone else's share.
//!
//! The fractional shares of the free members are rounded by largest remainder, then towards
//! the members already holding more than their floor (fewest moves), then by id, so with no
//! bound in play the quotas are exactly `floor(R × w / W)` plus one for the largest
//! remainders. Arithmetic is exact
//! (integers, cross-multiplied), so every instance computes the same quotas.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::names::InstanceId;

/// One member's input to the quota computation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds<'a> {
    /// Instance id (the final tie-break).
    pub id: &'a InstanceId,
    /// Capacity weight, >= 1.
    pub weight: u32,
    /// Roles it must hold.
    pub lower: usize,
    /// Roles it can hold at most (>= `lower`).
    pub upper: usize,
    /// Roles it holds now and can keep (fixed to it or tied for it); tie-break: fewest moves,
    /// stable once carried out.
    pub held: usize,
}

/// A non-negative rational `num / den` (den > 0).
#[derive(Debug, Clone, Copy)]
struct Ratio {
    num: u128,
    den: u128,
}

impl Ratio {
    fn cmp(self, other: Ratio) -> Ordering {
        (self.num * other.den).cmp(&(other.num * self.den))
    }
}

/// Where `λ` lies relative to a member's breakpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    AtLower,
    Free,
    AtUpper,
}

/// `(lower / w, upper / w)` of a member.
fn breakpoints(m: &Bounds<'_>) -> (Ratio, Ratio) {
    let w = u128::from(m.weight.max(1));
    (
        Ratio {
            num: m.lower as u128,
            den: w,
        },
        Ratio {
            num: m.upper.max(m.lower) as u128,
            den: w,
        },
    )
}

/// `Σ clamp(λ × w, lower, upper) ≥ total`, exactly.
fn reaches(members: &[Bounds<'_>], lambda: Ratio, total: usize) -> bool {
    // Scaled by λ's denominator.
    let mut sum: u128 = 0;
    for m in members {
        let w = u128::from(m.weight.max(1));
        let share = lambda.num * w;
        let lo = m.lower as u128 * lambda.den;
        let hi = m.upper.max(m.lower) as u128 * lambda.den;
        sum += share.clamp(lo, hi);
    }
    sum >= total as u128 * lambda.den
}

/// Quotas that add up to `total` when `Σ lower ≤ total ≤ Σ upper` (otherwise every member is
/// at the bound that is closer: all `lower` or all `upper`).
pub(crate) fn quotas<'a>(members: &[Bounds<'a>], total: usize) -> BTreeMap<&'a InstanceId, usize> {
    let lower_sum: usize = members.iter().map(|m| m.lower).sum();
    let upper_sum: usize = members.iter().map(|m| m.upper.max(m.lower)).sum();
    if members.is_empty() || total <= lower_sum {
        return members.iter().map(|m| (m.id, m.lower)).collect();
    }
    if total >= upper_sum {
        return members
            .iter()
            .map(|m| (m.id, m.upper.max(m.lower)))
            .collect();
    }
    // The smallest breakpoint at which the clamped shares reach `total`; `λ` lies between the
    // breakpoint before it (exclusive) and it (inclusive), where the shares are linear in `λ`.
    let mut points: Vec<Ratio> = members
        .iter()
        .flat_map(|m| {
            let (lo, hi) = breakpoints(m);
            [lo, hi]
        })
        .chain(std::iter::once(Ratio { num: 0, den: 1 }))
        .collect();
    points.sort_by(|a, b| a.cmp(*b));
    points.dedup_by(|a, b| a.cmp(*b) == Ordering::Equal);
    let hi_at = points
        .iter()
        .position(|p| reaches(members, *p, total))
        .unwrap_or(points.len() - 1);
    let lo_at = hi_at.saturating_sub(1);
    let (below, above) = (points[lo_at], points[hi_at]);

    let side = |m: &Bounds<'_>| {
        let (lo, hi) = breakpoints(m);
        if hi.cmp(below) != Ordering::Greater {
            Side::AtUpper
        } else if lo.cmp(above) != Ordering::Less {
            Side::AtLower
        } else {
            Side::Free
        }
    };
    let mut out: BTreeMap<&InstanceId, usize> = BTreeMap::new();
    let mut residual = total as u128;
    let mut free: Vec<&Bounds<'_>> = Vec::new();
    for m in members {
        let q = match side(m) {
            Side::AtLower => m.lower,
            Side::AtUpper => m.upper.max(m.lower),
            Side::Free => {
                free.push(m);
                continue;
            }
        };
        residual = residual.saturating_sub(q as u128);
        out.insert(m.id, q);
    }
    let weight_sum: u128 = free.iter().map(|m| u128::from(m.weight.max(1))).sum();
    if weight_sum == 0 {
        return out;
    }
    // Free members: residual × w / W, floors first, then one each by largest remainder.
    let mut given: u128 = 0;
    // Ties between equal remainders go to the members that already hold more than their
    // floor (giving them the extra saves a move, and once a plan has been carried out they
    // are exactly the members that got the extras), then by id.
    let mut rest: Vec<(u128, bool, &InstanceId)> = Vec::new();
    for m in &free {
        let share = residual * u128::from(m.weight.max(1));
        let floor = share / weight_sum;
        given += floor;
        let floor = usize::try_from(floor).unwrap_or(usize::MAX);
        out.insert(m.id, floor);
        rest.push((share % weight_sum, m.held > floor, m.id));
    }
    rest.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(b.2)));
    let extras = usize::try_from(residual.saturating_sub(given)).unwrap_or(usize::MAX);
    for (_, _, id) in rest.into_iter().take(extras) {
        if let Some(q) = out.get_mut(id) {
            *q += 1;
        }
    }
    out
}

/// [`quotas`] per group of members connected by shared roles: roles can only go to their
/// candidates, so members that share no role (directly or through others) cannot even each
/// other out, and a quota computed over everyone could not be reached (a plan chasing it
/// would differ from plan to plan). `shared` lists the candidates of every role that is not
/// fixed; each group's total is its members' fixed roles plus its shared roles.
pub(crate) fn quotas_by_group<'a>(
    members: &[Bounds<'a>],
    shared: &[&[&InstanceId]],
) -> BTreeMap<&'a InstanceId, usize> {
    // Union-find over member indices.
    let index: BTreeMap<&InstanceId, usize> =
        members.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
    let mut parent: Vec<usize> = (0..members.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut shared_roots: Vec<usize> = Vec::new();
    for tied in shared {
        let mut ids = tied.iter().filter_map(|id| index.get(*id).copied());
        let Some(first) = ids.next() else {
            continue;
        };
        for other in ids {
            let (a, b) = (root(&mut parent, first), root(&mut parent, other));
            if a != b {
                parent[a.max(b)] = a.min(b);
            }
        }
        shared_roots.push(first);
    }
    let mut groups: BTreeMap<usize, (Vec<Bounds<'a>>, usize)> = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        let g = groups.entry(root(&mut parent, i)).or_default();
        g.0.push(*m);
        g.1 += m.lower;
    }
    for first in shared_roots {
        if let Some(g) = groups.get_mut(&root(&mut parent, first)) {
            g.1 += 1;
        }
    }
    groups
        .into_values()
        .flat_map(|(group, total)| quotas(&group, total))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ids(n: usize) -> Vec<InstanceId> {
        (0..n)
            .map(|i| InstanceId::new(format!("node-{i}")).expect("valid"))
            .collect()
    }

    #[test]
    fn without_bounds_it_is_largest_remainder() {
        let ids = ids(3);
        let m: Vec<Bounds<'_>> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| Bounds {
                id,
                weight: 1,
                lower: 0,
                upper: 100,
                held: 3 + i / 2,
            })
            .collect();
        let q = quotas(&m, 10);
        // 3 each, the extra to the member holding most now.
        assert_eq!(q.values().copied().collect::<Vec<_>>(), vec![3, 3, 4]);
    }

    #[test]
    fn a_member_that_can_take_little_leaves_the_rest_to_the_others() {
        // 12 roles, 4 members: node-3 can hold only its 2 priority roles, node-0 has 1 pinned.
        let ids = ids(4);
        let b = |i: usize, lower, upper, held| Bounds {
            id: &ids[i],
            weight: 1,
            lower,
            upper,
            held,
        };
        let m = [b(0, 1, 10, 4), b(1, 0, 9, 3), b(2, 0, 9, 3), b(3, 2, 2, 2)];
        let q = quotas(&m, 12);
        assert_eq!(q[&ids[3]], 2);
        assert_eq!(q[&ids[0]], 4, "{q:?}");
        assert_eq!(q[&ids[1]] + q[&ids[2]], 6);
    }

    #[test]
    fn a_member_with_many_fixed_roles_lowers_the_others_share() {
        // 12 roles: node-0 must hold 5; node-1 can hold none beyond 0; node-2 gets the rest.
        let ids = ids(3);
        let m = [
            Bounds {
                id: &ids[0],
                weight: 1,
                lower: 5,
                upper: 12,
                held: 0,
            },
            Bounds {
                id: &ids[1],
                weight: 1,
                lower: 0,
                upper: 0,
                held: 0,
            },
            Bounds {
                id: &ids[2],
                weight: 1,
                lower: 0,
                upper: 12,
                held: 0,
            },
        ];
        let q = quotas(&m, 12);
        assert_eq!((q[&ids[0]], q[&ids[1]], q[&ids[2]]), (6, 0, 6));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Quotas add up, respect the bounds, follow the weights within one role among free
        /// members, and are water-filled: a member below its upper bound never has a smaller
        /// per-weight share (minus rounding) than a member above its lower bound.
        #[test]
        fn quotas_are_bounded_water_filling(
            spec in proptest::collection::vec((1u32..4, 0usize..6, 0usize..20, 0usize..10), 1..7),
            total_seed in 0usize..200,
        ) {
            let ids = ids(spec.len());
            let m: Vec<Bounds<'_>> = spec
                .iter()
                .zip(&ids)
                .map(|((w, lo, extra, held), id)| Bounds {
                    id,
                    weight: *w,
                    lower: *lo,
                    upper: lo + extra,
                    held: *held,
                })
                .collect();
            let lo_sum: usize = m.iter().map(|b| b.lower).sum();
            let hi_sum: usize = m.iter().map(|b| b.upper).sum();
            let total = lo_sum + total_seed % (hi_sum - lo_sum + 1);
            let q = quotas(&m, total);
            prop_assert_eq!(q.values().sum::<usize>(), total);
            for b in &m {
                let qi = q[b.id];
                prop_assert!(b.lower <= qi && qi <= b.upper, "{:?} got {}", b, qi);
            }
            for a in &m {
                for b in &m {
                    let (qa, qb) = (q[a.id] as f64, q[b.id] as f64);
                    let (wa, wb) = (f64::from(a.weight), f64::from(b.weight));
                    // a could take more and b could give: then a's share is not (clearly)
                    // below b's.
                    if q[a.id] < a.upper && q[b.id] > b.lower {
                        prop_assert!(
                            (qa + 1.0) / wa >= (qb - 1.0) / wb - 1e-9,
                            "{:?}: {} vs {:?}: {}", a, qa, b, qb
                        );
                    }
                }
            }
        }
    }
}
