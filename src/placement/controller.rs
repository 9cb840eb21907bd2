//! The placement controller's bookkeeping as a pure step function (no I/O, no clock, like
//! `core::machine`): the membership table, the roles this instance takes part in, the move
//! budget, the voluntary move in flight, the per-role cooldowns and the stuck vacancies.
//!
//! The manager's driver (`manager::placement`) feeds it [`Input`]s with the time and carries
//! out the [`Action`]s it returns: hold-backs and hand-overs for the role tasks, a rewrite of
//! the membership record, a new view for the API.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::decide::{Held, ReleaseRules, choose_release, hold_back, vacancies_filled};
use super::freeze::{FreezeRecord, Frozen, StormBreaker};
use super::member::MemberRecord;
use super::membership::{Membership, MembershipTiming};
use super::plan::{Candidate, Placement, Preferred};
use super::plan_cache::PlanCache;
use super::settings::{PlacementSettings, Takeover};
use crate::names::{InstanceId, RoleName};

/// What a controller is configured with.
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// This instance.
    pub instance: InstanceId,
    /// The placement knobs.
    pub config: PlacementSettings,
    /// Longest wait for one KV write.
    pub operation_timeout: Duration,
    /// Longest a voluntary move stays in flight (the drain timeout and two member TTLs).
    pub move_timeout: Duration,
    /// The storm breaker's window: members vanishing within it count together (the member
    /// TTL).
    pub storm_window: Duration,
}

/// A role this instance takes part in, as placement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnRole {
    /// Its priority here.
    pub priority: i32,
    /// Whether placement may hand it over.
    pub takeover: Takeover,
    /// Whether this instance campaigns for it (false: observer).
    pub campaign: bool,
    /// Its cost (`roles[].weight`, at least 1).
    pub cost: u32,
    /// Whether this instance prepares it before a voluntary move hands it here.
    pub prepares: bool,
}

/// A managed role as the manager sees it at a re-plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoleView {
    /// This instance holds it.
    pub leader: bool,
    /// This instance will not take it now (cooling down, or stopped on a permanent failure).
    pub declines: bool,
}

/// The world a re-plan sees.
#[derive(Debug, Clone, Default)]
pub struct World {
    /// Who holds which role (the watcher's view; vacant roles are absent).
    pub holders: BTreeMap<RoleName, InstanceId>,
    /// Every role the manager runs a task for now; a role not in here gets no action.
    pub roles: BTreeMap<RoleName, RoleView>,
    /// Whether this instance's health check passes.
    pub healthy: bool,
}

/// What happens to the controller.
#[derive(Debug, Clone)]
pub enum Input {
    /// The instances with a live session now (protocol Q9: a member is live while its session
    /// is), once the watcher delivered the bucket's state, then at every change.
    Sessions(BTreeSet<InstanceId>),
    /// A member record was written (the watcher saw it at `revision`).
    MemberPut {
        /// The record.
        record: Box<MemberRecord>,
        /// Its revision.
        revision: u64,
    },
    /// A member record was deleted (`expired`: it ran out of TTL).
    MemberGone {
        /// The member.
        id: InstanceId,
        /// Whether its TTL ran out (rather than a graceful delete).
        expired: bool,
        /// The revision of the deletion.
        revision: u64,
    },
    /// The bucket was recreated: revisions start again.
    BucketReset,
    /// This instance takes part in one more role (or again, with new settings).
    RoleAdded(RoleName, OwnRole),
    /// This instance no longer takes part in a role.
    RoleRemoved(RoleName),
    /// The operator's freeze record: set (`Some`) or deleted/unreadable (`None`).
    Freeze(Option<FreezeRecord>),
    /// This instance's preparation of a role ended, and how.
    Prepared(RoleName, PrepareEnd),
    /// The roles targeted moves keep on this instance now (protocol Q13): it never hands
    /// them over voluntarily and its record lists them as pinned.
    Kept(BTreeSet<RoleName>),
    /// Compute the plan and act on it.
    Replan(World),
}

/// How this instance's preparation of a role ended (warm hand-over, docs/placement.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrepareEnd {
    /// `on_prepare` succeeded: the record lists the role in `prepared`.
    Ready,
    /// `on_prepare` failed or ran out of `prepare_timeout`: the record lists the role in
    /// `prepare_failed`, so that the holder hands it over at once (a cold hand-over, as
    /// without a preparation) instead of waiting for a readiness that will not come.
    Failed,
    /// The preparation was abandoned: this instance was promoted meanwhile (the term has
    /// started and does not wait for a preparation). The record lists it nowhere.
    Abandoned,
}

