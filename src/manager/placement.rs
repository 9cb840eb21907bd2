//! The placement controller of one manager (docs/placement.md): publishes this instance's
//! membership record, feeds the membership table from the watcher, and acts on the plan —
//! per-role campaign hold-back for vacancies another live member is preferred for, and
//! voluntary graceful releases of roles the plan gives to someone else (one move in flight,
//! a move budget per interval, a per-role cooldown, hysteresis for spreading).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_nats::jetstream::kv::{Entry, Operation};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::role_task::RoleInput;
use super::shared::Shared;
use super::status::RoleStatus;
use crate::config::{PlacementConfig, Takeover};
use crate::core::{FailureKind, KeyState, ReleaseReason, WriteOutcome};
use crate::names::{InstanceId, RoleName};
use crate::placement::{
    Candidate, Held, MEMBER_PREFIX, MEMBER_VERSION, MemberRecord, Membership, MembershipTiming,
    Placement, Preferred, ReleaseRules, choose_release, hold_back, plan, vacancies_filled,
};
use crate::status::RoleState;
use crate::tap::PlacementEvent;

/// How often the controller re-plans without news (silence of members, windows, budget).
const TICK: Duration = Duration::from_millis(100);

/// Placement settings of one manager.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) config: PlacementConfig,
    /// TTL of the membership record.
    pub(crate) member_ttl: Duration,
    /// Longest wait for one KV write.
    pub(crate) operation_timeout: Duration,
    /// Default priority of this instance.
    pub(crate) priority: i32,
    /// Advertised HTTP address.
    pub(crate) http: Option<String>,
}

/// One role this instance takes part in, as placement sees it.
#[derive(Debug)]
struct OwnRole {
    priority: i32,
    takeover: Takeover,
    campaign: bool,
    /// Last hold-back and preference sent to the role task.
    sent: Option<(Duration, Option<Preferred>)>,
}

#[derive(Debug)]
struct Controller {
    membership: Membership,
    roles: BTreeMap<RoleName, OwnRole>,
    /// Last voluntary move of each role (per-role cooldown).
    moved_at: BTreeMap<RoleName, Instant>,
    /// The voluntary move in flight: role and when it was asked for.
    in_flight: Option<(RoleName, Instant)>,
    /// Start of the current budget interval and moves made in it.
    budget: (Instant, u32),
    last: Placement,
    /// Roles this instance will not take now (published in its record).
    unavailable: BTreeSet<RoleName>,
    /// Planned roles without a holder, and since when (this instance's view).
    vacant_since: BTreeMap<RoleName, Instant>,
}

/// What the last stored membership record said (so a caller can wait until it is out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Written {
    /// Its draining flag.
    pub(crate) draining: bool,
    /// Its healthy flag.
    pub(crate) healthy: bool,
}

/// Placement state shared by the watcher, the controller tasks and the manager.
pub(crate) struct PlacementShared {
    pub(crate) settings: Settings,
    state: Mutex<Controller>,
    /// Whether this instance is draining (config or admin action).
    pub(crate) draining: watch::Sender<bool>,
    /// Whether this instance's health check passes.
    pub(crate) healthy: watch::Sender<bool>,
    /// Bumped when the record's content changed (roles added); the heartbeat rewrites it.
    pub(crate) record_changed: watch::Sender<u64>,
    /// The flags of the last record written.
    pub(crate) written: watch::Sender<Option<Written>>,
    /// Wakes the controller (a role changed hands).
    pub(crate) wake: tokio::sync::Notify,
    started_at: String,
}

