//! [`Api`]: the state every handler shares (the manager, the options, the event journal, the
//! shutdown token, the draining flag and the count of open event streams).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

use super::journal::EventJournal;
use super::options::ApiOptions;
use super::server;
use crate::manager::RoleManager;

/// The HTTP API of one manager. Cheap to clone.
#[derive(Clone)]
pub struct Api {
    inner: Arc<Inner>,
}

struct Inner {
    manager: Arc<RoleManager>,
    options: ApiOptions,
    journal: EventJournal,
    shutdown: CancellationToken,
    draining: AtomicBool,
    /// Open `GET /api/events` streams.
    event_streams: AtomicUsize,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("manager", &self.inner.manager)
            .field("admin", &self.inner.options.admin_token.is_some())
            .finish_non_exhaustive()
    }
}

impl Api {
    /// The API of `manager`; its [`EventJournal`] records the manager's transitions from now
    /// on (call it inside a Tokio runtime: the journal's recorder is a task).
    #[must_use]
    pub fn new(manager: Arc<RoleManager>, options: ApiOptions) -> Self {
        let journal = EventJournal::new();
        // Subscribe before reading the holders: nothing falls between the two.
        let events = manager.events();
        let tracker = crate::inspect::TransitionTracker::new(&manager.holders());
        journal.follow(events, manager.instance_id().clone(), tracker);
        Self::with_journal(manager, options, journal)
    }

    /// The API of `manager` with a `journal` that already follows its transitions (made
    /// before the manager started, to keep the roles won while starting:
    /// [`EventJournal::follow`]). Placement freezes are added to it from now on.
    #[must_use]
    pub fn with_journal(
        manager: Arc<RoleManager>,
        options: ApiOptions,
        journal: EventJournal,
    ) -> Self {
        if let Some(changes) = manager.freeze_changes() {
            journal.follow_freezes(changes);
        }
        for group in manager.groups() {
            journal.follow_group(group);
        }
        Self {
            inner: Arc::new(Inner {
                manager,
                options,
                journal,
                shutdown: CancellationToken::new(),
                draining: AtomicBool::new(false),
                event_streams: AtomicUsize::new(0),
            }),
        }
    }

    /// The manager.
    #[must_use]
    pub fn manager(&self) -> &Arc<RoleManager> {
        &self.inner.manager
    }

    /// The journal of recent transitions (`GET /api/events?since=…`).
    #[must_use]
    pub fn journal(&self) -> &EventJournal {
        &self.inner.journal
    }

    /// Cancelling this token ends every SSE stream and makes [`Api::serve`] stop accepting
    /// connections and return once the open ones are done.
    #[must_use]
    pub fn shutdown_token(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    /// Marks the instance as shutting down: `/readyz` answers 503 from now on (call it before
    /// [`RoleManager::shutdown`], so load balancers stop sending traffic first).
    pub fn drain(&self) {
        self.inner.draining.store(true, Ordering::Relaxed);
    }

    /// Whether [`Api::drain`] was called.
    #[must_use]
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::Relaxed)
    }

    /// Counts an event stream in, unless half the connection limit is streaming already.
    pub(super) fn open_event_stream(&self) -> Option<EventStreamSlot> {
        let max = (server::connection_limit(&self.inner.options) / 2).max(1);
        self.inner
            .event_streams
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| EventStreamSlot(self.clone()))
    }

    pub(super) fn options(&self) -> &ApiOptions {
        &self.inner.options
    }
}

/// One open event stream, counted until dropped.
pub(super) struct EventStreamSlot(Api);

impl Drop for EventStreamSlot {
    fn drop(&mut self) {
        self.0.inner.event_streams.fetch_sub(1, Ordering::AcqRel);
    }
}
