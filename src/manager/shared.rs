//! State shared by the manager's tasks.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use uuid::Uuid;

use super::events::{HolderInfo, RoleEvent};
use super::role_input::{RoleDone, RoleInbox, RoleInput};
use super::status::RoleStatus;
use crate::leadership::Leadership;
use crate::names::{InstanceId, RoleName};
use crate::store::LeaseStore;

/// A role this manager takes part in (or observes).
pub(crate) struct RoleSlot {
    /// Its inbox (its driver's, tagged with the role).
    pub(crate) inbox: RoleInbox,
    /// The TTL class (ms) of the session the role campaigns on; `None` for an observer.
    pub(crate) class: Option<u64>,
    pub(crate) status: watch::Receiver<RoleStatus>,
    /// The current term (the role's runner is its only writer).
    pub(crate) current: watch::Receiver<Option<Leadership>>,
    /// Completes when the role has stopped (its last callback returned).
    pub(crate) task: RoleDone,
}

/// Shared by the watcher, the role runners, the placement tasks and the public handle. Each
/// piece has one writer: the manager adds and removes `roles`; the watcher writes `holders`
/// (the manager only adds channels to it for [`RoleManager::observe`](super::RoleManager::observe)),
/// `caught_up`, `epoch` and `bucket_high_water`; a role's status and term are written by its
/// task only ([`RoleSlot`]).
/// A synchronous observer of every [`RoleEvent`].
pub(crate) type EventObserver = Arc<dyn Fn(&RoleEvent) + Send + Sync>;

pub(crate) struct Shared {
    pub(crate) instance: InstanceId,
    pub(crate) incarnation: Uuid,
    pub(crate) store: Arc<LeaseStore>,
    pub(crate) drain_timeout: Duration,
    pub(crate) connected: watch::Receiver<bool>,
    pub(crate) events: broadcast::Sender<RoleEvent>,
    /// Called with every event by the task that emits it, before it is broadcast
    /// ([`RoleManagerBuilder::on_event`](super::RoleManagerBuilder::on_event)).
    pub(crate) observers: Vec<EventObserver>,
    pub(crate) roles: Mutex<HashMap<RoleName, RoleSlot>>,
    /// Holders of every role in the bucket, as the watcher sees them.
    pub(crate) holders: Mutex<BTreeMap<RoleName, watch::Sender<Option<HolderInfo>>>>,
    /// When each instance's session was last renewed, as the watcher saw it (the renewal age
    /// of its holders: `RoleManager::holders`). The watcher is its writer: one entry per
    /// renewal instead of a visit to every role the instance holds.
    pub(crate) renewals: Mutex<HashMap<InstanceId, std::time::SystemTime>>,
    /// Whether the watcher delivered the bucket's current state at least once.
    pub(crate) caught_up: watch::Sender<bool>,
    /// Asks the watcher to check the bucket's existence and epoch now (a role saw revisions go
    /// back, or writes found no stream).
    pub(crate) bucket_check: tokio::sync::Notify,
    /// Bucket checks started and finished (the watcher runs them one at a time): a session
    /// waiting for a check asked after a loss waits for the first one started after it.
    pub(crate) bucket_checks: watch::Sender<(u64, u64)>,
    /// Where the role drivers report what happens (history, metrics).
    pub(crate) tap: crate::tap::Tap,
    /// The placement tasks (membership, plan), when enabled.
    pub(crate) placement: Option<Arc<super::placement_link::PlacementLink>>,
    /// What the role drivers write leases with and hand terms on through (the store; decorated
    /// only by the test-only negative controls).
    pub(crate) backend: Arc<dyn super::backend::RoleBackend>,
    /// The bucket's current epoch (P1): read at start-up, replaced when the watcher finds the
    /// bucket recreated. Written and read only under the `roles` lock (see
    /// [`Shared::reset_epoch`]), so a role added concurrently with a reset starts on the new
    /// epoch or receives the reset.
    pub(crate) epoch: std::sync::atomic::AtomicU64,
    /// When the bucket of the current epoch was created, on this process's monotonic clock
    /// (`bucket::born`; written with the epoch): no acquire before it is a TTL + heartbeat old
    /// (protocol Q6).
    pub(crate) born: Mutex<tokio::time::Instant>,
    /// Roles whose terms a session lists as released (Q5 rule 5), with the session's TTL
    /// class: written by the session tasks, read by the watcher (it reports their keys' moves).
    pub(crate) released_roles: Mutex<HashMap<RoleName, u64>>,
    /// The highest revision seen in the current bucket, any key (the stream's last sequence at
    /// start-up, then every watcher entry); reset with the epoch. Seeds a new role's high-water
    /// mark (P6).
    pub(crate) bucket_high_water: std::sync::atomic::AtomicU64,
    /// This instance's sessions, one per TTL class in milliseconds (protocol Q1); the manager
    /// adds them with the first role of a class.
    pub(crate) sessions: Mutex<HashMap<u64, SessionClass>>,
    /// Every session in the bucket and the roles resting on them (protocol Q5). The watcher
    /// is its writer; role runners register the role values they read and ask for herd ranks.
    pub(crate) book: Mutex<crate::core::SessionBook>,
    /// Open vacancies this instance measures (`role_vacancy_seconds`).
    pub(crate) vacancies: super::vacancy::VacancyClock,
    /// The move records of the bucket (protocol Q13). The watcher is its writer; role runners
    /// read it at vacancies.
    pub(crate) moves: Mutex<crate::moves::MoveBook>,
    /// Roles removed from `roles` whose tasks have not stopped yet (`remove_role`, shutdown):
    /// they may still hold a term, so a value of theirs naming this instance's session is not
    /// "nobody's" (the watcher must not release it through the session, Q5 rule 5). The
    /// manager is its only writer.
    pub(crate) stopping_roles: Mutex<std::collections::HashSet<RoleName>>,
}

