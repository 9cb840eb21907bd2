//! [`RoleManager`]: many role elections over one NATS connection and one bucket watcher.

pub(crate) mod backend;
mod backstop;
mod bucket;
mod builder;
mod connection;
pub(crate) mod events;
mod follower;
mod group_api;
mod group_task;
pub(crate) mod groups;
mod handle;
mod health_task;
mod liveness;
mod member_link;
mod member_record;
pub(crate) mod move_request;
mod moves;
#[cfg(feature = "negative-controls")]
pub(crate) mod negative;
mod placement_link;
mod placement_tasks;
mod probe;
mod role_driver;
mod role_input;
mod role_report;
mod role_runner;
mod role_set;
mod session_link;
mod session_task;
pub(crate) mod shared;
pub(crate) mod slot_count;
mod slots;
mod spec;
pub(crate) mod startup;
pub(crate) mod status;
mod statuses;
mod successor;
mod ticker;
mod timer_queue;
mod vacancy;
pub(crate) mod view;
mod watcher;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};
use uuid::Uuid;

pub use builder::RoleManagerBuilder;
pub use connection::connect;
#[cfg(feature = "tooling")]
pub(crate) use connection::connect_observed;
pub use events::{HolderInfo, RoleEvent};
pub use groups::{
    GroupAssignment, GroupCallbacks, GroupHandle, GroupMember, GroupRevoke, GroupSpec,
    MemberCallbacks,
};
pub use handle::RoleHandle;
#[cfg(feature = "http")]
pub(crate) use placement_link::FreezeChanges;
pub use spec::RoleSpec;
pub use startup::{StartProgress, StartStep};
pub use status::RoleStatus;

pub use crate::core::{BucketSettings, StartRetry};
pub use crate::history::HistoryRecorder;
pub use crate::placement::{
    DrainRecord, FreezeRecord, Frozen, Joining, MemberList, MemberRecord, MemberView, Move,
    PlacementSettings, Preferred, PreferredReason, Simulation, Takeover, WhatIf, ZoneShare,
    simulate,
};
pub use crate::store::TtlMode;

use crate::core::ReleaseReason;
use crate::error::Error;
use crate::health::HealthState;
use crate::leadership::Leadership;
use crate::names::{InstanceId, RoleName};
pub use crate::store::ServerErrors;
use role_input::RoleInput;
use shared::{RoleSlot, Shared};

/// Runs many role elections over one NATS connection and one bucket watcher.
///
/// Dropping the manager without [`RoleManager::shutdown`] stops nothing gracefully: held roles
/// then expire after their TTL. Always call `shutdown` for a fast hand-over.
pub struct RoleManager {
    shared: Arc<Shared>,
    cancel: CancellationToken,
    epoch: u64,
    /// Adds and removes the roles (shared with the group task).
    set: Arc<role_set::RoleSet>,
    /// Ends the group task (first thing at shutdown: no member is added while roles stop).
    groups_cancel: CancellationToken,
    /// The background tasks (watcher, connection monitor, placement, health); shutdown waits
    /// for them.
    tasks: TaskTracker,
    /// The health checker's verdict (`None` without a health checker).
    health: Option<watch::Receiver<HealthState>>,
    /// Where the liveness probes of the watcher and the reaper go ([`RoleManager::probe`]).
    probes: probe::Probes,
    /// The bucket's key-value view (move requests read through it).
    kv: async_nats::jetstream::kv::Store,
}

impl std::fmt::Debug for RoleManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoleManager")
            .field("instance", &self.shared.instance)
            .field("bucket", &self.shared.store.bucket())
            .finish_non_exhaustive()
    }
}

impl RoleManager {
    /// This instance's id.
    #[must_use]
    pub fn instance_id(&self) -> &InstanceId {
        &self.shared.instance
    }

    /// Random id of this process start (written into every lease).
    #[must_use]
    pub fn incarnation(&self) -> Uuid {
        self.shared.incarnation
    }

    /// The bucket name.
    #[must_use]
    pub fn bucket(&self) -> &str {
        self.shared.store.bucket()
    }

