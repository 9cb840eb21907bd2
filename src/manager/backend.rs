//! The seam between a role driver and what it acts on besides its state machine: the lease
//! writes it sends and the way a term reaches the application. Production uses
//! [`LeaseStore`] as it is; the test-only negative controls (`negative`) decorate it.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use tokio::time::Instant;

use crate::core::{DemoteReason, SessionLoss, SessionUpdate, WriteKind, WriteOutcome};
use crate::store::LeaseStore;

/// One lease write as the role driver sends it.
#[derive(Debug, Clone)]
pub(crate) struct LeaseWrite {
    /// Acquire, renew or release (a release writes a delete marker).
    pub(crate) kind: WriteKind,
    /// The revision the key must be at (P3).
    pub(crate) expected: u64,
    /// The lease's per-key TTL.
    pub(crate) ttl: Option<Duration>,
    /// The holder value (empty for a release).
    pub(crate) payload: Bytes,
}

/// What a role driver writes leases with and how it hands terms on.
pub(crate) trait RoleBackend: Send + Sync + 'static {
    /// Sends `write` to `key` (P3: conditional on `write.expected`).
    fn write(
        &self,
        key: String,
        write: LeaseWrite,
        timeout: Duration,
    ) -> BoxFuture<'static, WriteOutcome>;

    /// Whether candidates rank themselves before claiming a vacancy (herd ranking, Q7).
    fn herd_ranking(&self) -> bool {
        true
    }

    /// Whether a role value another instance holds counts as vacant whatever the session
    /// book says (only the `ignore-session` negative control).
    fn ignores_sessions(&self) -> bool {
        false
    }

    /// Whether the slots of a role share the slot permit (Q15; not only under the
    /// `slot-no-permit` negative control).
    fn slot_permits(&self) -> bool {
        true
    }

    /// The deadline handed to the application for a term whose local deadline is `deadline`.
    fn handed_deadline(&self, deadline: Instant) -> Instant {
        deadline
    }

    /// Whether a demotion for `reason` is carried out: the term's token cancelled, the
    /// demotion recorded and delivered.
    fn carries_out(&self, reason: DemoteReason) -> bool {
        let _ = reason;
        true
    }

    /// What the role runners of the session `key` are told when its driver reports `update`
    /// (`loss`: why the session ended, for [`SessionUpdate::Lost`]); `None` tells them
    /// nothing. Every update is passed on as it is, except by the `renew-after-loss` negative
    /// control.
    fn session_update(
        &self,
        key: &str,
        update: SessionUpdate,
        loss: Option<SessionLoss>,
    ) -> Option<SessionUpdate> {
        let _ = (key, loss);
        Some(update)
    }
}

impl RoleBackend for LeaseStore {
    fn write(
        &self,
        key: String,
        write: LeaseWrite,
        timeout: Duration,
    ) -> BoxFuture<'static, WriteOutcome> {
        let store = self.clone();
        Box::pin(async move {
            let delete = write.kind == WriteKind::Release;
            store
                .cas(
                    &key,
                    write.expected,
                    write.ttl,
                    write.payload,
                    delete,
                    timeout,
                )
                .await
        })
    }
}
