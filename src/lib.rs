//! # nats-roles
//!
//! Role elections on NATS JetStream KeyValue: each role ("scheduler", "billing-sweeper",
//! "shard-7") has at most one active holder among many instances, fails over about one lease
//! TTL after its holder dies, and hands over in milliseconds when the holder stops or yields.
//!
//! A [`RoleManager`] runs many role elections over one NATS connection and one bucket watcher.
//! Each role is a lease key `role.<name>` written only by conditional (CAS) writes carrying a
//! per-key TTL; every term gets a [`FencingToken`]; a holder stops acting at its own monotonic
//! deadline ([`Leadership::is_valid`]); a graceful stop releases at once. The protocol is in
//! `docs/protocol.md`.
//!
//! ## Concepts
//! - **role** — a named responsibility that exactly one instance should perform.
//! - **term** — one uninterrupted holding of a role by one instance; numbered by the KV
//!   revision of the write that started it, so terms strictly increase per role.
//! - **fencing token** — `(bucket epoch, term)`: hand it to resources so they reject older terms,
//!   or write role data with [`Leadership::fenced_put`], which the server stores only while the
//!   lease is still yours.
//! - **deadline** — the monotonic instant after which a holder must not act unless a renewal
//!   moved it: send time of the last successful write + TTL × (1 − margin).
//! - **hand-over** — release by CAS-delete after the role work drained; the next holder is
//!   promoted within a few milliseconds.
//!
//! ## Quick start
//! A complete program (`examples/quick_start.rs`, also in the README): it connects to
//! `NATS_URL` (default `127.0.0.1:4222`) as `NATS_ROLES_INSTANCE_ID` (default `node-<pid>`),
//! creates the bucket `roles` if it is missing (`auto_create(1)`; in production create it
//! yourself) and holds the role `scheduler` until Ctrl-C. Run two copies with
//! `cargo run --example quick_start` and stop the holder: the other one takes over within
//! milliseconds.
#![doc = concat!("```no_run\n", include_str!("../examples/quick_start.rs"), "```")]
#![deny(missing_docs)]
#![warn(unnameable_types)]

// What an embedding application uses; the types of the private modules below that appear in
// it are re-exported at the crate root.
pub mod callbacks;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod error;
pub mod groups;
pub mod health;
#[cfg(feature = "http")]
pub mod http;
pub mod manager;
pub mod moves;
pub mod names;
#[cfg(feature = "otel")]
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod token;
#[cfg(feature = "tooling")]
pub mod tooling;

mod codec;
mod core;
mod election;
#[cfg(feature = "cli")]
mod exec;
mod history;
#[cfg(any(feature = "tooling", feature = "http"))]
mod inspect;
mod leadership;
mod metrics;
mod placement;
#[cfg(test)]
mod sim;
mod status;
mod store;
mod tap;
mod value;
mod while_leader;

pub use callbacks::{Demotion, FnCallbacks, NoCallbacks, PrepareError, RoleCallbacks};
pub use core::{
    DemoteReason, FailureClass, FailureKind, ReleaseReason, RetryPolicy, ServerCode, StartRetry,
    Timing, TimingOverrides,
};
pub use election::Election;
pub use error::{Error, FenceError, SettingError, TimingError};
pub use leadership::Leadership;
pub use manager::{
    GroupAssignment, GroupCallbacks, GroupHandle, GroupMember, GroupRevoke, GroupSpec, HolderInfo,
    RoleEvent, RoleHandle, RoleManager, RoleManagerBuilder, RoleSpec, RoleStatus, connect,
};
pub use metrics::RoleSeries;
pub use names::{InstanceId, RoleName};
pub use status::RoleState;
pub use token::FencingToken;
pub use while_leader::{WhileLeader, run_while_leader};