    /// Starts taking part in one more role.
    ///
    /// # Errors
    /// [`Error::InvalidTiming`] if the role's timing breaks a rule of [`Timing::validate`](crate::core::Timing::validate);
    /// [`Error::BucketMaxAge`] if the bucket has a `max_age` (and this instance campaigns for
    /// the role: protocol v2 role keys are written once per term); [`Error::RoleExists`] if the role is already
    /// managed, or if it is named like a member of one of the manager's groups (`shard-7` next
    /// to the group `shard`, at any index: a count record can raise the count to it, protocol
    /// Q14); [`Error::RoleStopping`] while its [`RoleManager::remove_role`] has not
    /// finished; [`Error::Stopped`] after shutdown; [`Error::InvalidSlots`] (a role with
    /// [`RoleSpec::slots`] is added as one role per slot, all or none);
    /// [`Error::SlotCountUnchecked`] for a role with slots this instance campaigns for whose
    /// count was not checked against the bucket's slot count record in this bucket (at start,
    /// or by [`RoleManager::add_role_checked`], which adds such roles).
    pub fn add_role(&self, spec: RoleSpec) -> Result<(), Error> {
        if self.cancel.is_cancelled() {
            return Err(Error::Stopped);
        }
        let member = self
            .shared
            .groups
            .entries()
            .keys()
            .any(|group| crate::groups::member_index(group, &spec.name).is_some());
        if member {
            return Err(Error::RoleExists(spec.name));
        }
        if spec.slots != 1 {
            spec.validate()?;
            if !self.slot_count_checked(&spec) {
                return Err(Error::SlotCountUnchecked {
                    role: spec.name,
                    slots: spec.slots,
                });
            }
            return self.add_slots(spec);
        }
        self.set.add_role(spec)
    }

    /// Starts taking part in one more role, as [`RoleManager::add_role`]; a role with
    /// [`RoleSpec::slots`] this instance campaigns for is first checked against the bucket's
    /// slot count record `control.slots.<role>` (protocol Q15): the record is created with
    /// the spec's count if there is none, and otherwise must hold the same count.
    ///
    /// # Errors
    /// As [`RoleManager::add_role`], and before any slot is added:
    /// [`Error::SlotCountConflict`] when the record holds another count,
    /// [`Error::SlotCountRecordInvalid`] when it holds no valid record, [`Error::Kv`] when
    /// the record cannot be read or written (nothing is added).
    pub async fn add_role_checked(&self, spec: RoleSpec) -> Result<(), Error> {
        if spec.slots != 1 && spec.campaign {
            spec.validate()?;
            if self.cancel.is_cancelled() {
                return Err(Error::Stopped);
            }
            let epoch = self.shared.bucket.epoch();
            slot_count::ensure(
                &self.shared.store,
                &spec.name,
                spec.slots,
                self.shared.instance.as_str(),
                spec.timing.operation_timeout,
            )
            .await?;
            self.shared
                .slot_counts
                .checked(&spec.name, epoch, spec.slots);
        }
        self.add_role(spec)
    }

    /// Whether `spec`, a role with slots, may be added: an observer opens no slot; a
    /// candidate's count must have been checked against the record in the current bucket.
    fn slot_count_checked(&self, spec: &RoleSpec) -> bool {
        !spec.campaign
            || self.shared.slot_counts.is_checked(
                &spec.name,
                self.shared.bucket.epoch(),
                spec.slots,
            )
    }

    /// With placement, an instance is a member, and a member is live while its session is
    /// (protocol Q9): see [`RoleSet::ensure_member_session`](role_set::RoleSet).
    pub(crate) fn ensure_member_session(&self, member_ttl: Duration) {
        self.set.ensure_member_session(member_ttl);
    }

    /// Stops taking part in a role: releases it gracefully if held and waits until the demote
    /// callback returned. A role added with [`RoleSpec::slots`] is removed with every slot.
    ///
    /// # Errors
    /// [`Error::UnknownRole`] if the role is not managed; [`Error::MemberOfGroup`] if it is a
    /// member of one of the manager's groups (the group's count decides its members:
    /// [`RoleManager::set_group_count`]).
    pub async fn remove_role(&self, role: &RoleName) -> Result<(), Error> {
        let member = self.shared.groups.entries().keys().find_map(|group| {
            crate::groups::member_index(group, role).map(|index| (group.clone(), index))
        });
        if let Some((group, index)) = member
            && self.shared.managed.roles().contains_key(role)
        {
            return Err(Error::MemberOfGroup {
                role: role.clone(),
                group,
                index,
            });
        }
        if let Some(slots) = self.slots_of(role) {
            return self.remove_slots(slots).await;
        }
        self.set.remove_role(role).await
    }

