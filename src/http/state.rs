//! [`Api`]: the state every handler shares (the manager, the options, the shutdown token, the
//! draining flag and the count of open event streams).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

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
    /// The API of `manager`.
    #[must_use]
    pub fn new(manager: Arc<RoleManager>, options: ApiOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                manager,
                options,
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
