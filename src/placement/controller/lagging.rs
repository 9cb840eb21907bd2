//! Members catching up with a group's count (protocol Q14): the instances see a count record
//! at different moments and add the new members over a few hundred milliseconds, so for a
//! moment some records list the new members and some do not. A plan of the vacant new members
//! made then would give them all to the members that were quick, and the spread would be
//! repaired by moving held ones. For the vacancies only, a member that takes part in a group
//! is planned as campaigning for every member below the highest count a live member acts on
//! (what it will campaign for once it caught up): the new members are spread over the whole
//! fleet from the first claims. A member that never catches up (another configuration) does
//! not claim what it is planned for; after the claim grace that vacancy is stuck and goes to
//! a member that campaigns for it (`vacancies_filled`).

use std::collections::BTreeMap;

use crate::groups::{member_index, member_name};
use crate::names::RoleName;
use crate::placement::membership::Membership;
use crate::placement::plan::Candidate;

/// A group a member lags in: the group, the count to reach, the priority and cost of the
/// members it lists.
type Lag<'a> = (&'a RoleName, u32, i32, Option<u32>);

/// `members` with the members of their groups they do not campaign for yet added, below the
/// highest count any of them acts on (with the priority and cost of the group members each
/// lists); `None` when none lags (nothing copied).
pub(super) fn caught_up(members: &[Candidate], membership: &Membership) -> Option<Vec<Candidate>> {
    let mut target: BTreeMap<&RoleName, u32> = BTreeMap::new();
    for m in members {
        if let Some(record) = membership.record(&m.id) {
            for (group, count) in &record.groups {
                let t = target.entry(group).or_default();
                *t = (*t).max(*count);
            }
        }
    }
    // Per member, the groups it lags in.
    let mut lags: Vec<Vec<Lag<'_>>> = Vec::with_capacity(members.len());
    for m in members {
        let mut mine = Vec::new();
        if let Some(record) = membership.record(&m.id) {
            for group in record.groups.keys() {
                let Some(&count) = target.get(group) else {
                    continue;
                };
                // The priority and cost of the members it lists (all of a group's members
                // share the group's settings).
                let mut first = None;
                let mut listed = 0u32;
                for (role, priority) in &m.roles {
                    if let Some(i) = member_index(group, role) {
                        first.get_or_insert((role, *priority));
                        listed += u32::from(i < count);
                    }
                }
                if let Some((role, priority)) = first
                    && listed < count
                {
                    mine.push((group, count, priority, m.costs.get(role).copied()));
                }
            }
        }
        lags.push(mine);
    }
    if lags.iter().all(Vec::is_empty) {
        return None;
    }
    let mut out = members.to_vec();
    for (m, mine) in out.iter_mut().zip(lags) {
        for (group, count, priority, cost) in mine {
            for i in 0..count {
                let Ok(name) = member_name(group, i) else {
                    continue;
                };
                if m.roles.contains_key(&name) {
                    continue;
                }
                if let Some(c) = cost {
                    m.costs.insert(name.clone(), c);
                }
                m.roles.insert(name, priority);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::InstanceId;
    use crate::placement::member::test_record;
    use crate::placement::membership::MembershipTiming;
    use crate::placement::plan::plan;
    use std::time::Duration;
    use tokio::time::Instant;

    fn shard(i: u32) -> RoleName {
        member_name(&RoleName::new("shard").expect("valid"), i).expect("valid")
    }

    /// `a` and `b` act on count 8 of `shard`, `c` still on 4 (it has not seen the count
    /// record yet): the vacancy plan counts `c` as a candidate for shard-4 … shard-7 too, so
    /// the new members spread over all three; with nobody lagging nothing is copied.
    #[test]
    fn a_member_behind_on_a_count_is_planned_for_the_new_members() {
        let now = Instant::now();
        let mut membership = Membership::new(MembershipTiming {
            stability_window: Duration::ZERO,
            leave_delay: Duration::ZERO,
        });
        let names: Vec<String> = (0..8).map(|i| shard(i).to_string()).collect();
        let roles =
            |n: usize| -> Vec<(&str, i32)> { names[..n].iter().map(|r| (r.as_str(), 0)).collect() };
        let group = RoleName::new("shard").expect("valid");
        for (revision, (id, count)) in [("a", 8), ("b", 8), ("c", 4)].into_iter().enumerate() {
            let mut r = test_record(id, &roles(count), 3_600_000);
            r.groups = [(group.clone(), count as u32)].into();
            membership.observe_put(r, revision as u64 + 1, now);
        }
        membership.refresh(now);
        let members = membership.effective();
        assert_eq!(members.len(), 3);
        // The first four held by a and b, the new ones vacant.
        let holders: BTreeMap<RoleName, InstanceId> = (0..4)
            .map(|i| {
                (
                    shard(i),
                    InstanceId::new(if i % 2 == 0 { "a" } else { "b" }).expect("valid"),
                )
            })
            .collect();
        let lagging = plan(&members, &holders);
        let c = InstanceId::new("c").expect("valid");
        let new_to_c = |p: &crate::placement::plan::Plan| {
            (4..8)
                .filter(|i| p.preferred.get(&shard(*i)).is_some_and(|x| x.instance == c))
                .count()
        };
        assert_eq!(new_to_c(&lagging), 0, "c campaigns for none of them yet");
        let caught = caught_up(&members, &membership).expect("c lags");
        let with_c = plan(&caught, &holders);
        assert!(new_to_c(&with_c) >= 2, "{:?}", with_c.preferred);
        // Caught up: nothing lags, nothing is copied.
        let mut r = test_record("c", &roles(8), 3_600_000);
        r.groups = [(group, 8)].into();
        membership.observe_put(r, 9, now);
        membership.refresh(now);
        assert!(caught_up(&membership.effective(), &membership).is_none());
    }
}
