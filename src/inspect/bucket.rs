//! [`Inspector`]: a bucket's roles read directly from NATS, without running a manager.

use std::pin::Pin;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::kv::Entry;
use futures_util::{Stream, StreamExt, TryStreamExt};

use super::denials::{Denials, Violation};
use super::evict::{EvictError, Evicted, Expect, evict};
use crate::codec::{self, member::MemberEntry};
use crate::config::NatsConfig;
use crate::core::SessionKeyState;
use crate::error::Error;
use crate::manager::HolderInfo;
use crate::manager::view::open_bucket;
use crate::names::RoleName;
use crate::store::{LeaseStore, ROLE_PREFIX, ServerErrors};
use crate::value::SESSION_PREFIX;
use std::collections::HashMap;
use uuid::Uuid;

/// Reads of role keys in flight at once in [`Inspector::holders`].
const READS_IN_FLIGHT: usize = 16;

/// A change of one role key seen by [`Inspector::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderUpdate {
    /// The role.
    pub role: RoleName,
    /// Revision of the key.
    pub revision: u64,
    /// The holder after the change; `None` when the role became vacant.
    pub holder: Option<HolderInfo>,
}

/// The role keys of one bucket, read with a NATS connection of its own (what the operator
/// commands use). Opening checks that the bucket exists; it never creates it.
///
/// Opened with [`Inspector::connect`], every operation fails at once with
/// [`Error::PermissionDenied`] naming the subject when the server reports a permission
/// violation on the connection, instead of timing out.
pub struct Inspector {
    bucket: String,
    epoch: u64,
    pub(super) kv: async_nats::jetstream::kv::Store,
    store: LeaseStore,
    pub(super) timeout: Duration,
    pub(super) denials: Denials,
}