    /// Gives a held role up voluntarily (graceful hand-over) and does not campaign for it
    /// again for `cooldown`.
    ///
    /// Not `async`: it only asks the role's task and returns at once, before the hand-over
    /// (`on_demote`, then the lease delete) has happened. To wait for it, watch the role's
    /// status ([`RoleHandle::watch`]: `wait_for(|s| !s.is_leader())`) or
    /// [`RoleManager::events`] (`Demoted` with reason `released`).
    /// [`RoleManager::remove_role`] and [`RoleManager::shutdown`] do wait.
    ///
    /// A role added with [`RoleSpec::slots`] is released as a whole: the slot this instance
    /// holds is given up and no slot of the role is campaigned for during `cooldown` (a slot's
    /// own name, `indexer.1`, releases that slot only).
    ///
    /// # Errors
    /// [`Error::UnknownRole`] if the role is not managed.
    pub fn release(&self, role: &RoleName, cooldown: Duration) -> Result<(), Error> {
        if let Some(slots) = self.slots_of(role) {
            for slot in &slots {
                self.shared
                    .send(slot, RoleInput::Release(ReleaseReason::Requested, cooldown));
            }
            return Ok(());
        }
        if self
            .shared
            .send(role, RoleInput::Release(ReleaseReason::Requested, cooldown))
        {
            Ok(())
        } else {
            Err(Error::UnknownRole(role.clone()))
        }
    }

    /// Asks that `role`, held by any instance, be handed to instance `to` — and to nobody
    /// else — and waits for the outcome (protocol Q13; `nats-roles move`): the target checks
    /// it can take the role and accepts (or refuses, with a reason), the holder releases
    /// gracefully (`on_demote`, then the lease delete), the target claims at once while the
    /// other candidates hold back for `options.grace`, and placement keeps the role on the
    /// target for `options.hold`. `options.by` defaults to this instance's id.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for options out of range; [`Error::Timeout`] or
    /// [`Error::Kv`] when a read or write of the request fails. A move that did not happen is
    /// an `Ok` outcome saying why ([`MoveOutcome`](crate::moves::MoveOutcome)).
    pub async fn move_role(
        &self,
        role: &RoleName,
        to: &InstanceId,
        options: &crate::moves::MoveOptions,
    ) -> Result<crate::moves::MoveOutcome, Error> {
        let mut options = options.clone();
        if options.by.is_empty() {
            options.by = self.shared.instance.to_string();
        }
        let bucket = self.move_bucket();
        move_request::request_move(&bucket, role, to, &options).await
    }

    /// Deletes `role`'s move record: ends a move in progress and placement's hold of a moved
    /// role. Returns the record deleted (`None`: there was none).
    ///
    /// # Errors
    /// As [`RoleManager::move_role`].
    pub async fn cancel_move(
        &self,
        role: &RoleName,
    ) -> Result<Option<crate::moves::MoveRecord>, Error> {
        let bucket = self.move_bucket();
        move_request::cancel_move(&bucket, role).await
    }

    /// The managed roles.
    #[must_use]
    pub fn roles(&self) -> Vec<RoleName> {
        let mut v: Vec<_> = self.shared.managed.roles().keys().cloned().collect();
        v.sort();
        v
    }

    /// A handle on a managed role (`is_leader`, `leadership`, status changes).
    #[must_use]
    pub fn role(&self, role: &RoleName) -> Option<RoleHandle> {
        self.shared.managed.roles().get(role).map(|s| RoleHandle {
            role: role.clone(),
            status: s.status.clone(),
            current: s.current.clone(),
        })
    }

    /// The current term of a role, if this instance holds it.
    #[must_use]
    pub fn leadership(&self, role: &RoleName) -> Option<Leadership> {
        self.shared
            .managed
            .roles()
            .get(role)
            .and_then(|s| s.current.borrow().clone())
            .filter(Leadership::is_valid)
    }

    /// Whether this instance holds `role` right now (term valid, deadline ahead).
    #[must_use]
    pub fn is_leader(&self, role: &RoleName) -> bool {
        self.leadership(role).is_some()
    }

    /// The log of every transition (promotions, demotions, failures, holder changes of every
    /// role in the bucket), for logging and auditing: a broadcast channel that drops the
    /// oldest events for a receiver that falls behind. To follow one role, use
    /// [`RoleHandle::watch`] (its latest status, never lagging) or the role's callbacks.
    #[must_use]
    pub fn events(&self) -> broadcast::Receiver<RoleEvent> {
        self.shared.events.subscribe()
    }

    /// The holder of any role in the bucket, including roles this instance does not campaign
    /// for (observer view, e.g. to route requests to the holder's advertised address). For a
    /// role this instance campaigns for, [`RoleHandle::watch`] carries the holder too.
    #[must_use]
    pub fn observe(&self, role: &RoleName) -> watch::Receiver<Option<HolderInfo>> {
        let mut holders = self.shared.bucket.holders();
        holders
            .entry(role.clone())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe()
    }

