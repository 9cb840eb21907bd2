//! State shared by the manager's tasks, split by writer: what the builder set once (here),
//! what the watcher writes ([`BucketView`]), what the manager's public API writes
//! ([`Managed`]), what the session tasks write ([`ReleasedRoles`]), and the two books several
//! tasks report to ([`Reports`]).

mod bucket_view;
mod managed;
mod released;
mod reports;
mod slot_counts;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use uuid::Uuid;

pub(crate) use bucket_view::BucketView;
pub(crate) use managed::{Managed, RoleSlot, SessionClass};
pub(crate) use released::ReleasedRoles;
pub(crate) use reports::Reports;
pub(crate) use slot_counts::SlotCounts;

use super::events::RoleEvent;
use super::role_input::RoleInput;
use crate::names::{InstanceId, RoleName};
use crate::store::LeaseStore;

/// A synchronous observer of every [`RoleEvent`].
pub(crate) type EventObserver = Arc<dyn Fn(&RoleEvent) + Send + Sync>;

/// Shared by the watcher, the backstop, the session tasks, the role drivers, the placement
/// tasks and the public handle. The rule: every piece of state that changes has one writer,
/// and the part holding it is named by that writer:
///
/// - the fields of `Shared` itself are set by the builder and never change (the channels and
///   sinks among them carry messages; who sends on them is said at each);
/// - [`BucketView`] (`bucket`): what this instance knows of the bucket — the watcher writes it;
/// - [`Managed`] (`managed`): the roles and sessions of this instance — the manager's public
///   API writes it (`add_role`, `remove_role`, `shutdown`, the start of a session);
/// - [`ReleasedRoles`] (`released`): the session tasks write it, each only its own class;
/// - [`Reports`] (`reports`): the session book and the vacancy clock, which several tasks
///   report what they saw to — the type keeps its own rules, the lock only orders the reports.
///
/// A role's status and term are written by its runner only ([`RoleSlot`]). The one rule that
/// spans two parts: the watcher writes the bucket's epoch under the `roles` lock of
/// [`Managed`] ([`Shared::reset_epoch`]), and `add_role` reads it under that lock.
pub(crate) struct Shared {
    pub(crate) instance: InstanceId,
    pub(crate) incarnation: Uuid,
    pub(crate) store: Arc<LeaseStore>,
    pub(crate) drain_timeout: Duration,
    /// Whether the connection is up: the connection monitor holds the sender.
    pub(crate) connected: watch::Receiver<bool>,
    /// Every task sends its transitions here ([`Shared::emit`]).
    pub(crate) events: broadcast::Sender<RoleEvent>,
    /// Called with every event by the task that emits it, before it is broadcast
    /// ([`RoleManagerBuilder::on_event`](super::RoleManagerBuilder::on_event)).
    pub(crate) observers: Vec<EventObserver>,
    /// Where the role drivers, the watcher and the session tasks report what happens
    /// (history, metrics).
    pub(crate) tap: crate::tap::Tap,
    /// The member record's writer (every manager, protocol Q8 rule 1): its settings, and what
    /// the watcher tells it (`MemberLink::observe`).
    pub(crate) member: super::member_link::MemberLink,
    /// The role groups and their count records (protocol Q14; the watcher writes the records,
    /// the group task the counts).
    pub(crate) groups: Arc<super::groups::GroupsLink>,
    /// The placement tasks (membership, plan), when enabled.
    pub(crate) placement: Option<Arc<super::placement_link::PlacementLink>>,
    /// What the role drivers write leases with and hand terms on through (the store; decorated
    /// only by the test-only negative controls).
    pub(crate) backend: Arc<dyn super::backend::RoleBackend>,
    /// What this instance knows of the bucket: the watcher writes it.
    pub(crate) bucket: BucketView,
    /// This instance's roles and sessions: the manager's public API writes them.
    pub(crate) managed: Managed,
    /// Roles whose terms a session lists as released: the session tasks write it.
    pub(crate) released: ReleasedRoles,
    /// The session book and the vacancy clock: several tasks report to them.
    pub(crate) reports: Reports,
    /// The slot counts checked against the bucket's slot count records (protocol Q15): the
    /// public API and the start write them, the watcher re-asserts them.
    pub(crate) slot_counts: SlotCounts,
}

