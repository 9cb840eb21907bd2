//! The slot count record of a role with slots, `control.slots.<role>` (protocol Q15, "Slot
//! count record"): the number of slots the first instance of the role wrote, which every
//! other instance must agree with before it opens a slot — as `consul lock -n` keeps its limit
//! in the semaphore's key. Without it an instance with 3 slots and one with 2 each enforce
//! their own bound and up to 3 + 1 hold the role at once.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::WriteOutcome;
use crate::error::Error;
use crate::names::RoleName;
use crate::store::LeaseStore;
use tracing::{debug, error};

use super::shared::Shared;

/// Prefix of the slot count records' keys.
pub(crate) const SLOTS_PREFIX: &str = "control.slots.";

/// The record format written here; another version is not agreement (a typed error).
pub(crate) const SLOTS_VERSION: u32 = 1;

/// Longest record accepted from the bucket, in bytes.
const MAX_LEN: usize = 4096;

/// Writes and reads tried before [`ensure`] gives up with a transient error (the start
/// retries it): each lost race means another writer stored a record, which the next read
/// finds.
const ATTEMPTS: u32 = 5;

/// The key of `role`'s slot count record.
#[must_use]
pub(crate) fn slots_key(role: &RoleName) -> String {
    format!("{SLOTS_PREFIX}{role}")
}

/// A role's slot count, as the bucket records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SlotCountRecord {
    /// Format version ([`SLOTS_VERSION`]).
    pub(crate) v: u32,
    /// The role (also the key's last tokens).
    pub(crate) role: RoleName,
    /// Its number of slots, 2 to [`MAX_SLOTS`](crate::config::MAX_SLOTS).
    pub(crate) slots: u32,
    /// Who wrote it (informational).
    #[serde(default)]
    pub(crate) by: String,
    /// When (RFC 3339; informational).
    #[serde(default)]
    pub(crate) at: String,
}

impl SlotCountRecord {
    /// The record `by` writes for `role` with `slots` slots now.
    pub(crate) fn new(role: &RoleName, slots: u32, by: &str) -> Self {
        let mut end = by.len().min(128);
        while !by.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            v: SLOTS_VERSION,
            role: role.clone(),
            slots,
            by: by[..end].to_owned(),
            at: crate::value::now_rfc3339(),
        }
    }

    /// The slot count stored under `key`, or why the value is no valid version-1 record of
    /// the role the key names with 2 to `MAX_SLOTS` slots.
    pub(crate) fn parse(key: &str, bytes: &[u8]) -> Result<u32, String> {
        if bytes.len() > MAX_LEN {
            return Err(format!("{} bytes, more than {MAX_LEN}", bytes.len()));
        }
        let r: Self = serde_json::from_slice(bytes).map_err(|e| format!("not a record: {e}"))?;
        if r.v != SLOTS_VERSION {
            return Err(format!("format version {}, not {SLOTS_VERSION}", r.v));
        }
        if key.strip_prefix(SLOTS_PREFIX) != Some(r.role.as_str()) {
            return Err(format!("it names role {}, not the key's", r.role));
        }
        if !(2..=crate::config::MAX_SLOTS).contains(&r.slots) {
            return Err(format!(
                "{} slots (a role has 2 to {})",
                r.slots,
                crate::config::MAX_SLOTS
            ));
        }
        Ok(r.slots)
    }

    /// Serialises the record to JSON bytes.
    pub(crate) fn to_bytes(&self) -> bytes::Bytes {
        // Strings and integers: serialising cannot fail.
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }
}

/// What the stream leader holds under a slot count key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stored {
    /// No entry: a create expects revision 0.
    Absent,
    /// A delete, purge or expiry marker at this revision: a create expects it.
    Marker(u64),
    /// A value.
    Value(bytes::Bytes),
}

/// What an instance with `configured` slots does with what the leader holds:
/// `Ok(Some(revision))` to create the record expecting that revision, `Ok(None)` on agreement,
/// or the error refusing the slots (another count, or a value that is no valid record: never
/// taken for agreement).
pub(crate) fn judge(
    role: &RoleName,
    configured: u32,
    stored: &Stored,
) -> Result<Option<u64>, Error> {
    match stored {
        Stored::Absent => Ok(Some(0)),
        Stored::Marker(revision) => Ok(Some(*revision)),
        Stored::Value(bytes) => match SlotCountRecord::parse(&slots_key(role), bytes) {
            Ok(recorded) if recorded == configured => Ok(None),
            Ok(recorded) => Err(Error::SlotCountConflict {
                role: role.clone(),
                configured,
                recorded,
            }),
            Err(problem) => Err(Error::SlotCountRecordInvalid {
                role: role.clone(),
                problem,
            }),
        },
    }
}

