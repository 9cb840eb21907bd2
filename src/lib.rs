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
//! ```no_run
//! use std::time::Duration;
//! use nats_roles::{FnCallbacks, InstanceId, RoleManager, RoleName, RoleSpec};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = async_nats::connect("127.0.0.1:4222").await?;
//! let scheduler = RoleName::new("scheduler")?;
//! let manager = RoleManager::builder(client, InstanceId::new("node-a")?)
//!     .auto_create(1)
//!     .role(RoleSpec::new(scheduler.clone()).callbacks(FnCallbacks::new(
//!         |leadership: nats_roles::Leadership| async move {
//!             tokio::spawn(async move {
//!                 while leadership.is_valid() {
//!                     // leader-only work; stop when the term ends
//!                     tokio::select! {
//!                         () = leadership.cancelled() => break,
//!                         () = tokio::time::sleep(Duration::from_millis(100)) => {}
//!                     }
//!                 }
//!             });
//!         },
//!         |demotion: nats_roles::Demotion| async move {
//!             eprintln!("lost {}: {}", demotion.leadership.role(), demotion.reason);
//!         },
//!     )))
//!     .start()
//!     .await?;
//! // ... run the service ...
//! manager.shutdown(Duration::from_secs(10)).await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
pub mod callbacks;
pub mod config;
pub mod core;
pub mod election;
pub mod error;
pub mod health;
pub mod history;
#[cfg(feature = "http")]
pub mod http;
pub mod inspect;
pub mod leadership;
pub mod manager;
pub mod metrics;
pub mod names;
#[cfg(feature = "negative-controls")]
#[doc(hidden)]
pub mod negative;
pub mod placement;
pub mod status;
pub mod store;
pub(crate) mod tap;
#[cfg(feature = "otel")]
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod token;
pub mod value;
pub mod while_leader;

pub use callbacks::{Demotion, FnCallbacks, NoCallbacks, RoleCallbacks};
pub use core::{DemoteReason, ReleaseReason, Timing};
pub use election::Election;
pub use error::{Error, TimingError};
pub use leadership::Leadership;
pub use manager::{
    HolderInfo, RoleEvent, RoleHandle, RoleManager, RoleManagerBuilder, RoleSpec, RoleStatus,
    connect,
};
pub use names::{InstanceId, RoleName};
pub use status::RoleState;
pub use token::FencingToken;
pub use while_leader::{WhileLeader, run_while_leader};
