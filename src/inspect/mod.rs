//! A read-only view of a bucket's roles, shared by the HTTP API ([`crate::http`]) and the
//! `nats-roles status`/`watch`/`evict` commands, plus the one operator write: eviction.
//!
//! - [`RoleView`] / [`InstanceView`]: the JSON shapes of `GET /api/roles` and
//!   `GET /api/instances` (and of `nats-roles status --json`), built from the
//!   [`HolderInfo`](crate::HolderInfo) a manager's watcher keeps or an [`Inspector`] reads.
//! - [`EventView`] and [`TransitionTracker`]: one JSON event per transition (promoted,
//!   demoted, holder changed, vacated), with the previous holder so hand-overs can be shown.
//! - [`Inspector`]: opens a bucket without running a manager (for tools).
//! - [`evict`]: CAS-deletes a role's lease at its current revision.
//!
//! Fencing tokens only ever appear redacted ([`redact_token`]).

#[cfg(feature = "tooling")]
mod bucket;
#[cfg(feature = "tooling")]
mod denials;
mod evict;
mod groups;
mod redact;
mod transitions;
mod view;

pub use crate::placement::{MemberList, MemberView};
#[cfg(feature = "tooling")]
pub use bucket::{HolderUpdate, Inspector};
#[cfg(feature = "tooling")]
pub use denials::Violation;
#[cfg(feature = "http")]
pub(crate) use evict::evict;
pub use evict::{EvictError, Evicted, Expect};
#[cfg(feature = "tooling")]
pub use redact::redact_token;
pub use transitions::{EventView, TransitionTracker};
pub use view::{
    Candidates, HeldRole, HolderState, InstanceList, InstanceView, LocalView, RoleList, RoleView,
    format_time, instances, shown_name,
};
#[cfg(feature = "tooling")]
pub use view::{MAX_SHOWN_KEY, MAX_SHOWN_META, MAX_SHOWN_VALUE, shown_meta};
