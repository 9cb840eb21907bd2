//! The requester of a targeted move (protocol Q13): reads the role and the target's session,
//! writes the move record by CAS, follows it until the target holds the role, refuses, or the
//! request times out (then withdraws it). Used by `nats-roles move`, `RoleManager::move_role`
//! and `POST /api/roles/{role}/move`. (Here rather than in `moves/`, whose records the codec
//! decodes: the requester reads the bucket through `crate::codec`.)

use std::time::Duration;

use async_nats::jetstream::kv::{Entry, Store};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::codec;
use crate::core::{SettingError, WriteOutcome};
use crate::error::Error;
use crate::moves::{MOVE_VERSION, MoveOptions, MoveOutcome, MoveRecord, MoveState};
use crate::names::{InstanceId, RoleName};
use crate::store::{LeaseStore, ROLE_PREFIX};
use crate::value::{parse_session_key, session_key};

/// How often the requester looks at the role and the record while it waits.
const POLL: Duration = Duration::from_millis(20);

/// The bucket a request is made in: its key-value view (reads) and its lease store (CAS
/// writes with a per-key TTL); `op_timeout` bounds each read and write.
pub(crate) struct MoveBucket<'a> {
    pub(crate) kv: &'a Store,
    pub(crate) store: &'a LeaseStore,
    pub(crate) op_timeout: Duration,
}

impl MoveBucket<'_> {
    async fn entry(&self, key: String) -> Result<Option<Entry>, Error> {
        tokio::time::timeout(self.op_timeout, self.kv.entry(key))
            .await
            .map_err(|_| Error::Timeout(self.op_timeout))?
            .map_err(|e| Error::JetStream(Box::new(e)))
    }

    async fn write(
        &self,
        key: &str,
        expected: u64,
        ttl: Option<Duration>,
        record: Option<&MoveRecord>,
    ) -> Result<Option<u64>, Error> {
        let (payload, delete) = match record {
            Some(r) => (r.to_bytes(), false),
            None => (bytes::Bytes::new(), true),
        };
        match self
            .store
            .cas(key, expected, ttl, payload, delete, self.op_timeout)
            .await
        {
            WriteOutcome::Ok { revision } => Ok(Some(revision)),
            WriteOutcome::Conflict => Ok(None),
            WriteOutcome::Unknown => Err(Error::Timeout(self.op_timeout)),
            WriteOutcome::Failed(kind) => Err(Error::Kv(kind)),
            WriteOutcome::Retry => Err(Error::Kv(crate::core::FailureKind::Unavailable)),
        }
    }

    /// The live holder of `role`: instance, term (revision) and the TTL class of its session.
    async fn holder(&self, role: &RoleName) -> Result<Option<(InstanceId, u64, u64)>, Error> {
        let Some(entry) = self.entry(format!("{ROLE_PREFIX}{role}")).await? else {
            return Ok(None);
        };
        let state = codec::role::watched(&entry);
        let Some(v) = state.lease() else {
            return Ok(None); // a marker, or not a lease of ours
        };
        let Some((_, class)) = parse_session_key(&v.session_key) else {
            return Ok(None);
        };
        if self.live_session(&v.session_key).await? != Some(v.session) {
            return Ok(None); // its session is gone: the role is vacant (Q5)
        }
        Ok(Some((v.holder.clone(), entry.revision, class)))
    }

    async fn live_session(&self, key: &str) -> Result<Option<uuid::Uuid>, Error> {
        Ok(self
            .entry(key.to_owned())
            .await?
            .and_then(|e| codec::session::watched(&e).uuid()))
    }

    /// The move record of `role` and its revision (`None` for the record: no valid record;
    /// the revision is what the next CAS expects: 0 when the key has no entry).
    pub(crate) async fn record(&self, role: &RoleName) -> Result<(u64, Option<MoveRecord>), Error> {
        Ok(match self.entry(MoveRecord::key(role)).await? {
            None => (0, None),
            Some(e) => (e.revision, codec::control::move_record(&e).record()),
        })
    }
}

/// Checks a request's options.
fn check(options: &MoveOptions) -> Result<(), Error> {
    let bad =
        |field, message: String| Err(Error::InvalidSetting(SettingError::new(field, message)));
    if options.timeout.is_zero() || options.timeout > MoveOptions::MAX_TIMEOUT {
        return bad(
            "move.timeout",
            format!(
                "must be above zero and at most {}",
                crate::core::fmt_duration(MoveOptions::MAX_TIMEOUT)
            ),
        );
    }
    if options.hold > MoveOptions::MAX_HOLD {
        return bad(
            "move.hold",
            format!(
                "must be at most {}",
                crate::core::fmt_duration(MoveOptions::MAX_HOLD)
            ),
        );
    }
    Ok(())
}

