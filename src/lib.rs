//! nats-roles: role elections on NATS JetStream KV.
pub mod config;
pub mod core;
pub mod names;
pub mod status;
pub mod token;
pub mod value;
