//! The placement tasks of one manager (docs/placement.md): the driver of the placement
//! [`Controller`] (it feeds the controller the membership changes the watcher sees, the
//! roles added and removed and re-plan requests, and carries out its actions — per-role
//! campaign hold-back for vacancies another live member is preferred for, voluntary graceful
//! releases of roles the plan gives to someone else). The record itself is written by
//! `member_record` (every manager has that writer).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::Entry;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::placement_link::{PlacementEnds, PlacementInput, PlacementLink, PlacementView, Written};
use super::role_input::RoleInput;
use super::shared::{RoleSlot, Shared};
use super::status::RoleStatus;
use crate::codec::member::MemberEntry;
use crate::core::{FailureKind, ReleaseReason};
use crate::names::{InstanceId, RoleName};
use crate::placement::controller::{
    Controller, ControllerSettings, Input, PlacementAction, RecordRoles, RoleView, World,
};
use crate::placement::{Frozen, MEMBER_PREFIX, MEMBER_VERSION};
use crate::status::RoleState;
use crate::tap::PlacementEvent;

/// How often the driver re-plans without news while something time-dependent is pending
/// (`Controller::busy`: a move in flight, windows, the budget); otherwise it re-plans only on
/// events (protocol Q9).
const TICK: Duration = Duration::from_millis(100);

/// Runs the controller driver of a manager; returns the sender of the written record's flags,
/// for the member record's writer.
pub(crate) fn spawn(
    tasks: &tokio_util::task::TaskTracker,
    shared: &Arc<Shared>,
    link: &Arc<PlacementLink>,
    ends: PlacementEnds,
    cancel: &CancellationToken,
    span: &tracing::Span,
) -> watch::Sender<Option<Written>> {
    use tracing::Instrument;
    let PlacementEnds {
        inbox,
        record_roles,
        view,
        written,
    } = ends;
    let driver = Driver {
        controller: Controller::new(
            ControllerSettings {
                instance: shared.instance.clone(),
                config: link.settings.config.clone(),
                operation_timeout: link.settings.operation_timeout,
                move_timeout: shared.drain_timeout + link.settings.member_ttl * 2,
                storm_window: link.settings.member_ttl,
            },
            Instant::now(),
        ),
        shared: shared.clone(),
        link: link.clone(),
        record_roles,
        view,
        logged_freeze: std::sync::Mutex::new(None),
        deleting: std::collections::BTreeSet::new(),
        record_dirty: std::sync::Mutex::new(None),
    };
    tasks.spawn(driver.run(inbox, cancel.clone()).instrument(span.clone()));
    written
}

/// The driver of the placement controller: the only owner of its state.
struct Driver {
    controller: Controller,
    shared: Arc<Shared>,
    link: Arc<PlacementLink>,
    record_roles: watch::Sender<Option<RecordRoles>>,
    view: watch::Sender<Arc<PlacementView>>,
    /// The freeze last logged (each freeze and its end are logged once).
    logged_freeze: std::sync::Mutex<Option<Frozen>>,
    /// Stale records of other members this driver is deleting (instance, revision).
    deleting: std::collections::BTreeSet<(InstanceId, u64)>,
    /// While a batch of queued messages is handled: whether the record's roles changed (they
    /// are published once after the batch — building them is linear in the roles, so one
    /// publication per message made a group's count change of thousands of members
    /// quadratic).
    record_dirty: std::sync::Mutex<Option<bool>>,
}

