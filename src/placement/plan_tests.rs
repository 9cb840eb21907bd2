//! The plan: priorities, shares, weights, draining, pinned and unavailable roles, stability
//! (property tests).

use super::*;
use crate::placement::decide::{Held, ReleaseRules, choose_release, vacancies_filled};
use proptest::prelude::*;
use std::time::Duration;

fn id(i: usize) -> InstanceId {
    InstanceId::new(format!("node-{i}")).expect("valid")
}

fn pref(i: usize, reason: PreferredReason) -> Preferred {
    Preferred {
        instance: id(i),
        reason,
    }
}

fn role(i: usize) -> RoleName {
    RoleName::new(format!("shard-{i:02}")).expect("valid")
}

fn member(i: usize, roles: usize, prio: i32) -> Candidate {
    Candidate {
        roles: (0..roles).map(|r| (role(r), prio)).collect(),
        ..Candidate::new(id(i))
    }
}

/// Roles held per member.
fn counts(holders: &BTreeMap<RoleName, InstanceId>) -> BTreeMap<InstanceId, usize> {
    let mut c = BTreeMap::new();
    for h in holders.values() {
        *c.entry(h.clone()).or_default() += 1;
    }
    c
}

fn applied(p: &Plan) -> BTreeMap<RoleName, InstanceId> {
    p.preferred
        .iter()
        .map(|(r, p)| (r.clone(), p.instance.clone()))
        .collect()
}

/// Roles whose live, eligible holder the plan replaces.
fn moves(p: &Plan, holders: &BTreeMap<RoleName, InstanceId>, live: &[Candidate]) -> usize {
    holders
        .iter()
        .filter(|(_, h)| live.iter().any(|c| &c.id == *h && c.eligible()))
        .filter(|(r, h)| p.preferred.get(*r).is_some_and(|p| &p.instance != *h))
        .count()
}

/// Fewest moves that reach spread <= 1 with equal weights: the members holding the most
/// keep up to `q + 1` (as many as there are extras), the others up to `q`.
fn minimum_moves(
    roles: usize,
    live: &[Candidate],
    holders: &BTreeMap<RoleName, InstanceId>,
) -> usize {
    let n = live.len();
    let (q, extra) = (roles / n, roles % n);
    let c = counts(holders);
    let mut held: Vec<usize> = live
        .iter()
        .map(|m| c.get(&m.id).copied().unwrap_or(0))
        .collect();
    held.sort_unstable_by(|a, b| b.cmp(a));
    held.iter()
        .enumerate()
        .map(|(i, h)| h.saturating_sub(q + usize::from(i < extra)))
        .sum()
}

