//! Evicting a role's holder: a CAS delete of its lease at the holder's current revision, so a
//! newer term can never be evicted by accident (protocol P3).

use std::time::Duration;

use bytes::Bytes;

use crate::core::{FailureKind, KeyState, WriteOutcome};
use crate::names::RoleName;
use crate::store::{LeaseStore, ROLE_PREFIX};

/// A successful eviction.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Evicted {
    /// The role.
    pub role: String,
    /// The holder that was evicted (`None`: a foreign value).
    pub holder: Option<String>,
    /// Its term.
    pub term: Option<u64>,
    /// The revision of the lease that was deleted.
    pub revision: u64,
    /// The revision of the delete marker written.
    pub marker_revision: u64,
}

/// What the lease must still be for an eviction to go ahead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expect {
    /// The exact revision of the role key (the write that began the term; protocol v2 renews
    /// the session, not the role key, so it moves only with a new term or a rewrite).
    pub revision: Option<u64>,
    /// The term (what a person confirms).
    pub term: Option<u64>,
}

#[cfg(feature = "tooling")]
impl Expect {
    /// No expectation: evict whatever holds the role right now.
    #[must_use]
    pub fn any() -> Self {
        Self::default()
    }

    /// The lease must be at `revision`.
    #[must_use]
    pub fn revision(revision: u64) -> Self {
        Self {
            revision: Some(revision),
            term: None,
        }
    }

    /// The lease must still be in `term`.
    #[must_use]
    pub fn term(term: u64) -> Self {
        Self {
            revision: None,
            term: Some(term),
        }
    }
}

/// Why nothing was evicted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EvictError {
    /// The role has never been written to the bucket (or its marker is gone).
    #[error("role {role} is not in the bucket")]
    UnknownRole {
        /// The role.
        role: RoleName,
    },
    /// Nobody holds the role.
    #[error("role {role} is vacant; nothing to evict")]
    NotHeld {
        /// The role.
        role: RoleName,
    },
    /// The caller named a revision and the lease is at another one (a renewal or a new term
    /// since the caller looked).
    #[error(
        "role {role} is at revision {current} (holder {}, term {}), not {expected}; nothing \
         evicted (a new term or a rewrite moved the revision: read it again)",
        holder.as_deref().unwrap_or("<foreign value>"),
        term.map_or_else(|| "?".to_owned(), |t| t.to_string())
    )]
    RevisionMismatch {
        /// The role.
        role: RoleName,
        /// The revision the caller gave.
        expected: u64,
        /// The lease's revision now.
        current: u64,
        /// The holder now.
        holder: Option<String>,
        /// The term now.
        term: Option<u64>,
    },
    /// The caller named a term and the role is in another one (it changed hands).
    #[error(
        "role {role} is in term {} (holder {}), not {expected}; nothing evicted",
        current.map_or_else(|| "?".to_owned(), |t| t.to_string()),
        holder.as_deref().unwrap_or("<foreign value>")
    )]
    TermMismatch {
        /// The role.
        role: RoleName,
        /// The term the caller gave.
        expected: u64,
        /// The term now.
        current: Option<u64>,
        /// The holder now.
        holder: Option<String>,
    },
    /// The lease changed between reading it and deleting it: a new term started, the role
    /// was released or evicted by someone else, or (rarely) renewals of the same term kept
    /// moving it until the timeout.
    #[error("role {role} changed while it was being evicted; nothing evicted (try again)")]
    Changed {
        /// The role.
        role: RoleName,
    },
    /// The delete was sent but not confirmed in time: it may or may not have happened.
    #[error("evicting role {role} timed out after {timeout:?}; the outcome is unknown")]
    Timeout {
        /// The role.
        role: RoleName,
        /// The timeout.
        timeout: Duration,
    },
    /// The NATS server refused a permission the eviction needs (only from
    /// [`Inspector::evict`](super::Inspector::evict) on a connection of its own, which can
    /// tell the subject).
    #[error("evicting role {role}: permission denied on {subject} ({operation})")]
    #[cfg_attr(not(feature = "tooling"), allow(dead_code))]
    PermissionDenied {
        /// The role.
        role: RoleName,
        /// The subject the server refused.
        subject: String,
        /// `publish` or `subscribe`.
        operation: &'static str,
    },
    /// Reading or writing the bucket failed.
    #[error("evicting role {role} failed: {}", kind.as_str())]
    Kv {
        /// The role.
        role: RoleName,
        /// What failed.
        kind: FailureKind,
    },
}

