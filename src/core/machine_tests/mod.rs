//! Unit tests of single machines for the failure, release and adoption rules (P3, P4, P5,
//! P8) and the session rules of protocol version 2 (Q4, Q5, Q7): each drives one
//! [`RoleMachine`] by hand through one situation. This file holds what they share; the tests
//! are by topic in `failures.rs`, `sessions.rs`, `releases.rs`, `adoption.rs` and
//! `vacancies.rs`. The machines get a live session
//! ([`SessionUpdate::Live`]) before they are expected to acquire: no acquire is sent without.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::{
    Action, DemoteReason, FailureKind, Identity, KeyState, Notice, ReleaseReason, RetryPolicy,
    RoleMachine, ServerCode, SessionUpdate, Timing, WriteKind, WriteOutcome,
};
use crate::names::InstanceId;
use crate::value::{HolderValue, LeaseValue};

mod adoption;
mod failures;
mod permit;
mod releases;
mod sessions;
mod vacancies;

const EPOCH: u64 = 1;

/// A free role key: its last entry is a delete marker (a key with no entry at all is acquired
/// only after a TTL + heartbeat, see `an_absent_key_is_acquired_only_after_a_ttl`).
const FREE: KeyState = KeyState::Vacant {
    revision: 1,
    expired: false,
};
const PERSISTENT_RETRY: Duration = Duration::from_secs(10);

fn identity(incarnation: u64) -> Identity {
    Identity {
        instance: InstanceId::new("solo").expect("valid instance id"),
        incarnation: Uuid::from_u64_pair(incarnation, incarnation),
        priority: 0,
        meta: std::collections::BTreeMap::new(),
    }
}

/// The uuid of the session the test machines rest on.
const SESSION: Uuid = Uuid::from_u64_pair(42, 42);

/// A candidate machine whose session is not live yet.
fn machine_without_session() -> RoleMachine {
    RoleMachine::new(
        identity(1),
        Timing::default(),
        RetryPolicy::default(),
        true,
        EPOCH,
        7,
    )
}

/// A machine with a live session acknowledged at the returned instant.
fn machine_with(retry: RetryPolicy) -> (RoleMachine, Instant) {
    let mut m = RoleMachine::new(identity(1), Timing::default(), retry, true, EPOCH, 7);
    let t0 = Instant::now();
    session_at(&mut m, SESSION, t0);
    (m, t0)
}

/// The session `uuid` was (re)written with a write sent at `at`, acknowledged at `at`.
fn session_at(m: &mut RoleMachine, uuid: Uuid, at: Instant) {
    m.handle_session(
        SessionUpdate::Live {
            uuid,
            acked_sent_at: at,
        },
        at,
    );
}

fn machine() -> (RoleMachine, Instant) {
    machine_with(RetryPolicy::default())
}

/// The session `uuid` ended for `reason` (as the session driver maps its loss).
fn lose(m: &mut RoleMachine, uuid: Uuid, reason: DemoteReason, at: Instant) {
    m.handle_session(SessionUpdate::Lost { uuid, reason }, at);
}

/// Every action produced so far.
fn drain(m: &mut RoleMachine) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

/// The op id of the last read or write among `actions`.
fn op_of(actions: &[Action]) -> Option<u64> {
    actions.iter().rev().find_map(|a| match a {
        Action::Write(w) => Some(w.op),
        Action::Read { op, .. } => Some(*op),
        _ => None,
    })
}

fn write_of(actions: &[Action]) -> Option<(u64, WriteKind, u64)> {
    actions.iter().rev().find_map(|a| match a {
        Action::Write(w) => Some((w.op, w.kind, w.expected)),
        _ => None,
    })
}

fn lease(holder: &str, incarnation: u64, nonce: u64, term: Option<u64>) -> HolderValue {
    lease_with_nonce(holder, incarnation, Uuid::from_u64_pair(nonce, nonce), term)
}

fn lease_with_nonce(holder: &str, incarnation: u64, nonce: Uuid, term: Option<u64>) -> HolderValue {
    HolderValue::Lease(Box::new(LeaseValue {
        v: crate::value::VALUE_VERSION,
        holder: InstanceId::new(holder).expect("valid instance id"),
        incarnation: Uuid::from_u64_pair(incarnation, incarnation),
        session: uuid::Uuid::nil(),
        session_key: crate::value::session_key(
            &InstanceId::new(holder).expect("valid instance id"),
            3_000,
        ),
        nonce,
        term,
        priority: 0,
        ttl_ms: 3_000,
        meta: std::collections::BTreeMap::new(),
        acquired_at: None,
        renewed_at: None,
    }))
}

/// Starts `m` and answers its first read with `state`.
fn start_on(m: &mut RoleMachine, t0: Instant, state: KeyState) {
    m.start(t0);
    let read = op_of(&drain(m)).expect("a read");
    m.handle_read(read, Ok(state), t0);
}

/// Starts `m` on an absent key and returns the op id of its acquire.
fn start_and_acquire(m: &mut RoleMachine, t0: Instant) -> u64 {
    start_on(m, t0, FREE);
    let (op, kind, _) = write_of(&drain(m)).expect("an acquire");
    assert_eq!(kind, WriteKind::Acquire);
    op
}

/// Promotes `m` at revision `rev`; returns the time of promotion.
fn promote(m: &mut RoleMachine, t0: Instant, rev: u64) {
    let acquire = start_and_acquire(m, t0);
    m.handle_write(acquire, WriteOutcome::Ok { revision: rev }, t0);
    assert!(m.term().is_some(), "promoted");
    drain(m);
}
