//! The decisions an instance takes from the plan (pure): how long to hold back for a vacancy,
//! and which held role to hand over next (docs/placement.md).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::plan::{Plan, Preferred, PreferredReason};
use crate::names::{InstanceId, RoleName};

/// The member a vacancy of one role goes to: the plan's preferred member if it is live,
/// otherwise `fallback`'s (the plan without silent members) if that one is live, so a crashed
/// member is never waited for.
fn target<'p>(
    preferred: Option<&'p Preferred>,
    fallback: Option<&'p Preferred>,
    is_live: impl Fn(&InstanceId) -> bool,
) -> Option<&'p Preferred> {
    let target = match preferred {
        Some(p) if is_live(&p.instance) => Some(p),
        _ => fallback,
    };
    target.filter(|t| is_live(&t.instance))
}

/// Hold-back for a vacancy of one role: `grace` when another live member is the target,
/// else zero. The target is the plan's preferred member if it is live, otherwise `fallback`
/// (the plan without silent members), so a crashed member is never waited for.
#[must_use]
pub fn hold_back(
    me: &InstanceId,
    preferred: Option<&Preferred>,
    fallback: Option<&Preferred>,
    is_live: impl Fn(&InstanceId) -> bool,
    grace: Duration,
) -> Duration {
    match target(preferred, fallback, is_live) {
        Some(t) if &t.instance != me => grace,
        _ => Duration::ZERO,
    }
}

/// Whether `me` is the member a vacancy goes to (the target of [`hold_back`]): it claims
/// first, everybody else holds back.
#[must_use]
pub fn claims_first(
    me: &InstanceId,
    preferred: Option<&Preferred>,
    fallback: Option<&Preferred>,
    is_live: impl Fn(&InstanceId) -> bool,
) -> bool {
    target(preferred, fallback, is_live).is_some_and(|t| &t.instance == me)
}

/// The holders with the *stuck* vacancies filled: every role the plan has a preferred member
/// for, that nobody holds and for which `stuck` is true (vacant for longer than a hand-over
/// takes: it outlived the claim grace, so its target cannot or does not take it) counts as held
/// by the member it goes to (the target of [`hold_back`]). Releases are decided on the plan of
/// this state, and only the other vacancies (hand-overs in flight) hold back spreading (see
/// [`ReleaseRules::spread_settled`]): a role that no one takes pauses no move of any other
/// role. A vacancy with no live target stays vacant here.
#[must_use]
pub fn vacancies_filled(
    holders: &BTreeMap<RoleName, InstanceId>,
    plan: &Plan,
    fallback: Option<&Plan>,
    is_live: impl Fn(&InstanceId) -> bool,
    stuck: impl Fn(&RoleName) -> bool,
) -> BTreeMap<RoleName, InstanceId> {
    let mut filled = holders.clone();
    for (role, preferred) in &plan.preferred {
        if holders.contains_key(role) || !stuck(role) {
            continue;
        }
        let fallback = fallback.and_then(|f| f.preferred.get(role));
        if let Some(t) = target(Some(preferred), fallback, &is_live) {
            filled.insert(role.clone(), t.instance.clone());
        }
    }
    filled
}

/// A role this instance holds, as the release decision sees it.
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    /// The role.
    pub role: &'a RoleName,
    /// `takeover: voluntary`.
    pub voluntary: bool,
    /// When this instance last handed the role over voluntarily.
    pub moved_at: Option<Instant>,
}

/// Limits of voluntary releases.
#[derive(Debug, Clone, Copy)]
pub struct ReleaseRules {
    /// Spreading releases only while holding more than the share in the plan + this.
    pub hysteresis: usize,
    /// No second voluntary move of a role within this.
    pub cooldown: Duration,
    /// Whether spreading (`share`) moves may start: false while a hand-over is in flight
    /// (a planned role has been vacant for less than a hand-over takes), since a plan computed
    /// from that passing state may differ from the settled one and move a role back and forth.
    /// A vacancy that outlived that is stuck: it is filled by [`vacancies_filled`] instead and
    /// pauses nothing.
    pub spread_settled: bool,
}