/// Reads `role`'s slot count record from the stream leader (not a direct get, which may
/// answer from a lagging replica).
///
/// # Errors
/// [`Error::Kv`] when the read fails or times out.
pub(crate) async fn read(
    store: &LeaseStore,
    role: &RoleName,
    timeout: Duration,
) -> Result<Stored, Error> {
    let raw = store
        .read_raw(&slots_key(role), timeout)
        .await
        .map_err(Error::Kv)?;
    Ok(match raw {
        None => Stored::Absent,
        Some((revision, headers, payload)) => match crate::codec::EntryKind::stored(&headers) {
            crate::codec::EntryKind::Value => Stored::Value(payload),
            crate::codec::EntryKind::Marker { .. } => Stored::Marker(revision),
        },
    })
}

/// Before any slot of `role` opens (protocol Q15): creates the record with `slots` (a create
/// expecting revision 0, or the revision of a marker over it), or reads it from the stream
/// leader with the same count. A create whose outcome is unknown, or that lost a race, is
/// decided by reading the record again: the count stored is what counts, whoever wrote it.
///
/// # Errors
/// [`Error::SlotCountConflict`] when the record holds another count;
/// [`Error::SlotCountRecordInvalid`] when it holds a value that is not a valid record;
/// [`Error::Kv`] when a read or write fails ([`Error::is_transient`] says whether retrying
/// can help) or the races did not settle within a few attempts.
pub(crate) async fn ensure(
    store: &LeaseStore,
    role: &RoleName,
    slots: u32,
    by: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let key = slots_key(role);
    for _ in 0..ATTEMPTS {
        let stored = read(store, role, timeout).await?;
        let Some(expected) = judge(role, slots, &stored)? else {
            return Ok(());
        };
        let record = SlotCountRecord::new(role, slots, by).to_bytes();
        match store
            .cas(&key, expected, None, record, false, timeout)
            .await
        {
            WriteOutcome::Ok { .. } => {
                tracing::info!(role = %role, slots, key = %key, "slot count record created");
                return Ok(());
            }
            // Another writer first (or a replicated stream's in-flight conflict), or no answer:
            // the next read says what the bucket holds.
            WriteOutcome::Conflict | WriteOutcome::Retry | WriteOutcome::Unknown => {}
            WriteOutcome::Failed(kind) => return Err(Error::Kv(kind)),
        }
    }
    Err(Error::Kv(crate::core::FailureKind::Unavailable))
}

/// [`ensure`] for each `(role, slots, timeout)` in turn (the start's step
/// `CheckSlotCounts`), `by` writing.
///
/// # Errors
/// The first error of [`ensure`].
pub(crate) async fn ensure_all(
    store: LeaseStore,
    roles: Vec<(RoleName, u32, Duration)>,
    by: String,
) -> Result<(), Error> {
    for (role, slots, timeout) in roles {
        ensure(&store, &role, slots, &by, timeout).await?;
    }
    Ok(())
}

/// Before roles without slots start campaigning (protocol Q15): none of them may have a slot
/// count record, i.e. be run elsewhere as a role with slots (a process holding `role.<r>`
/// beside the N holders of `r`'s slots would make N + 1). Leader reads, 32 at a time; a record
/// that does not parse is left to the instances with slots to judge. A guard against a
/// misconfiguration, not a rule of the election: a read that fails (a user without read
/// permission on `control.slots.>`, a timeout) skips the check with a warning — the watcher
/// still logs such a record at ERROR ([`observe`]).
///
/// # Errors
/// [`Error::SlotCountConflict`] (`configured` 1) for the first such role.
pub(crate) async fn refuse_plain_with_record(
    store: LeaseStore,
    roles: Vec<(RoleName, Duration)>,
) -> Result<(), Error> {
    use futures_util::StreamExt;
    let mut reads = futures_util::stream::iter(roles)
        .map(|(role, timeout)| {
            let store = store.clone();
            async move {
                let stored = read(&store, &role, timeout).await;
                (role, stored)
            }
        })
        .buffer_unordered(32);
    let mut warned = false;
    while let Some((role, stored)) = reads.next().await {
        let stored = match stored {
            Ok(stored) => stored,
            Err(e) => {
                if !std::mem::replace(&mut warned, true) {
                    tracing::warn!(role = %role, error = %e, "cannot read the slot count record of a role without slots; not checked");
                }
                continue;
            }
        };
        if let Stored::Value(bytes) = stored
            && let Ok(recorded) = SlotCountRecord::parse(&slots_key(&role), &bytes)
        {
            return Err(Error::SlotCountConflict {
                role,
                configured: 1,
                recorded,
            });
        }
    }
    Ok(())
}

