//! The manager's part in targeted moves (protocol Q13): the watcher hands it every
//! `control.move.*` entry; as the target it answers a request, as the holder it hands the
//! role over once the target accepted, and after the target's acquire it marks the move done.

use std::time::Duration;

use async_nats::jetstream::kv::Entry;
use tracing::{debug, info, warn};

use super::role_input::RoleInput;
use super::shared::Shared;
use crate::codec::control::Control;
use crate::core::WriteOutcome;
use crate::moves::{MoveRecord, MoveState, TargetFacts};
use crate::names::RoleName;
use crate::status::RoleState;

/// The watcher saw a move key change.
pub(crate) fn observe(shared: &std::sync::Arc<Shared>, entry: &Entry) {
    let Some(role) = entry
        .key
        .strip_prefix(crate::moves::MOVE_PREFIX)
        .and_then(|r| RoleName::new(r).ok())
    else {
        debug!(key = %entry.key, "ignoring a key that is not a move key");
        return;
    };
    let decoded = crate::codec::control::move_record(entry);
    if matches!(decoded, Control::Foreign) {
        warn!(key = %entry.key, revision = entry.revision, "ignoring a value that is not a move record (it moves nothing)");
    }
    let record = decoded.record();
    // Only records of roles this instance manages are kept (only they are read by its
    // hold-backs, releases and placement pins): move records of other roles cost no memory
    // here. A request naming this instance is answered either way (`not_configured`).
    let managed = shared.managed.roles().contains_key(&role);
    let kept = record.clone().filter(|_| managed);
    shared
        .bucket
        .moves()
        .observe(&entry.key, entry.revision, kept);
    report_kept(shared);
    let Some(record) = record else {
        return;
    };
    match record.state {
        MoveState::Requested if record.to == shared.instance => {
            answer(shared, &role, entry.revision, record);
        }
        MoveState::Accepted if managed => {
            // The holder of the named term hands it over (its role runner checks the term).
            shared.send(&role, RoleInput::MoveAccepted(record.term));
        }
        _ => {}
    }
}

/// Tells placement which roles moves keep on this instance.
fn report_kept(shared: &Shared) {
    if let Some(p) = &shared.placement {
        let kept = shared.bucket.moves().kept_on(&shared.instance);
        p.kept(kept);
    }
}

/// What this instance knows of itself as the target of a move of `role`.
fn facts(shared: &Shared, role: &RoleName) -> TargetFacts {
    let (status, class, held) = {
        let roles = shared.managed.roles();
        let Some(slot) = roles.get(role) else {
            return TargetFacts::default();
        };
        let held = roles
            .values()
            .filter(|s| super::status::current(&s.status).state == RoleState::Leader)
            .count();
        (super::status::current(&slot.status), slot.class, held)
    };
    let now = tokio::time::Instant::now();
    let stopping = matches!(status.state, RoleState::Stopped)
        || (status.state != RoleState::Leader
            && status.last_demote_reason
                == Some(crate::core::DemoteReason::Released(
                    crate::core::ReleaseReason::Shutdown,
                )));
    let draining = shared
        .placement
        .as_ref()
        .is_some_and(|p| *p.draining.borrow());
    let full = shared.placement.as_ref().and_then(|p| {
        p.full().contains(&shared.instance).then(|| {
            p.settings
                .config
                .max_roles
                .is_some_and(|m| held >= m as usize)
        })
    });
    let session = class.and_then(|class| {
        shared
            .managed
            .sessions()
            .get(&class)
            .and_then(|c| match c.view.borrow().update {
                Some(crate::core::SessionUpdate::Live { uuid, .. }) => Some(uuid),
                _ => None,
            })
    });
    TargetFacts {
        configured: true,
        campaigns: class.is_some(),
        draining: draining || stopping,
        unavailable: status.failure.is_some() || status.cooldown_until.is_some_and(|u| u > now),
        full,
        session,
        holds: status.state == RoleState::Leader,
    }
}

