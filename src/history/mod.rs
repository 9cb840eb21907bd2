//! Histories of elections under faults, and the checker that judges them.
//!
//! A node records what happens to its roles — lease writes and their outcomes, promotions,
//! renewals, demotions, leader-only acts and fenced writes — as JSON lines stamped with the
//! host's monotonic clock ([`HistoryRecorder`], registered with
//! [`RoleManagerBuilder::history`](crate::RoleManagerBuilder::history)). A test harness adds its
//! faults to the same timeline. The format and the invariants are in `docs/reliability.md`.

pub mod clock;
pub mod event;
#[cfg(any(test, feature = "tooling"))]
pub mod invariant;
pub mod recorder;

#[cfg(feature = "tooling")]
pub use clock::{mono_now_ns, real_mono_now_ns};
#[cfg(feature = "tooling")]
pub use event::{Event, OpKind, OpResult, Phase, Record, Source, TrialInfo};
pub use recorder::HistoryRecorder;
#[cfg(feature = "tooling")]
pub mod check;
#[cfg(feature = "tooling")]
pub mod load;
#[cfg(feature = "tooling")]
pub mod timeline;

#[cfg(feature = "tooling")]
pub use check::{
    Failover, FaultSpan, Report, Stats, TermSpan, Vacancy, Violation, check, check_loaded,
};
#[cfg(any(test, feature = "tooling"))]
pub use invariant::Invariant;
#[cfg(feature = "tooling")]
pub use load::{LoadError, Loaded, load_paths};
#[cfg(feature = "tooling")]
pub use timeline::render_html;
