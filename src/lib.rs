//! nats-roles: role elections on NATS JetStream KV.
pub mod callbacks;
pub mod config;
pub mod core;
pub mod error;
pub mod health;
pub mod leadership;
pub mod manager;
pub mod names;
pub mod status;
pub mod store;
pub mod token;
pub mod value;

pub use callbacks::{Demotion, FnCallbacks, NoCallbacks, RoleCallbacks};
pub use core::{DemoteReason, ReleaseReason, Timing};
pub use error::Error;
pub use leadership::Leadership;
pub use manager::{HolderInfo, RoleEvent, RoleManager, RoleManagerBuilder, RoleSpec, RoleStatus, connect};
pub use names::{InstanceId, RoleName};
pub use status::RoleState;
pub use token::FencingToken;