impl Driver {
    /// Handles messages until `cancel`; a [`PlacementInput::Tick`] every [`TICK`] while the
    /// controller has something time-dependent pending (`Controller::busy`), none otherwise.
    async fn run(
        mut self,
        mut inbox: mpsc::UnboundedReceiver<PlacementInput>,
        cancel: CancellationToken,
    ) {
        // The roles the manager started with are all in the first record.
        self.handle_queued(None, &mut inbox);
        self.record_roles
            .send_replace(Some(self.controller.record_roles()));
        let mut next_tick = Some(Instant::now() + TICK);
        loop {
            let input = tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                () = sleep_until_opt(next_tick) => PlacementInput::Tick,
                input = inbox.recv() => match input {
                    Some(input) => input,
                    None => return,
                },
            };
            let ticked = matches!(input, PlacementInput::Tick);
            self.handle_queued(Some(input), &mut inbox);
            let now = Instant::now();
            self.delete_stale(now);
            next_tick = match next_tick {
                _ if !self.controller.busy() => None,
                Some(at) if !ticked && at > now => Some(at),
                _ => Some(now + TICK),
            };
        }
    }

    /// Deletes the records of members whose sessions are gone for the leave delay and a
    /// stability window (protocol Q9: any member may; a CAS on the record's revision, so a
    /// record rewritten meanwhile stays).
    fn delete_stale(&mut self, now: Instant) {
        // Two member TTLs more than the rule's minimum (housekeeping has no hurry).
        let stale = self
            .controller
            .stale_records(now, self.link.settings.member_ttl * 2);
        self.deleting.retain(|d| stale.contains(d));
        for (id, revision) in stale {
            if !self.deleting.insert((id.clone(), revision)) {
                continue;
            }
            let store = self.shared.store.clone();
            let timeout = self.link.settings.operation_timeout;
            tokio::spawn(async move {
                let key = format!("{MEMBER_PREFIX}{id}");
                let outcome = store
                    .cas(&key, revision, None, bytes::Bytes::new(), true, timeout)
                    .await;
                debug!(instance = %id, ?outcome, "deleted the record of a member without a session");
            });
        }
    }

    /// Handles `first` and every message already queued behind it. Re-plan requests
    /// ([`PlacementInput::Changed`], [`PlacementInput::Tick`]) are coalesced into one re-plan
    /// after the batch, unless a member change re-planned after them.
    fn handle_queued(
        &mut self,
        first: Option<PlacementInput>,
        inbox: &mut mpsc::UnboundedReceiver<PlacementInput>,
    ) {
        let mut due = false;
        let mut next = first.or_else(|| inbox.try_recv().ok());
        *self.deferring() = Some(false);
        while let Some(input) = next {
            match input {
                PlacementInput::Changed | PlacementInput::Tick => due = true,
                input => due &= !self.handle(input),
            }
            next = inbox.try_recv().ok();
        }
        let dirty = self.deferring().take();
        if dirty == Some(true) {
            self.publish_record_roles();
        }
        if due {
            self.replan(Instant::now());
        }
    }

    /// Handles one message; whether it re-planned.
    fn handle(&mut self, input: PlacementInput) -> bool {
        let now = Instant::now();
        let mut replanned = false;
        match input {
            PlacementInput::Member { entry, done } => {
                match member_change(&self.controller, &entry) {
                    MemberChange::NotAnInstance => {}
                    MemberChange::Unchanged(input) => self.step(input, now),
                    change => {
                        if let MemberChange::Input(input) = change {
                            self.step(input, now);
                        }
                        // At once, so that hold-backs reach the role runners before any role
                        // entry that follows in the stream (the watcher waits for `done`).
                        self.replan(now);
                        replanned = true;
                    }
                }
                let _ = done.send(());
            }
            PlacementInput::BucketReset => self.step(Input::BucketReset, now),
            PlacementInput::Sessions(live) => {
                self.step(Input::Sessions(live), now);
                self.replan(now);
                replanned = true;
            }
            PlacementInput::Prepared(role, end) => self.step(Input::Prepared(role, end), now),
            PlacementInput::Kept(roles) => self.step(Input::Kept(roles), now),
            PlacementInput::Freeze(record) => {
                self.step(Input::Freeze(record), now);
                self.replan(now);
                replanned = true;
            }
            PlacementInput::RoleAdded(role, own) => self.step(Input::RoleAdded(role, own), now),
            PlacementInput::RoleRemoved(role) => self.step(Input::RoleRemoved(role), now),
            PlacementInput::Changed | PlacementInput::Tick => {
                self.replan(now);
                replanned = true;
            }
        }
        replanned
    }

    /// A step that needs no role runner.
    fn step(&mut self, input: Input, now: Instant) {
        let actions = self.controller.step(input, now);
        self.execute(actions, None);
    }

    /// Re-plans with the holders the watcher sees and the roles' statuses now.
    fn replan(&mut self, now: Instant) {
        let holders = self
            .shared
            .bucket
            .holders()
            .iter()
            .filter_map(|(r, h)| {
                h.borrow()
                    .as_ref()
                    .and_then(|h| h.holder.clone())
                    .map(|id| (r.clone(), id))
            })
            .collect();
        let roles = self.shared.managed.roles();
        let taken = slots_taken(&holders, &self.shared.instance);
        let world = World {
            roles: roles
                .iter()
                .map(|(name, slot)| {
                    let status = super::status::current(&slot.status);
                    let view = RoleView {
                        leader: status.state == RoleState::Leader,
                        declines: declines(&status, now)
                            || sibling_held(name, &holders, &taken, &self.shared.instance),
                    };
                    (name.clone(), view)
                })
                .collect(),
            holders,
            healthy: *self.link.healthy.borrow(),
        };
        let actions = self.controller.step(Input::Replan(world), now);
        self.execute(actions, Some(&roles));
    }

    fn execute(&self, actions: Vec<PlacementAction>, roles: Option<&HashMap<RoleName, RoleSlot>>) {
        let send = |role: &RoleName, input: RoleInput| {
            if let Some(slot) = roles.and_then(|r| r.get(role)) {
                let _ = slot.inbox.send(input);
            }
        };
        for action in actions {
            match action {
                PlacementAction::LiveMembers(live) => self.shared.tap.placement(
                    &self.shared.instance,
                    PlacementEvent::Members {
                        live: u64::try_from(live).unwrap_or(u64::MAX),
                    },
                ),
                PlacementAction::Unavailable(unavailable) => {
                    debug!(?unavailable, "roles this instance will not take changed");
                    self.publish_record_roles();
                }
                PlacementAction::RecordChanged => {
                    let deferred = self.deferring().as_mut().map(|dirty| *dirty = true);
                    if deferred.is_none() {
                        self.publish_record_roles();
                    }
                }
                PlacementAction::Prepare(role) => send(
                    &role,
                    RoleInput::Prepare(self.link.settings.config.prepare_timeout),
                ),
                PlacementAction::Full(full) => {
                    if let Ok(mut f) = self.link.full.lock() {
                        *f = Arc::new(full);
                    }
                }
                PlacementAction::HoldBack {
                    role,
                    delay,
                    first,
                    preferred,
                } => {
                    debug!(role = %role, ?delay, first, preferred = ?preferred.as_ref().map(|p| p.instance.as_str()), "placement: hold-back");
                    send(
                        &role,
                        RoleInput::Placement {
                            delay,
                            first,
                            preferred,
                        },
                    );
                }
                PlacementAction::Release { role, to } => {
                    info!(role = %role, to = %to.instance, reason = %to.reason, "placement: handing the role over");
                    self.shared.tap.placement(
                        &self.shared.instance,
                        PlacementEvent::VoluntaryMove {
                            reason: to.reason.as_str(),
                        },
                    );
                    // No cooldown in the machine: the hold-back (the role is preferred
                    // elsewhere) keeps this instance from taking it straight back, and it may
                    // take the role again as soon as the plan prefers it (a machine cooldown
                    // would make the preferred member unable to acquire, and the role would
                    // bounce).
                    send(
                        &role,
                        RoleInput::Release(ReleaseReason::Placement, Duration::ZERO),
                    );
                }
                PlacementAction::ViewChanged => {
                    self.view.send_replace(Arc::new(PlacementView {
                        membership: self.controller.membership().clone(),
                        preferred: self.controller.plan().preferred.clone(),
                        frozen: self.controller.frozen().cloned(),
                    }));
                    self.log_freeze_change();
                }
            }
        }
    }

    /// Logs a freeze, its replacement and its end, once each (info).
    fn log_freeze_change(&self) {
        let now = self.controller.frozen().cloned();
        let Ok(mut logged) = self.logged_freeze.lock() else {
            return;
        };
        if Frozen::same(logged.as_ref(), now.as_ref()) {
            return;
        }
        match (&*logged, &now) {
            (_, Some(f)) => {
                let replaced = logged
                    .as_ref()
                    .map(|was| format!(" (replaces: {})", was.describe()))
                    .unwrap_or_default();
                info!(
                    "placement: voluntary moves {}{replaced}; vacant roles are still taken",
                    f.describe()
                );
            }
            (Some(was), None) => info!(
                "placement: voluntary moves no longer frozen (were {})",
                was.describe()
            ),
            (None, None) => {}
        }
        *logged = now;
    }

    /// Whether the record's publication is deferred to the end of the batch (`Some`), and
    /// whether it is due then.
    fn deferring(&self) -> std::sync::MutexGuard<'_, Option<bool>> {
        self.record_dirty
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The record's writer rewrites the record at once (once the driver started).
    fn publish_record_roles(&self) {
        let next = self.controller.record_roles();
        self.record_roles
            .send_if_modified(|current| current.as_mut().map(|c| *c = next).is_some());
    }
}