/// What the driver has to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Report how many counted members are live.
    LiveMembers(usize),
    /// The roles, pinned roles or declined roles of this instance's record changed: rewrite
    /// it ([`Controller::record_roles`]).
    RecordChanged,
    /// The roles this instance will not take now changed (the record is rewritten too).
    Unavailable(BTreeSet<RoleName>),
    /// Tell a role task how long to hold back campaigning for a vacancy, and where the role
    /// is wanted.
    HoldBack {
        /// The role.
        role: RoleName,
        /// The hold-back.
        delay: Duration,
        /// Where the plan wants it.
        preferred: Option<Preferred>,
    },
    /// Prepare a role this instance is about to receive by a voluntary move (its
    /// `on_prepare`, at most `prepare_timeout`), then report [`Input::Prepared`].
    Prepare(RoleName),
    /// Hand a held role over gracefully (a voluntary move).
    Release {
        /// The role.
        role: RoleName,
        /// To whom, and why.
        to: Preferred,
    },
    /// The members at their capacity (`max_roles`, `capacity`) changed: the herd ranking
    /// skips them.
    Full(BTreeSet<InstanceId>),
    /// The membership table or the plan changed ([`Controller::membership`],
    /// [`Controller::plan`]).
    ViewChanged,
}

/// What this instance's membership record says about its roles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordRoles {
    /// Roles it campaigns for, with their priorities.
    pub roles: BTreeMap<RoleName, i32>,
    /// Of those, the ones placement never moves.
    pub pinned: BTreeSet<RoleName>,
    /// Of those, the ones it will not take now.
    pub unavailable: BTreeSet<RoleName>,
    /// Of those, the costs that are not 1.
    pub costs: BTreeMap<RoleName, u32>,
    /// Of those, the ones it prepares before receiving them.
    pub prepares: BTreeSet<RoleName>,
    /// Of those, the ones it has prepared (ready to receive).
    pub prepared: BTreeSet<RoleName>,
    /// Of those, the ones whose preparation failed or timed out (not ready; hand them over
    /// without waiting).
    pub prepare_failed: BTreeSet<RoleName>,
    /// Roles it holds only because their previous holder left: role → that holder.
    pub parked: BTreeMap<RoleName, InstanceId>,
}

#[derive(Debug)]
struct Own {
    role: OwnRole,
    /// Last hold-back and preference sent to the role task.
    sent: Option<(Duration, Option<Preferred>)>,
}

/// The controller's state (see the module documentation).
#[derive(Debug)]
pub struct Controller {
    settings: ControllerSettings,
    membership: Membership,
    roles: BTreeMap<RoleName, Own>,
    /// Last voluntary move of each role (per-role cooldown).
    moved_at: BTreeMap<RoleName, Instant>,
    /// The voluntary move in flight: role and when it was asked for.
    /// The voluntary move in flight: role, when it was asked for, and whether the role was
    /// seen vacant since.
    in_flight: Option<(RoleName, Instant, bool)>,
    /// Start of the current budget interval and moves made in it.
    budget: (Instant, u32),
    last: Placement,
    /// Roles this instance will not take now (published in its record).
    unavailable: BTreeSet<RoleName>,
    /// Planned roles without a holder, and since when (this instance's view).
    vacant_since: BTreeMap<RoleName, Instant>,
    /// The operator's freeze record, if any.
    operator_freeze: Option<FreezeRecord>,
    /// Freezes voluntary moves when many members vanish at once.
    breaker: StormBreaker,
    /// Why voluntary moves are frozen now, if they are.
    frozen: Option<Frozen>,
    /// Live members that hold as much as their limits allow.
    full: BTreeSet<InstanceId>,
    /// Roles this instance is preparing to receive.
    preparing: BTreeSet<RoleName>,
    /// Roles this instance has prepared (announced in its record).
    prepared: BTreeSet<RoleName>,
    /// Roles whose preparation failed or timed out here (announced in its record).
    prepare_failed: BTreeSet<RoleName>,
    /// Held roles the plan gives to a member that prepares them: (role, receiver) → since
    /// when. Each role's wait for its receiver counts from when a plan first gave it there,
    /// so roles moving to one receiver wait for it at the same time, not one after another.
    awaiting: BTreeMap<(RoleName, InstanceId), Instant>,
    /// The last holder seen of every role (kept through vacancies).
    last_holder: BTreeMap<RoleName, InstanceId>,
    /// Roles this instance holds because their previous holder left (published as `parked`).
    parked: BTreeMap<RoleName, InstanceId>,
    /// Recent plans and their inputs (most re-plans see nothing new).
    plans: PlanCache,
    /// Roles targeted moves keep on this instance (Q13): pinned while they last.
    kept: BTreeSet<RoleName>,
    /// The last re-plan left roles held here that the plan gives to another live member.
    moves_left: bool,
}