/// The held role to hand over next, if any, and to whom: a voluntary role, not moved within
/// the cooldown, that the plan gives to another live member; for a `share` reason only while
/// this instance holds more than its quota plus the hysteresis. Priority and health reasons
/// first, then by name. Pass the plan of the [`vacancies_filled`] holders.
#[must_use]
pub fn choose_release<'a, 'p>(
    me: &InstanceId,
    held: &[Held<'a>],
    plan: &'p Plan,
    is_live: impl Fn(&InstanceId) -> bool,
    rules: ReleaseRules,
    now: Instant,
) -> Option<(&'a RoleName, &'p Preferred)> {
    let quota = plan.quota.get(me).copied().unwrap_or(0);
    let over = plan.units(held.iter().map(|h| h.role)) > quota + rules.hysteresis;
    held.iter()
        .filter(|h| h.voluntary)
        .filter(|h| h.moved_at.is_none_or(|t| now >= t + rules.cooldown))
        .filter_map(|h| plan.preferred.get(h.role).map(|p| (h.role, p)))
        .filter(|(_, p)| &p.instance != me && is_live(&p.instance))
        .filter(|(_, p)| p.reason != PreferredReason::Share || (over && rules.spread_settled))
        .min_by_key(|(r, p)| (p.reason == PreferredReason::Share, *r))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn id(s: &str) -> InstanceId {
        InstanceId::new(s).expect("valid")
    }

    fn role(s: &str) -> RoleName {
        RoleName::new(s).expect("valid")
    }

    fn pref(to: &str, reason: PreferredReason) -> Preferred {
        Preferred {
            instance: id(to),
            reason,
        }
    }

    const GRACE: Duration = Duration::from_millis(300);

    #[test]
    fn holds_back_only_for_another_live_member() {
        let me = id("a");
        let live = |i: &InstanceId| i.as_str() != "dead";
        let b = pref("b", PreferredReason::Share);
        let mine = pref("a", PreferredReason::Share);
        let dead = pref("dead", PreferredReason::Share);
        assert_eq!(hold_back(&me, Some(&b), None, live, GRACE), GRACE);
        assert_eq!(
            hold_back(&me, Some(&mine), None, live, GRACE),
            Duration::ZERO
        );
        assert_eq!(hold_back(&me, None, None, live, GRACE), Duration::ZERO);
        // A silent preferred member: the plan without it decides.
        assert_eq!(
            hold_back(&me, Some(&dead), None, live, GRACE),
            Duration::ZERO
        );
        assert_eq!(hold_back(&me, Some(&dead), Some(&b), live, GRACE), GRACE);
        assert_eq!(
            hold_back(&me, Some(&dead), Some(&mine), live, GRACE),
            Duration::ZERO
        );
    }

    #[test]
    fn stuck_vacancies_are_filled_by_the_member_they_go_to() {
        let live = |i: &InstanceId| i.as_str() != "dead";
        let holders = BTreeMap::from([(role("held"), id("c"))]);
        let p = placement(
            &[
                ("held", pref("b", PreferredReason::Share)),
                ("to-b", pref("b", PreferredReason::Share)),
                ("to-dead", pref("dead", PreferredReason::Share)),
                ("in-flight", pref("b", PreferredReason::Share)),
            ],
            0,
        );
        let stuck = |r: &RoleName| r.as_str() != "in-flight";
        // A held role keeps its holder; a stuck vacancy goes to its live target; one preferred
        // by a silent member stays vacant unless the plan without it has a live target; a
        // hand-over in flight is left alone (it holds back spreading instead).
        let filled = vacancies_filled(&holders, &p, None, live, stuck);
        assert_eq!(
            filled,
            BTreeMap::from([(role("held"), id("c")), (role("to-b"), id("b"))])
        );
        let without_dead = placement(&[("to-dead", pref("a", PreferredReason::Share))], 0);
        let filled = vacancies_filled(&holders, &p, Some(&without_dead), live, stuck);
        assert_eq!(filled.get(&role("to-dead")), Some(&id("a")));
        assert_eq!(filled.get(&role("in-flight")), None);
    }

    fn placement(prefs: &[(&str, Preferred)], my_quota: usize) -> Plan {
        Plan {
            preferred: prefs
                .iter()
                .map(|(r, p)| (role(r), p.clone()))
                .collect::<BTreeMap<_, _>>(),
            quota: BTreeMap::from([(id("a"), my_quota)]),
            cost: BTreeMap::new(),
        }
    }

    #[test]
    fn releases_priority_first_and_share_only_above_quota_plus_hysteresis() {
        let me = id("a");
        let (r1, r2, r3) = (role("r1"), role("r2"), role("r3"));
        let held = [
            Held {
                role: &r1,
                voluntary: true,
                moved_at: None,
            },
            Held {
                role: &r2,
                voluntary: true,
                moved_at: None,
            },
            Held {
                role: &r3,
                voluntary: true,
                moved_at: None,
            },
        ];
        let p = placement(
            &[
                ("r1", pref("b", PreferredReason::Share)),
                ("r2", pref("c", PreferredReason::Priority)),
                ("r3", pref("a", PreferredReason::Share)),
            ],
            2,
        );
        let now = Instant::now();
        let rules = ReleaseRules {
            hysteresis: 0,
            cooldown: Duration::from_secs(30),
            spread_settled: true,
        };
        let live = |_: &InstanceId| true;
        let pick = choose_release(&me, &held, &p, live, rules, now).map(|(r, _)| r.clone());
        assert_eq!(pick, Some(role("r2")), "priority first");
        // Within quota + hysteresis, share moves wait; priority ones do not.
        let share_only = placement(&[("r1", pref("b", PreferredReason::Share))], 2);
        let rules1 = ReleaseRules {
            hysteresis: 1,
            ..rules
        };
        assert!(choose_release(&me, &held, &share_only, live, rules1, now).is_none());
        let pick =
            choose_release(&me, &held, &share_only, live, rules, now).map(|(r, _)| r.clone());
        assert_eq!(pick, Some(role("r1")));
        // While a hand-over is in flight somewhere, share moves wait; priority ones do not.
        let unsettled = ReleaseRules {
            spread_settled: false,
            ..rules
        };
        assert!(choose_release(&me, &held, &share_only, live, unsettled, now).is_none());
        let pick = choose_release(&me, &held, &p, live, unsettled, now).map(|(r, _)| r.clone());
        assert_eq!(pick, Some(role("r2")));
        // Never to a silent member, never a pinned role, never within the cooldown.
        assert!(
            choose_release(&me, &held, &share_only, |i| i.as_str() != "b", rules, now).is_none()
        );
        let pinned = [
            Held {
                role: &r1,
                voluntary: false,
                moved_at: None,
            },
            held[1],
            held[2],
        ];
        assert!(choose_release(&me, &pinned, &share_only, live, rules, now).is_none());
        let recent = [
            Held {
                role: &r1,
                voluntary: true,
                moved_at: Some(now),
            },
            held[1],
            held[2],
        ];
        assert!(choose_release(&me, &recent, &share_only, live, rules, now).is_none());
        let later = now + Duration::from_secs(30);
        let pick =
            choose_release(&me, &recent, &share_only, live, rules, later).map(|(r, _)| r.clone());
        assert_eq!(pick, Some(role("r1")));
    }
}