/// Asks that `role` be handed to `to` (protocol Q13) and waits for the outcome.
pub(crate) async fn request_move(
    bucket: &MoveBucket<'_>,
    role: &RoleName,
    to: &InstanceId,
    options: &MoveOptions,
) -> Result<MoveOutcome, Error> {
    check(options)?;
    let Some((from, term, class)) = bucket.holder(role).await? else {
        return Ok(MoveOutcome::Vacant);
    };
    if &from == to {
        return Ok(MoveOutcome::AlreadyThere { term });
    }
    if bucket
        .live_session(&session_key(to, class))
        .await?
        .is_none()
    {
        return Ok(MoveOutcome::TargetNotLive);
    }
    let key = MoveRecord::key(role);
    let (expected, existing) = bucket.record(role).await?;
    if let Some(r) = &existing
        && matches!(r.state, MoveState::Requested | MoveState::Accepted)
    {
        return Ok(MoveOutcome::InProgress {
            to: r.to.clone(),
            state: r.state,
        });
    }
    let ttl = Duration::from_millis(class);
    let grace = options.grace.min(ttl);
    let record = MoveRecord {
        v: MOVE_VERSION,
        id: uuid::Uuid::new_v4(),
        role: role.clone(),
        to: to.clone(),
        from,
        term,
        state: MoveState::Requested,
        session: None,
        reason: None,
        grace_ms: millis(grace),
        hold_ms: millis(options.hold),
        timeout_ms: millis(options.timeout),
        by: options.by.chars().take(128).collect(),
        at: crate::value::now_rfc3339(),
    };
    let started = Instant::now();
    let deadline = started + options.timeout;
    // The record ends by itself a little after the request does.
    let record_ttl = options.timeout + Duration::from_secs(1);
    let Some(mut revision) = bucket
        .write(&key, expected, Some(record_ttl), Some(&record))
        .await?
    else {
        // Somebody wrote the record since it was read: another request.
        let (_, now) = bucket.record(role).await?;
        return Ok(match now {
            Some(r) => MoveOutcome::InProgress {
                to: r.to,
                state: r.state,
            },
            None => MoveOutcome::InProgress {
                to: to.clone(),
                state: MoveState::Requested,
            },
        });
    };
    debug!(%role, %to, id = %record.id, revision, "move requested");
    loop {
        if let Some((holder, term, _)) = bucket.holder(role).await?
            && &holder == to
        {
            return Ok(MoveOutcome::Moved {
                term,
                took: started.elapsed(),
            });
        }
        let (rev, now) = bucket.record(role).await?;
        match now {
            Some(r) if r.id == record.id => {
                revision = rev;
                if r.state == MoveState::Refused {
                    let reason = r.reason.unwrap_or(crate::moves::MoveRefusal::Unavailable);
                    // The refusal is read: withdraw it at once (its TTL would end it anyway).
                    let _ = bucket.write(&key, rev, None, None).await;
                    return Ok(MoveOutcome::Refused(reason));
                }
            }
            // Deleted (`move --cancel`), expired or replaced: this request is over.
            _ => {
                return Ok(MoveOutcome::TimedOut {
                    holder: bucket.holder(role).await?.map(|(h, _, _)| h),
                });
            }
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
    // Timed out: withdraw the request so that no hold-back outlives it (a CAS on the revision
    // last read; a record rewritten since then ends by its TTL).
    match bucket.write(&key, revision, None, None).await {
        Ok(Some(_)) => {}
        Ok(None) => debug!(%role, "the move record changed at the timeout; left to its TTL"),
        Err(e) => warn!(%role, error = %e, "cannot withdraw the move record; it ends by its TTL"),
    }
    Ok(MoveOutcome::TimedOut {
        holder: bucket.holder(role).await?.map(|(h, _, _)| h),
    })
}

/// Deletes `role`'s move record (ends a move in progress and the placement hold of a done
/// one). Returns the record deleted, `None` when there was none.
pub(crate) async fn cancel_move(
    bucket: &MoveBucket<'_>,
    role: &RoleName,
) -> Result<Option<MoveRecord>, Error> {
    // A target answering meanwhile rewrites the record: delete what is there then (a few
    // times at most; a record rewritten without end is ended by its TTL).
    for _ in 0..5 {
        let (revision, record) = bucket.record(role).await?;
        let Some(record) = record else {
            return Ok(None);
        };
        if bucket
            .write(&MoveRecord::key(role), revision, None, None)
            .await?
            .is_some()
        {
            return Ok(Some(record));
        }
    }
    Err(Error::Kv(crate::core::FailureKind::Unavailable))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