impl std::fmt::Debug for PlacementShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacementShared")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl PlacementShared {
    pub(crate) fn new(settings: Settings) -> Self {
        let timing = MembershipTiming {
            stability_window: settings.config.stability_window,
            leave_delay: settings.config.leave_delay,
        };
        let draining = settings.config.draining;
        Self {
            settings,
            state: Mutex::new(Controller {
                membership: Membership::new(timing),
                roles: BTreeMap::new(),
                moved_at: BTreeMap::new(),
                in_flight: None,
                budget: (Instant::now(), 0),
                last: Placement::default(),
                unavailable: BTreeSet::new(),
                vacant_since: BTreeMap::new(),
            }),
            draining: watch::channel(draining).0,
            healthy: watch::channel(true).0,
            record_changed: watch::channel(0).0,
            written: watch::channel(None).0,
            wake: tokio::sync::Notify::new(),
            started_at: crate::value::now_rfc3339(),
        }
    }

    /// The bucket was recreated: the membership table accepts the new bucket's revisions.
    pub(crate) fn bucket_reset(&self) {
        self.state().membership.bucket_reset();
    }

    fn state(&self) -> MutexGuard<'_, Controller> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a role this instance takes part in (call without holding the roles lock).
    pub(crate) fn add_role(
        &self,
        role: RoleName,
        priority: i32,
        takeover: Takeover,
        campaign: bool,
    ) {
        self.state().roles.insert(
            role,
            OwnRole {
                priority,
                takeover,
                campaign,
                sent: None,
            },
        );
        self.record_changed.send_modify(|g| *g += 1);
    }

    /// Forgets a role this instance no longer takes part in.
    pub(crate) fn remove_role(&self, role: &RoleName) {
        {
            let mut state = self.state();
            state.roles.remove(role);
            state.moved_at.remove(role);
        }
        self.record_changed.send_modify(|g| *g += 1);
    }

    /// This instance's record as it should be stored now.
    fn record(&self, shared: &Shared) -> MemberRecord {
        let state = self.state();
        let roles: BTreeMap<RoleName, i32> = state
            .roles
            .iter()
            .filter(|(_, r)| r.campaign)
            .map(|(n, r)| (n.clone(), r.priority))
            .collect();
        let pinned = state
            .roles
            .iter()
            .filter(|(_, r)| r.campaign && r.takeover == Takeover::Never)
            .map(|(n, _)| n.clone())
            .collect();
        let unavailable = state
            .unavailable
            .iter()
            .filter(|r| roles.contains_key(*r))
            .cloned()
            .collect();
        drop(state);
        MemberRecord {
            v: MEMBER_VERSION,
            instance: shared.instance.clone(),
            incarnation: shared.incarnation,
            weight: self.settings.config.weight,
            priority: self.settings.priority,
            roles,
            pinned,
            unavailable,
            draining: *self.draining.borrow(),
            healthy: *self.healthy.borrow(),
            http: self.settings.http.clone(),
            started_at: Some(self.started_at.clone()),
            heartbeat_ms: u64::try_from(heartbeat(self.settings.member_ttl).as_millis())
                .unwrap_or(u64::MAX),
        }
    }

    /// The plan as last computed (status, API).
    pub(crate) fn preferred(&self, role: &RoleName) -> Option<Preferred> {
        self.state().last.preferred.get(role).cloned()
    }

    /// Live members' records (API).
    pub(crate) fn members(&self) -> Vec<MemberRecord> {
        let now = Instant::now();
        let state = self.state();
        state
            .membership
            .records()
            .filter(|r| state.membership.is_live(&r.instance, now))
            .cloned()
            .collect()
    }
}

/// Whether this instance will not take a role now, from the role's status: it cools down
/// (after a release with a cooldown, or an eviction), or its role task stopped on a failure
/// (it cannot acquire the role). Published in the membership record so that the plan gives
/// the role to someone else instead of handing it here and waiting a claim grace each time.
fn declines(status: &RoleStatus, now: Instant) -> bool {
    status.cooldown_until.is_some_and(|until| until > now)
        || (!status.is_leader() && status.failure.is_some_and(FailureKind::is_permanent))
}

/// Heartbeat period of a record with this TTL.
fn heartbeat(ttl: Duration) -> Duration {
    ttl / 4
}

