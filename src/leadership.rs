//! The handle role code gets for one term of leadership.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::core::{DemoteReason, WriteOutcome};
use crate::error::FenceError;
use crate::names::{InstanceId, RoleName};
use crate::store::{DATA_PREFIX, ROLE_PREFIX};
use crate::tap::{FencedRefusal, TapEvent};
use crate::token::FencingToken;

/// State of a term shared between the role runner and the application.
#[derive(Debug)]
pub(crate) struct TermShared {
    pub(crate) role: RoleName,
    pub(crate) instance: InstanceId,
    pub(crate) token: FencingToken,
    pub(crate) cancel: CancellationToken,
    pub(crate) live: Mutex<LiveTerm>,
    pub(crate) live_changed: tokio::sync::Notify,
    pub(crate) store: Arc<dyn TermBackend>,
    pub(crate) operation_timeout: Duration,
    /// Where fenced writes are reported.
    pub(crate) tap: crate::tap::Tap,
    /// Why the term ended: set (once) by the role runner just before it cancels `cancel`, so
    /// that work reacting to the cancellation knows whether a successor may already be
    /// promoted ([`DemoteReason::is_loss`]).
    pub(crate) end_reason: std::sync::OnceLock<DemoteReason>,
    /// Held while work of the term is being started (an `exec` role's child: the validity
    /// check, the start and its report); the role runner takes it after cancelling the term and
    /// before it records the demotion, so a start either completes before the demotion or
    /// sees the term cancelled (docs/protocol.md Q12).
    pub(crate) start_gate: tokio::sync::Mutex<()>,
    /// Set (once) when the term, ended for a graceful release, was lost before its release
    /// went through: work still draining must stop at once (Q12).
    pub(crate) lost: std::sync::OnceLock<DemoteReason>,
    /// Wakes whoever waits for [`TermShared::lost`].
    pub(crate) lost_notify: tokio::sync::Notify,
    /// When the term started (its promotion).
    pub(crate) started_at: Instant,
    /// Set (once) by whoever records the term's demotion (its role runner, or the session's
    /// abandonment when the runner is gone): a term draining a release is demoted already,
    /// and its history must not get a second `demote` (S6).
    pub(crate) demotion_recorded: std::sync::OnceLock<()>,
}

