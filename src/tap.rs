//! The instrumentation seam: the role driver and [`Leadership`](crate::leadership::Leadership)
//! report what happens to each role as [`TapEvent`]s; sinks (the history recorder, metrics)
//! consume them.
//!
//! Every manager has the metrics sink; the history recorder only when configured. Sinks run
//! inline on the role's task, so they must be cheap and must never block (no I/O beyond a
//! buffered write, no awaits).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::core::{DemoteReason, FailureKind, WriteKind, WriteOutcome};
use crate::names::{InstanceId, RoleName};
use crate::status::RoleState;
use crate::token::FencingToken;

/// One thing that happened to a role on this instance.
#[derive(Debug, Clone)]
pub(crate) enum TapEvent {
    /// A lease write (acquire, renew or release) was sent.
    WriteInvoked {
        /// The machine's operation id (pairs invoke with complete).
        op: u64,
        /// Acquire, renew or release.
        kind: WriteKind,
        /// The revision the write expects the key to be at (0 = absent).
        expected: u64,
    },
    /// A lease write completed: stored, refused, or with an unknown outcome.
    WriteCompleted {
        /// The operation id of the matching `WriteInvoked`.
        op: u64,
        /// Acquire, renew or release.
        kind: WriteKind,
        /// What the server said (or did not say).
        outcome: WriteOutcome,
        /// From sending to the outcome.
        elapsed: Duration,
    },
    /// A vacancy this instance measures ended (`manager::vacancy`): the role was without a
    /// holder for `took`.
    VacancyEnded {
        /// `crash`, `hand_over` or `move`.
        cause: &'static str,
        /// How long.
        took: Duration,
    },
    /// A term began.
    Promoted {
        /// The term's fencing token.
        token: FencingToken,
        /// The holder's local deadline.
        deadline: Instant,
        /// The session the term rests on (protocol v2; `None` outside a session clock).
        session: Option<uuid::Uuid>,
    },
    /// A renewal moved the term's deadline.
    Renewed {
        /// The term's fencing token.
        token: FencingToken,
        /// The new local deadline.
        deadline: Instant,
        /// The session whose renewal it was (`None` outside a session clock): every held term
        /// of that session is renewed by it, one record each.
        session: Option<uuid::Uuid>,
    },
    /// A term ended (the token is cancelled before this is reported).
    Demoted {
        /// The term's fencing token.
        token: FencingToken,
        /// Why.
        reason: DemoteReason,
        /// How long the term lasted.
        held: Duration,
    },
    /// The role's reported state changed.
    StateChanged {
        /// Before.
        from: RoleState,
        /// After.
        to: RoleState,
        /// Why it left leadership, when it did.
        reason: Option<DemoteReason>,
    },
    /// A fenced write under the role's data prefix completed.
    FencedWrite {
        /// The term's fencing token.
        token: FencingToken,
        /// The key under `data.<role>.`.
        key: String,
        /// `Ok(revision)` when stored; `Err(())` when refused or the outcome is unknown.
        stored: Result<u64, FencedRefusal>,
    },
    /// The role cannot campaign or renew because of this failure (reported once per
    /// condition; the role keeps retrying).
    Failed(FailureKind),
    /// The server answers normally again after a reported failure.
    Recovered,
    /// The manager's NATS connection went down (`false`) or came back (`true`), as the role
    /// task learned it.
    Connection(bool),
}

/// What the manager's one bucket watcher reports (not tied to a role).
#[derive(Debug, Clone, Copy)]
pub(crate) enum WatcherEvent {
    /// The watcher failed or ended and is being recreated.
    Restarted,
    /// An entry was delivered.
    Delivered {
        /// Entries still pending on the server after this one (the watcher's backlog).
        pending: u64,
        /// Local wall clock minus the entry's server timestamp (`None` when the local clock
        /// is behind the server's).
        lag: Option<Duration>,
    },
}

/// What a session driver reports (protocol v2: one session per TTL class, not tied to a role).
#[derive(Debug, Clone, Copy)]
pub(crate) enum SessionEvent<'a> {
    /// A session write completed: stored, refused, or with an unknown outcome.
    Written {
        /// The session key (`session.<instance>.<ttl_ms>`).
        key: &'a str,
        /// Start, renew or end.
        kind: crate::core::SessionWriteKind,
        /// What the server said (or did not say).
        outcome: WriteOutcome,
        /// From sending to the outcome.
        elapsed: Duration,
    },
}

/// What the placement controller reports (not tied to a role's driver).
#[derive(Debug, Clone, Copy)]
pub(crate) enum PlacementEvent {
    /// Members the controller counts as live right now (this instance included).
    Members {
        /// How many.
        live: u64,
    },
    /// The controller handed one of this instance's roles over voluntarily.
    VoluntaryMove {
        /// Why the plan prefers another member (`priority`, `share`, `draining`, …).
        reason: &'static str,
    },
}

/// Why a fenced write was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FencedRefusal {
    /// The term was over (locally, or the server refused the fence).
    Fenced,
    /// No answer in time: the write may still be stored.
    Unknown,
    /// Another failure.
    Failed(FailureKind),
}

