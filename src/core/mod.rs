//! The pure (sans-I/O) election core: one state machine per role.

mod attempts;
pub mod backoff;
pub mod bucket_settings;
pub mod machine;
pub mod presence;
pub mod server_code;
pub mod session;
pub mod session_book;
pub mod session_types;
pub mod setting_error;
pub(crate) mod slot_permits;
pub mod start_retry;
pub mod timing_error;
pub mod types;

pub use backoff::RetryPolicy;
pub use bucket_settings::{BucketSettings, MAX_BUCKET_REPLICAS};
pub use machine::{Identity, RoleMachine, SessionUpdate};
pub use presence::PresentRecord;
pub use server_code::{FailureClass, ServerCode};
pub use session::{SessionAction, SessionKeyState, SessionLoss, SessionMachine, SessionWriteKind};
pub use session_book::{Herd, Reap, SessionBook, Verdict};
pub use setting_error::SettingError;
pub use start_retry::StartRetry;
pub use timing_error::TimingError;
pub(crate) use timing_error::fmt_duration;
pub use types::*;
#[cfg(test)]
mod machine_tests;
#[cfg(test)]
mod session_book_tests;
#[cfg(test)]
mod session_tests;
