//! Targeted moves (docs/protocol.md Q13): an operator asks that a role's holder hand it to a
//! named instance, and to nobody else. The control record ([`MoveRecord`]), the target's
//! answer ([`MoveRefusal`]), the hold-back everybody applies at the vacancy the move ends
//! (the manager's book of records), and what a request comes to ([`MoveOutcome`]).
//!
//! The requester (`manager/move_request.rs`) is [`crate::inspect::Inspector::request_move`]
//! (the CLI's `nats-roles move`), [`crate::RoleManager::move_role`] (the library and
//! `POST /api/roles/{role}/move`).

mod book;
mod outcome;
mod record;
mod target;

pub(crate) use book::{HoldBack, MoveBook};
pub use outcome::{MoveOptions, MoveOutcome};
pub use record::{MOVE_PREFIX, MOVE_VERSION, MoveRecord, MoveRefusal, MoveState};
pub(crate) use target::{TargetFacts, answer};