impl Controller {
    /// A controller that knows no member and no role yet; its first budget interval starts
    /// at `now`.
    #[must_use]
    pub fn new(settings: ControllerSettings, now: Instant) -> Self {
        let breaker = StormBreaker::new(settings.storm_window, settings.config.stability_window);
        let timing = MembershipTiming {
            stability_window: settings.config.stability_window,
            leave_delay: settings.config.leave_delay,
        };
        Self {
            settings,
            membership: Membership::new(timing),
            roles: BTreeMap::new(),
            moved_at: BTreeMap::new(),
            in_flight: None,
            budget: (now, 0),
            last: Placement::default(),
            unavailable: BTreeSet::new(),
            vacant_since: BTreeMap::new(),
            operator_freeze: None,
            breaker,
            frozen: None,
            full: BTreeSet::new(),
            preparing: BTreeSet::new(),
            prepared: BTreeSet::new(),
            prepare_failed: BTreeSet::new(),
            awaiting: BTreeMap::new(),
            last_holder: BTreeMap::new(),
            parked: BTreeMap::new(),
            plans: PlanCache::default(),
            kept: BTreeSet::new(),
            moves_left: false,
        }
    }

    /// Why voluntary moves are frozen, as of the last re-plan.
    #[must_use]
    pub fn frozen(&self) -> Option<&Frozen> {
        self.frozen.as_ref()
    }

    /// The membership table.
    #[must_use]
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// The plan as last computed.
    #[must_use]
    pub fn plan(&self) -> &Placement {
        &self.last
    }

    /// The voluntary move in flight, if any.
    #[cfg(test)]
    #[must_use]
    pub fn in_flight(&self) -> Option<&RoleName> {
        self.in_flight.as_ref().map(|(r, _, _)| r)
    }

    /// What this instance's record says about its roles now.
    #[must_use]
    pub fn record_roles(&self) -> RecordRoles {
        let campaigned = || self.roles.iter().filter(|(_, o)| o.role.campaign);
        RecordRoles {
            roles: campaigned()
                .map(|(n, o)| (n.clone(), o.role.priority))
                .collect(),
            pinned: campaigned()
                .filter(|(n, o)| o.role.takeover == Takeover::Never || self.kept.contains(*n))
                .map(|(n, _)| n.clone())
                .collect(),
            prepares: campaigned()
                .filter(|(_, o)| o.role.prepares)
                .map(|(n, _)| n.clone())
                .collect(),
            prepared: self.prepared.clone(),
            prepare_failed: self.prepare_failed.clone(),
            parked: self.parked.clone(),
            costs: campaigned()
                .filter(|(_, o)| o.role.cost != 1)
                .map(|(n, o)| (n.clone(), o.role.cost.max(1)))
                .collect(),
            unavailable: self
                .unavailable
                .iter()
                .filter(|r| self.roles.contains_key(*r))
                .cloned()
                .collect(),
        }
    }

    /// Applies one input at `now`; returns what the driver has to do, in order.
    pub fn step(&mut self, input: Input, now: Instant) -> Vec<Action> {
        match input {
            Input::MemberPut { record, revision } => {
                self.membership.observe_put(*record, revision, now);
                vec![Action::ViewChanged]
            }
            Input::MemberGone {
                id,
                expired,
                revision,
            } => {
                self.membership.observe_gone(&id, expired, revision, now);
                vec![Action::ViewChanged]
            }
            Input::BucketReset => {
                self.membership.bucket_reset();
                vec![Action::ViewChanged]
            }
            Input::Sessions(live) => {
                self.membership.set_sessions(live, now);
                vec![Action::ViewChanged]
            }
            Input::RoleAdded(role, own) => {
                self.roles.insert(
                    role,
                    Own {
                        role: own,
                        sent: None,
                    },
                );
                vec![Action::RecordChanged]
            }
            Input::RoleRemoved(role) => {
                self.roles.remove(&role);
                self.moved_at.remove(&role);
                vec![Action::RecordChanged]
            }
            Input::Freeze(record) => {
                self.operator_freeze = record;
                Vec::new()
            }
            Input::Prepared(role, end) => {
                if !self.preparing.remove(&role) {
                    return Vec::new();
                }
                match end {
                    PrepareEnd::Ready => self.prepared.insert(role),
                    PrepareEnd::Failed => self.prepare_failed.insert(role),
                    PrepareEnd::Abandoned => return Vec::new(),
                };
                vec![Action::RecordChanged]
            }
            Input::Kept(kept) => {
                if kept == self.kept {
                    return Vec::new();
                }
                self.kept = kept;
                vec![Action::RecordChanged]
            }
            Input::Replan(world) => self.replan(&world, now),
        }
    }