impl std::fmt::Debug for Inspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspector")
            .field("bucket", &self.bucket)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl Inspector {
    /// Opens `bucket`; `timeout` bounds each later read or write.
    ///
    /// # Errors
    /// [`Error::BucketNotFound`], [`Error::PermissionDenied`] or [`Error::JetStream`].
    pub async fn open(
        client: &async_nats::Client,
        bucket: &str,
        errors: &ServerErrors,
        timeout: Duration,
    ) -> Result<Self, Error> {
        let settings = crate::core::BucketSettings {
            name: bucket.to_owned(),
            ..Default::default()
        };
        Self::open_with(client, &settings, errors, timeout, Denials::default()).await
    }

    /// Connects to NATS as `nats` says (client name `name` unless `nats.name` is set) and
    /// opens `bucket` (in its JetStream domain or behind its API prefix, when set; never
    /// created) on that connection of its own. Any permission violation the server
    /// reports on it fails the pending operation at once with [`Error::PermissionDenied`]
    /// naming the subject (`detail`: `SUBJECT (publish)` or `SUBJECT (subscribe)`).
    ///
    /// # Errors
    /// [`Error::Connect`], and those of [`Inspector::open`].
    pub async fn connect(
        nats: &NatsConfig,
        name: &str,
        bucket: &crate::core::BucketSettings,
        timeout: Duration,
    ) -> Result<Self, Error> {
        let denials = Denials::default();
        let (client, errors) = crate::manager::connect_observed(nats, name, {
            let denials = denials.clone();
            move |message| denials.note(message)
        })
        .await?;
        Self::open_with(&client, bucket, &errors, timeout, denials).await
    }

    async fn open_with(
        client: &async_nats::Client,
        bucket: &crate::core::BucketSettings,
        errors: &ServerErrors,
        timeout: Duration,
        denials: Denials,
    ) -> Result<Self, Error> {
        let opened = guarded(&denials, open_bucket(client, bucket, errors)).await?;
        Ok(Self {
            bucket: bucket.name.clone(),
            epoch: opened.epoch,
            kv: opened.kv,
            store: opened.store,
            timeout,
            denials,
        })
    }

    /// The first permission violation the server reported on this inspector's connection
    /// (only with [`Inspector::connect`]).
    #[must_use]
    pub fn permission_violation(&self) -> Option<Violation> {
        self.denials.first()
    }

    /// The bucket name.
    #[must_use]
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The bucket epoch (first half of every fencing token).
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The holder of every held role (foreign values included), sorted by role. A role whose
    /// holder's session is gone (the instance died or ended its session) is vacant (protocol
    /// v2, Q5) and not listed.
    ///
    /// # Errors
    /// [`Error::JetStream`] when listing or reading the keys fails; [`Error::Timeout`].
    pub async fn holders(&self) -> Result<Vec<HolderInfo>, Error> {
        // Role keys first, then sessions: a session that changed in between is newer than the
        // role value read, so a live holder is never shown gone.
        let roles = self
            .read_keys(role_of, |role, entry| {
                self.holder_of(&role, &entry)
                    .map(|info| (info, session_of(&entry)))
            })
            .await?;
        // Each live session with the time of its last renewal: in protocol v2 a holder renews
        // its session, not its role keys, so that is when the holder was last heard of.
        let sessions: HashMap<String, (Uuid, SystemTime)> = self
            .read_keys(
                |key| key.starts_with(SESSION_PREFIX).then(|| key.to_owned()),
                |key, entry| {
                    let renewed = SystemTime::from(entry.created);
                    live_session(&entry).map(|uuid| (key, (uuid, renewed)))
                },
            )
            .await?
            .into_iter()
            .collect();
        let mut out: Vec<HolderInfo> = roles
            .into_iter()
            .filter_map(|(mut info, session)| match session {
                None => Some(info),
                Some((key, uuid)) => {
                    let (live, renewed) = sessions.get(&key)?;
                    (*live == uuid).then(|| {
                        info.renewed_at = Some(*renewed);
                        info
                    })
                }
            })
            .collect();
        out.sort_by(|a: &HolderInfo, b| a.role.cmp(&b.role));
        Ok(out)
    }

    /// Placement membership records (`member.<instance>`) in the bucket; invalid or foreign
    /// values are skipped. Expired or deleted records are not listed, nor presence records
    /// (`placement: false`: instances without placement, protocol Q8).
    ///
    /// # Errors
    /// [`Error::JetStream`] when listing or reading the keys fails; [`Error::Timeout`].
    pub async fn members(&self) -> Result<Vec<crate::placement::MemberRecord>, Error> {
        use crate::placement::MEMBER_PREFIX;
        self.read_keys(
            |key| key.starts_with(MEMBER_PREFIX).then_some(()),
            |(), entry| placement_record(&entry),
        )
        .await
    }

    /// The placement membership record of one instance (`member.<id>`), if it has one: one
    /// read of its key, not a listing of the bucket (a listing that races a rewrite of the
    /// record can miss it).
    ///
    /// # Errors
    /// [`Error::JetStream`] when the read fails; [`Error::Timeout`].
    pub async fn member(
        &self,
        id: &crate::names::InstanceId,
    ) -> Result<Option<crate::placement::MemberRecord>, Error> {
        let key = format!("{}{id}", crate::placement::MEMBER_PREFIX);
        Ok(self.entry(key).await?.and_then(|e| placement_record(&e)))
    }

    /// One key's last entry (a direct get), within the timeout.
    async fn entry(&self, key: String) -> Result<Option<Entry>, Error> {
        guarded(&self.denials, async {
            tokio::time::timeout(self.timeout, self.kv.entry(key))
                .await
                .map_err(|_| Error::Timeout(self.timeout))?
                .map_err(|e| Error::JetStream(Box::new(e)))
        })
        .await
    }

    /// The deployment-wide freeze of voluntary placement moves (`control.freeze`), if set;
    /// a foreign value there freezes nothing and reads as `None`.
    ///
    /// # Errors
    /// [`Error::JetStream`] when the read fails; [`Error::Timeout`].
    pub async fn freeze_state(&self) -> Result<Option<crate::placement::FreezeRecord>, Error> {
        use crate::placement::FREEZE_KEY;
        let read = async {
            self.kv
                .entry(FREEZE_KEY)
                .await
                .map_err(|e| Error::JetStream(Box::new(e)))
        };
        let entry = guarded(&self.denials, async {
            tokio::time::timeout(self.timeout, read)
                .await
                .map_err(|_| Error::Timeout(self.timeout))?
        })
        .await?;
        Ok(entry.and_then(|e| codec::control::freeze(&e).record()))
    }

    /// Freezes (`Some(record)`) or unfreezes (`None`) every instance's voluntary placement
    /// moves (docs/placement.md): writes or deletes `control.freeze`. Vacant roles are taken
    /// while frozen.
    ///
    /// # Errors
    /// [`Error::JetStream`] when the write fails; [`Error::Timeout`];
    /// [`Error::PermissionDenied`].
    pub async fn set_freeze(
        &self,
        record: Option<&crate::placement::FreezeRecord>,
    ) -> Result<(), Error> {
        use crate::placement::FREEZE_KEY;
        let write = async {
            match record {
                Some(r) => self
                    .kv
                    .put(FREEZE_KEY, r.to_bytes())
                    .await
                    .map(|_| ())
                    .map_err(|e| Error::JetStream(Box::new(e))),
                None => self
                    .kv
                    .delete(FREEZE_KEY)
                    .await
                    .map_err(|e| Error::JetStream(Box::new(e))),
            }
        };
        guarded(&self.denials, async {
            tokio::time::timeout(self.timeout, write)
                .await
                .map_err(|_| Error::Timeout(self.timeout))?
        })
        .await
    }

    /// The operator's drain record naming `instance` (`control.drain.<instance>`), if set; a
    /// foreign value there drains nothing and reads as `None`.
    ///
    /// # Errors
    /// [`Error::JetStream`] when the read fails; [`Error::Timeout`].
    pub async fn drain_record(
        &self,
        instance: &crate::names::InstanceId,
    ) -> Result<Option<crate::placement::DrainRecord>, Error> {
        use crate::placement::drain_key;
        let key = drain_key(instance);
        let read = async {
            self.kv
                .entry(key.as_str())
                .await
                .map_err(|e| Error::JetStream(Box::new(e)))
        };
        let entry = guarded(&self.denials, async {
            tokio::time::timeout(self.timeout, read)
                .await
                .map_err(|_| Error::Timeout(self.timeout))?
        })
        .await?;
        Ok(entry.and_then(|e| codec::control::drain(&e).record()))
    }

    /// Makes `instance` drain (`Some(record)`, whose `instance` must be it) or ends the drain
    /// an operator asked for (`None`): writes or deletes `control.drain.<instance>`
    /// (docs/placement.md). The instance drains while the record exists or its own flag is
    /// set.
    ///
    /// # Errors
    /// [`Error::JetStream`] when the write fails; [`Error::Timeout`];
    /// [`Error::PermissionDenied`].
    pub async fn set_drain(
        &self,
        instance: &crate::names::InstanceId,
        record: Option<&crate::placement::DrainRecord>,
    ) -> Result<(), Error> {
        let key = crate::placement::drain_key(instance);
        self.put_or_delete(&key, record.map(crate::placement::DrainRecord::to_bytes))
            .await
    }

    /// Writes `value` under `key`, or deletes `key` (`None`): a plain write, for the
    /// operator's records (the last word wins).
    ///
    /// # Errors
    /// [`Error::JetStream`] when the write fails; [`Error::Timeout`];
    /// [`Error::PermissionDenied`].
    pub(super) async fn put_or_delete(
        &self,
        key: &str,
        value: Option<bytes::Bytes>,
    ) -> Result<(), Error> {
        let write = async {
            match value {
                Some(v) => self
                    .kv
                    .put(key, v)
                    .await
                    .map(|_| ())
                    .map_err(|e| Error::JetStream(Box::new(e))),
                None => self
                    .kv
                    .delete(key)
                    .await
                    .map_err(|e| Error::JetStream(Box::new(e))),
            }
        };
        guarded(&self.denials, async {
            tokio::time::timeout(self.timeout, write)
                .await
                .map_err(|_| Error::Timeout(self.timeout))?
        })
        .await
    }

    /// Lists the bucket's keys, reads those `select` picks (a few reads in flight at once:
    /// one round trip per key adds up over a WAN) and keeps what `parse` makes of their
    /// entries, in key order; the whole is bounded by four read timeouts.
    pub(super) async fn read_keys<S, T>(
        &self,
        select: impl Fn(&str) -> Option<S>,
        parse: impl Fn(S, Entry) -> Option<T>,
    ) -> Result<Vec<T>, Error> {
        let parse = &parse;
        let list = async {
            let keys: Vec<String> = self
                .kv
                .keys()
                .await
                .map_err(|e| Error::JetStream(Box::new(e)))?
                .try_collect()
                .await
                .map_err(|e| Error::JetStream(Box::new(e)))?;
            let entries: Vec<Option<T>> = futures_util::stream::iter(
                keys.into_iter()
                    .filter_map(|key| Some((select(&key)?, key))),
            )
            .map(|(selected, key)| async move {
                let entry = self
                    .kv
                    .entry(key)
                    .await
                    .map_err(|e| Error::JetStream(Box::new(e)))?;
                Ok::<_, Error>(entry.and_then(|e| parse(selected, e)))
            })
            .buffered(READS_IN_FLIGHT)
            .try_collect()
            .await?;
            Ok::<_, Error>(entries.into_iter().flatten().collect::<Vec<_>>())
        };
        guarded(&self.denials, async {
            tokio::time::timeout(self.timeout * 4, list)
                .await
                .map_err(|_| Error::Timeout(self.timeout * 4))?
        })
        .await
    }

    /// The holder of one role; `None` when it is vacant (its holder's session gone included)
    /// or was never written.
    ///
    /// # Errors
    /// [`Error::JetStream`] when the read fails; [`Error::Timeout`].
    pub async fn holder(&self, role: &RoleName) -> Result<Option<HolderInfo>, Error> {
        let key = format!("{ROLE_PREFIX}{role}");
        let Some(entry) = self.entry(key).await? else {
            return Ok(None);
        };
        let Some(mut info) = self.holder_of(role, &entry) else {
            return Ok(None);
        };
        // Protocol v2 (Q5): a role value whose session is gone is vacant. The holder renews
        // its session, not the role key (written once per term): the session's last write is
        // when the holder was last heard of, as in [`Inspector::holders`].
        if let Some((key, uuid)) = session_of(&entry) {
            let session = guarded(&self.denials, async {
                tokio::time::timeout(self.timeout, self.kv.entry(key.clone()))
                    .await
                    .map_err(|_| Error::Timeout(self.timeout))?
                    .map_err(|e| Error::JetStream(Box::new(e)))
            })
            .await?;
            let Some(session) = session.filter(|e| live_session(e) == Some(uuid)) else {
                return Ok(None);
            };
            info.renewed_at = Some(SystemTime::from(session.created));
        }
        Ok(Some(info))
    }

    /// Changes of role holders from now on: every change of a role key, and (protocol v2) a
    /// role becoming vacant when its holder's session ends, with the revision of the session's
    /// marker (no replay of the current state: combine with
    /// [`Inspector::holders`] read *after* this returns, and skip updates whose revision is
    /// not newer than what was read). The stream ends with an error if the watch fails (or,
    /// with [`Inspector::connect`], on a permission violation).
    ///
    /// # Errors
    /// [`Error::JetStream`] when the watch cannot be created.
    pub async fn watch(
        &self,
    ) -> Result<Pin<Box<dyn Stream<Item = Result<HolderUpdate, Error>> + Send>>, Error> {
        let watch = guarded(&self.denials, async {
            self.kv
                .watch_many([format!("{ROLE_PREFIX}>"), format!("{SESSION_PREFIX}>")])
                .await
                .map_err(|e| Error::JetStream(Box::new(e)))
        })
        .await?;
        // Protocol v2 (Q5): a role is vacant when its holder's session ends, which changes no
        // role key. Which role rests on which session: read once after the watch started,
        // then followed from the role entries the watch delivers.
        let resting: HashMap<RoleName, (String, Uuid)> = self
            .read_keys(role_of, |role, entry| {
                session_of(&entry).map(|session| (role, session))
            })
            .await?
            .into_iter()
            .collect();
        let epoch = self.epoch;
        let updates = watch
            .scan(resting, move |resting, entry| {
                let updates: Vec<Result<HolderUpdate, Error>> = match entry {
                    Ok(entry) => session_updates(resting, &entry, epoch)
                        .into_iter()
                        .map(Ok)
                        .collect(),
                    Err(e) => vec![Err(Error::JetStream(Box::new(e)))],
                };
                std::future::ready(Some(futures_util::stream::iter(updates)))
            })
            .flatten();
        // A violation ends the stream with its error (after the updates before it).
        let updates = futures_util::stream::unfold(
            Some((Box::pin(updates), Box::pin(self.denials.denied()))),
            |state| async move {
                let (mut updates, mut denied) = state?;
                tokio::select! {
                    biased;
                    item = updates.next() => item.map(|item| (item, Some((updates, denied)))),
                    v = &mut denied => Some((Err(permission_denied(&v)), None)),
                }
            },
        );
        Ok(Box::pin(updates))
    }

    /// Evicts `role`'s holder: a CAS-delete of its lease at the revision read (`docs/operations.md`).
    ///
    /// # Errors
    /// See [`EvictError`].
    pub async fn evict(&self, role: &RoleName, expect: Expect) -> Result<Evicted, EvictError> {
        let denied = |v: Violation| EvictError::PermissionDenied {
            role: role.clone(),
            subject: v.subject,
            operation: v.operation,
        };
        let result = tokio::select! {
            biased;
            r = evict(&self.store, role, expect, self.timeout) => r,
            v = self.denials.denied() => return Err(denied(v)),
        };
        match (result, self.denials.first()) {
            // The store noticed first; name the subject it was denied on.
            (
                Err(EvictError::Kv {
                    kind: crate::core::FailureKind::PermissionDenied,
                    ..
                }),
                Some(v),
            ) => Err(denied(v)),
            (result, _) => result,
        }
    }

    /// Asks that `role` be handed to instance `to` and waits for the outcome (protocol Q13,
    /// `nats-roles move`): the holder releases it gracefully, `to` claims it, the others hold
    /// back for `options.grace`.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for options out of range; [`Error::Timeout`],
    /// [`Error::Kv`], [`Error::JetStream`] or [`Error::PermissionDenied`] when a read or
    /// write fails (a move already asked for is withdrawn by its TTL).
    pub async fn request_move(
        &self,
        role: &RoleName,
        to: &crate::names::InstanceId,
        options: &crate::moves::MoveOptions,
    ) -> Result<crate::moves::MoveOutcome, Error> {
        let bucket = self.move_bucket();
        guarded(
            &self.denials,
            crate::manager::move_request::request_move(&bucket, role, to, options),
        )
        .await
    }

    /// Deletes `role`'s move record (`nats-roles move --cancel`): ends a move in progress and
    /// placement's hold of a moved role. Returns the record deleted (`None`: there was none).
    ///
    /// # Errors
    /// As [`Inspector::request_move`].
    pub async fn cancel_move(
        &self,
        role: &RoleName,
    ) -> Result<Option<crate::moves::MoveRecord>, Error> {
        let bucket = self.move_bucket();
        guarded(
            &self.denials,
            crate::manager::move_request::cancel_move(&bucket, role),
        )
        .await
    }

    /// The move record of `role`, if a valid one is stored.
    ///
    /// # Errors
    /// As [`Inspector::request_move`].
    pub async fn move_record(
        &self,
        role: &RoleName,
    ) -> Result<Option<crate::moves::MoveRecord>, Error> {
        let bucket = self.move_bucket();
        guarded(&self.denials, bucket.record(role))
            .await
            .map(|(_, r)| r)
    }

    /// The bucket as move requests read and write it.
    fn move_bucket(&self) -> crate::manager::move_request::MoveBucket<'_> {
        crate::manager::move_request::MoveBucket {
            kv: &self.kv,
            store: &self.store,
            op_timeout: self.timeout,
        }
    }

    fn holder_of(&self, role: &RoleName, entry: &Entry) -> Option<HolderInfo> {
        holder_info(role, entry, self.epoch)
    }
}

