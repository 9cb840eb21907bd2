//! The slots of one role (protocol Q15) in the plan: never two on one member, whatever the
//! loads, priorities, holders and parked roles say (property tests).

use super::*;
use proptest::prelude::*;

fn id(i: usize) -> InstanceId {
    InstanceId::new(format!("node-{i}")).expect("valid")
}

fn name(n: &str) -> RoleName {
    RoleName::from_key_name(n).expect("valid")
}

/// Roles `plain-0 … plain-<plain-1>` and the slots `idx.0 … idx.<slots-1>` and
/// `jobs.0 … jobs.<slots-1>`.
fn roles(plain: usize, slots: usize) -> Vec<RoleName> {
    let mut all: Vec<RoleName> = (0..plain).map(|i| name(&format!("plain-{i}"))).collect();
    for base in ["idx", "jobs"] {
        all.extend((0..slots).map(|k| name(&format!("{base}.{k}"))));
    }
    all
}

/// Members planned two slots of one role.
fn doubled(p: &Plan) -> Vec<(InstanceId, RoleName)> {
    let mut seen: BTreeMap<(InstanceId, RoleName), usize> = BTreeMap::new();
    for (role, pref) in &p.preferred {
        if role.slot().is_some() {
            *seen
                .entry((pref.instance.clone(), role.base_role()))
                .or_default() += 1;
        }
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(k, _)| k)
        .collect()
}

proptest! {
    /// Members campaign for plain roles and the slots of two roles, some with a higher
    /// priority for the slots, holding any roles now (two slots of one role at one member
    /// included, as a foreign write could leave it), some with parked roles: no plan gives a
    /// member two slots of one role, every slot is planned while there are as many members
    /// as slots, and a carried-out plan is its own plan.
    #[test]
    fn no_member_is_planned_two_slots_of_one_role(
        members in 2usize..6,
        plain in 0usize..20,
        slots in 2usize..6,
        priority in proptest::collection::vec(0i32..2, 6),
        held in proptest::collection::vec(proptest::option::of(0usize..6), 40),
        parked in proptest::collection::vec(proptest::option::of(0usize..6), 40),
    ) {
        let all = roles(plain, slots);
        let live: Vec<Candidate> = (0..members)
            .map(|i| Candidate {
                roles: all
                    .iter()
                    .map(|r| (r.clone(), if r.slot().is_some() { priority[i] } else { 0 }))
                    .collect(),
                ..Candidate::new(id(i))
            })
            .collect();
        let holders: BTreeMap<RoleName, InstanceId> = all
            .iter()
            .zip(&held)
            .filter_map(|(r, h)| h.filter(|h| *h < members).map(|h| (r.clone(), id(h))))
            .collect();
        let mut live = live;
        for (r, home) in all.iter().zip(&parked) {
            if let (Some(h), Some(home)) = (holders.get(r), home.filter(|m| *m < members))
                && let Some(c) = live.iter_mut().find(|c| &c.id == h)
                && c.id != id(home)
            {
                c.parked.insert(r.clone(), id(home));
            }
        }
        let p = plan(&live, &holders);
        prop_assert!(doubled(&p).is_empty(), "{:?}", doubled(&p));
        if members >= slots {
            let planned = p.preferred.keys().filter(|r| r.slot().is_some()).count();
            prop_assert_eq!(planned, 2 * slots);
        }
        let after: BTreeMap<RoleName, InstanceId> = p
            .preferred
            .iter()
            .map(|(r, pref)| (r.clone(), pref.instance.clone()))
            .collect();
        let mut settled = live.clone();
        for c in &mut settled {
            c.parked.clear();
        }
        let again = plan(&settled, &after);
        prop_assert!(doubled(&again).is_empty());
        let moved: Vec<&RoleName> = again
            .preferred
            .iter()
            .filter(|(r, pref)| after.get(*r) != Some(&pref.instance))
            .map(|(r, _)| r)
            .collect();
        prop_assert!(moved.is_empty(), "moved again: {:?}", moved);
    }
}

/// Three members, a role with three slots and nothing else: one slot each, also when one
/// member has the highest priority for the role (it gets one, the others share the rest).
#[test]
fn slots_spread_one_per_member_even_under_priority() {
    let all = roles(0, 3);
    for top in [None, Some(1)] {
        let live: Vec<Candidate> = (0..3)
            .map(|i| Candidate {
                roles: all
                    .iter()
                    .map(|r| (r.clone(), i32::from(Some(i) == top)))
                    .collect(),
                ..Candidate::new(id(i))
            })
            .collect();
        let p = plan(&live, &BTreeMap::new());
        assert!(doubled(&p).is_empty(), "{top:?}: {:?}", p.preferred);
        assert_eq!(p.preferred.len(), 6);
        if let Some(t) = top {
            let at_top: Vec<&RoleName> = p
                .preferred
                .iter()
                .filter(|(_, pref)| pref.instance == id(t))
                .map(|(r, _)| r)
                .collect();
            assert_eq!(at_top.len(), 2, "one slot of each role: {at_top:?}");
        }
    }
}
