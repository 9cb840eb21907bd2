//! The pure (sans-I/O) election core: one state machine per role.

pub mod backoff;
pub mod machine;
pub mod server_code;
pub mod timing_error;
pub mod types;

pub use backoff::RetryPolicy;
pub use machine::{Identity, RoleMachine};
pub use server_code::{FailureClass, ServerCode};
pub use timing_error::TimingError;
pub(crate) use timing_error::fmt_duration;
pub use types::*;
#[cfg(test)]
mod machine_tests;
#[cfg(test)]
mod sim;
