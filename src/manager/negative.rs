//! Negative controls: deliberately broken modes that the history checker must flag (cargo
//! feature `negative-controls`; test-only, never for production).
//!
//! A mode lives only here: [`Flawed`] decorates the role drivers' backend (the lease store and
//! the way terms reach the application), and the builder installs it only under the feature.
//! The production types (store, state machine, driver) know nothing of it.
//!
//! One more test seam lives here: `NATS_ROLES_TEST_WEDGE_IF_EXISTS=PATH` wedges a role runner
//! once `PATH` exists ([`wedged`], [`wedge`]), so that the process tests can show that `nats-roles run` stops
//! sending systemd's `WATCHDOG=1` when a task of the manager no longer answers its liveness
//! probe (`RoleManager::probe`, docs/deploy.md). And `NATS_ROLES_TEST_PANIC_IF_EXISTS=PATH`
//! makes a role driver panic at its next liveness probe once `PATH` exists (only the driver of
//! the role the file names, when it names one) ([`panic_if_asked`]): a driver's panic is
//! fail-stop (its session is abandoned).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;
use uuid::Uuid;

use super::backend::{LeaseWrite, RoleBackend};
use crate::core::{DemoteReason, SessionLoss, SessionUpdate, WriteKind, WriteOutcome};
use crate::store::LeaseStore;

/// One deliberately broken mode of the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NegativeControl {
    /// Lease writes without the expected-revision header (plain puts instead of CAS).
    PlainPut,
    /// Session renewals without `Nats-TTL`: a dead holder's session never expires.
    DropTtl,
    /// The holder keeps acting after its local deadline (the driver does not demote at it).
    NoLocalDeadline,
    /// Demotions are neither recorded nor delivered: the term stays open.
    SkipDemote,
    /// Protocol v2: every role value another instance holds counts as vacant at once, as if
    /// its session were gone (a takeover while the holder's session is alive).
    IgnoreSession,
    /// Protocol v2: role runners never hear that their session was lost (evicted, superseded,
    /// expired, a recreated bucket — anything but a clean end), and the next session's
    /// renewals extend the terms resting on the lost one: a holder acts on after its session
    /// is gone, until it sees its role key taken (the simulation's control of the same name).
    RenewAfterLoss,
    /// Protocol Q15: the slots of a role campaign each on their own, without the slot
    /// permit, so one process takes several slots of a role at once (flagged S7).
    SlotNoPermit,
}

impl NegativeControl {
    /// Every mode.
    pub const ALL: [Self; 7] = [
        Self::PlainPut,
        Self::DropTtl,
        Self::NoLocalDeadline,
        Self::SkipDemote,
        Self::IgnoreSession,
        Self::RenewAfterLoss,
        Self::SlotNoPermit,
    ];

    /// The command-line name (`plain-put`, `drop-ttl`, `no-local-deadline`, `skip-demote`,
    /// `ignore-session`, `renew-after-loss`, `slot-no-permit`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PlainPut => "plain-put",
            Self::DropTtl => "drop-ttl",
            Self::NoLocalDeadline => "no-local-deadline",
            Self::SkipDemote => "skip-demote",
            Self::IgnoreSession => "ignore-session",
            Self::RenewAfterLoss => "renew-after-loss",
            Self::SlotNoPermit => "slot-no-permit",
        }
    }
}

impl FromStr for NegativeControl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|m| m.as_str()).collect();
                format!(
                    "unknown negative control {s:?} (one of {})",
                    names.join(", ")
                )
            })
    }
}

impl std::fmt::Display for NegativeControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much later than its local deadline a `no-local-deadline` holder believes it may act.
const DEADLINE_IGNORED_FOR: Duration = Duration::from_secs(3600);

/// The lease store with one [`NegativeControl`] built in.
#[derive(Debug, Clone)]
pub(crate) struct Flawed {
    store: LeaseStore,
    mode: NegativeControl,
    /// `renew-after-loss`, per session key (TTL class): the uuid of its first lost session,
    /// on which its role runners still believe their terms rest.
    lost: Arc<Mutex<HashMap<String, Uuid>>>,
}

impl Flawed {
    /// `store`, broken as `mode` says.
    pub(crate) fn new(store: LeaseStore, mode: NegativeControl) -> Self {
        tracing::error!(
            ?mode,
            "negative control active: this manager is deliberately broken (test only)"
        );
        Self {
            store,
            mode,
            lost: Arc::default(),
        }
    }
}