/// Deletes `role`'s lease if it is as `expect`ed (at that revision, in that term; with no
/// expectation, whatever holds it now): reads the lease from the stream leader, then deletes
/// it with a conditional delete at the revision read, which fails if anything was written
/// since.
///
/// A live holder renews its session every heartbeat, not the role key (protocol v2: written
/// once per term), so the revision read normally stays. When the delete fails because the
/// key was rewritten within the same term (a late commit of the term's own write, P5, or a
/// version-1 holder renewing its lease: the lease still holds the term that was read — same
/// holder, incarnation, term and nonce), the eviction reads again and deletes at the new
/// revision, until `timeout` has passed. Any other change (a new term,
/// a release, a foreign value) ends it with [`EvictError::Changed`]; with
/// [`Expect::revision`] a renewal ends it with [`EvictError::RevisionMismatch`].
///
/// The evicted holder learns of it through its watcher and stops at once
/// (`DemoteReason::Evicted`); every candidate, the evicted instance included, may then take
/// the role. To move a role away from a live instance, release it on that instance instead.
///
/// # Errors
/// See [`EvictError`]: nothing was deleted unless the error is [`EvictError::Timeout`].
pub(crate) async fn evict(
    store: &LeaseStore,
    role: &RoleName,
    expect: Expect,
    timeout: Duration,
) -> Result<Evicted, EvictError> {
    evict_from(store, role, expect, timeout).await
}