/// What a `member.` entry means to the controller.
enum MemberChange {
    /// The key names no valid instance: ignored (with a warning).
    NotAnInstance,
    /// An invalid or foreign record: ignored (with a warning), but re-planned.
    Unreadable,
    /// A record written or deleted.
    Input(Input),
    /// A record rewritten with the content the controller has (its presence TTL's refresh,
    /// protocol Q8 rule 1): its revision is taken in, nothing is re-planned.
    Unchanged(Input),
}

/// What `entry` means to the controller. This instance's own record deleted or replaced is
/// the member record writer's business (the watcher tells it: `MemberLink::observe`).
fn member_change(controller: &Controller, entry: &Entry) -> MemberChange {
    let (id, expired) = match crate::codec::member::watched(entry) {
        MemberEntry::NotAnInstance => {
            warn!(key = %entry.key, "ignoring a member key that is not a valid instance id");
            return MemberChange::NotAnInstance;
        }
        MemberEntry::Foreign { .. } => {
            warn!(key = %entry.key, "ignoring an invalid or foreign member record");
            return MemberChange::Unreadable;
        }
        // A presence record (an instance without placement, protocol Q8 rule 1): to
        // placement, no record.
        MemberEntry::Record(record) if !record.placement => (record.instance, false),
        MemberEntry::Record(record) => {
            let unchanged = record.v == MEMBER_VERSION
                && controller.membership().record(&record.instance) == Some(&*record);
            let input = Input::MemberPut {
                record,
                revision: entry.revision,
            };
            return if unchanged {
                MemberChange::Unchanged(input)
            } else {
                MemberChange::Input(input)
            };
        }
        MemberEntry::Gone { id, expired } => (id, expired),
    };
    MemberChange::Input(Input::MemberGone {
        id,
        expired,
        revision: entry.revision,
    })
}

