//! nats-roles (work in progress)
pub mod names;
