//! [`BucketView`]: what this instance knows of the bucket — its epoch and age, the highest
//! revision seen, whether the watcher caught up, every role's holder, the sessions' last
//! renewals and the move records. The watcher writes it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::manager::events::HolderInfo;
use crate::names::{InstanceId, RoleName};

/// The bucket as this instance's watcher sees it. The watcher is the writer of every field;
/// the exceptions, each said at its field, only add what the watcher would write the same way
/// (a revision to a maximum, an empty channel, a holder cleared by the watcher's own function).
/// The epoch, the bucket's age and the high-water mark are reset together, by the watcher,
/// under the `roles` lock ([`Shared::reset_epoch`](super::Shared::reset_epoch)).
pub(crate) struct BucketView {
    /// The bucket's current epoch (P1): read at start-up, replaced when the watcher finds the
    /// bucket recreated. Written under the `roles` lock, and read under it by `add_role`, so
    /// a role added concurrently with a reset starts on the new epoch or receives the reset.
    epoch: AtomicU64,
    /// When the bucket of the current epoch was created, on this process's monotonic clock
    /// (`bucket::born`; written with the epoch): no acquire before it is a TTL + heartbeat old
    /// (protocol Q6).
    born: Mutex<Instant>,
    /// The longest session TTL this process knew in the bucket the current one replaced (zero
    /// before any reset): the young-bucket hold of a role added later lasts at least that long
    /// too (protocol Q6).
    old_ttl: Mutex<std::time::Duration>,
    /// The highest revision seen in the current bucket, any key (the stream's last sequence at
    /// start-up, then every watcher entry); reset with the epoch. Seeds a new role's high-water
    /// mark (P6). The session tasks raise it too, with the revisions of their own acknowledged
    /// writes (they may arrive before the watcher's entry): a maximum, whoever raises it first.
    high_water: AtomicU64,
    /// Whether the watcher delivered the bucket's current state at least once.
    pub(crate) caught_up: watch::Sender<bool>,
    /// Asks the watcher to check the bucket's existence and epoch now (a role saw revisions go
    /// back, or writes found no stream): anybody asks ([`BucketView::ask_check`]), the watcher
    /// alone waits for it ([`BucketView::check_asked`]).
    check: Notify,
    /// Bucket checks started and finished (the watcher runs them one at a time): a session
    /// waiting for a check asked after a loss waits for the first one started after it.
    pub(crate) checks: watch::Sender<(u64, u64)>,
    /// Holders of every role in the bucket, as the watcher sees them. Besides the watcher,
    /// [`RoleManager::observe`](crate::manager::RoleManager::observe) adds an empty channel for
    /// a role not seen yet (the watcher fills it), and the backstop's reaps clear holders
    /// through the watcher's own `holders_gone`.
    holders: Mutex<BTreeMap<RoleName, watch::Sender<Option<HolderInfo>>>>,
    /// When each instance's session was last renewed, as the watcher saw it (the renewal age
    /// of its holders: `RoleManager::holders`): one entry per renewal instead of a visit to
    /// every role the instance holds.
    renewals: Mutex<HashMap<InstanceId, SystemTime>>,
    /// The move records of the bucket (protocol Q13). Role runners read it at vacancies.
    moves: Mutex<crate::moves::MoveBook>,
}

impl BucketView {
    /// The bucket of `epoch`, created at `born`, whose stream's last sequence is `last_revision`.
    pub(crate) fn new(epoch: u64, born: Instant, last_revision: u64) -> Self {
        Self {
            epoch: AtomicU64::new(epoch),
            born: Mutex::new(born),
            old_ttl: Mutex::new(std::time::Duration::ZERO),
            high_water: AtomicU64::new(last_revision),
            caught_up: watch::channel(false).0,
            check: Notify::new(),
            checks: watch::channel((0, 0)).0,
            holders: Mutex::new(BTreeMap::new()),
            renewals: Mutex::new(HashMap::new()),
            moves: Mutex::new(crate::moves::MoveBook::new()),
        }
    }

    /// The bucket's current epoch; call with the `roles` lock held when the answer decides
    /// which epoch a new role starts on.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// The highest revision seen in the current bucket (any key).
    pub(crate) fn high_water(&self) -> u64 {
        self.high_water.load(Ordering::SeqCst)
    }

    /// `revision` was seen in the current bucket (by the watcher, or acknowledged to a session).
    pub(crate) fn saw_revision(&self, revision: u64) {
        self.high_water.fetch_max(revision, Ordering::SeqCst);
    }

    /// The longest session TTL known in the bucket the current one replaced (Q6).
    pub(crate) fn old_ttl(&self) -> std::time::Duration {
        *lock(&self.old_ttl)
    }

    /// The bucket's age now (protocol Q6), from its creation on this process's clock.
    pub(crate) fn age(&self, now: Instant) -> std::time::Duration {
        let born = *lock(&self.born);
        now.saturating_duration_since(born)
    }

    /// A new epoch, created at `born`: only [`Shared::reset_epoch`](super::Shared::reset_epoch),
    /// under the `roles` lock.
    pub(super) fn reset(&self, epoch: u64, born: Instant, old_ttl: std::time::Duration) {
        *lock(&self.born) = born;
        // Never shorter than a reset's before: its holders' deadlines do not move.
        let mut known = lock(&self.old_ttl);
        *known = (*known).max(old_ttl);
        drop(known);
        self.epoch.store(epoch, Ordering::SeqCst);
        self.high_water.store(0, Ordering::SeqCst);
    }

    /// Asks the watcher for a bucket check.
    pub(crate) fn ask_check(&self) {
        self.check.notify_one();
    }

    /// Completes when a bucket check was asked for (the watcher's side).
    pub(crate) async fn check_asked(&self) {
        self.check.notified().await;
    }

    pub(crate) fn holders(
        &self,
    ) -> MutexGuard<'_, BTreeMap<RoleName, watch::Sender<Option<HolderInfo>>>> {
        lock(&self.holders)
    }

    pub(crate) fn renewals(&self) -> MutexGuard<'_, HashMap<InstanceId, SystemTime>> {
        lock(&self.renewals)
    }

    pub(crate) fn moves(&self) -> MutexGuard<'_, crate::moves::MoveBook> {
        lock(&self.moves)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