/// The watcher saw a `member.` key change. Foreign or invalid values are ignored with a
/// warning. Re-plans at once, so that hold-backs reach the role tasks before any role entry
/// that follows in the stream.
pub(crate) fn observe_member(shared: &Shared, p: &PlacementShared, entry: &Entry) {
    let now = Instant::now();
    let Some(id) = entry
        .key
        .strip_prefix(MEMBER_PREFIX)
        .and_then(|id| InstanceId::new(id).ok())
    else {
        warn!(key = %entry.key, "ignoring a member key that is not a valid instance id");
        return;
    };
    {
        let mut state = p.state();
        match entry.operation {
            Operation::Put => match MemberRecord::parse(&entry.key, &entry.value) {
                Some(record) => {
                    if record.instance == shared.instance
                        && record.incarnation != shared.incarnation
                    {
                        debug!(other = %record.incarnation, "member record of another incarnation of this instance id");
                    }
                    state.membership.observe_put(record, entry.revision, now);
                }
                None => warn!(key = %entry.key, "ignoring an invalid or foreign member record"),
            },
            Operation::Delete => state
                .membership
                .observe_gone(&id, false, entry.revision, now),
            Operation::Purge => state
                .membership
                .observe_gone(&id, true, entry.revision, now),
        }
    }
    replan(shared, p, now);
}