    /// Whether re-plans are due on a timer now (placement is event-driven otherwise, protocol
    /// Q9): a move in flight, vacancies or receivers being waited for, membership that time
    /// alone changes, roles held here that the last plan gives elsewhere (the move budget,
    /// a cooldown or a freeze holds them back), roles being prepared, roles this instance
    /// will not take now (a cooldown ends with time).
    #[must_use]
    pub fn busy(&self) -> bool {
        self.in_flight.is_some()
            || !self.vacant_since.is_empty()
            || !self.awaiting.is_empty()
            || !self.preparing.is_empty()
            // A cooldown or an eviction's wait ends with time (the record then says so).
            || !self.unavailable.is_empty()
            || self.moves_left
            || matches!(self.frozen, Some(Frozen::Storm { .. }))
            || self.membership.settling()
    }

    /// Records of members whose sessions are gone for the leave delay, a stability window and
    /// `grace` (protocol Q9): `(instance, revision)`, for the driver to delete by CAS. Deleting
    /// is housekeeping: `grace` keeps a session that is only being started again (a loss, a
    /// restart) from costing its member a record rewrite.
    #[must_use]
    pub fn stale_records(&self, now: Instant, grace: Duration) -> Vec<(InstanceId, u64)> {
        self.membership
            .stale_records(now, self.settings.config.stability_window + grace)
            .into_iter()
            .filter(|(id, _)| id != &self.settings.instance)
            .collect()
    }