/// One of this instance's sessions.
pub(crate) struct SessionClass {
    pub(crate) inbox: mpsc::UnboundedSender<super::session_link::SessionInput>,
    pub(crate) view: watch::Receiver<super::session_link::SessionView>,
    /// The session's renewals and the terms resting on it (Q4, one deadline per session).
    pub(crate) clock: Arc<super::session_link::SessionClock>,
    pub(crate) task: tokio::task::JoinHandle<()>,
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

    pub(crate) fn roles(&self) -> MutexGuard<'_, HashMap<RoleName, RoleSlot>> {
        self.roles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn holders(
        &self,
    ) -> MutexGuard<'_, BTreeMap<RoleName, watch::Sender<Option<HolderInfo>>>> {
        self.holders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends an input to a managed role; false if the role is not managed (or stopped).
    pub(crate) fn send(&self, role: &RoleName, input: RoleInput) -> bool {
        self.roles()
            .get(role)
            .is_some_and(|slot| slot.inbox.send(input).is_ok())
    }

    /// The bucket's current epoch; call with the `roles` lock held when the answer decides
    /// which epoch a new role starts on.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The highest revision seen in the current bucket (any key).
    pub(crate) fn bucket_high_water(&self) -> u64 {
        self.bucket_high_water
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The watcher saw `revision` in the current bucket.
    pub(crate) fn saw_revision(&self, revision: u64) {
        self.bucket_high_water
            .fetch_max(revision, std::sync::atomic::Ordering::SeqCst);
    }

    /// A new bucket epoch (P1): records it and resets every managed role to it, under the
    /// `roles` lock (a role added at the same time starts on the new epoch or gets the reset).
    /// Asks the session of TTL class `class` to list the term at `revision` of `role`, whose
    /// value names session `uuid`, as released (Q5 rule 5). Nothing without such a session.
    pub(crate) fn release_term(
        &self,
        class: Option<u64>,
        uuid: Uuid,
        role: &RoleName,
        revision: u64,
    ) {
        if let Some(class) = class.and_then(|c| self.sessions().get(&c).map(|s| s.inbox.clone())) {
            let _ = class.send(super::session_link::SessionInput::ReleaseTerm {
                uuid,
                role: role.clone(),
                revision,
            });
        }
    }

    /// The roles the session of TTL class `class` lists released terms of now.
    pub(crate) fn set_released_roles(&self, class: u64, roles: &[RoleName]) {
        let mut map = self
            .released_roles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.retain(|_, c| *c != class);
        for r in roles {
            map.insert(r.clone(), class);
        }
    }

    /// The key of `role` moved to `revision`: a session listing a released term of it hears
    /// of it (the entry is settled once somebody took the role over).
    pub(crate) fn role_moved(&self, role: &RoleName, revision: u64) {
        let class = self
            .released_roles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(role)
            .copied();
        if let Some(inbox) = class.and_then(|c| self.sessions().get(&c).map(|s| s.inbox.clone())) {
            let _ = inbox.send(super::session_link::SessionInput::RoleMoved {
                role: role.clone(),
                revision,
            });
        }
    }

    /// The bucket's age now (protocol Q6), from its creation on this process's clock.
    pub(crate) fn bucket_age(&self, now: tokio::time::Instant) -> std::time::Duration {
        let born = *self
            .born
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        now.saturating_duration_since(born)
    }

    pub(crate) fn reset_epoch(&self, epoch: u64, born: tokio::time::Instant) {
        let roles = self.roles();
        *self
            .born
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = born;
        self.epoch.store(epoch, std::sync::atomic::Ordering::SeqCst);
        self.bucket_high_water
            .store(0, std::sync::atomic::Ordering::SeqCst);
        for slot in roles.values() {
            let _ = slot.inbox.send(RoleInput::BucketReset(epoch));
        }
    }

    pub(crate) fn sessions(&self) -> MutexGuard<'_, HashMap<u64, SessionClass>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn moves(&self) -> MutexGuard<'_, crate::moves::MoveBook> {
        self.moves
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Roles being stopped (see [`Shared::stopping_roles`]).
    pub(crate) fn stopping_roles(&self) -> MutexGuard<'_, std::collections::HashSet<RoleName>> {
        self.stopping_roles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn book(&self) -> MutexGuard<'_, crate::core::SessionBook> {
        self.book
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Another live process writes this instance's session: every role reports it.
    pub(crate) fn note_duplicate(&self) {
        self.broadcast(|| RoleInput::DuplicateInstance);
    }

    /// Sends an input to every managed role.
    pub(crate) fn broadcast(&self, make: impl Fn() -> RoleInput) {
        for slot in self.roles().values() {
            let _ = slot.inbox.send(make());
        }
    }
}