/// How long [`reassert`] waits for each read and write.
const REASSERT_TIMEOUT: Duration = Duration::from_secs(2);

/// Writes the slot count record again where the bucket lost it while this instance runs
/// slots (a delete or purge marker delivered, a stream purged or the bucket recreated: the
/// watcher calls this after each bucket check), on a task of its own: for `only`, or every
/// role with slots managed here. A record that now holds another count (a newcomer created
/// it first) is logged at ERROR: the slots here keep running (protocol Q15, "Slot count
/// record").
pub(crate) fn reassert(shared: &Arc<Shared>, only: Option<&RoleName>) {
    let managed: BTreeSet<RoleName> = shared
        .managed
        .roles()
        .keys()
        .filter(|name| name.slot().is_some())
        .map(RoleName::base_role)
        .filter(|base| only.is_none_or(|o| o == base))
        .collect();
    let roles: Vec<(RoleName, u32)> = managed
        .into_iter()
        .filter_map(|role| shared.slot_counts.of(&role).map(|n| (role, n)))
        .collect();
    if roles.is_empty() {
        return;
    }
    let shared = shared.clone();
    tokio::spawn(async move {
        for (role, slots) in roles {
            let epoch = shared.bucket.epoch();
            let by = shared.instance.as_str();
            match ensure(&shared.store, &role, slots, by, REASSERT_TIMEOUT).await {
                Ok(()) => shared.slot_counts.checked(&role, epoch, slots),
                Err(
                    e @ (Error::SlotCountConflict { .. } | Error::SlotCountRecordInvalid { .. }),
                ) => {
                    error!(
                        role = %role,
                        slots,
                        "this instance runs {slots} slots of role {role}, but the bucket's record \
                         disagrees now (it was lost under the running slots and written again by \
                         another instance, or overwritten): {e}. The slots here keep running; \
                         stop every instance of the role and start them with one count"
                    );
                }
                Err(e) => debug!(role = %role, "slot count record not re-asserted: {e}"),
            }
        }
    });
}

/// What the watcher does with an entry of a slot count key: a marker over the record of a
/// role with slots here writes it again ([`reassert`]); a value that disagrees with the count
/// run here is logged at ERROR.
pub(crate) fn observe(shared: &Arc<Shared>, entry: &async_nats::jetstream::kv::Entry) {
    let Some(role) = entry
        .key
        .strip_prefix(SLOTS_PREFIX)
        .and_then(|name| RoleName::new(name).ok())
    else {
        return;
    };
    let Some(slots) = shared.slot_counts.of(&role) else {
        plain_named_like(shared, &role, entry);
        return;
    };
    match crate::codec::EntryKind::watched(entry.operation) {
        crate::codec::EntryKind::Marker { .. } => reassert(shared, Some(&role)),
        crate::codec::EntryKind::Value => {
            if let Err(e) = judge(&role, slots, &Stored::Value(entry.value.clone())) {
                error!(role = %role, slots, revision = entry.revision, "{e}");
            }
        }
    }
}

/// A slot count record for a role this instance campaigns for as one role (one holder, key
/// `role.<name>`, not a slot): the role's holders can then be one more than the recorded
/// count, which nothing here prevents (each side checks only its own keys) — logged at ERROR
/// on every such record the watcher delivers (the replay at start included), so that the
/// configuration is fixed. Protocol Q15, "Slot count record".
fn plain_named_like(shared: &Shared, role: &RoleName, entry: &async_nats::jetstream::kv::Entry) {
    if !matches!(
        crate::codec::EntryKind::watched(entry.operation),
        crate::codec::EntryKind::Value
    ) {
        return;
    }
    let Ok(recorded) = SlotCountRecord::parse(&entry.key, &entry.value) else {
        return;
    };
    let campaigns = shared
        .managed
        .roles()
        .get(role)
        .is_some_and(|slot| slot.class.is_some());
    if campaigns {
        error!(
            role = %role,
            recorded,
            key = %entry.key,
            "role {role} runs here as one role (one holder), but the bucket records it as a \
             role with {recorded} slots: up to {} processes may act on it at once; give every \
             instance of the role the same slots",
            recorded + 1
        );
    }
}

