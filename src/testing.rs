//! Test support for code that runs under nats-roles (cargo feature `testing`).
//!
//! [`FakeRole`] drives a role's callbacks without a NATS server: promote now, demote now, lose
//! the lease to another holder, or let the local deadline pass. The [`Leadership`] handles it
//! gives out behave like real ones — `is_valid`, `cancelled`, `validate` and `fenced_put`
//! (fenced against an in-memory lease, so a write after losing the lease fails with
//! [`FenceError::Fenced`]) — and everything runs on tokio's clock, so tests can use paused time.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use nats_roles::testing::FakeRole;
//! use nats_roles::run_while_leader;
//!
//! let role = FakeRole::new("sweeper", run_while_leader(|l| async move {
//!     let _ = l.fenced_put("state", "swept").await;
//!     l.cancelled().await;
//! }));
//! let term = role.promote().await;
//! tokio::task::yield_now().await;
//! assert_eq!(role.data("state").as_deref(), Some(&b"swept"[..]));
//! role.lose_lease().await; // another instance took over
//! assert!(!term.is_valid());
//! assert!(term.fenced_put("state", "late").await.is_err());
//! # }
//! ```

/// Deliberately broken election modes that the history checker must flag (cargo feature
/// `negative-controls`; test only, never in a build that runs real roles).
#[cfg(feature = "negative-controls")]
pub use crate::manager::negative::NegativeControl;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use tokio::time::Instant;
use uuid::Uuid;

use crate::callbacks::{Demotion, RoleCallbacks};
use crate::core::{DemoteReason, FailureKind, KeyState, WriteOutcome};
use crate::error::FenceError;
use crate::leadership::{Leadership, LiveTerm, TermBackend, TermShared};
use crate::names::{InstanceId, RoleName};
use crate::store::{DATA_PREFIX, ROLE_PREFIX};
use crate::token::FencingToken;
use crate::value::{HolderValue, LeaseValue, VALUE_VERSION};

/// The in-memory bucket behind a [`FakeRole`].
#[derive(Debug)]
struct FakeKv {
    instance: InstanceId,
    state: Mutex<FakeKvState>,
}

#[derive(Debug, Default)]
struct FakeKvState {
    sequence: u64,
    /// Role key: revision and the nonce of its holder (`None` = vacant).
    lease: Option<(u64, Option<Uuid>)>,
    data: BTreeMap<String, (u64, Bytes)>,
}

impl FakeKv {
    fn lock(&self) -> MutexGuard<'_, FakeKvState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_lease(&self, nonce: Option<Uuid>) -> u64 {
        let mut s = self.lock();
        s.sequence += 1;
        let rev = s.sequence;
        s.lease = Some((rev, nonce));
        rev
    }
}

impl TermBackend for FakeKv {
    fn read<'a>(
        &'a self,
        key: &'a str,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<KeyState, FailureKind>> {
        let state = match (key.strip_prefix(ROLE_PREFIX), self.lock().lease) {
            (Some(_), Some((revision, Some(nonce)))) => KeyState::Held {
                revision,
                value: HolderValue::Lease(Box::new(fake_value(&self.instance, nonce))),
            },
            (Some(_), Some((revision, None))) => KeyState::Vacant {
                revision,
                expired: false,
            },
            _ => KeyState::Absent,
        };
        Box::pin(async move { Ok(state) })
    }

    fn fenced_put<'a>(
        &'a self,
        data_key: &'a str,
        _fence_key: &'a str,
        fence_revision: u64,
        payload: Bytes,
        _timeout: Duration,
    ) -> BoxFuture<'a, WriteOutcome> {
        let mut s = self.lock();
        let outcome = match s.lease {
            Some((rev, Some(_))) if rev == fence_revision => {
                s.sequence += 1;
                let revision = s.sequence;
                s.data.insert(data_key.to_string(), (revision, payload));
                WriteOutcome::Ok { revision }
            }
            _ => WriteOutcome::Conflict,
        };
        Box::pin(async move { outcome })
    }
}

fn fake_value(instance: &InstanceId, nonce: Uuid) -> LeaseValue {
    LeaseValue {
        v: VALUE_VERSION,
        holder: instance.clone(),
        incarnation: Uuid::nil(),
        session: Uuid::nil(),
        session_key: crate::value::session_key(instance, 1000),
        nonce,
        term: None,
        priority: 0,
        ttl_ms: 1000,
        meta: BTreeMap::new(),
        acquired_at: None,
        renewed_at: None,
    }
}

/// One role driven by hand: no server, no timers of its own.
pub struct FakeRole {
    role: RoleName,
    instance: InstanceId,
    callbacks: Arc<dyn RoleCallbacks>,
    kv: Arc<FakeKv>,
    lease: Duration,
    current: Mutex<Option<Leadership>>,
}

