//! [`PlacementLink`]: how the rest of the manager talks to the placement tasks (the
//! controller driver and the membership heartbeat) — their settings, their inbox, the flags
//! they publish (draining, healthy) and what they publish back (record contents, the plan
//! and membership view, the last record written). Each channel has one writer, named on it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::Entry;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::codec::control::Control;
use crate::names::RoleName;
use crate::placement::controller::{OwnRole, PrepareEnd, RecordRoles};
use crate::placement::{
    DrainRecord, FreezeRecord, Frozen, MemberRecord, Membership, MembershipTiming, Preferred,
};
use crate::placement::{PlacementSettings, Takeover};

/// Placement settings of one manager.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) config: PlacementSettings,
    /// TTL of the membership record.
    pub(crate) member_ttl: Duration,
    /// Longest wait for one KV write.
    pub(crate) operation_timeout: Duration,
    /// Default priority of this instance.
    pub(crate) priority: i32,
}

/// What the last stored membership record said (so a caller can wait until it is out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Written {
    /// Its draining flag.
    pub(crate) draining: bool,
    /// Its healthy flag.
    pub(crate) healthy: bool,
}

/// What makes this instance drain: its own flag and the bucket's drain record naming it.
#[derive(Debug, Default)]
struct DrainSources {
    /// Config, admin API, library call or a graceful stop.
    local: bool,
    /// The operator's drain record (`nats-roles drain`), while it exists.
    record: Option<DrainRecord>,
}

impl DrainSources {
    fn draining(&self) -> bool {
        self.local || self.record.is_some()
    }
}

/// Messages to the placement controller's driver.
#[derive(Debug)]
pub(crate) enum PlacementInput {
    /// The watcher saw a `member.` key change; `done` is answered once the driver re-planned
    /// (so hold-backs reach the role runners before any role entry that follows in the stream).
    Member {
        entry: Entry,
        done: oneshot::Sender<()>,
    },
    /// The bucket was recreated.
    BucketReset,
    /// The instances with a live session (protocol Q9), at every change once caught up.
    Sessions(std::collections::BTreeSet<crate::names::InstanceId>),
    /// The freeze record was written (`Some`) or deleted or unreadable (`None`).
    Freeze(Option<FreezeRecord>),
    /// A role's preparation ended (ready, failed or abandoned).
    Prepared(RoleName, PrepareEnd),
    /// The roles targeted moves keep on this instance now (Q13).
    Kept(std::collections::BTreeSet<RoleName>),
    /// This instance takes part in one more role.
    RoleAdded(RoleName, OwnRole),
    /// This instance no longer takes part in a role.
    RoleRemoved(RoleName),
    /// A role changed hands, or a role's state or cooldown changed: re-plan.
    Changed,
    /// Re-plan without news (member silence, windows, budget).
    Tick,
}

/// The membership table and the plan as the driver last published them (API, status).
#[derive(Debug, Clone)]
pub(crate) struct PlacementView {
    pub(crate) membership: Membership,
    pub(crate) preferred: BTreeMap<RoleName, Preferred>,
    /// Why voluntary moves are frozen, if they are.
    pub(crate) frozen: Option<Frozen>,
}

#[cfg(feature = "http")]
/// Follows why voluntary moves are frozen, view by view ([`PlacementLink::freeze_changes`]).
#[derive(Debug, Clone)]
pub(crate) struct FreezeChanges(watch::Receiver<Arc<PlacementView>>);

#[cfg(feature = "http")]
impl FreezeChanges {
    /// Waits for the next view; `false` once the placement driver is gone.
    pub(crate) async fn changed(&mut self) -> bool {
        self.0.changed().await.is_ok()
    }

    /// Why voluntary moves are frozen in the latest view (`None`: they are not).
    pub(crate) fn frozen(&mut self) -> Option<Frozen> {
        self.0.borrow_and_update().frozen.clone()
    }
}

/// The manager's side of placement (see the module documentation).
#[derive(Debug)]
pub(crate) struct PlacementLink {
    pub(crate) settings: Settings,
    /// The driver's inbox.
    inbox: mpsc::UnboundedSender<PlacementInput>,
    /// Whether this instance is draining: its own flag (config, `POST /api/drain`,
    /// [`RoleManager::set_draining`](crate::RoleManager::set_draining), a graceful stop) OR an
    /// operator's drain record in the bucket (`control.drain.<instance>`). Writer:
    /// [`PlacementLink::set_local_draining`] and [`PlacementLink::observe_drain`], under
    /// `drain_sources`.
    pub(crate) draining: watch::Sender<bool>,
    /// The two sources of `draining`.
    drain_sources: std::sync::Mutex<DrainSources>,
    /// Whether an operator froze this instance's voluntary moves (writer: the manager; config
    /// or admin action).
    pub(crate) frozen: watch::Sender<bool>,
    /// Whether this instance's health check passes (writer: the health task).
    pub(crate) healthy: watch::Sender<bool>,
    /// What the record says about this instance's roles (writer: the driver; `None` until
    /// it took in the roles the manager started with).
    pub(crate) record_roles: watch::Receiver<Option<RecordRoles>>,
    /// Membership and plan (writer: the driver).
    view: watch::Receiver<Arc<PlacementView>>,
    /// Live members at their capacity, skipped by the herd ranking (writer: the driver).
    pub(crate) full:
        std::sync::Mutex<std::sync::Arc<std::collections::BTreeSet<crate::names::InstanceId>>>,
    /// The flags of the last record written (writer: the member record's writer).
    written: watch::Receiver<Option<Written>>,
    /// The live-session set last sent to the driver (writer: the watcher), so that only
    /// changes are sent.
    sessions_sent: std::sync::Mutex<Option<std::collections::BTreeSet<crate::names::InstanceId>>>,
}