/// The watcher delivered a lease of `role.<role>` — the role as one role, not a slot — while
/// this instance runs `role` with slots: its holder acts beside the slots' N holders (the
/// order a start cannot refuse, protocol Q15: the value may be a term long over, so only a
/// delivered write is reported). Logged at ERROR, once per term (a role key is written once
/// per term).
pub(crate) fn plain_key_held(
    shared: &Shared,
    role: &RoleName,
    holder: &crate::names::InstanceId,
    revision: u64,
) {
    if let Some(slots) = shared.slot_counts.of(role) {
        error!(
            role = %role,
            slots,
            holder = %holder,
            revision,
            "role {role} runs here with {slots} slots, but {holder} holds it as one role (key \
             role.{role}): up to {} processes may act on it at once; give every instance of the \
             role the same slots",
            slots + 1
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> RoleName {
        RoleName::new(s).unwrap()
    }

    #[test]
    fn a_record_round_trips_under_its_own_key_only_and_damage_is_a_problem() {
        let r = name("sem");
        let key = slots_key(&r);
        assert_eq!(key, "control.slots.sem");
        let rec = SlotCountRecord::new(&r, 2, "exec-host-1");
        assert_eq!(SlotCountRecord::parse(&key, &rec.to_bytes()), Ok(2));
        assert!(SlotCountRecord::parse("control.slots.other", &rec.to_bytes()).is_err());
        for slots in [0, 1, crate::config::MAX_SLOTS + 1, u32::MAX] {
            let mut bad = rec.clone();
            bad.slots = slots;
            assert!(
                SlotCountRecord::parse(&key, &bad.to_bytes()).is_err(),
                "{slots}"
            );
        }
        let mut v2 = rec.clone();
        v2.v = 2;
        assert!(SlotCountRecord::parse(&key, &v2.to_bytes()).is_err());
        for bytes in [
            &b""[..],
            b"null",
            b"{}",
            b"2",
            br#"{"v":1,"role":"sem"}"#,
            br#"{"v":1,"role":"sem","slots":-1}"#,
            br#"{"v":1,"role":"sem","slots":2.5}"#,
            br#"{"v":1,"role":"sem.0","slots":2}"#,
            b"\xff",
        ] {
            assert!(SlotCountRecord::parse(&key, bytes).is_err(), "{bytes:?}");
        }
        assert_eq!(
            SlotCountRecord::parse(&key, br#"{"v":1,"role":"sem","slots":64}"#),
            Ok(64)
        );
        let mut long = rec;
        long.by = "b".repeat(MAX_LEN);
        assert!(SlotCountRecord::parse(&key, &long.to_bytes()).is_err());
        assert_eq!(SlotCountRecord::new(&r, 2, &"é".repeat(100)).by.len(), 128);
    }

    #[test]
    fn absent_or_cleared_creates_the_same_count_agrees_and_anything_else_refuses() {
        let r = name("sem");
        assert_eq!(judge(&r, 2, &Stored::Absent).unwrap(), Some(0));
        assert_eq!(judge(&r, 2, &Stored::Marker(17)).unwrap(), Some(17));
        let two = Stored::Value(SlotCountRecord::new(&r, 2, "a").to_bytes());
        assert_eq!(judge(&r, 2, &two).unwrap(), None);
        match judge(&r, 3, &two) {
            Err(Error::SlotCountConflict {
                role,
                configured: 3,
                recorded: 2,
            }) => assert_eq!(role, r),
            other => panic!("{other:?}"),
        }
        for damaged in [&b"garbage"[..], b"", br#"{"v":1,"role":"sem","slots":1}"#] {
            let stored = Stored::Value(bytes::Bytes::copy_from_slice(damaged));
            match judge(&r, 2, &stored) {
                Err(e @ Error::SlotCountRecordInvalid { .. }) => assert!(!e.is_transient()),
                other => panic!("{damaged:?}: {other:?}"),
            }
        }
        let conflict = judge(&r, 3, &two).unwrap_err();
        assert!(!conflict.is_transient());
        let text = conflict.to_string();
        assert!(
            text.contains("has 3 slot(s) here") && text.contains("records 2"),
            "{text}"
        );
    }
}