/// Whether this instance will not take a role now, from the role's status: it cools down
/// (after a release with a cooldown, or an eviction), or its role runner stopped on a failure
/// (it cannot acquire the role). Published in the membership record so that the plan gives
/// the role to someone else instead of handing it here and waiting a claim grace each time.
fn declines(status: &RoleStatus, now: Instant) -> bool {
    status.cooldown_until.is_some_and(|until| until > now)
        || (!status.is_leader() && status.failure.is_some_and(FailureKind::is_permanent))
}

/// The roles with slots of which this instance holds a slot (protocol Q15).
fn slots_taken(
    holders: &std::collections::BTreeMap<RoleName, InstanceId>,
    me: &InstanceId,
) -> std::collections::BTreeSet<RoleName> {
    holders
        .iter()
        .filter(|(role, holder)| *holder == me && role.slot().is_some())
        .map(|(role, _)| role.base_role())
        .collect()
}

/// Whether `role` is a slot this instance will not take because it holds another slot of
/// the same role (`taken`: [`slots_taken`]): its member record lists it as unavailable, so
/// placement never plans two slots of a role on one member (Q15).
fn sibling_held(
    role: &RoleName,
    holders: &std::collections::BTreeMap<RoleName, InstanceId>,
    taken: &std::collections::BTreeSet<RoleName>,
    me: &InstanceId,
) -> bool {
    role.slot().is_some() && taken.contains(&role.base_role()) && holders.get(role) != Some(me)
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use async_nats::jetstream::kv::Operation;

    use super::*;
    use crate::codec::test_entry;
    use crate::placement::PlacementSettings;
    use crate::placement::test_record;

    fn controller() -> Controller {
        Controller::new(
            ControllerSettings {
                instance: InstanceId::new("a").expect("valid"),
                config: PlacementSettings::default(),
                operation_timeout: Duration::from_secs(1),
                move_timeout: Duration::from_secs(10),
                storm_window: Duration::from_secs(3),
            },
            Instant::now(),
        )
    }

    /// A record rewritten with the content the controller has (the presence TTL's refresh,
    /// protocol Q8 rule 1) re-plans nothing; a changed one does; a presence record
    /// (`placement: false`) is no record to placement.
    #[test]
    fn unchanged_rewrites_and_presence_records_are_not_placement_changes() {
        let mut c = controller();
        let mut b = test_record("b", &[("r", 0)], 250);
        b.sessions = [(1000, uuid::Uuid::from_u128(1))].into();
        let put = |record: &crate::placement::MemberRecord, revision| {
            test_entry("member.b", revision, Operation::Put, &record.to_bytes())
        };
        let MemberChange::Input(input) = member_change(&c, &put(&b, 3)) else {
            panic!("a new record is a change");
        };
        c.step(input, Instant::now());
        let MemberChange::Unchanged(input) = member_change(&c, &put(&b, 4)) else {
            panic!("a rewrite with the same content is no change");
        };
        c.step(input, Instant::now());
        assert_eq!(
            c.membership().record(&b.instance),
            Some(&b),
            "the rewrite's revision is taken in"
        );
        let mut renewed = b.clone();
        renewed.sessions = [(1000, uuid::Uuid::from_u128(2))].into();
        assert!(matches!(
            member_change(&c, &put(&renewed, 5)),
            MemberChange::Input(Input::MemberPut { .. })
        ));
        let mut presence = b.clone();
        presence.placement = false;
        presence.roles.clear();
        assert!(matches!(
            member_change(&c, &put(&presence, 6)),
            MemberChange::Input(Input::MemberGone {
                expired: false,
                revision: 6,
                ..
            })
        ));
    }

    /// Q15: a member holding a slot of a role declines the other slots of that role (its
    /// record lists them unavailable, so no plan puts two slots on it), not the one it holds,
    /// nor slots of other roles or roles without slots.
    #[test]
    fn a_member_holding_a_slot_declines_its_siblings() {
        let me = InstanceId::new("a").expect("valid");
        let other = InstanceId::new("b").expect("valid");
        let name = |n: &str| RoleName::from_key_name(n).expect("valid");
        let holders: std::collections::BTreeMap<RoleName, InstanceId> = [
            (name("idx.1"), me.clone()),
            (name("idx.2"), other.clone()),
            (name("jobs.0"), other.clone()),
            (name("plain"), me.clone()),
        ]
        .into();
        let taken = slots_taken(&holders, &me);
        assert_eq!(taken, [name("idx")].into());
        let declined: Vec<&str> = [
            "idx.0", "idx.1", "idx.2", "jobs.0", "jobs.1", "plain", "idx",
        ]
        .into_iter()
        .filter(|n| sibling_held(&name(n), &holders, &taken, &me))
        .collect();
        assert_eq!(declined, ["idx.0", "idx.2"]);
    }
}