/// Computes the plan and acts on it: hold-backs, statuses, at most one voluntary release.
pub(crate) fn replan(shared: &Shared, p: &PlacementShared, now: Instant) {
    let cfg = &p.settings.config;
    let holders: BTreeMap<RoleName, InstanceId> = shared
        .holders()
        .iter()
        .filter_map(|(r, h)| {
            h.borrow()
                .as_ref()
                .and_then(|h| h.holder.clone())
                .map(|id| (r.clone(), id))
        })
        .collect();
    let mut state = p.state();
    state.membership.refresh(now);
    let members = state.membership.effective();
    let placement = plan(&members, &holders);
    // Silent members (crashed, not yet expired or within the leave delay) are never waited
    // for: vacancies they are preferred for go to whom the plan without them prefers.
    let live: Vec<Candidate> = members
        .iter()
        .filter(|c| state.membership.is_live(&c.id, now))
        .cloned()
        .collect();
    let live_plan = (live.len() != members.len()).then(|| plan(&live, &holders));
    shared.tap.placement(
        &shared.instance,
        PlacementEvent::Members {
            live: u64::try_from(live.len()).unwrap_or(u64::MAX),
        },
    );
    let me = &shared.instance;
    let i_count = members.iter().any(|c| &c.id == me);
    let roles = shared.roles();
    let mut statuses: BTreeMap<&RoleName, RoleState> = BTreeMap::new();
    let mut unavailable: BTreeSet<RoleName> = BTreeSet::new();
    for (name, slot) in roles.iter() {
        let status = slot.status.borrow();
        statuses.insert(name, status.state);
        if state.roles.get(name).is_some_and(|r| r.campaign) && declines(&status, now) {
            unavailable.insert(name.clone());
        }
    }
    if unavailable != state.unavailable {
        // The record says what this instance will not take: rewritten at once.
        debug!(?unavailable, "roles this instance will not take changed");
        state.unavailable = unavailable;
        p.record_changed.send_modify(|g| *g += 1);
    }

    // Hold-back and preference per own role.
    let names: Vec<RoleName> = state.roles.keys().cloned().collect();
    for name in &names {
        let preferred = placement.preferred.get(name).cloned();
        let fallback = live_plan.as_ref().and_then(|lp| lp.preferred.get(name));
        let delay = hold_back(
            me,
            preferred.as_ref(),
            fallback,
            |i| state.membership.is_live(i, now),
            cfg.claim_grace,
        );
        let next = (delay, preferred);
        if let Some(own) = state.roles.get_mut(name)
            && own.sent.as_ref() != Some(&next)
            && let Some(slot) = roles.get(name)
        {
            let _ = slot.inbox.send(RoleInput::Placement {
                delay: next.0,
                preferred: next.1.clone(),
            });
            own.sent = Some(next);
        }
    }

    // The move in flight ends once another instance holds the role, or the vacancy had its
    // claim grace, or it takes far too long.
    if let Some((role, at)) = state.in_flight.clone() {
        let holder = holders.get(&role);
        let done = match holder {
            Some(h) => h != me,
            None => now >= at + cfg.claim_grace + p.settings.operation_timeout,
        } || now >= at + shared.drain_timeout + p.settings.member_ttl * 2;
        if done {
            state.in_flight = None;
        }
    }
    // A planned role vacant for longer than a hand-over takes (the claim grace and one
    // operation) is stuck: no target takes it. Hand-overs in flight hold spreading back; stuck
    // vacancies do not (they are planned as taken by their target).
    let vacant: BTreeSet<&RoleName> = placement
        .preferred
        .keys()
        .filter(|r| !holders.contains_key(*r))
        .collect();
    state.vacant_since.retain(|r, _| vacant.contains(r));
    for r in &vacant {
        state.vacant_since.entry((*r).clone()).or_insert(now);
    }
    let hand_over = cfg.claim_grace + p.settings.operation_timeout;
    let stuck: BTreeSet<RoleName> = state
        .vacant_since
        .iter()
        .filter(|(_, since)| now >= **since + hand_over)
        .map(|(r, _)| r.clone())
        .collect();
    let spread_settled = vacant.iter().all(|r| stuck.contains(*r));
    if now >= state.budget.0 + cfg.move_interval {
        state.budget = (now, 0);
    }

    // At most one voluntary release, and only once this instance counts in the plan itself.
    // An unhealthy instance releases nothing here: its health check releases every role at
    // once, with the health cooldown (a placement release first would run without it).
    if i_count
        && *p.healthy.borrow()
        && state.in_flight.is_none()
        && state.budget.1 < cfg.move_budget
    {
        let held: Vec<Held<'_>> = statuses
            .iter()
            .filter(|(_, s)| **s == RoleState::Leader)
            .map(|(n, _)| Held {
                role: n,
                voluntary: state
                    .roles
                    .get(*n)
                    .is_some_and(|r| r.takeover == Takeover::Voluntary),
                moved_at: state.moved_at.get(*n).copied(),
            })
            .collect();
        let rules = ReleaseRules {
            hysteresis: cfg.hysteresis as usize,
            cooldown: cfg.cooldown,
            spread_settled,
        };
        // Releases are planned as if every stuck vacancy were taken by the member it goes
        // to, so a role no one takes delays no move of another role.
        let filled = vacancies_filled(
            &holders,
            &placement,
            live_plan.as_ref(),
            |i| state.membership.is_live(i, now),
            |r| stuck.contains(r),
        );
        let filled_plan = (filled.len() != holders.len()).then(|| plan(&members, &filled));
        let pick = choose_release(
            me,
            &held,
            filled_plan.as_ref().unwrap_or(&placement),
            |i| state.membership.is_live(i, now),
            rules,
            now,
        );
        if let Some((role, pr)) = pick
            && let Some(slot) = roles.get(role)
        {
            info!(role = %role, to = %pr.instance, reason = %pr.reason, "placement: handing the role over");
            shared.tap.placement(
                &shared.instance,
                PlacementEvent::VoluntaryMove {
                    reason: pr.reason.as_str(),
                },
            );
            // No cooldown in the machine: the hold-back (the role is preferred elsewhere)
            // keeps this instance from taking it straight back, and it may take the role
            // again as soon as the plan prefers it (a machine cooldown would make the
            // preferred member unable to acquire, and the role would bounce).
            let _ = slot
                .inbox
                .send(RoleInput::Release(ReleaseReason::Placement, Duration::ZERO));
            let role = role.clone();
            state.moved_at.insert(role.clone(), now);
            state.in_flight = Some((role, now));
            state.budget.1 += 1;
        }
    }
    drop(roles);
    state.last = placement;
}

/// Re-plans when a role changed hands, and every [`TICK`] (member silence, stability window,
/// leave delay, budget).
pub(crate) async fn run_controller(
    shared: Arc<Shared>,
    p: Arc<PlacementShared>,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            _ = tick.tick() => replan(&shared, &p, Instant::now()),
            () = p.wake.notified() => replan(&shared, &p, Instant::now()),
        }
    }
}