    /// Computes the plan and acts on it: hold-backs, declined roles, at most one voluntary
    /// release.
    fn replan(&mut self, world: &World, now: Instant) -> Vec<Action> {
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
        let joining = membership.joining(now);
        let vacancy_plan = (!joining.is_empty()).then(|| {
            let mut with: Vec<Candidate> = live.clone();
            with.extend(joining);
            self.plans.plan(&with, holders)
        });
        actions.push(Action::LiveMembers(live.len()));
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
            actions.push(Action::ViewChanged);
        }
        self.frozen = frozen;
        let full = full_members(membership, &live_ids, holders);
        if full != self.full {
            self.full = full.clone();
            actions.push(Action::Full(full));
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
            actions.push(Action::Unavailable(unavailable));
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
            let mut delay = match live_choice {
                Some(lp) => hold_back(me, Some(lp), preferred.as_ref(), is_live, cfg.claim_grace),
                None => hold_back(me, preferred.as_ref(), None, is_live, cfg.claim_grace),
            };
            if handing_over.as_ref() == Some(name) {
                delay = cfg.claim_grace;
            }
            let next = (delay, preferred);
            if own.sent.as_ref() != Some(&next) && world.roles.contains_key(name) {
                actions.push(Action::HoldBack {
                    role: name.clone(),
                    delay: next.0,
                    preferred: next.1.clone(),
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
                let next = (cfg.claim_grace, Some(to.clone()));
                if own.sent.as_ref() != Some(&next) {
                    actions.push(Action::HoldBack {
                        role: role.clone(),
                        delay: next.0,
                        preferred: next.1.clone(),
                    });
                    own.sent = Some(next);
                }
            }
            actions.push(Action::Release { role, to });
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
        self.track_parked(holders, &live_ids, &mut actions);
        if placement != self.last {
            self.last = placement;
            actions.push(Action::ViewChanged);
        }
        actions
    }

    /// Whether the release of held `role` waits for the receiver `plan` gives it to prepare
    /// it: that receiver has not answered (neither ready nor failed) and `prepare_timeout` has
    /// not passed since a plan first gave it the role.
    fn waits_for_prepare(&self, role: &RoleName, plan: &Placement, now: Instant) -> bool {
        let Some(to) = plan.preferred.get(role) else {
            return false;
        };
        self.awaiting
            .get(&(role.clone(), to.instance.clone()))
            .is_some_and(|since| now < *since + self.settings.config.prepare_timeout)
    }

    /// Roles this instance took over because their holder left (draining, stopped, crashed —
    /// not a voluntary move from a live member) are parked for that holder: published, so
    /// that placement moves them home first when that member is back and needs roles.
    fn track_parked(
        &mut self,
        holders: &BTreeMap<RoleName, InstanceId>,
        live: &BTreeSet<InstanceId>,
        actions: &mut Vec<Action>,
    ) {
        let me = &self.settings.instance;
        let mut changed = false;
        for (role, holder) in holders {
            if holder == me
                && let Some(previous) = self.last_holder.get(role)
                && previous != me
            {
                let left = !live.contains(previous)
                    || self
                        .membership
                        .record(previous)
                        .is_none_or(|r| r.draining || !r.healthy);
                if left && self.parked.get(role) != Some(previous) {
                    self.parked.insert(role.clone(), previous.clone());
                    changed = true;
                }
            }
        }
        let before = self.parked.len();
        self.parked
            .retain(|role, _| holders.get(role).is_some_and(|h| h == me));
        changed |= self.parked.len() != before;
        for (role, holder) in holders {
            self.last_holder.insert(role.clone(), holder.clone());
        }
        if changed {
            actions.push(Action::RecordChanged);
        }
    }

    /// Receiver side of a warm hand-over: prepares the own roles the plan gives this instance
    /// while another live member still holds them; forgets preparations no longer needed.
    fn receive_prepared(
        &mut self,
        placement: &Placement,
        holders: &BTreeMap<RoleName, InstanceId>,
        live: &BTreeSet<InstanceId>,
        actions: &mut Vec<Action>,
    ) {
        let me = &self.settings.instance;
        let wanted: BTreeSet<RoleName> = self
            .roles
            .iter()
            .filter(|(_, o)| o.role.prepares && o.role.campaign)
            .filter(|(r, _)| {
                placement
                    .preferred
                    .get(*r)
                    .is_some_and(|p| &p.instance == me)
            })
            .filter(|(r, _)| holders.get(*r).is_some_and(|h| h != me && live.contains(h)))
            .map(|(r, _)| r.clone())
            .collect();
        let before = (self.prepared.len(), self.prepare_failed.len());
        self.prepared.retain(|r| wanted.contains(r));
        self.prepare_failed.retain(|r| wanted.contains(r));
        self.preparing.retain(|r| wanted.contains(r));
        // Every role the plan gives here is prepared at once (each role runs its own
        // `on_prepare`): a receiver taking several roles is ready for all of them after one
        // preparation, not one after another.
        for r in &wanted {
            if !self.prepared.contains(r)
                && !self.prepare_failed.contains(r)
                && self.preparing.insert(r.clone())
            {
                actions.push(Action::Prepare(r.clone()));
            }
        }
        if (self.prepared.len(), self.prepare_failed.len()) != before {
            actions.push(Action::RecordChanged);
        }
    }
}

/// Starts the wait of every role `me` holds that `plan` gives to another live member that
/// prepares it (the receiver starts preparing it on the same plan), and forgets the waits
/// that are over: the role is no longer held by `me`, or its receiver answered, left or no
/// longer prepares it.
fn track_awaiting(
    awaiting: &mut BTreeMap<(RoleName, InstanceId), Instant>,
    membership: &Membership,
    me: &InstanceId,
    (plan, holders, live): (
        &Placement,
        &BTreeMap<RoleName, InstanceId>,
        &BTreeSet<InstanceId>,
    ),
    now: Instant,
) {
    awaiting.retain(|(role, to), _| {
        holders.get(role) == Some(me) && live.contains(to) && prepares(membership, role, to)
    });
    for (role, holder) in holders {
        if holder == me
            && let Some(to) = plan.preferred.get(role).map(|p| &p.instance)
            && to != me
            && live.contains(to)
            && prepares(membership, role, to)
        {
            awaiting.entry((role.clone(), to.clone())).or_insert(now);
        }
    }
}

/// Whether `to`'s record says it prepares `role` and has not answered yet (neither ready nor
/// failed): a holder moving the role there waits for the answer (at most `prepare_timeout`).
fn prepares(membership: &Membership, role: &RoleName, to: &InstanceId) -> bool {
    membership.record(to).is_some_and(|r| {
        r.prepares.contains(role) && !r.prepared.contains(role) && !r.prepare_failed.contains(role)
    })
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

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
