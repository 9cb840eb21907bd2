//! Integration tests in the test process: the library (role managers, the HTTP API, the
//! history checker) against real nats-server processes, and the test kit itself. One module
//! per area; one binary, so it links once.

mod bucket_lifecycle;
mod embedding;
mod failures;
mod foreign;
mod groups;
mod history;
mod hostile;
mod http_api;
mod kit_smoke;
mod lease_protocol;
mod prepare;
mod presence;
mod proxy;
mod renewal_age;
mod reset_start;
mod role_driver;
mod slot_count;
mod slots;
mod start_retry;

/// The `nats-roles` binary (cargo builds it for integration tests).
pub const BIN: &str = env!("CARGO_BIN_EXE_nats-roles");