/// Who receives tap events.
pub(crate) trait TapSink: Send + Sync + 'static {
    /// Records `event` for `role` on `instance`, which happened at `at`.
    fn record(&self, instance: &InstanceId, role: &RoleName, event: &TapEvent, at: Instant);

    /// Records a bucket watcher event of `instance` (default: ignored).
    fn watcher(&self, instance: &InstanceId, event: WatcherEvent) {
        let _ = (instance, event);
    }

    /// The manager of `instance` stopped (or was dropped): no role of it is held any more,
    /// whatever its drivers last reported (default: ignored).
    fn manager_stopped(&self, instance: &InstanceId) {
        let _ = instance;
    }

    /// Records a placement controller event of `instance` (default: ignored).
    fn placement(&self, instance: &InstanceId, event: PlacementEvent) {
        let _ = (instance, event);
    }

    /// Records a session driver event of `instance` (default: ignored).
    fn session(&self, instance: &InstanceId, event: SessionEvent<'_>) {
        let _ = (instance, event);
    }
}

/// The sinks of one manager (cheap to clone).
#[derive(Clone, Default)]
pub(crate) struct Tap {
    sinks: Arc<[Arc<dyn TapSink>]>,
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap")
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

impl Tap {
    /// A tap feeding `sinks`.
    pub(crate) fn new(sinks: Vec<Arc<dyn TapSink>>) -> Self {
        Self {
            sinks: sinks.into(),
        }
    }

    /// Whether any sink listens (callers may skip building events when not).
    pub(crate) fn is_active(&self) -> bool {
        !self.sinks.is_empty()
    }

    /// Reports `event` to every sink, stamped now.
    pub(crate) fn record(&self, instance: &InstanceId, role: &RoleName, event: TapEvent) {
        if self.sinks.is_empty() {
            return;
        }
        let at = Instant::now();
        for sink in self.sinks.iter() {
            sink.record(instance, role, &event, at);
        }
    }

    /// Tells every sink that the manager stopped.
    pub(crate) fn manager_stopped(&self, instance: &InstanceId) {
        for sink in self.sinks.iter() {
            sink.manager_stopped(instance);
        }
    }

    /// Reports a placement controller event to every sink.
    pub(crate) fn placement(&self, instance: &InstanceId, event: PlacementEvent) {
        for sink in self.sinks.iter() {
            sink.placement(instance, event);
        }
    }

    /// Reports a session driver event to every sink.
    pub(crate) fn session(&self, instance: &InstanceId, event: SessionEvent<'_>) {
        for sink in self.sinks.iter() {
            sink.session(instance, event);
        }
    }

    /// Reports a bucket watcher event to every sink.
    pub(crate) fn watcher(&self, instance: &InstanceId, event: WatcherEvent) {
        for sink in self.sinks.iter() {
            sink.watcher(instance, event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Collect(Mutex<Vec<String>>);

    impl TapSink for Collect {
        fn record(&self, instance: &InstanceId, role: &RoleName, event: &TapEvent, _at: Instant) {
            if let Ok(mut v) = self.0.lock() {
                v.push(format!("{instance}/{role}: {event:?}"));
            }
        }
    }

    /// Every event and value a driver handles, as `Debug` prints it, never shows the token's
    /// nonce or the token's exposed form.
    #[test]
    fn debug_output_never_shows_a_token() {
        use crate::core::{DemoteReason, KeyState, Term};
        use crate::value::{HolderValue, LeaseValue};
        let nonce = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let token = FencingToken::new(1_700_000_000_000_000_000, 42, nonce);
        let lease = LeaseValue {
            v: crate::value::VALUE_VERSION,
            holder: InstanceId::new("node-a").expect("valid"),
            incarnation: uuid::Uuid::nil(),
            session: uuid::Uuid::nil(),
            session_key: crate::value::session_key(
                &InstanceId::new("node-a").expect("valid"),
                3000,
            ),
            nonce,
            term: Some(42),
            priority: 0,
            ttl_ms: 3000,
            meta: Default::default(),
            acquired_at: None,
            renewed_at: None,
        };
        let now = Instant::now();
        let texts = [
            format!(
                "{:?}",
                TapEvent::Promoted {
                    token,
                    deadline: now,
                    session: None,
                }
            ),
            format!(
                "{:?}",
                TapEvent::Demoted {
                    token,
                    reason: DemoteReason::Superseded,
                    held: Duration::ZERO
                }
            ),
            format!(
                "{:?}",
                TapEvent::FencedWrite {
                    token,
                    key: "data.r.k".into(),
                    stored: Ok(1)
                }
            ),
            format!("{token:?} {token}"),
            format!("{lease:?}"),
            format!(
                "{:?}",
                KeyState::Held {
                    revision: 42,
                    value: HolderValue::Lease(Box::new(lease.clone())),
                }
            ),
            format!(
                "{:?}",
                Term {
                    token,
                    nonce,
                    deadline: now
                }
            ),
        ];
        for text in texts {
            for secret in [
                nonce.to_string(),
                nonce.simple().to_string(),
                token.expose(),
                "1700000000000000000".to_owned(),
            ] {
                assert!(!text.contains(&secret), "{secret} in {text}");
            }
        }
    }

    #[test]
    fn fans_out_to_every_sink_and_is_inactive_without_sinks() {
        let a = Arc::new(Collect::default());
        let b = Arc::new(Collect::default());
        let tap = Tap::new(vec![a.clone(), b.clone()]);
        assert!(tap.is_active());
        let (i, r) = (
            InstanceId::new("i1").expect("valid"),
            RoleName::new("r").expect("valid"),
        );
        tap.record(&i, &r, TapEvent::Failed(FailureKind::PermissionDenied));
        for s in [&a, &b] {
            let v = s.0.lock().expect("lock");
            assert_eq!(v.len(), 1);
            assert!(v[0].starts_with("i1/r: Failed"), "{v:?}");
        }
        assert!(!Tap::default().is_active());
    }
}