impl TermShared {
    /// A term of `role` held by `instance` that just started: valid until `deadline`, won at
    /// `revision`; fenced writes go through `store` (each bounded by `operation_timeout`) and
    /// are reported to `tap`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn started(
        role: RoleName,
        instance: InstanceId,
        token: FencingToken,
        deadline: Instant,
        revision: u64,
        store: Arc<dyn TermBackend>,
        operation_timeout: Duration,
        tap: crate::tap::Tap,
    ) -> Self {
        Self {
            role,
            instance,
            token,
            cancel: CancellationToken::new(),
            live: Mutex::new(LiveTerm { deadline, revision }),
            live_changed: tokio::sync::Notify::new(),
            store,
            operation_timeout,
            tap,
            end_reason: std::sync::OnceLock::new(),
            start_gate: tokio::sync::Mutex::new(()),
            lost: std::sync::OnceLock::new(),
            lost_notify: tokio::sync::Notify::new(),
            started_at: Instant::now(),
            demotion_recorded: std::sync::OnceLock::new(),
        }
    }

    /// The term, already ended for a release, was lost (`reason`) before the release went
    /// through: wakes work that drains gracefully, so that it stops at once.
    pub(crate) fn lose(&self, reason: DemoteReason) {
        let _ = self.lost.set(reason);
        self.lost_notify.notify_waiters();
    }

    /// Completes once the term was lost during its release ([`TermShared::lose`]), with the
    /// reason.
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    pub(crate) async fn lost(&self) -> DemoteReason {
        loop {
            let notified = self.lost_notify.notified();
            if let Some(reason) = self.lost.get() {
                return *reason;
            }
            notified.await;
        }
    }

    /// The deadline handed to the application now.
    pub(crate) fn deadline_now(&self) -> Instant {
        match self.live.lock() {
            Ok(g) => g.deadline,
            Err(poisoned) => poisoned.into_inner().deadline,
        }
    }

    /// A renewal of the term's session that arrived at `arrived_at` moves the term's deadline
    /// to `handed` (the holder's deadline `deadline` as handed to the application), unless the
    /// deadline had passed by then (a lapsed term is never extended) or is already later. The
    /// move is reported to the tap (`Renewed` with `deadline`: the history's `renew` record)
    /// before the new deadline can be read, under the term's lock: whatever the term's work
    /// hands on (an `exec` child's watchdog kills at it, Q12) was recorded first, so a process
    /// stopped (`SIGSTOP`) right after a renewal never leaves a history whose last deadline is
    /// older than the one its child was killed by. Wakes whatever waits for a change of the
    /// term; returns the new deadline when it moved. `session` is the session renewed.
    pub(crate) fn extend(
        &self,
        arrived_at: Instant,
        deadline: Instant,
        handed: Instant,
        session: uuid::Uuid,
    ) -> Option<Instant> {
        {
            let mut live = match self.live.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            if arrived_at >= live.deadline || handed <= live.deadline {
                return None;
            }
            // The sinks only take the event (none reads the term): no lock order to keep.
            self.tap.record(
                &self.instance,
                &self.role,
                TapEvent::Renewed {
                    token: self.token,
                    deadline,
                    session: Some(session),
                },
            );
            live.deadline = handed;
        }
        self.live_changed.notify_waiters();
        Some(handed)
    }

    /// Ends the term for `reason`: the reason first, then the cancellation (and a wake-up of
    /// whatever waits for a change of the term). Later calls change nothing.
    pub(crate) fn end(&self, reason: DemoteReason) {
        let _ = self.end_reason.set(reason);
        self.cancel.cancel();
        self.live_changed.notify_waiters();
    }
}

/// The KV operations a term needs: the NATS store in production, an in-memory fake in tests
/// (`testing` feature).
pub(crate) trait TermBackend: Send + Sync + std::fmt::Debug + 'static {
    /// Reads a key (P3/P6).
    fn read<'a>(
        &'a self,
        key: &'a str,
        timeout: Duration,
    ) -> futures_util::future::BoxFuture<'a, Result<crate::core::KeyState, crate::core::FailureKind>>;
    /// A fenced write (P7).
    fn fenced_put<'a>(
        &'a self,
        data_key: &'a str,
        fence_key: &'a str,
        fence_revision: u64,
        payload: Bytes,
        timeout: Duration,
    ) -> futures_util::future::BoxFuture<'a, WriteOutcome>;
}

impl TermBackend for crate::store::LeaseStore {
    fn read<'a>(
        &'a self,
        key: &'a str,
        timeout: Duration,
    ) -> futures_util::future::BoxFuture<'a, Result<crate::core::KeyState, crate::core::FailureKind>>
    {
        Box::pin(crate::store::LeaseStore::read(self, key, timeout))
    }

    fn fenced_put<'a>(
        &'a self,
        data_key: &'a str,
        fence_key: &'a str,
        fence_revision: u64,
        payload: Bytes,
        timeout: Duration,
    ) -> futures_util::future::BoxFuture<'a, WriteOutcome> {
        Box::pin(crate::store::LeaseStore::fenced_put(
            self,
            data_key,
            fence_key,
            fence_revision,
            payload,
            timeout,
        ))
    }
}

/// The parts of a term that can move during it: the deadline (every session renewal) and the
/// role key's revision (only a late commit of the term's own write, P5).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LiveTerm {
    pub(crate) deadline: Instant,
    pub(crate) revision: u64,
}

/// One term of leadership of one role.
///
/// Cheap to clone. Leader-only work should run while [`Leadership::is_valid`] is true and stop
/// when [`Leadership::cancelled`] completes; writes that must never come from a stale leader go
/// through [`Leadership::fenced_put`].
#[derive(Debug, Clone)]
pub struct Leadership {
    pub(crate) inner: Arc<TermShared>,
}