/// Writes and heartbeats this instance's membership record by CAS on its own revision, with
/// the member TTL (P9); rewrites it at once when draining, health or the roles change;
/// deletes it on cancel.
pub(crate) async fn run_heartbeat(
    shared: Arc<Shared>,
    p: Arc<PlacementShared>,
    cancel: CancellationToken,
) {
    let key = format!("{MEMBER_PREFIX}{}", shared.instance);
    let ttl = p.settings.member_ttl;
    let timeout = p.settings.operation_timeout.min(heartbeat(ttl));
    let mut draining = p.draining.subscribe();
    let mut healthy = p.healthy.subscribe();
    let mut changed = p.record_changed.subscribe();
    // Revision of our last write; `None`: read the key first.
    let mut rev: Option<u64> = None;
    let mut adopted = false;
    let mut next = Instant::now();
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => break,
            _ = draining.changed() => {}
            _ = healthy.changed() => {}
            _ = changed.changed() => {}
            () = tokio::time::sleep_until(next) => {}
        }
        let expected = match rev {
            Some(r) => r,
            None => match shared.store.read(&key, timeout).await {
                Ok(KeyState::Absent) => 0,
                Ok(KeyState::Vacant { revision, .. }) => revision,
                Ok(KeyState::Held { revision, .. }) => {
                    if adopted {
                        error!(
                            "the member record of this instance id was rewritten by another \
                             process; instance ids must be unique"
                        );
                    }
                    revision
                }
                Ok(KeyState::Unknown { revision }) => revision,
                Err(kind) => {
                    debug!(
                        error = kind.as_str(),
                        "cannot read the member record; retrying"
                    );
                    next = Instant::now() + heartbeat(ttl) / 2;
                    continue;
                }
            },
        };
        let record = p.record(&shared);
        let written = Written {
            draining: record.draining,
            healthy: record.healthy,
        };
        let outcome = shared
            .store
            .cas(&key, expected, Some(ttl), record.to_bytes(), false, timeout)
            .await;
        match outcome {
            WriteOutcome::Ok { revision } => {
                rev = Some(revision);
                adopted = true;
                p.written.send_replace(Some(written));
                next = Instant::now() + heartbeat(ttl);
            }
            WriteOutcome::Conflict => {
                warn!("member record changed under us; re-reading it");
                rev = None;
                next = Instant::now() + heartbeat(ttl) / 2;
            }
            other => {
                debug!(outcome = ?other, "member record write failed; retrying");
                rev = None;
                next = Instant::now() + heartbeat(ttl) / 4;
            }
        }
    }
    // Graceful stop: delete the record at our revision (anything else is not ours to delete).
    if let Some(r) = rev {
        let outcome = shared
            .store
            .cas(&key, r, None, bytes::Bytes::new(), true, timeout)
            .await;
        debug!(?outcome, "member record deleted");
    }
}

/// Writes the draining flag and waits (bounded) until a record saying so is stored.
pub(crate) async fn drain_and_wait(p: &PlacementShared, timeout: Duration) {
    p.draining.send_replace(true);
    let mut written = p.written.subscribe();
    let _ =
        tokio::time::timeout(timeout, written.wait_for(|w| w.is_some_and(|w| w.draining))).await;
}

/// Sets the healthy flag and waits, at most one operation timeout and not past `cancel`,
/// until a record saying so is stored (the other members then stop preferring this instance
/// before it lets go).
pub(crate) async fn publish_health_and_wait(
    p: &PlacementShared,
    healthy: bool,
    cancel: &CancellationToken,
) {
    p.healthy.send_replace(healthy);
    let mut written = p.written.subscribe();
    tokio::select! {
        () = cancel.cancelled() => {}
        _ = tokio::time::timeout(
            p.settings.operation_timeout,
            written.wait_for(|w| w.is_some_and(|w| w.healthy == healthy)),
        ) => {}
    }
}