/// `Error::PermissionDenied` for a violation.
fn permission_denied(v: &Violation) -> Error {
    Error::PermissionDenied {
        detail: v.to_string(),
    }
}

/// Runs `op`, failing at once on a permission violation; a permission error of `op` itself
/// is given the violation's subject.
pub(super) async fn guarded<T>(
    denials: &Denials,
    op: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let result = tokio::select! {
        biased;
        r = op => r,
        v = denials.denied() => return Err(permission_denied(&v)),
    };
    match (result, denials.first()) {
        (Err(Error::PermissionDenied { .. }), Some(v)) => Err(permission_denied(&v)),
        (result, _) => result,
    }
}

fn role_of(key: &str) -> Option<RoleName> {
    key.strip_prefix(ROLE_PREFIX)
        .and_then(|name| RoleName::from_key_name(name).ok())
}

/// What one watched entry means for the role holders: a role entry is an update of its role
/// (and `resting` learns which session it rests on); a session entry that ends a session (a
/// marker, or a new session with another uuid) makes every role resting on it vacant, at the
/// session entry's revision.
fn session_updates(
    resting: &mut HashMap<RoleName, (String, Uuid)>,
    entry: &Entry,
    epoch: u64,
) -> Vec<HolderUpdate> {
    if let Some(role) = role_of(&entry.key) {
        match session_of(entry) {
            Some(session) => resting.insert(role.clone(), session),
            None => resting.remove(&role),
        };
        return vec![HolderUpdate {
            holder: holder_info(&role, entry, epoch),
            role,
            revision: entry.revision,
        }];
    }
    if !entry.key.starts_with(SESSION_PREFIX) {
        return Vec::new();
    }
    let now = match codec::session::watched(entry) {
        SessionKeyState::Value { value: Some(v), .. } => Some(v.session),
        // Not a session value: believed in no direction.
        SessionKeyState::Value { value: None, .. } => return Vec::new(),
        SessionKeyState::Marker { .. } | SessionKeyState::Absent => None,
    };
    let ended: Vec<RoleName> = resting
        .iter()
        .filter(|(_, (key, uuid))| *key == entry.key && Some(*uuid) != now)
        .map(|(role, _)| role.clone())
        .collect();
    ended
        .into_iter()
        .map(|role| {
            resting.remove(&role);
            HolderUpdate {
                role,
                revision: entry.revision,
                holder: None,
            }
        })
        .collect()
}

/// The session a role entry's lease rests on (protocol v2): its key and uuid.
fn session_of(entry: &Entry) -> Option<(String, Uuid)> {
    codec::role::watched(entry)
        .lease()
        .map(|v| (v.session_key.clone(), v.session))
}

/// The uuid of the live session a session key's entry holds (`None`: a marker or a value
/// that is not a session of the instance the key names).
fn live_session(entry: &Entry) -> Option<Uuid> {
    codec::session::watched(entry).uuid()
}

/// The holder a role entry shows (`None`: a marker, the role is vacant).
fn holder_info(role: &RoleName, entry: &Entry, epoch: u64) -> Option<HolderInfo> {
    let state = codec::role::watched(entry);
    HolderInfo::from_state(role, &state, epoch, Some(SystemTime::from(entry.created)))
}

/// A placement membership record (not a presence record, a foreign value or a marker).
fn placement_record(entry: &Entry) -> Option<crate::placement::MemberRecord> {
    match codec::member::watched(entry) {
        MemberEntry::Record(record) => record.placement.then_some(*record),
        MemberEntry::NotAnInstance | MemberEntry::Foreign { .. } | MemberEntry::Gone { .. } => None,
    }
}