/// The writing ends of the link's channels, owned by the placement tasks.
#[derive(Debug)]
pub(crate) struct PlacementEnds {
    /// The driver's.
    pub(crate) inbox: mpsc::UnboundedReceiver<PlacementInput>,
    /// The driver's.
    pub(crate) record_roles: watch::Sender<Option<RecordRoles>>,
    /// The driver's.
    pub(crate) view: watch::Sender<Arc<PlacementView>>,
    /// The member record writer's (`member_record`).
    pub(crate) written: watch::Sender<Option<Written>>,
}

impl PlacementLink {
    /// A link and the channel ends its tasks own.
    pub(crate) fn new(settings: Settings) -> (Self, PlacementEnds) {
        let timing = MembershipTiming {
            stability_window: settings.config.stability_window,
            leave_delay: settings.config.leave_delay,
        };
        let (inbox_tx, inbox) = mpsc::unbounded_channel();
        let (record_roles, record_roles_rx) = watch::channel(None);
        let (view, view_rx) = watch::channel(Arc::new(PlacementView {
            membership: Membership::new(timing),
            preferred: BTreeMap::new(),
            frozen: None,
        }));
        let (written, written_rx) = watch::channel(None);
        let link = Self {
            draining: watch::channel(settings.config.draining).0,
            drain_sources: std::sync::Mutex::new(DrainSources {
                local: settings.config.draining,
                record: None,
            }),
            frozen: watch::channel(settings.config.frozen).0,
            settings,
            inbox: inbox_tx,
            healthy: watch::channel(true).0,
            record_roles: record_roles_rx,
            view: view_rx,
            written: written_rx,
            full: std::sync::Mutex::default(),
            sessions_sent: std::sync::Mutex::new(None),
        };
        let ends = PlacementEnds {
            inbox,
            record_roles,
            view,
            written,
        };
        (link, ends)
    }

    fn send(&self, input: PlacementInput) {
        // The driver stops only with the manager.
        let _ = self.inbox.send(input);
    }

    /// Registers a role this instance takes part in.
    pub(crate) fn add_role(
        &self,
        role: RoleName,
        priority: i32,
        takeover: Takeover,
        campaign: bool,
        cost: u32,
        prepares: bool,
    ) {
        let own = OwnRole {
            priority,
            takeover,
            campaign,
            cost,
            prepares,
        };
        self.send(PlacementInput::RoleAdded(role, own));
    }

    /// Forgets a role this instance no longer takes part in.
    pub(crate) fn remove_role(&self, role: &RoleName) {
        self.send(PlacementInput::RoleRemoved(role.clone()));
    }

    /// A role changed hands or state: the driver re-plans.
    pub(crate) fn changed(&self) {
        self.send(PlacementInput::Changed);
    }

    /// The instances with a live session now, as the watcher's session book has them
    /// (protocol Q9): sent to the driver when the set changed.
    pub(crate) fn sessions(&self, live: std::collections::BTreeSet<crate::names::InstanceId>) {
        let mut sent = self
            .sessions_sent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if sent.as_ref() != Some(&live) {
            *sent = Some(live.clone());
            self.send(PlacementInput::Sessions(live));
        }
    }

    /// The bucket was recreated: the membership table accepts the new bucket's revisions.
    pub(crate) fn bucket_reset(&self) {
        self.send(PlacementInput::BucketReset);
    }

    /// Hands a `member.` entry to the driver and waits until it re-planned with it.
    pub(crate) async fn observe_member(&self, entry: Entry) {
        let (done, replanned) = oneshot::channel();
        self.send(PlacementInput::Member { entry, done });
        // An error: the driver stopped (the manager stops).
        let _ = replanned.await;
    }

    /// A role's preparation ended: the record says it is ready, or that it failed.
    pub(crate) fn prepared(&self, role: RoleName, end: PrepareEnd) {
        self.send(PlacementInput::Prepared(role, end));
    }

    /// The roles targeted moves keep on this instance now (protocol Q13).
    pub(crate) fn kept(&self, roles: std::collections::BTreeSet<RoleName>) {
        self.send(PlacementInput::Kept(roles));
    }