/// The two operations an eviction needs ([`LeaseStore`]; a fake in the unit tests).
trait EvictStore {
    /// The key's last entry, read from the stream leader.
    fn read(
        &self,
        key: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<KeyState, FailureKind>> + Send;
    /// A delete marker, stored only if the key is still at `revision`.
    fn delete(
        &self,
        key: &str,
        revision: u64,
        timeout: Duration,
    ) -> impl Future<Output = WriteOutcome> + Send;
}

impl EvictStore for LeaseStore {
    fn read(
        &self,
        key: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<KeyState, FailureKind>> + Send {
        LeaseStore::read(self, key, timeout)
    }

    fn delete(
        &self,
        key: &str,
        revision: u64,
        timeout: Duration,
    ) -> impl Future<Output = WriteOutcome> + Send {
        self.cas(key, revision, None, Bytes::new(), true, timeout)
    }
}

/// What identifies one term of one holder across its renewals.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TermId {
    holder: String,
    incarnation: uuid::Uuid,
    nonce: uuid::Uuid,
    term: u64,
}

async fn evict_from<S: EvictStore>(
    store: &S,
    role: &RoleName,
    expect: Expect,
    timeout: Duration,
) -> Result<Evicted, EvictError> {
    let key = format!("{ROLE_PREFIX}{role}");
    let deadline = tokio::time::Instant::now() + timeout;
    // The term read first (`Some(None)`: a foreign value); later passes go ahead only while
    // the lease still holds it.
    let mut first: Option<Option<TermId>> = None;
    loop {
        let state = store
            .read(&key, timeout)
            .await
            .map_err(|kind| EvictError::Kv {
                role: role.clone(),
                kind,
            })?;
        let changed = || EvictError::Changed { role: role.clone() };
        let (revision, value) = match state {
            KeyState::Held { revision, value } => (revision, value),
            KeyState::Vacant { .. } if first.is_some() => return Err(changed()),
            KeyState::Vacant { .. } => return Err(EvictError::NotHeld { role: role.clone() }),
            KeyState::Absent | KeyState::Unknown { .. } if first.is_some() => {
                return Err(changed());
            }
            KeyState::Absent | KeyState::Unknown { .. } => {
                return Err(EvictError::UnknownRole { role: role.clone() });
            }
        };
        let lease = value.lease();
        let holder = lease.map(|l| l.holder.to_string());
        let term = lease.map(|l| l.term.unwrap_or(revision));
        let id = lease.map(|l| TermId {
            holder: l.holder.to_string(),
            incarnation: l.incarnation,
            nonce: l.nonce,
            term: l.term.unwrap_or(revision),
        });
        if let Some(expected) = expect.term
            && Some(expected) != term
        {
            return Err(match first {
                Some(_) => changed(),
                None => EvictError::TermMismatch {
                    role: role.clone(),
                    expected,
                    current: term,
                    holder,
                },
            });
        }
        if let Some(expected) = expect.revision
            && expected != revision
        {
            return Err(EvictError::RevisionMismatch {
                role: role.clone(),
                expected,
                current: revision,
                holder,
                term,
            });
        }
        match &first {
            None => first = Some(id),
            // A renewal of the term read first: delete at its revision.
            Some(Some(was)) if id.as_ref() == Some(was) => {}
            Some(_) => return Err(changed()),
        }
        match store.delete(&key, revision, timeout).await {
            WriteOutcome::Ok {
                revision: marker_revision,
            } => {
                return Ok(Evicted {
                    role: role.to_string(),
                    holder,
                    term,
                    revision,
                    marker_revision,
                });
            }
            // Written since the read (a renewal?) or an in-flight conflict (R3): read again.
            WriteOutcome::Conflict | WriteOutcome::Retry => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(changed());
                }
            }
            WriteOutcome::Unknown => {
                return Err(EvictError::Timeout {
                    role: role.clone(),
                    timeout,
                });
            }
            WriteOutcome::Failed(kind) => {
                return Err(EvictError::Kv {
                    role: role.clone(),
                    kind,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use uuid::Uuid;

    use super::*;
    use crate::names::InstanceId;
    use crate::value::{HolderValue, LeaseValue, VALUE_VERSION};

    /// Answers reads and deletes from scripts, recording the revisions deletes were sent at.
    struct Scripted {
        reads: Mutex<VecDeque<KeyState>>,
        deletes: Mutex<VecDeque<WriteOutcome>>,
        deleted_at: Mutex<Vec<u64>>,
    }

    impl Scripted {
        fn new(reads: Vec<KeyState>, deletes: Vec<WriteOutcome>) -> Self {
            Self {
                reads: Mutex::new(reads.into()),
                deletes: Mutex::new(deletes.into()),
                deleted_at: Mutex::default(),
            }
        }

        fn deleted_at(&self) -> Vec<u64> {
            self.deleted_at.lock().expect("lock").clone()
        }
    }

    impl EvictStore for Scripted {
        fn read(
            &self,
            _key: &str,
            _timeout: Duration,
        ) -> impl Future<Output = Result<KeyState, FailureKind>> + Send {
            let next = self.reads.lock().expect("lock").pop_front();
            std::future::ready(next.ok_or(FailureKind::Unavailable))
        }

        fn delete(
            &self,
            _key: &str,
            revision: u64,
            _timeout: Duration,
        ) -> impl Future<Output = WriteOutcome> + Send {
            self.deleted_at.lock().expect("lock").push(revision);
            let next = self.deletes.lock().expect("lock").pop_front();
            std::future::ready(next.unwrap_or(WriteOutcome::Unknown))
        }
    }

    const NONCE: Uuid = Uuid::from_u128(7);

    /// The lease of `holder` at `revision`, in the term started at `started`.
    fn held(holder: &str, nonce: Uuid, started: u64, revision: u64) -> KeyState {
        KeyState::Held {
            revision,
            value: HolderValue::Lease(Box::new(LeaseValue {
                v: VALUE_VERSION,
                holder: InstanceId::new(holder).expect("valid"),
                incarnation: Uuid::from_u128(1),
                session: uuid::Uuid::nil(),
                session_key: crate::value::session_key(
                    &InstanceId::new(holder).expect("valid"),
                    3_000,
                ),
                nonce,
                term: (revision != started).then_some(started),
                priority: 0,
                ttl_ms: 3_000,
                meta: Default::default(),
                acquired_at: None,
                renewed_at: None,
            })),
        }
    }

    fn role() -> RoleName {
        RoleName::new("r").expect("valid")
    }

    async fn run(store: &Scripted, expect: Expect) -> Result<Evicted, EvictError> {
        evict_from(store, &role(), expect, Duration::from_secs(5)).await
    }

    #[tokio::test]
    async fn a_renewal_between_read_and_delete_is_the_same_term_and_evicted() {
        // Read at 10 (the term's first write), renewed to 11 before the delete, 12 before the
        // next one.
        let store = Scripted::new(
            vec![
                held("a", NONCE, 10, 10),
                held("a", NONCE, 10, 11),
                held("a", NONCE, 10, 12),
            ],
            vec![
                WriteOutcome::Conflict,
                WriteOutcome::Retry,
                WriteOutcome::Ok { revision: 13 },
            ],
        );
        let evicted = run(&store, Expect::any()).await.expect("evicted");
        assert_eq!(store.deleted_at(), [10, 11, 12]);
        assert_eq!(evicted.term, Some(10));
        assert_eq!(evicted.revision, 12);
        assert_eq!(evicted.marker_revision, 13);
        assert_eq!(evicted.holder.as_deref(), Some("a"));

        // The confirmed term (what the CLI asks about) survives renewals too.
        let store = Scripted::new(
            vec![held("a", NONCE, 10, 11), held("a", NONCE, 10, 12)],
            vec![WriteOutcome::Conflict, WriteOutcome::Ok { revision: 13 }],
        );
        run(&store, Expect::term(10)).await.expect("evicted");
        assert_eq!(store.deleted_at(), [11, 12]);
    }

    #[tokio::test]
    async fn anything_but_a_renewal_of_the_term_read_is_a_change() {
        let other_nonce = Uuid::from_u128(8);
        for (what, now) in [
            (
                "a new term of the same holder",
                held("a", other_nonce, 11, 11),
            ),
            ("another holder", held("b", other_nonce, 11, 11)),
            (
                "a released role",
                KeyState::Vacant {
                    revision: 11,
                    expired: false,
                },
            ),
            (
                "a foreign value",
                KeyState::Held {
                    revision: 11,
                    value: HolderValue::Foreign,
                },
            ),
        ] {
            let store = Scripted::new(
                vec![held("a", NONCE, 10, 10), now],
                vec![WriteOutcome::Conflict],
            );
            let e = run(&store, Expect::any()).await.expect_err(what);
            assert!(matches!(e, EvictError::Changed { .. }), "{what}: {e:?}");
            assert_eq!(store.deleted_at(), [10], "{what}: deleted only at the read");
        }
        // A foreign value read first cannot be told apart from a new one: no second try.
        let foreign = || KeyState::Held {
            revision: 10,
            value: HolderValue::Foreign,
        };
        let store = Scripted::new(vec![foreign(), foreign()], vec![WriteOutcome::Conflict]);
        let e = run(&store, Expect::any()).await.expect_err("foreign");
        assert!(matches!(e, EvictError::Changed { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn an_exact_revision_is_not_followed_across_renewals() {
        let store = Scripted::new(
            vec![held("a", NONCE, 10, 10), held("a", NONCE, 10, 11)],
            vec![WriteOutcome::Conflict],
        );
        let e = run(&store, Expect::revision(10))
            .await
            .expect_err("moved on");
        assert!(
            matches!(
                e,
                EvictError::RevisionMismatch {
                    expected: 10,
                    current: 11,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(store.deleted_at(), [10]);
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_are_followed_only_until_the_timeout() {
        /// Always renewed again just before the delete, each read taking 1 s.
        struct Busy(Mutex<u64>);
        impl EvictStore for Busy {
            fn read(
                &self,
                _key: &str,
                _timeout: Duration,
            ) -> impl Future<Output = Result<KeyState, FailureKind>> + Send {
                let mut rev = self.0.lock().expect("lock");
                *rev += 1;
                let state = held("a", NONCE, 10, *rev);
                async move {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok(state)
                }
            }
            fn delete(
                &self,
                _key: &str,
                _revision: u64,
                _timeout: Duration,
            ) -> impl Future<Output = WriteOutcome> + Send {
                std::future::ready(WriteOutcome::Conflict)
            }
        }
        let store = Busy(Mutex::new(9));
        let e = evict_from(&store, &role(), Expect::any(), Duration::from_secs(5))
            .await
            .expect_err("never settles");
        assert!(matches!(e, EvictError::Changed { .. }), "{e:?}");
        assert_eq!(*store.0.lock().expect("lock"), 14, "five reads in 5 s");
    }
}