impl Leadership {
    /// The role (for a slot, the slot's role `<role>.<k>`: protocol Q15).
    #[must_use]
    pub fn role(&self) -> &RoleName {
        &self.inner.role
    }

    /// The slot this term holds, for a role with slots ([`RoleSpec::slots`](crate::RoleSpec::slots)):
    /// `Some(2)` for a term of `indexer.2`; `None` for a role without slots.
    #[must_use]
    pub fn slot(&self) -> Option<u32> {
        self.inner.role.slot()
    }

    /// The role this term belongs to: `indexer` for a term of the slot `indexer.2`, the role
    /// itself for a role without slots.
    #[must_use]
    pub fn base_role(&self) -> RoleName {
        self.inner.role.base_role()
    }

    /// This instance's id.
    #[must_use]
    pub fn instance_id(&self) -> &InstanceId {
        &self.inner.instance
    }

    /// The term's fencing token (redacted in `Debug`/`Display`).
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.inner.token
    }

    /// The term number (revision of the write that started the term).
    #[must_use]
    pub fn term(&self) -> u64 {
        self.inner.token.term()
    }

    /// The local deadline: leader-only work must not happen at or after this instant unless a
    /// renewal moves it.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.live().deadline
    }

    /// Revision of the role key this term rests on: the term's acquire (protocol v2 renews the
    /// session, not the role key, so it does not move during the term — except to a late
    /// commit of the term's own write, P5).
    #[must_use]
    pub fn revision(&self) -> u64 {
        self.live().revision
    }

    /// Whether this term is still current: not cancelled and the deadline is ahead.
    /// Needs no background task: it compares the monotonic clock with the deadline.
    #[must_use]
    pub fn is_valid(&self) -> bool {
        !self.inner.cancel.is_cancelled() && Instant::now() < self.deadline()
    }

    /// Why the term ended, once it was ended by a demotion (set before the token is cancelled;
    /// `None` while the term runs, and after a lapsed deadline until the demotion comes). Work
    /// that reacts to [`Leadership::cancelled`] can stop at once on a loss
    /// ([`DemoteReason::is_loss`]: a successor may already be promoted) and gracefully
    /// otherwise, as the binary does with `exec` children (docs/protocol.md Q12).
    #[must_use]
    pub fn end_reason(&self) -> Option<DemoteReason> {
        self.inner.end_reason.get().copied()
    }

    /// A token cancelled when the term ends (loss, deadline, release or shutdown).
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        self.inner.cancel.clone()
    }

    /// Completes when the term ends.
    pub async fn cancelled(&self) {
        tokio::select! {
            () = self.inner.cancel.cancelled() => {}
            () = self.until_deadline() => {}
        }
    }

    async fn until_deadline(&self) {
        loop {
            let deadline = self.deadline();
            let changed = self.inner.live_changed.notified();
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    if Instant::now() >= self.deadline() {
                        return;
                    }
                }
                () = changed => {}
            }
        }
    }

    fn live(&self) -> LiveTerm {
        match self.inner.live.lock() {
            Ok(g) => *g,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    /// Checks against the KV (a read from the stream leader) that the lease still belongs to
    /// this term. Use it before critical operations; a fenced write is stronger still.
    ///
    /// # Errors
    /// [`FenceError::Fenced`] when the term is over; [`FenceError::Kv`] when the read failed.
    pub async fn validate(&self) -> Result<(), FenceError> {
        if !self.is_valid() {
            return Err(self.fenced());
        }
        let key = format!("{ROLE_PREFIX}{}", self.inner.role);
        let state = self
            .inner
            .store
            .read(&key, self.inner.operation_timeout)
            .await
            .map_err(FenceError::Kv)?;
        match state.lease() {
            Some(v) if v.nonce == self.inner.token.nonce() && self.is_valid() => Ok(()),
            _ => Err(self.fenced()),
        }
    }

    /// Writes `value` under `data.<role>.<key>` in the bucket, stored by the server only while
    /// the role key is still at this term's revision (protocol P7): once another term began or
    /// the key was deleted, the server refuses it.
    ///
    /// Returns the revision of the stored value.
    ///
    /// # Errors
    /// [`FenceError::Fenced`] when the term is over; [`FenceError::Unknown`] when the outcome
    /// is unknown; [`FenceError::Kv`] for other failures.
    pub async fn fenced_put(&self, key: &str, value: impl Into<Bytes>) -> Result<u64, FenceError> {
        let span = tracing::debug_span!(
            "kv",
            op = "fenced_put",
            role = %self.inner.role,
            term = self.inner.token.term(),
            key,
            outcome = tracing::field::Empty,
        );
        let result =
            tracing::Instrument::instrument(self.fenced_put_inner(key, value.into()), span.clone())
                .await;
        span.record(
            "outcome",
            match &result {
                Ok(_) => "ok",
                Err(FenceError::Unknown(_)) => "unknown",
                Err(FenceError::Kv(_)) => "failed",
                Err(_) => "fenced",
            },
        );
        if self.inner.tap.is_active() {
            let stored = match &result {
                Ok(revision) => Ok(*revision),
                Err(FenceError::Unknown(_)) => Err(FencedRefusal::Unknown),
                Err(FenceError::Kv(kind)) => Err(FencedRefusal::Failed(*kind)),
                Err(_) => Err(FencedRefusal::Fenced),
            };
            self.inner.tap.record(
                &self.inner.instance,
                &self.inner.role,
                TapEvent::FencedWrite {
                    token: self.inner.token,
                    key: key.to_string(),
                    stored,
                },
            );
        }
        result
    }

    async fn fenced_put_inner(&self, key: &str, value: Bytes) -> Result<u64, FenceError> {
        let data_key = format!("{DATA_PREFIX}{}.{key}", self.inner.role);
        let fence_key = format!("{ROLE_PREFIX}{}", self.inner.role);
        let mut conflicts = 0;
        let mut retries = 0;
        loop {
            if !self.is_valid() {
                return Err(self.fenced());
            }
            let live = self.live();
            let timeout = self
                .inner
                .operation_timeout
                .min(live.deadline.saturating_duration_since(Instant::now()));
            let outcome = self
                .inner
                .store
                .fenced_put(&data_key, &fence_key, live.revision, value.clone(), timeout)
                .await;
            match outcome {
                WriteOutcome::Ok { revision } => return Ok(revision),
                WriteOutcome::Conflict => {
                    // Protocol v2: the role key does not move during a term (Q4), so a conflict
                    // means the term is over — unless the term itself moved on to its own
                    // late-committed write (P5) meanwhile: then retry on that revision.
                    conflicts += 1;
                    if self.revision() == live.revision || conflicts >= MAX_FENCED_CONFLICTS {
                        return Err(self.fenced());
                    }
                }
                WriteOutcome::Retry => {
                    // 10164 on a replicated stream: an in-flight conflict, not a verdict on
                    // the term (P7). Retry while the term is valid, with a short backoff.
                    retries += 1;
                    tokio::time::sleep(retry_delay(retries)).await;
                }
                WriteOutcome::Unknown => return Err(FenceError::Unknown(timeout)),
                WriteOutcome::Failed(kind) => return Err(FenceError::Kv(kind)),
            }
        }
    }

    fn fenced(&self) -> FenceError {
        FenceError::Fenced {
            role: self.inner.role.clone(),
        }
    }
}

/// Conflicts (10071) a fenced write tolerates in one call: each must be explained by the term
/// moving to a newer revision of its own (a late-committed write of the term, P5).
const MAX_FENCED_CONFLICTS: u32 = 3;

/// Backoff before retry number `n` (1-based) of a fenced write refused with 10164: 5 ms
/// doubling up to 100 ms (the term's deadline bounds the loop).
fn retry_delay(n: u32) -> Duration {
    Duration::from_millis(
        5u64.saturating_mul(1 << n.saturating_sub(1).min(5))
            .min(100),
    )
}