    /// Placement: starts (`true`) or ends draining. A draining instance hands every role over
    /// gracefully, one at a time within the move budget, and takes none another live member
    /// is preferred for. Without placement this does nothing and returns false.
    ///
    /// This sets the instance's own flag; an operator's drain record in the bucket
    /// (`control.drain.<instance>`, `nats-roles drain`) drains it too: it drains while either
    /// asks ([`RoleManager::is_draining`]), so `set_draining(false)` does not end a drain the
    /// record asks for (`nats-roles undrain` does).
    pub fn set_draining(&self, draining: bool) -> bool {
        match &self.shared.placement {
            Some(p) => {
                p.set_local_draining(draining);
                true
            }
            None => false,
        }
    }

    /// Placement: freezes (`Some(reason)`) or unfreezes (`None`) the voluntary moves of every
    /// instance of the deployment, by writing or deleting the bucket's freeze record
    /// (`control.freeze`; docs/placement.md). Vacant roles are still taken while frozen.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the write's outcome is unknown; [`Error::Kv`] when it failed.
    pub async fn set_freeze(&self, reason: Option<&str>) -> Result<(), Error> {
        use crate::core::WriteOutcome;
        use crate::placement::{FREEZE_KEY, FreezeRecord};
        let timeout = self.freeze_timeout();
        let (payload, delete) = match reason {
            Some(r) => (
                FreezeRecord::new(r, self.shared.instance.as_str()).to_bytes(),
                false,
            ),
            None => (bytes::Bytes::new(), true),
        };
        match self
            .shared
            .store
            .lease_write(FREEZE_KEY, None, None, payload, delete, timeout)
            .await
        {
            WriteOutcome::Ok { .. } => Ok(()),
            WriteOutcome::Unknown => Err(Error::Timeout(timeout)),
            WriteOutcome::Failed(kind) => Err(Error::Kv(kind)),
            WriteOutcome::Conflict | WriteOutcome::Retry => {
                Err(Error::Kv(crate::core::FailureKind::Unavailable))
            }
        }
    }

    /// Placement: why voluntary moves are frozen now (operator, a member's configuration, or
    /// the storm breaker); `None` when they are not, or without placement.
    #[must_use]
    pub fn frozen(&self) -> Option<crate::placement::Frozen> {
        self.shared.placement.as_ref()?.frozen()
    }