    /// The watcher saw the freeze key change.
    pub(crate) fn observe_freeze(&self, entry: &Entry) {
        let decoded = crate::codec::control::freeze(entry);
        if matches!(decoded, Control::Foreign) {
            tracing::warn!(
                key = %entry.key,
                "ignoring a value that is not a freeze record (voluntary moves are not frozen)"
            );
        }
        self.send(PlacementInput::Freeze(decoded.record()));
    }

    /// Why voluntary moves are frozen, as of the last re-plan (`None`: they are not).
    pub(crate) fn frozen(&self) -> Option<Frozen> {
        self.view.borrow().frozen.clone()
    }

    /// The whole view: membership, plan and freeze (API).
    pub(crate) fn view(&self) -> Arc<PlacementView> {
        self.view.borrow().clone()
    }

    #[cfg(feature = "http")]
    /// Follows the freeze as the driver republishes its view (the API's event journal).
    pub(crate) fn freeze_changes(&self) -> FreezeChanges {
        FreezeChanges(self.view.clone())
    }

    /// Live members at their capacity (the herd ranking skips them).
    pub(crate) fn full(&self) -> Arc<std::collections::BTreeSet<crate::names::InstanceId>> {
        self.full.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// The plan as last computed (status, API).
    pub(crate) fn preferred(&self, role: &RoleName) -> Option<Preferred> {
        self.view.borrow().preferred.get(role).cloned()
    }

    /// Live members' records (API).
    pub(crate) fn members(&self) -> Vec<MemberRecord> {
        let now = Instant::now();
        let view = self.view.borrow();
        view.membership
            .records()
            .filter(|r| view.membership.is_live(&r.instance, now))
            .cloned()
            .collect()
    }

    /// Sets this instance's own draining flag (config, admin API, library call); it drains
    /// while that flag is set OR a drain record names it. Returns whether it drains now.
    pub(crate) fn set_local_draining(&self, draining: bool) -> bool {
        self.update_drain(|s| s.local = draining)
    }

    /// The drain record naming this instance, if one is in the bucket.
    pub(crate) fn drain_record(&self) -> Option<DrainRecord> {
        self.drain_sources
            .lock()
            .ok()
            .and_then(|s| s.record.clone())
    }

    /// The bucket was recreated: a drain record of the old bucket is gone.
    pub(crate) fn forget_drain_record(&self) {
        self.update_drain(|s| s.record = None);
    }

    /// The watcher saw this instance's drain key (`control.drain.<instance>`) change: the
    /// instance drains while it holds a valid record (logged once per change).
    pub(crate) fn observe_drain(&self, entry: &Entry) {
        let decoded = crate::codec::control::drain(entry);
        if matches!(decoded, Control::Foreign) {
            tracing::warn!(
                key = %entry.key,
                "ignoring a value that is not a drain record for this instance (it drains nothing)"
            );
        }
        let record = decoded.record();
        let before = self.drain_record();
        let local = self
            .drain_sources
            .lock()
            .map(|s| s.local)
            .unwrap_or_default();
        match (&before, &record) {
            (None, Some(r)) => tracing::info!(
                by = %r.by, reason = %r.reason, since = %r.at,
                "draining: an operator's drain record names this instance (`nats-roles undrain` ends it)"
            ),
            (Some(_), None) if local => tracing::info!(
                "the drain record was deleted; still draining by this instance's own flag (config or POST /api/drain)"
            ),
            (Some(_), None) => tracing::info!("the drain record was deleted: no longer draining"),
            _ => {}
        }
        self.update_drain(|s| s.record = record);
    }

    /// Changes the drain sources and publishes the resulting flag; returns it.
    fn update_drain(&self, change: impl FnOnce(&mut DrainSources)) -> bool {
        let Ok(mut sources) = self.drain_sources.lock() else {
            return *self.draining.borrow();
        };
        change(&mut sources);
        let draining = sources.draining();
        self.draining.send_if_modified(|d| {
            let changed = *d != draining;
            *d = draining;
            changed
        });
        draining
    }

    /// Writes the draining flag and waits (bounded) until a record saying so is stored.
    pub(crate) async fn drain_and_wait(&self, timeout: Duration) {
        self.set_local_draining(true);
        let mut written = self.written.clone();
        let _ = tokio::time::timeout(timeout, written.wait_for(|w| w.is_some_and(|w| w.draining)))
            .await;
    }

    /// Sets the healthy flag and waits, at most one operation timeout and not past `cancel`,
    /// until a record saying so is stored (the other members then stop preferring this
    /// instance before it lets go).
    pub(crate) async fn publish_health_and_wait(&self, healthy: bool, cancel: &CancellationToken) {
        self.healthy.send_replace(healthy);
        let mut written = self.written.clone();
        tokio::select! {
            () = cancel.cancelled() => {}
            _ = tokio::time::timeout(
                self.settings.operation_timeout,
                written.wait_for(|w| w.is_some_and(|w| w.healthy == healthy)),
            ) => {}
        }
    }
}
