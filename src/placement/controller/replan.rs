//! A re-plan ([`Input::Replan`](super::Input::Replan)): the plan with and without the silent
//! and the joining members, the freeze, the members at their capacity, the roles this
//! instance declines, a hold-back per own role, the end of the move in flight, the stuck
//! vacancies and the move budget, and at most one voluntary release.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use super::prepare::track_awaiting;
use super::{Controller, PlacementAction, World};
use crate::names::{InstanceId, RoleName};
use crate::placement::decide::{
    Held, ReleaseRules, choose_release, claims_first, hold_back, vacancies_filled,
};
use crate::placement::freeze::Frozen;
use crate::placement::member::MemberRecord;
use crate::placement::membership::Membership;
use crate::placement::plan::Candidate;
use crate::placement::settings::Takeover;

impl Controller {
    /// Computes the plan and acts on it: hold-backs, declined roles, at most one voluntary
    /// release.
    pub(super) fn replan(&mut self, world: &World, now: Instant) -> Vec<PlacementAction> {
        let mut actions = Vec::new();
        let cfg = &self.settings.config;
        let me = &self.settings.instance;
        let holders = &world.holders;
        self.membership.refresh(now);
        let membership = &self.membership;
        let is_live = |i: &InstanceId| membership.is_live(i, now);
        let members = membership.effective();
        let placement = self.plans.plan(&members, holders);
        // Silent members (crashed, not yet expired or within the leave delay) are never waited
        // for: vacancies they are preferred for go to whom the plan without them prefers.
        let live: Vec<Candidate> = members.iter().filter(|c| is_live(&c.id)).cloned().collect();
        let live_plan = (live.len() != members.len()).then(|| self.plans.plan(&live, holders));
        // Vacancies go where the plan with the live members that are still joining puts them
        // (a vacant role moves nothing): a fleet that starts together is spread from the first
        // claims, not first planned without its late starters and then moved within the move
        // budget. Held roles follow the stable plan only.
        // So do members that have not caught up with a group's count yet (`lagging.rs`).
        let joining = membership.joining(now);
        let with_joining = (!joining.is_empty()).then(|| {
            let mut with: Vec<Candidate> = live.clone();
            with.extend(joining);
            with
        });
        let with = with_joining.as_deref().unwrap_or(&live);
        let vacancy_plan = match super::lagging::caught_up(with, membership) {
            Some(caught_up) => Some(self.plans.plan(&caught_up, holders)),
            None => with_joining.map(|with| self.plans.plan(&with, holders)),
        };
        actions.push(PlacementAction::LiveMembers(live.len()));
        let live_ids: BTreeSet<InstanceId> = live.iter().map(|c| c.id.clone()).collect();
        let storm = self.breaker.observe(&live_ids, now);
        let frozen_members: Vec<InstanceId> = live
            .iter()
            .filter(|c| membership.record(&c.id).is_some_and(|r| r.frozen))
            .map(|c| c.id.clone())
            .collect();
        let frozen = match &self.operator_freeze {
            Some(f) => Some(Frozen::Operator {
                reason: f.reason.clone(),
                by: f.by.clone(),
                at: f.at.clone(),
            }),
            None if !frozen_members.is_empty() => Some(Frozen::Member {
                members: frozen_members,
            }),
            None => storm,
        };
        // The countdown of a storm changes every re-plan: report changes of cause only.
        let kind = |f: &Option<Frozen>| f.as_ref().map(std::mem::discriminant);
        if kind(&frozen) != kind(&self.frozen)
            || (!matches!(frozen, Some(Frozen::Storm { .. })) && frozen != self.frozen)
        {
            actions.push(PlacementAction::ViewChanged);
        }
        self.frozen = frozen;
        let full = full_members(membership, &live_ids, holders);
        if full != self.full {
            self.full = full.clone();
            actions.push(PlacementAction::Full(full));
        }
        let i_count = members.iter().any(|c| &c.id == me);

        let unavailable: BTreeSet<RoleName> = world
            .roles
            .iter()
            .filter(|(n, v)| v.declines && self.roles.get(*n).is_some_and(|o| o.role.campaign))
            .map(|(n, _)| n.clone())
            .collect();
        if unavailable != self.unavailable {
            // The record says what this instance will not take: rewritten at once.
            self.unavailable = unavailable.clone();
            actions.push(PlacementAction::Unavailable(unavailable));
        }

        // Hold-back and preference per own role. The role this instance is handing over is
        // held back for the claim grace whatever the plan says meanwhile: plans computed while
        // moves are carried out can differ for a moment, and taking the role straight back
        // would stop every other move of this instance.
        let handing_over = self.in_flight.as_ref().map(|(r, _, _)| r.clone());
        for (name, own) in &mut self.roles {
            let preferred = placement.preferred.get(name).cloned();
            // While members are silent (crashed, not yet gone), vacancies go where the plan
            // without them puts them: that is where they belong once the silent members are
            // gone, and what `nats-roles plan --leave` predicts.
            let live_choice = vacancy_plan
                .as_ref()
                .filter(|_| !holders.contains_key(name))
                .and_then(|vp| vp.preferred.get(name))
                .or_else(|| live_plan.as_ref().and_then(|lp| lp.preferred.get(name)));
            let (first, fallback) = match live_choice {
                Some(lp) => (Some(lp), preferred.as_ref()),
                None => (preferred.as_ref(), None),
            };
            let mut delay = hold_back(me, first, fallback, is_live, cfg.claim_grace);
            let mut claims = claims_first(me, first, fallback, is_live);
            if handing_over.as_ref() == Some(name) {
                delay = cfg.claim_grace;
                claims = false;
            }
            let next = (delay, claims, preferred);
            if own.sent.as_ref() != Some(&next) && world.roles.contains_key(name) {
                actions.push(PlacementAction::HoldBack {
                    role: name.clone(),
                    delay: next.0,
                    first: next.1,
                    preferred: next.2.clone(),
                });
                own.sent = Some(next);
            }
        }

        // The move in flight ends once another instance holds the role, or the vacancy had its
        // claim grace, or it takes far too long.
        let hand_over = cfg.claim_grace + self.settings.operation_timeout;
        // Held by this instance again after it was seen vacant (nobody else took it within
        // the claim grace, or plans disagreed for a moment) also ends it: the move failed, and
        // waiting for the move timeout would stop every other move of this instance.
        if let Some((role, at, seen_vacant)) = &mut self.in_flight {
            let done = match holders.get(role) {
                Some(h) => h != me || *seen_vacant,
                None => {
                    *seen_vacant = true;
                    now >= *at + hand_over
                }
            } || now >= *at + self.settings.move_timeout;
            if done {
                self.in_flight = None;
            }
        }
        // A planned role vacant for longer than a hand-over takes (the claim grace and one
        // operation) is stuck: no target takes it. Hand-overs in flight hold spreading back;
        // stuck vacancies do not (they are planned as taken by their target).
        let vacant: BTreeSet<&RoleName> = placement
            .preferred
            .keys()
            .filter(|r| !holders.contains_key(*r))
            .collect();
        self.vacant_since.retain(|r, _| vacant.contains(r));
        for r in &vacant {
            self.vacant_since.entry((*r).clone()).or_insert(now);
        }
        let stuck: BTreeSet<&RoleName> = self
            .vacant_since
            .iter()
            .filter(|(_, since)| now >= **since + hand_over)
            .map(|(r, _)| r)
            .collect();
        let spread_settled = vacant.iter().all(|r| stuck.contains(*r));
        if now >= self.budget.0 + cfg.move_interval {
            self.budget = (now, 0);
        }

        // At most one voluntary release, and only once this instance counts in the plan
        // itself. An unhealthy instance releases nothing here: its health check releases every
        // role at once, with the health cooldown (a placement release first would run without
        // it).
        track_awaiting(
            &mut self.awaiting,
            &self.membership,
            me,
            (&placement, holders, &live_ids),
            now,
        );
        let mut pick = None;
        if i_count
            && world.healthy
            && self.frozen.is_none()
            && self.in_flight.is_none()
            && self.budget.1 < cfg.move_budget
        {
            // Releases are planned as if every stuck vacancy were taken by the member it goes
            // to, so a role no one takes delays no move of another role.
            let filled = vacancies_filled(holders, &placement, live_plan.as_ref(), is_live, |r| {
                stuck.contains(r)
            });
            let filled_plan =
                (filled.len() != holders.len()).then(|| self.plans.plan(&members, &filled));
            // Roles moving to a receiver that prepares them wait for it (from when either plan
            // first gave it the role).
            let chosen_plan = filled_plan.as_ref().unwrap_or(&placement);
            track_awaiting(
                &mut self.awaiting,
                &self.membership,
                me,
                (chosen_plan, holders, &live_ids),
                now,
            );
            let held: Vec<Held<'_>> = world
                .roles
                .iter()
                .filter(|(_, v)| v.leader)
                .map(|(n, _)| Held {
                    role: n,
                    // A role whose receiver is still preparing it is not released yet; the
                    // choice goes to another role (one whose receiver is ready, or does
                    // not prepare) meanwhile.
                    voluntary: !self.kept.contains(n)
                        && self
                            .roles
                            .get(n)
                            .is_some_and(|o| o.role.takeover == Takeover::Voluntary)
                        && !self.waits_for_prepare(n, chosen_plan, now),
                    moved_at: self.moved_at.get(n).copied(),
                })
                .collect();
            let rules = ReleaseRules {
                hysteresis: cfg.hysteresis as usize,
                cooldown: cfg.cooldown,
                spread_settled,
            };
            pick = choose_release(me, &held, chosen_plan, is_live, rules, now)
                .map(|(role, to)| (role.clone(), to.clone()));
        }
        if let Some((role, to)) = pick {
            self.awaiting.retain(|(r, _), _| r != &role);
            self.moved_at.insert(role.clone(), now);
            self.in_flight = Some((role.clone(), now, false));
            self.budget.1 += 1;
            // The releasing instance holds back for the role like everyone else, whatever the
            // plan without filled vacancies said: it must not take straight back what it hands
            // over (it would win the race against the receiver).
            if let Some(own) = self.roles.get_mut(&role) {
                let next = (cfg.claim_grace, false, Some(to.clone()));
                if own.sent.as_ref() != Some(&next) {
                    actions.push(PlacementAction::HoldBack {
                        role: role.clone(),
                        delay: next.0,
                        first: false,
                        preferred: next.2.clone(),
                    });
                    own.sent = Some(next);
                }
            }
            actions.push(PlacementAction::Release { role, to });
        }
        // Roles held here that the plan gives elsewhere: re-plans stay due on a timer until
        // they moved (the budget, a cooldown, the hysteresis or a freeze may hold them).
        self.moves_left = world.roles.iter().any(|(n, v)| {
            v.leader
                && placement
                    .preferred
                    .get(n)
                    .is_some_and(|p| &p.instance != me && is_live(&p.instance))
        });
        self.receive_prepared(&placement, holders, &live_ids, &mut actions);
        self.track_parked(holders, now, &mut actions);
        if placement != self.last {
            self.last = placement;
            actions.push(PlacementAction::ViewChanged);
        }
        actions
    }
}

/// The live members that cannot take one more role: they hold `max_roles` roles, or
/// `capacity` units (roles at their cost).
fn full_members(
    membership: &Membership,
    live: &BTreeSet<InstanceId>,
    holders: &BTreeMap<RoleName, InstanceId>,
) -> BTreeSet<InstanceId> {
    let records: Vec<&MemberRecord> = membership
        .records()
        .filter(|r| live.contains(&r.instance) && (r.capacity.is_some() || r.max_roles.is_some()))
        .collect();
    if records.is_empty() {
        return BTreeSet::new();
    }
    let cost = |role: &RoleName| {
        membership
            .records()
            .filter_map(|r| r.costs.get(role))
            .max()
            .map_or(1, |c| u64::from(*c))
    };
    records
        .into_iter()
        .filter(|r| {
            let held: Vec<&RoleName> = holders
                .iter()
                .filter(|(_, h)| **h == r.instance)
                .map(|(role, _)| role)
                .collect();
            let units: u64 = held.iter().map(|role| cost(role)).sum();
            r.max_roles.is_some_and(|m| held.len() >= m as usize)
                || r.capacity.is_some_and(|c| units >= u64::from(c))
        })
        .map(|r| r.instance.clone())
        .collect()
}