    /// The bucket as move requests read and write it.
    fn move_bucket(&self) -> move_request::MoveBucket<'_> {
        move_request::MoveBucket {
            kv: &self.kv,
            store: &self.shared.store,
            op_timeout: self.freeze_timeout(),
        }
    }

    fn freeze_timeout(&self) -> Duration {
        self.shared
            .placement
            .as_ref()
            .map_or(Duration::from_secs(5), |p| p.settings.operation_timeout)
    }

    /// Placement: every member in the membership table (those holding nothing and silent ones
    /// included) with the roles the plan gives it and the roles it holds, why voluntary moves
    /// are frozen and where members disagree on settings (`GET /api/members`). Empty without
    /// placement.
    #[must_use]
    pub fn member_list(&self) -> crate::placement::MemberList {
        let holders: BTreeMap<RoleName, InstanceId> = self
            .holders()
            .into_iter()
            .filter_map(|h| h.holder.map(|id| (h.role, id)))
            .collect();
        let Some(p) = &self.shared.placement else {
            return crate::placement::member_list(
                Some(&self.shared.instance),
                false,
                &[],
                &BTreeMap::new(),
                &holders,
                None,
            );
        };
        let view = p.view();
        let now = Instant::now();
        let records: Vec<(crate::placement::MemberRecord, bool)> = view
            .membership
            .records()
            .map(|r| (r.clone(), view.membership.is_live(&r.instance, now)))
            .collect();
        crate::placement::member_list(
            Some(&self.shared.instance),
            true,
            &records,
            &view.preferred,
            &holders,
            view.frozen.as_ref(),
        )
    }

    /// Placement: the moves the plan would make from what this instance sees now (live
    /// members' records and the holders) after `changes` (`nats-roles plan`,
    /// `POST /api/plan/simulate`; docs/placement.md).
    ///
    /// # Errors
    /// A message when a change names an unknown member, a joining id is taken, or a weight or
    /// zone is malformed.
    pub fn simulate(&self, changes: &WhatIf) -> Result<Simulation, String> {
        let members = self.members();
        changes.check(&members)?;
        let holders: BTreeMap<RoleName, InstanceId> = self
            .holders()
            .into_iter()
            .filter_map(|h| h.holder.map(|id| (h.role, id)))
            .collect();
        Ok(simulate(&members, &holders, changes))
    }

    /// Whether placement is enabled on this instance ([`RoleManagerBuilder::placement`]).
    #[must_use]
    pub fn placement_enabled(&self) -> bool {
        self.shared.placement.is_some()
    }

    #[cfg(feature = "http")]
    /// Placement: follows why voluntary moves are frozen (`None` without placement).
    pub(crate) fn freeze_changes(&self) -> Option<placement_link::FreezeChanges> {
        self.shared.placement.as_ref().map(|p| p.freeze_changes())
    }

    /// Placement: the membership records of the live members (empty without placement).
    #[must_use]
    pub fn members(&self) -> Vec<crate::placement::MemberRecord> {
        self.shared
            .placement
            .as_ref()
            .map(|p| p.members())
            .unwrap_or_default()
    }

    /// Placement: where the plan wants `role` and why (`None` without placement).
    #[must_use]
    pub fn preferred(&self, role: &RoleName) -> Option<crate::placement::Preferred> {
        self.shared.placement.as_ref()?.preferred(role)
    }

    /// What the health checker says about this instance: healthy or not, failing since when,
    /// cooling down until when (`None` without a [`RoleManagerBuilder::health_checker`]).
    /// While it is not [`healthy`](HealthState::healthy) its roles are released and it does
    /// not campaign, and `/readyz` answers 503 with [`HealthState::reason`].
    #[must_use]
    pub fn health(&self) -> Option<HealthState> {
        self.health.as_ref().map(|rx| rx.borrow().clone())
    }

    /// Resolves once the watcher has delivered the bucket's current state.
    pub async fn caught_up(&self) {
        let mut rx = self.shared.bucket.caught_up.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Graceful shutdown: releases every held role (cancel, run `on_demote`, CAS-delete),
    /// waits for all demote callbacks, then stops the watcher.
    ///
    /// # Errors
    /// [`Error::ShutdownTimeout`] when roles were not released within `timeout` (their leases
    /// then expire after the TTL).
    pub async fn shutdown(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        self.groups_cancel.cancel();
        if let Some(p) = &self.shared.placement {
            // Others stop preferring this instance before its roles become vacant, so the
            // preferred members acquire first (docs/placement.md).
            let wait = p.settings.operation_timeout.min(timeout / 4);
            p.drain_and_wait(wait).await;
        }
        let slots: Vec<(RoleName, RoleSlot)> = {
            let mut roles = self.shared.managed.roles();
            // Still stopping (they may hold terms): not "nobody's" for the watcher until the
            // sessions end below.
            self.shared.managed.stopping().extend(roles.keys().cloned());
            roles.drain().collect()
        };
        for (_, slot) in &slots {
            let _ = slot.inbox.send(RoleInput::Stop);
        }
        let mut late = Vec::new();
        for (name, slot) in slots {
            let mut task = slot.task;
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                warn!(role = %name, "role did not stop in time");
                task.abort();
                late.push(name);
            }
        }
        // Q4: the sessions end after the releases (their roles' keys are deleted already; a
        // role that did not stop in time keeps its session's term until the session expires).
        let sessions: Vec<shared::SessionClass> = self
            .shared
            .managed
            .sessions()
            .drain()
            .map(|(_, c)| c)
            .collect();
        for class in sessions {
            if !late.is_empty() {
                // A role aborted above may still hand its term to the application until its
                // deadline: deleting the session would let another instance act before that.
                // The session key expires after its TTL instead.
                class.task.abort();
                continue;
            }
            let _ = class.inbox.send(session_link::SessionInput::Stop);
            let mut task = class.task;
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                task.abort();
            }
        }
        self.cancel.cancel();
        self.tasks.close();
        let _ =
            tokio::time::timeout_at(deadline + Duration::from_millis(100), self.tasks.wait()).await;
        // Roles aborted above never reported STOPPED: end every series of this manager.
        self.shared.tap.manager_stopped(&self.shared.instance);
        if late.is_empty() {
            info!("role manager stopped");
            Ok(())
        } else {
            Err(Error::ShutdownTimeout {
                timeout,
                roles: late,
            })
        }
    }
}

impl Drop for RoleManager {
    fn drop(&mut self) {
        self.cancel.cancel();
        for slot in self.shared.managed.roles().values() {
            slot.task.abort();
        }
        for class in self.shared.managed.sessions().values() {
            class.task.abort();
        }
        // The aborted roles report nothing more: a gauge must not show them held.
        self.shared.tap.manager_stopped(&self.shared.instance);
    }
}