fn scenario() -> impl Strategy<Value = (usize, usize, Vec<Option<usize>>, Vec<usize>)> {
    (1usize..7, 1usize..70).prop_flat_map(|(n, r)| {
        (
            Just(n),
            Just(r),
            // Current holder of each role: one of up to n + 2 instances (some gone), or none.
            proptest::collection::vec(proptest::option::of(0..n + 2), r),
            // A permutation seed for the member order.
            proptest::collection::vec(0..n, n),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn equal_weights_spread_at_most_one_with_minimum_moves(
        (n, r, held, order) in scenario()
    ) {
        let live: Vec<Candidate> = (0..n).map(|i| member(i, r, 0)).collect();
        let holders: BTreeMap<RoleName, InstanceId> = held
            .iter()
            .enumerate()
            .filter_map(|(ri, h)| h.map(|h| (role(ri), id(h))))
            .collect();
        let p = plan(&live, &holders);
        // Every role has a preferred live member.
        prop_assert_eq!(p.preferred.len(), r);
        let loads: Vec<usize> = live.iter().map(|c| p.load(&c.id)).collect();
        let (max, min) = (loads.iter().max().copied(), loads.iter().min().copied());
        prop_assert!(max.unwrap_or(0) - min.unwrap_or(0) <= 1, "loads {:?}", loads);
        prop_assert_eq!(moves(&p, &holders, &live), minimum_moves(r, &live, &holders));
        // Deterministic: member order does not matter.
        let mut shuffled = live.clone();
        for (i, j) in order.iter().enumerate() {
            shuffled.swap(i, *j);
        }
        prop_assert_eq!(&plan(&shuffled, &holders), &p);
        // Stable: the applied plan is its own plan.
        let after = applied(&p);
        let again = plan(&live, &after);
        prop_assert_eq!(moves(&again, &after, &live), 0);
    }

    /// Members campaign for different subsets of the roles (equal priority). The plan
    /// gives every role to one of its candidates, is its own plan once applied, and is
    /// balanced as far as the subsets allow: no role sits with a member holding two or
    /// more roles more than another candidate of that role.
    #[test]
    fn restricted_candidates_are_balanced_and_stable(
        subsets in proptest::collection::vec(proptest::collection::vec(any::<bool>(), 24), 2..6),
        held in proptest::collection::vec(proptest::option::of(0usize..6), 24),
    ) {
        let live: Vec<Candidate> = subsets
            .iter()
            .enumerate()
            .map(|(i, s)| Candidate {
                roles: s
                    .iter()
                    .enumerate()
                    .filter(|(_, on)| **on)
                    .map(|(r, _)| (role(r), 0))
                    .collect(),
                ..member(i, 0, 0)
            })
            .collect();
        let holders: BTreeMap<RoleName, InstanceId> = held
            .iter()
            .enumerate()
            .filter_map(|(ri, h)| {
                h.filter(|h| *h < live.len() && subsets[*h][ri])
                    .map(|h| (role(ri), id(h)))
            })
            .collect();
        let p = plan(&live, &holders);
        for (r, pref) in &p.preferred {
            let c = live.iter().find(|c| c.id == pref.instance).expect("a member");
            prop_assert!(c.roles.contains_key(r), "{} given to a non-candidate", r);
        }
        for (r, pref) in &p.preferred {
            let load = p.load(&pref.instance);
            for c in live.iter().filter(|c| c.roles.contains_key(r)) {
                prop_assert!(
                    load < p.load(&c.id) + 2,
                    "{} stays with {} ({} roles) though {} ({} roles) campaigns for it",
                    r, pref.instance, load, c.id, p.load(&c.id)
                );
            }
        }
        let after = applied(&p);
        let again = plan(&live, &after);
        prop_assert_eq!(moves(&again, &after, &live), 0);
    }

    /// Members in groups that campaign for disjoint sets of roles (so quotas computed over
    /// everyone cannot all be reached), with random subsets inside a group, weights and
    /// holders: a plan that has been carried out is its own plan.
    #[test]
    fn carried_out_plans_are_stable_when_quotas_cannot_be_reached(
        groups in proptest::collection::vec(
            (1usize..4, 1usize..12, proptest::collection::vec(any::<bool>(), 36)),
            1..4,
        ),
        weights in proptest::collection::vec(1u32..4, 12),
        held in proptest::collection::vec(proptest::option::of(0usize..12), 48),
    ) {
        let mut live: Vec<Candidate> = Vec::new();
        let mut first_role = 0;
        for (members, roles, picks) in &groups {
            for m in 0..*members {
                let i = live.len();
                let mine: BTreeMap<RoleName, i32> = (0..*roles)
                    .filter(|r| m == 0 || picks[(m * roles + r) % picks.len()])
                    .map(|r| (role(first_role + r), 0))
                    .collect();
                live.push(Candidate {
                    weight: weights[i % weights.len()],
                    roles: mine,
                    ..member(i, 0, 0)
                });
            }
            first_role += roles;
        }
        let holders: BTreeMap<RoleName, InstanceId> = held
            .iter()
            .enumerate()
            .filter_map(|(ri, h)| {
                let h = (*h)?;
                let c = live.get(h)?;
                c.roles.contains_key(&role(ri)).then(|| (role(ri), c.id.clone()))
            })
            .collect();
        let p = plan(&live, &holders);
        for (r, pref) in &p.preferred {
            let c = live.iter().find(|c| c.id == pref.instance).expect("a member");
            prop_assert!(c.roles.contains_key(r), "{} given to a non-candidate", r);
        }
        let after = applied(&p);
        let again = plan(&live, &after);
        prop_assert_eq!(moves(&again, &after, &live), 0, "plan {:?} then {:?}", p, again);
    }

    /// A member that will not take some roles (cooldown, failure) is planned exactly as if
    /// it did not campaign for them: none of them is given to it, the others absorb them
    /// in their quotas, and the carried-out plan is its own plan (no hand-over to it and
    /// back while it cools down).
    #[test]
    fn unavailable_roles_are_planned_as_roles_not_campaigned_for(
        spec in proptest::collection::vec(
            (proptest::collection::vec(any::<bool>(), 16), proptest::collection::vec(any::<bool>(), 16), 1u32..3, -1i32..2),
            1..6,
        ),
        held in proptest::collection::vec(proptest::option::of(0usize..6), 16),
        pins in proptest::collection::vec(any::<bool>(), 6),
    ) {
        let with: Vec<Candidate> = spec
            .iter()
            .enumerate()
            .map(|(i, (on, off, w, prio))| {
                let roles: BTreeMap<RoleName, i32> = on
                    .iter()
                    .enumerate()
                    .filter(|(_, on)| **on)
                    .map(|(r, _)| (role(r), if r % 3 == 0 { *prio } else { 0 }))
                    .collect();
                Candidate {
                    weight: *w,
                    unavailable: roles
                        .keys()
                        .enumerate()
                        .filter(|(k, _)| off[*k])
                        .map(|(_, r)| r.clone())
                        .collect(),
                    pinned: if pins[i] { roles.keys().take(1).cloned().collect() } else { BTreeSet::new() },
                    roles,
                    ..member(i, 0, 0)
                }
            })
            .collect();
        let without: Vec<Candidate> = with
            .iter()
            .map(|c| Candidate {
                roles: c
                    .roles
                    .iter()
                    .filter(|(r, _)| !c.unavailable.contains(*r))
                    .map(|(r, p)| (r.clone(), *p))
                    .collect(),
                unavailable: BTreeSet::new(),
                ..c.clone()
            })
            .collect();
        // A member holds a role it campaigns for (it may be the one cooling down: the
        // lease is still there until its release is seen).
        let holders: BTreeMap<RoleName, InstanceId> = held
            .iter()
            .enumerate()
            .filter_map(|(ri, h)| {
                let c = with.get((*h)?)?;
                c.roles.contains_key(&role(ri)).then(|| (role(ri), c.id.clone()))
            })
            .collect();
        let p = plan(&with, &holders);
        prop_assert_eq!(&p, &plan(&without, &holders));
        for (r, pref) in &p.preferred {
            let c = with.iter().find(|c| c.id == pref.instance).expect("a member");
            prop_assert!(!c.unavailable.contains(r), "{} given to {}, which will not take it", r, c.id);
        }
        let after = applied(&p);
        let again = plan(&with, &after);
        prop_assert_eq!(moves(&again, &after, &with), 0, "plan {:?} then {:?}", p, again);
    }

    #[test]
    fn weighted_shares_follow_weights(weights in proptest::collection::vec(1u32..5, 1..5), r in 1usize..80) {
        let live: Vec<Candidate> = weights
            .iter()
            .enumerate()
            .map(|(i, w)| Candidate { weight: *w, ..member(i, r, 0) })
            .collect();
        let p = plan(&live, &BTreeMap::new());
        let sum: u32 = weights.iter().sum();
        for (i, w) in weights.iter().enumerate() {
            let exact = r as f64 * f64::from(*w) / f64::from(sum);
            let got = p.load(&id(i)) as f64;
            // Within one role of the exact share (ties of the potential can land on 1).
            prop_assert!((got - exact).abs() <= 1.0 + 1e-9, "member {} weight {} got {} of {}", i, w, got, exact);
        }
        // Optimal: no single move lowers the potential (sum of load² / weight).
        for (a, wa) in weights.iter().enumerate() {
            for (b, wb) in weights.iter().enumerate() {
                let (la, lb) = (p.load(&id(a)) as u64, p.load(&id(b)) as u64);
                if a != b && la > 0 {
                    prop_assert!((2 * lb + 1) * u64::from(*wa) >= (2 * la - 1) * u64::from(*wb));
                }
            }
        }
    }

    /// Members in three zones (1 to 3 members each), random holders: zones hold at most
    /// ⌈R/3⌉ roles each (+1 allowed by the issue; the potential gives at most ⌈R/3⌉), the
    /// carried-out plan is its own plan, and losing a zone moves only that zone's roles.
    #[test]
    fn zones_spread_first_and_losing_one_moves_only_its_roles(
        sizes in proptest::collection::vec(1usize..4, 3),
        r in 1usize..60,
        held in proptest::collection::vec(proptest::option::of(0usize..9), 60),
        lost in 0usize..3,
    ) {
        let mut live: Vec<Candidate> = Vec::new();
        for (z, n) in sizes.iter().enumerate() {
            for _ in 0..*n {
                let i = live.len();
                live.push(Candidate { zone: Some(format!("zone-{z}")), ..member(i, r, 0) });
            }
        }
        let holders: BTreeMap<RoleName, InstanceId> = (0..r)
            .filter_map(|ri| held[ri].filter(|h| *h < live.len()).map(|h| (role(ri), id(h))))
            .collect();
        let p = plan(&live, &holders);
        prop_assert_eq!(p.preferred.len(), r);
        let zone_of = |i: &InstanceId| live.iter().find(|c| &c.id == i).and_then(|c| c.zone.clone());
        let mut per_zone: BTreeMap<Option<String>, usize> = BTreeMap::new();
        for pref in p.preferred.values() {
            *per_zone.entry(zone_of(&pref.instance)).or_default() += 1;
        }
        for (z, n) in &per_zone {
            prop_assert!(*n <= r.div_ceil(3), "zone {:?} holds {} of {}", z, n, r);
        }
        let after = applied(&p);
        prop_assert_eq!(moves(&plan(&live, &after), &after, &live), 0);
        // A zone is lost: only its roles move.
        let lost_zone = format!("zone-{lost}");
        let rest: Vec<Candidate> = live.iter().filter(|c| c.zone.as_deref() != Some(&lost_zone)).cloned().collect();
        let q = plan(&rest, &after);
        prop_assert_eq!(moves(&q, &after, &rest), 0, "roles of the other zones moved");
        prop_assert_eq!(q.preferred.len(), r);
    }

    /// Capacities (`max_roles`) that can hold every role: nobody is planned over its limit,
    /// whatever it holds now; the carried-out plan is its own plan.
    #[test]
    fn capacity_is_never_exceeded_when_the_roles_fit(
        caps in proptest::collection::vec(1u32..10, 2..6),
        held in proptest::collection::vec(proptest::option::of(0usize..6), 40),
        costly in any::<bool>(),
    ) {
        let total: u32 = caps.iter().sum();
        let r = (total as usize).min(40);
        let live: Vec<Candidate> = caps
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut m = member(i, r, 0);
                if costly { m.capacity = Some(*c) } else { m.max_roles = Some(*c) }
                m
            })
            .collect();
        let holders: BTreeMap<RoleName, InstanceId> = (0..r)
            .filter_map(|ri| held[ri].filter(|h| *h < live.len()).map(|h| (role(ri), id(h))))
            .collect();
        let p = plan(&live, &holders);
        prop_assert_eq!(p.preferred.len(), r, "every role fits somewhere");
        for (i, c) in caps.iter().enumerate() {
            prop_assert!(p.load(&id(i)) <= *c as usize, "node-{} planned {} over {}", i, p.load(&id(i)), c);
        }
        let after = applied(&p);
        prop_assert_eq!(moves(&plan(&live, &after), &after, &live), 0);
    }

    /// Roles of different costs: the units per member differ by at most the largest cost,
    /// and the carried-out plan is its own plan.
    #[test]
    fn role_costs_are_balanced_in_units(
        n in 2usize..5,
        costs in proptest::collection::vec(1u32..5, 1..30),
        held in proptest::collection::vec(proptest::option::of(0usize..5), 30),
    ) {
        let r = costs.len();
        let live: Vec<Candidate> = (0..n)
            .map(|i| Candidate {
                costs: (0..r).filter(|ri| costs[*ri] != 1).map(|ri| (role(ri), costs[ri])).collect(),
                ..member(i, r, 0)
            })
            .collect();
        let holders: BTreeMap<RoleName, InstanceId> = (0..r)
            .filter_map(|ri| held[ri].filter(|h| *h < n).map(|h| (role(ri), id(h))))
            .collect();
        let p = plan(&live, &holders);
        let units: Vec<usize> = (0..n).map(|i| p.quota.get(&id(i)).copied().unwrap_or(0)).collect();
        let max_cost = costs.iter().max().copied().unwrap_or(1) as usize;
        let (hi, lo) = (units.iter().max().copied().unwrap_or(0), units.iter().min().copied().unwrap_or(0));
        prop_assert!(hi - lo <= max_cost, "units {:?}, largest cost {}", units, max_cost);
        let after = applied(&p);
        prop_assert_eq!(moves(&plan(&live, &after), &after, &live), 0);
    }

    /// A rolling upgrade: no role held by a live member moves onto a member older than the
    /// newest live version.
    #[test]
    fn roles_never_move_onto_an_older_version(
        versions in proptest::collection::vec(1u64..4, 2..7),
        r in 1usize..40,
        held in proptest::collection::vec(proptest::option::of(0usize..7), 40),
    ) {
        let live: Vec<Candidate> = versions
            .iter()
            .enumerate()
            .map(|(i, v)| Candidate {
                version: Some(crate::placement::Version::parse(&format!("1.{v}.0")).expect("valid")),
                ..member(i, r, 0)
            })
            .collect();
        let newest = versions.iter().max().copied().unwrap_or(0);
        let holders: BTreeMap<RoleName, InstanceId> = (0..r)
            .filter_map(|ri| held[ri].filter(|h| *h < live.len()).map(|h| (role(ri), id(h))))
            .collect();
        let p = plan(&live, &holders);
        prop_assert_eq!(p.preferred.len(), r);
        for (ro, pref) in &p.preferred {
            if holders.get(ro) != Some(&pref.instance) {
                let i = live.iter().position(|c| c.id == pref.instance).expect("a member");
                prop_assert_eq!(versions[i], newest, "{} moved onto {} (1.{}.0)", ro, pref.instance, versions[i]);
            }
        }
        let after = applied(&p);
        prop_assert_eq!(moves(&plan(&live, &after), &after, &live), 0);
    }

    #[test]
    fn priority_dominates_and_draining_gets_nothing(
        prios in proptest::collection::vec(proptest::collection::vec(-2i32..3, 12), 2..6),
        draining in proptest::collection::vec(any::<bool>(), 6),
        unhealthy in proptest::collection::vec(any::<bool>(), 6),
        held in proptest::collection::vec(proptest::option::of(0usize..6), 12),
    ) {
        let live: Vec<Candidate> = prios
            .iter()
            .enumerate()
            .map(|(i, ps)| Candidate {
                draining: draining[i],
                healthy: !unhealthy[i],
                roles: ps.iter().enumerate().map(|(r, p)| (role(r), *p)).collect(),
                ..Candidate::new(id(i))
            })
            .collect();
        let holders: BTreeMap<RoleName, InstanceId> = held
            .iter()
            .enumerate()
            .filter_map(|(ri, h)| h.filter(|h| *h < live.len()).map(|h| (role(ri), id(h))))
            .collect();
        let p = plan(&live, &holders);
        for (ri, _) in prios[0].iter().enumerate() {
            let eligible: Vec<&Candidate> = live.iter().filter(|c| c.eligible()).collect();
            let best = eligible.iter().map(|c| c.roles[&role(ri)]).max();
            match (p.preferred.get(&role(ri)), best) {
                (None, None) => {}
                (Some(pref), Some(best)) => {
                    let c = live.iter().find(|c| c.id == pref.instance).expect("a member");
                    prop_assert!(c.eligible(), "{:?} is draining or unhealthy", pref);
                    prop_assert_eq!(c.roles[&role(ri)], best);
                }
                (pref, best) => prop_assert!(false, "preferred {:?} but best {:?}", pref, best),
            }
        }
    }
}

#[test]
fn higher_priority_member_gets_exactly_its_roles() {
    let mut live: Vec<Candidate> = (0..3).map(|i| member(i, 10, 0)).collect();
    let base = plan(&live, &BTreeMap::new());
    let holders = applied(&base);
    // node-3 prefers roles 0..4 (priority 5) and campaigns for the rest at 0.
    let mut p3 = member(3, 10, 0);
    for r in 0..4 {
        p3.roles.insert(role(r), 5);
    }
    live.push(p3);
    let p = plan(&live, &holders);
    for r in 0..4 {
        assert_eq!(p.preferred[&role(r)].instance, id(3));
        assert_eq!(p.preferred[&role(r)].reason, PreferredReason::Priority);
    }
    assert_eq!(p.load(&id(3)), 4);
}

/// The scenario of `tests/placement_processes.rs`: 12 roles on 3 members, 4 each; node-3
/// joins campaigning only for one role of each member, at a higher priority, and one of
/// them is pinned. Only its two movable roles move, in every state the hand-overs pass
/// through: a member that can hold only a few roles must not leave an unusable share
/// that makes the others trade roles among themselves. Which roles are wanted and which
/// is pinned decides the rendezvous tie-breaks, so every combination is tried (the CI run
/// that found the defect differed from a fixed choice only in the role names).
#[test]
fn a_member_campaigning_for_few_roles_moves_only_those() {
    let base: Vec<Candidate> = (0..3).map(|i| member(i, 12, 0)).collect();
    let start = applied(&plan(&base, &BTreeMap::new()));
    let held_by = |m: usize| -> Vec<RoleName> {
        start
            .iter()
            .filter(|(_, i)| **i == id(m))
            .map(|(r, _)| r.clone())
            .collect()
    };
    let held: Vec<Vec<RoleName>> = (0..3).map(held_by).collect();
    assert!(held.iter().all(|h| h.len() == 4), "{held:?}");
    for choice in 0..64 {
        for pinned_member in 0..3 {
            let wanted: Vec<RoleName> = (0..3)
                .map(|m| held[m][(choice >> (2 * m)) & 3].clone())
                .collect();
            let mut live = base.clone();
            live[pinned_member].pinned = [wanted[pinned_member].clone()].into();
            let mut p3 = member(3, 0, 0);
            p3.roles = wanted.iter().map(|r| (r.clone(), 10)).collect();
            live.push(p3);
            let movable: Vec<RoleName> = (0..3)
                .filter(|m| *m != pinned_member)
                .map(|m| wanted[m].clone())
                .collect();
            let case = format!("wanted {wanted:?}, pinned on node-{pinned_member}");
            let mut holders = start.clone();
            for step in 0..=movable.len() {
                let p = plan(&live, &holders);
                let moving: Vec<&RoleName> = holders
                    .iter()
                    .filter(|(r, h)| p.preferred.get(*r).is_some_and(|p| &p.instance != *h))
                    .map(|(r, _)| r)
                    .collect();
                let mut expected: Vec<&RoleName> = movable[step..].iter().collect();
                expected.sort();
                assert_eq!(moving, expected, "{case}: after {step} hand-overs");
                // A hand-over in flight (released, not yet acquired) moves nothing else.
                if let Some(r) = movable.get(step) {
                    let mut vacant = holders.clone();
                    vacant.remove(r);
                    let p = plan(&live, &vacant);
                    let still_to_move = &movable[step + 1..];
                    let moved: Vec<&RoleName> = vacant
                        .iter()
                        .filter(|(r, h)| {
                            !still_to_move.contains(r)
                                && p.preferred.get(*r).is_some_and(|p| &p.instance != *h)
                        })
                        .map(|(r, _)| r)
                        .collect();
                    assert!(
                        moved.is_empty(),
                        "{case}: the vacancy of {r} moves {moved:?}"
                    );
                    assert_eq!(
                        p.preferred.get(r).map(|p| &p.instance),
                        Some(&id(3)),
                        "{case}: the vacancy of {r} goes to node-3"
                    );
                    holders.insert(r.clone(), id(3));
                    // Releases are decided on the vacancy filled by its target: the state
                    // right after the hand-over.
                    assert_eq!(
                        vacancies_filled(&vacant, &p, None, |_| true, |_| true),
                        holders,
                        "{case}: the vacancy of {r} filled"
                    );
                }
            }
        }
    }
}

/// The defect of the issue: a member that released its priority role with a cooldown was
/// still preferred for it, so the role came back to it (hold-back, vacancy, released again)
/// for the whole cooldown. Now the role goes to the others, who absorb it in their shares,
/// and nothing moves until the cooldown ends; then the role returns by priority.
#[test]
fn a_member_cooling_down_a_role_is_not_handed_it_and_gets_it_back_after() {
    let mut live: Vec<Candidate> = (0..3).map(|i| member(i, 9, 0)).collect();
    live[0].roles.insert(role(0), 5);
    let settled = applied(&plan(&live, &BTreeMap::new()));
    assert_eq!(settled[&role(0)], id(0));
    assert_eq!(
        plan(&live, &settled).preferred[&role(0)].reason,
        PreferredReason::Priority
    );
    // node-0 releases role 0 with a cooldown: its record lists the role as unavailable.
    live[0].unavailable = [role(0)].into();
    let mut vacant = settled.clone();
    vacant.remove(&role(0));
    let p = plan(&live, &vacant);
    let to = p.preferred[&role(0)].instance.clone();
    assert_ne!(to, id(0), "the vacancy goes to a member that takes it");
    // Whoever takes it, the plan is stable for the whole cooldown and spread <= 1.
    for taker in [id(1), id(2)] {
        let mut h = vacant.clone();
        h.insert(role(0), taker.clone());
        let mut h = applied(&plan(&live, &h));
        let p = plan(&live, &h);
        assert_eq!(moves(&p, &h, &live), 0, "taken by {taker}: {p:?}");
        assert_ne!(h[&role(0)], id(0));
        let loads: Vec<usize> = (0..3).map(|i| p.load(&id(i))).collect();
        assert!(loads.iter().max().unwrap_or(&0) - loads.iter().min().unwrap_or(&0) <= 1);
        // The cooldown ends: role 0 goes back to node-0 by priority.
        live[0].unavailable.clear();
        let p = plan(&live, &h);
        assert_eq!(p.preferred[&role(0)], pref(0, PreferredReason::Priority));
        h = applied(&p);
        assert_eq!(moves(&plan(&live, &h), &h, &live), 0);
        live[0].unavailable = [role(0)].into();
    }
    // A role only an unavailable member campaigns for has no preferred holder: nobody
    // holds back for it and it blocks nothing.
    let mut solo = member(3, 0, 0);
    solo.roles.insert(role(20), 0);
    solo.unavailable = [role(20)].into();
    live.push(solo);
    assert!(!plan(&live, &settled).preferred.contains_key(&role(20)));
}

/// The second defect of the issue: one vacant role stopped every spreading move for as
/// long as it stayed vacant. Releases are now decided on the plan with the stuck vacancies
/// filled by their targets, and only hand-overs in flight hold spreading back: a member
/// that joins gets its share while another role stays vacant, and nothing moved on that
/// plan moves back if the target takes the role after all.
#[test]
fn a_stuck_vacancy_delays_no_move_of_another_role() {
    let mut live: Vec<Candidate> = (0..3).map(|i| member(i, 12, 0)).collect();
    let settled = applied(&plan(&live, &BTreeMap::new()));
    live.push(member(3, 12, 0));
    // One role of node-0 is vacant (a hand-over in flight, or its target fails to take it).
    let vacant_role = settled
        .iter()
        .find(|(_, h)| **h == id(0))
        .map(|(r, _)| r.clone())
        .expect("node-0 holds roles");
    let mut holders = settled.clone();
    holders.remove(&vacant_role);
    let p = plan(&live, &holders);
    let target = p.preferred[&vacant_role].instance.clone();
    let filled = vacancies_filled(&holders, &p, None, |_| true, |_| true);
    assert_eq!(filled.get(&vacant_role), Some(&target));
    let fp = plan(&live, &filled);
    let rules = ReleaseRules {
        hysteresis: 0,
        cooldown: Duration::from_secs(30),
        // The vacancy is stuck: no hand-over is in flight.
        spread_settled: true,
    };
    let now = tokio::time::Instant::now();
    let mut releases = 0;
    for m in 0..3 {
        let mine: Vec<RoleName> = holders
            .iter()
            .filter(|(_, h)| **h == id(m))
            .map(|(r, _)| r.clone())
            .collect();
        let held: Vec<Held<'_>> = mine
            .iter()
            .map(|r| Held {
                role: r,
                voluntary: true,
                moved_at: None,
            })
            .collect();
        if let Some((r, to)) = choose_release(&id(m), &held, &fp, |_| true, rules, now) {
            assert_ne!(r, &vacant_role);
            assert_eq!(to.instance, id(3), "{r} moves to the member that joined");
            assert_eq!(fp.preferred[r].instance, id(3));
            releases += 1;
        }
    }
    assert!(
        releases > 0,
        "the vacancy of {vacant_role} stopped all spreading"
    );
    // The filled plan is the plan once the target took the role: nothing moved on it is
    // moved back.
    let mut taken = holders.clone();
    taken.insert(vacant_role.clone(), target);
    assert_eq!(plan(&live, &taken), fp);
}

#[test]
fn a_pinned_role_stays_with_its_holder_and_counts_in_its_share() {
    let mut live: Vec<Candidate> = (0..3).map(|i| member(i, 9, 0)).collect();
    // node-0 holds 5 roles, two of them pinned; node-3 prefers role 0 by priority.
    live[0].pinned = [role(0), role(1)].into();
    let mut p3 = member(3, 9, 0);
    p3.roles.insert(role(0), 9);
    live.push(p3);
    let holders: BTreeMap<RoleName, InstanceId> = (0..5).map(|r| (role(r), id(0))).collect();
    let p = plan(&live, &holders);
    for r in 0..2 {
        assert_eq!(p.preferred[&role(r)], pref(0, PreferredReason::Pinned));
    }
    let loads: Vec<usize> = (0..4).map(|i| p.load(&id(i))).collect();
    assert!(
        loads.iter().max().unwrap_or(&0) - loads.iter().min().unwrap_or(&0) <= 1,
        "{loads:?}"
    );
    // Draining ends the pin: the role goes to its priority member.
    live[0].draining = true;
    let p = plan(&live, &holders);
    assert_eq!(p.preferred[&role(0)].instance, id(3));
}

#[test]
fn draining_holder_is_the_reason() {
    let mut live: Vec<Candidate> = (0..2).map(|i| member(i, 1, 0)).collect();
    live[0].draining = true;
    let holders = BTreeMap::from([(role(0), id(0))]);
    let p = plan(&live, &holders);
    assert_eq!(p.preferred[&role(0)], pref(1, PreferredReason::Draining));
    let p = plan(&live, &BTreeMap::new());
    assert_eq!(p.preferred[&role(0)].reason, PreferredReason::OnlyCandidate);
    live.push(member(2, 1, 0));
    let p = plan(&live, &holders);
    assert_eq!(p.preferred[&role(0)].reason, PreferredReason::Draining);
}

/// A plan of 1,000 roles over 10 members in three zones: carried out, it is its own plan (no
/// move); with one member gone, every role still has a preferred holder and none is planned on
/// the gone member. It prints how long each plan took (a figure, not a check; 20–30 ms in a
/// debug build): `cargo test --release --lib plan_cost -- --nocapture`.
#[test]
fn plan_cost() {
    let r = 1000;
    let live: Vec<Candidate> = (0..10)
        .map(|i| Candidate {
            zone: Some(format!("z{}", i % 3)),
            ..member(i, r, 0)
        })
        .collect();
    let roles: Vec<RoleName> = (0..r)
        .map(|i| RoleName::new(format!("shard-{i:04}")).expect("valid"))
        .collect();
    let live: Vec<Candidate> = live
        .into_iter()
        .map(|c| Candidate {
            roles: roles.iter().map(|r| (r.clone(), 0)).collect(),
            ..c
        })
        .collect();
    let t = std::time::Instant::now();
    let p = plan(&live, &BTreeMap::new());
    let first = t.elapsed();
    let after = applied(&p);
    let t = std::time::Instant::now();
    let again = plan(&live, &after);
    let steady = t.elapsed();
    // One member gone: its roles spread over the others.
    let rest: Vec<Candidate> = live[1..].to_vec();
    let t = std::time::Instant::now();
    let without = plan(&rest, &after);
    let lost = t.elapsed();
    assert_eq!(without.preferred.len(), roles.len());
    assert!(
        without.preferred.values().all(|p| p.instance != live[0].id),
        "a role planned on the member that is gone"
    );
    // Every role held by one member (the first instance to start took them all): the plan
    // moves 900 and more of them, one improvement at a time (issue 27: this took ~100 ms a plan while
    // the sort of each member's roles hashed every role at every comparison).
    let one: BTreeMap<RoleName, InstanceId> = roles
        .iter()
        .map(|r| (r.clone(), live[0].id.clone()))
        .collect();
    let t = std::time::Instant::now();
    let spread = plan(&live, &one);
    let from_one = t.elapsed();
    // 900 to even the counts, a few more to even the zones (4, 3 and 3 members).
    let moved = moves(&spread, &one, &live);
    assert!((900..=934).contains(&moved), "{moved} moves");
    println!(
        "plan 1000 roles x 10 members: from nothing {first:?}, carried out {steady:?}, one member lost {lost:?}, all held by one {from_one:?}"
    );
    assert_eq!(moves(&again, &after, &live), 0);
}

/// A member that comes back gets back exactly the roles parked for it while it was away
/// (each role moves out and back, nothing else moves), even when other roles would balance
/// the loads as well.
#[test]
fn a_returning_member_gets_its_parked_roles_back() {
    let n = 4;
    let r = 12;
    let live: Vec<Candidate> = (0..n).map(|i| member(i, r, 0)).collect();
    let first = plan(&live, &BTreeMap::new());
    let before = applied(&first);
    // node-3 leaves: its roles go to the others, which park them for node-3.
    let rest: Vec<Candidate> = live[..3].to_vec();
    let away = applied(&plan(&rest, &before));
    let mine: BTreeSet<&RoleName> = before
        .iter()
        .filter(|(_, h)| **h == id(3))
        .map(|(r, _)| r)
        .collect();
    let mut parked_rest = rest.clone();
    for c in &mut parked_rest {
        c.parked = away
            .iter()
            .filter(|(r, h)| **h == c.id && mine.contains(r))
            .map(|(r, _)| (r.clone(), id(3)))
            .collect();
    }
    // node-3 is back.
    let mut back = parked_rest.clone();
    back.push(member(3, r, 0));
    let p = plan(&back, &away);
    let moved: BTreeSet<&RoleName> = p
        .preferred
        .iter()
        .filter(|(role, pref)| away.get(*role) != Some(&pref.instance))
        .map(|(role, _)| role)
        .collect();
    assert_eq!(moved, mine, "exactly node-3's parked roles move back");
    assert!(
        moved
            .iter()
            .all(|role| p.preferred[*role].instance == id(3))
    );
}