/// Answers a request naming this instance: accepted or refused, by CAS on its revision.
fn answer(shared: &std::sync::Arc<Shared>, role: &RoleName, revision: u64, mut record: MoveRecord) {
    match crate::moves::answer(&facts(shared, role)) {
        Ok(session) => {
            info!(%role, from = %record.from, id = %record.id, by = %record.by, "move accepted: taking the role over");
            record.state = MoveState::Accepted;
            record.session = Some(session);
        }
        Err(reason) => {
            info!(%role, from = %record.from, id = %record.id, %reason, "move refused: {}", reason.describe());
            record.state = MoveState::Refused;
            record.reason = Some(reason);
        }
    }
    let ttl = Duration::from_millis(record.timeout_ms) + Duration::from_secs(1);
    write(shared, role, revision, ttl, record);
}

/// This instance's lease of `role` at `revision` was delivered: an accepted move to this
/// instance is done (its record now keeps the role here for `hold_ms`, or ends).
pub(crate) fn took(shared: &std::sync::Arc<Shared>, role: &RoleName, revision: u64) {
    let Some((rev, mut record)) = shared.bucket.moves().get(role).cloned() else {
        return;
    };
    if record.state != MoveState::Accepted || record.to != shared.instance {
        return;
    }
    info!(%role, term = revision, from = %record.from, id = %record.id, "moved here");
    record.state = MoveState::Done;
    record.term = revision;
    if record.hold_ms == 0 {
        // No hold: the record has done its work.
        delete(shared, role, rev);
        return;
    }
    let hold = Duration::from_millis(record.hold_ms);
    write(shared, role, rev, hold, record);
}

fn write(
    shared: &std::sync::Arc<Shared>,
    role: &RoleName,
    revision: u64,
    ttl: Duration,
    record: MoveRecord,
) {
    let shared = shared.clone();
    let role = role.clone();
    tokio::spawn(async move {
        let timeout = shared
            .store
            .max_age()
            .max(Duration::from_secs(2))
            .min(Duration::from_secs(5));
        let outcome = shared
            .store
            .cas(
                &MoveRecord::key(&role),
                revision,
                Some(ttl),
                record.to_bytes(),
                false,
                timeout,
            )
            .await;
        report(&role, record.state, outcome);
    });
}

fn delete(shared: &std::sync::Arc<Shared>, role: &RoleName, revision: u64) {
    let shared = shared.clone();
    let role = role.clone();
    tokio::spawn(async move {
        let outcome = shared
            .store
            .cas(
                &MoveRecord::key(&role),
                revision,
                None,
                bytes::Bytes::new(),
                true,
                Duration::from_secs(5),
            )
            .await;
        report(&role, MoveState::Done, outcome);
    });
}

fn report(role: &RoleName, state: MoveState, outcome: WriteOutcome) {
    match outcome {
        WriteOutcome::Ok { .. } => {}
        // Somebody changed the record first (the requester withdrew it, a cancel): it is
        // theirs now.
        WriteOutcome::Conflict => {
            debug!(%role, state = state.as_str(), "the move record changed first")
        }
        other => {
            warn!(%role, state = state.as_str(), outcome = ?other, "cannot write the move record; it ends by its TTL")
        }
    }
}

/// The hold-back of a targeted move at the vacancy of `role` that ends the term at `ended`
/// (protocol Q13): `Some(zero)` for the target, `Some(grace)` for everybody else while the
/// target's session lives, `None` when no accepted move names that term.
pub(crate) fn hold_back(
    shared: &Shared,
    role: &RoleName,
    ended: Option<u64>,
    ttl: Duration,
) -> Option<Duration> {
    let book = shared.bucket.moves();
    let sessions = shared.reports.book();
    let live = |instance: &crate::names::InstanceId, uuid: uuid::Uuid| {
        sessions.is_live_session(instance, uuid)
    };
    book.hold_back(role, ended, &shared.instance, ttl, live)
        .map(|h| match h {
            crate::moves::HoldBack::Claim => Duration::ZERO,
            crate::moves::HoldBack::Wait(d) => d,
        })
}