impl Shared {
    /// Announces a transition: to the synchronous observers first (in the calling task, so
    /// what they write is out before the caller's next step — a demotion's line before the
    /// release is sent), then to the broadcast subscribers.
    pub(crate) fn emit(&self, event: RoleEvent) {
        for observe in &self.observers {
            observe(&event);
        }
        // No subscriber is fine.
        let _ = self.events.send(event);
    }

    /// Sends an input to a managed role; false if the role is not managed (or stopped).
    pub(crate) fn send(&self, role: &RoleName, input: RoleInput) -> bool {
        self.managed
            .roles()
            .get(role)
            .is_some_and(|slot| slot.inbox.send(input).is_ok())
    }

    /// Sends an input to every managed role.
    pub(crate) fn broadcast(&self, make: impl Fn() -> RoleInput) {
        for slot in self.managed.roles().values() {
            let _ = slot.inbox.send(make());
        }
    }

    /// Another live process writes this instance's session: every role reports it.
    pub(crate) fn note_duplicate(&self) {
        self.broadcast(|| RoleInput::DuplicateInstance);
    }

    /// A new bucket epoch (P1), found by the watcher: records it and resets every managed role
    /// to it, under the `roles` lock (a role added at the same time starts on the new epoch or
    /// gets the reset).
    /// `old_ttl` is the longest TTL of the sessions known in the old bucket (Q6).
    pub(crate) fn reset_epoch(
        &self,
        epoch: u64,
        born: tokio::time::Instant,
        old_ttl: std::time::Duration,
    ) {
        let roles = self.managed.roles();
        self.bucket.reset(epoch, born, old_ttl);
        for slot in roles.values() {
            let _ = slot.inbox.send(RoleInput::BucketReset { epoch, old_ttl });
        }
    }

    /// Asks the session of TTL class `class` to list the term at `revision` of `role`, whose
    /// value names session `uuid`, as released (Q5 rule 5). Nothing without such a session.
    pub(crate) fn release_term(
        &self,
        class: Option<u64>,
        uuid: Uuid,
        role: &RoleName,
        revision: u64,
    ) {
        if let Some(class) = class.and_then(|c| self.session_inbox(c)) {
            let _ = class.send(super::session_link::SessionInput::ReleaseTerm {
                uuid,
                role: role.clone(),
                revision,
            });
        }
    }

    /// The key of `role` moved to `revision`: a session listing a released term of it hears
    /// of it (the entry is settled once somebody took the role over).
    pub(crate) fn role_moved(&self, role: &RoleName, revision: u64) {
        let class = self.released.class_of(role);
        if let Some(inbox) = class.and_then(|c| self.session_inbox(c)) {
            let _ = inbox.send(super::session_link::SessionInput::RoleMoved {
                role: role.clone(),
                revision,
            });
        }
    }

    /// The role driver of TTL class `class` failed: its session stops renewing without
    /// ending (fail-stop, [`SessionInput::Abandon`](super::session_link::SessionInput::Abandon)).
    pub(crate) fn abandon_session(&self, class: u64) {
        if let Some(inbox) = self.session_inbox(class) {
            let _ = inbox.send(super::session_link::SessionInput::Abandon);
        }
    }

    /// The inbox of this instance's session of TTL class `class`, if it has one.
    fn session_inbox(
        &self,
        class: u64,
    ) -> Option<mpsc::UnboundedSender<super::session_link::SessionInput>> {
        self.managed.sessions().get(&class).map(|s| s.inbox.clone())
    }
}