impl RoleBackend for Flawed {
    fn write(
        &self,
        key: String,
        mut write: LeaseWrite,
        timeout: Duration,
    ) -> BoxFuture<'static, WriteOutcome> {
        let store = self.store.clone();
        // `plain-put`: no expected-revision header.
        let expected = (self.mode != NegativeControl::PlainPut).then_some(write.expected);
        // `drop-ttl`: renewals (of the session, protocol v2) without a TTL.
        if self.mode == NegativeControl::DropTtl && write.kind == WriteKind::Renew {
            write.ttl = None;
        }
        Box::pin(async move {
            let delete = write.kind == WriteKind::Release;
            store
                .lease_write(&key, expected, write.ttl, write.payload, delete, timeout)
                .await
        })
    }

    /// `plain-put`: candidates claim every vacancy at once (as protocol v1 did), so that
    /// vacancies are contended and the missing CAS — the only thing between two writers —
    /// shows; herd ranking would otherwise keep most claims apart in time.
    fn herd_ranking(&self) -> bool {
        self.mode != NegativeControl::PlainPut
    }

    /// `slot-no-permit`: every slot campaigns on its own.
    fn slot_permits(&self) -> bool {
        self.mode != NegativeControl::SlotNoPermit
    }

    /// `ignore-session`: another instance's role value is vacant whatever its session.
    fn ignores_sessions(&self) -> bool {
        self.mode == NegativeControl::IgnoreSession
    }

    /// `no-local-deadline`: the application may act for another hour.
    fn handed_deadline(&self, deadline: Instant) -> Instant {
        if self.mode == NegativeControl::NoLocalDeadline {
            deadline + DEADLINE_IGNORED_FOR
        } else {
            deadline
        }
    }

    /// `skip-demote`: no demotion is carried out; `no-local-deadline`: none at the deadline.
    fn carries_out(&self, reason: DemoteReason) -> bool {
        match self.mode {
            NegativeControl::SkipDemote => false,
            NegativeControl::NoLocalDeadline => reason != DemoteReason::DeadlineExpired,
            NegativeControl::PlainPut
            | NegativeControl::DropTtl
            | NegativeControl::IgnoreSession
            | NegativeControl::RenewAfterLoss
            | NegativeControl::SlotNoPermit => true,
        }
    }

    /// `renew-after-loss`: a loss (other than a clean end) is not passed on, and every later
    /// session of the key is passed on as the lost one, so its renewals extend the terms that
    /// rested on it.
    fn session_update(
        &self,
        key: &str,
        update: SessionUpdate,
        loss: Option<SessionLoss>,
    ) -> Option<SessionUpdate> {
        if self.mode != NegativeControl::RenewAfterLoss {
            return Some(update);
        }
        let mut lost = self.lost.lock().unwrap_or_else(PoisonError::into_inner);
        match update {
            SessionUpdate::Lost { uuid, .. } if loss != Some(SessionLoss::Ended) => {
                lost.entry(key.to_owned()).or_insert(uuid);
                None
            }
            SessionUpdate::Lost { uuid, reason } => Some(SessionUpdate::Lost {
                uuid: lost.get(key).copied().unwrap_or(uuid),
                reason,
            }),
            SessionUpdate::Live {
                uuid,
                acked_sent_at,
            } => Some(SessionUpdate::Live {
                uuid: lost.get(key).copied().unwrap_or(uuid),
                acked_sent_at,
            }),
        }
    }
}

/// The environment variable of the wedge seam: a file's path.
const WEDGE_IF_EXISTS: &str = "NATS_ROLES_TEST_WEDGE_IF_EXISTS";

/// Test seam (`NATS_ROLES_TEST_WEDGE_IF_EXISTS=PATH`): whether a role runner that receives a
/// liveness probe now must wedge ([`wedge`]) instead of answering: once `PATH` exists.
pub(crate) fn wedged() -> bool {
    std::env::var_os(WEDGE_IF_EXISTS).is_some_and(|path| std::path::Path::new(&path).exists())
}

/// Never returns: the calling task is stuck for good, as one stuck in an await that never
/// completes would be (the rest of the process goes on).
pub(crate) async fn wedge() {
    tracing::error!(
        "test seam {WEDGE_IF_EXISTS}: the driver of this role's session class is wedged for good (test only)"
    );
    std::future::pending::<()>().await;
}

/// The environment variable of the panic seam: a file's path.
const PANIC_IF_EXISTS: &str = "NATS_ROLES_TEST_PANIC_IF_EXISTS";

/// Test seam (`NATS_ROLES_TEST_PANIC_IF_EXISTS=PATH`): a role driver that receives a liveness
/// probe panics once `PATH` exists, as a bug in the driver would. When the file names a role
/// (its content, trimmed, not empty), only the driver probed for that role panics (one
/// session class; the others go on).
pub(crate) fn panic_if_asked(role: Option<&str>) {
    let Some(path) = std::env::var_os(PANIC_IF_EXISTS) else {
        return;
    };
    let Ok(named) = std::fs::read_to_string(std::path::Path::new(&path)) else {
        return;
    };
    let named = named.trim();
    if named.is_empty() || role == Some(named) {
        panic!("test seam {PANIC_IF_EXISTS}: the role driver panics (test only)");
    }
}