impl std::fmt::Debug for FakeRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeRole")
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl FakeRole {
    /// A fake role named `role` whose terms run `callbacks`.
    ///
    /// # Panics
    /// If `role` is not a valid role name (test code only).
    #[must_use]
    pub fn new(role: &str, callbacks: impl RoleCallbacks) -> Self {
        let role = RoleName::new(role).expect("FakeRole::new: invalid role name");
        let instance = InstanceId::new("fake-instance").expect("a valid instance id");
        Self {
            role,
            instance: instance.clone(),
            callbacks: Arc::new(callbacks),
            kv: Arc::new(FakeKv {
                instance,
                state: Mutex::default(),
            }),
            lease: Duration::from_secs(3600),
            current: Mutex::new(None),
        }
    }

    /// How long a term stays valid without [`FakeRole::renew`] (default one hour).
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The role name.
    #[must_use]
    pub fn role(&self) -> &RoleName {
        &self.role
    }

    fn slot(&self) -> MutexGuard<'_, Option<Leadership>> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a new term (demoting the current one first, if any) and runs `on_promote`.
    pub async fn promote(&self) -> Leadership {
        if self.slot().is_some() {
            self.demote(DemoteReason::Superseded).await;
        }
        let nonce = Uuid::new_v4();
        let revision = self.kv.write_lease(Some(nonce));
        let leadership = Leadership {
            inner: Arc::new(TermShared::started(
                self.role.clone(),
                self.instance.clone(),
                FencingToken::new(1, revision, nonce),
                Instant::now() + self.lease,
                revision,
                self.kv.clone(),
                Duration::from_secs(1),
                crate::tap::Tap::default(),
            )),
        };
        *self.slot() = Some(leadership.clone());
        self.callbacks.on_promote(leadership.clone()).await;
        leadership
    }

    /// Renews the current term: moves its revision and its deadline (`with_lease` ahead).
    pub fn renew(&self) {
        if let Some(l) = self.slot().as_ref() {
            let revision = self.kv.write_lease(Some(l.token().nonce()));
            if let Ok(mut live) = l.inner.live.lock() {
                *live = LiveTerm {
                    deadline: Instant::now() + self.lease,
                    revision,
                };
            }
            l.inner.live_changed.notify_waiters();
        }
    }

    /// Ends the current term for `reason`: cancels its token, then runs `on_demote` and waits
    /// for it (the real ordering).
    pub async fn demote(&self, reason: DemoteReason) {
        let Some(leadership) = self.slot().take() else {
            return;
        };
        leadership.inner.end(reason);
        self.callbacks
            .on_demote(Demotion { leadership, reason })
            .await;
    }

    /// Another instance takes the role over: the lease key moves on (fenced writes of the old
    /// term fail at the "server"), then the term is demoted with `Superseded`.
    pub async fn lose_lease(&self) {
        self.kv.write_lease(Some(Uuid::new_v4()));
        self.demote(DemoteReason::Superseded).await;
    }

    /// The local deadline passes (e.g. renewals failed during a network partition): the
    /// handle becomes invalid at once, then the term is demoted with `DeadlineExpired`.
    pub async fn expire(&self) {
        if let Some(l) = self.slot().as_ref() {
            if let Ok(mut live) = l.inner.live.lock() {
                live.deadline = Instant::now();
            }
            l.inner.live_changed.notify_waiters();
        }
        self.demote(DemoteReason::DeadlineExpired).await;
    }

    /// The current term, if any.
    #[must_use]
    pub fn leadership(&self) -> Option<Leadership> {
        self.slot().clone()
    }

    /// What fenced writes stored under `key` (`data.<role>.<key>`).
    #[must_use]
    pub fn data(&self, key: &str) -> Option<Bytes> {
        let full = format!("{DATA_PREFIX}{}.{key}", self.role);
        self.kv.lock().data.get(&full).map(|(_, v)| v.clone())
    }

    /// Checks that `result` is the error a stale leader gets.
    #[must_use]
    pub fn is_fenced(result: &Result<u64, FenceError>) -> bool {
        matches!(result, Err(FenceError::Fenced { .. }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::run_while_leader;

    /// What a user's test of leader-only code looks like.
    #[tokio::test(start_paused = true)]
    async fn leader_only_work_runs_only_while_leading() {
        let ticks = Arc::new(AtomicU32::new(0));
        let counter = ticks.clone();
        let role = FakeRole::new(
            "sweeper",
            run_while_leader(move |l| {
                let counter = counter.clone();
                async move {
                    loop {
                        counter.fetch_add(1, Ordering::SeqCst);
                        if l.fenced_put("tick", "x").await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }),
        )
        .with_lease(Duration::from_secs(10));

        let term = role.promote().await;
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), 4);
        assert!(term.is_valid());

        // The deadline passes without renewals: the work stops by itself.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!term.is_valid());
        let after_deadline = ticks.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), after_deadline);
        role.expire().await;

        // A new term; losing it stops the work and fences the old handle.
        let second = role.promote().await;
        assert!(second.token() > term.token());
        tokio::time::sleep(Duration::from_millis(10)).await;
        role.lose_lease().await;
        assert!(FakeRole::is_fenced(
            &second.fenced_put("tick", "late").await
        ));
        assert!(second.validate().await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn renew_extends_the_deadline_and_keeps_fenced_writes_working() {
        let role = FakeRole::new("r", crate::NoCallbacks).with_lease(Duration::from_secs(2));
        let l = role.promote().await;
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            role.renew();
            assert!(l.is_valid());
            assert!(l.fenced_put("k", "v").await.is_ok());
            assert!(l.validate().await.is_ok());
        }
        role.demote(DemoteReason::Released(crate::ReleaseReason::Shutdown))
            .await;
        assert!(!l.is_valid());
        assert!(role.leadership().is_none());
    }
}
