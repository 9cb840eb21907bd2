//! Histories of elections under faults, and the checker that judges them.
//!
//! A node records what happens to its roles — lease writes and their outcomes, promotions,
//! renewals, demotions, leader-only acts and fenced writes — as JSON lines stamped with the
//! host's monotonic clock ([`HistoryRecorder`], registered with
//! [`RoleManagerBuilder::history`](crate::RoleManagerBuilder::history)). A test harness adds its
//! faults to the same timeline. The format and the invariants are in `docs/reliability.md`.

pub mod clock;
pub mod event;
pub mod invariant;
pub mod recorder;

pub use clock::{mono_now_ns, real_mono_now_ns};
pub use event::{Event, OpKind, OpResult, Phase, Record, Source, TrialInfo};
pub use recorder::HistoryRecorder;
pub mod check;
pub mod load;
pub mod timeline;

pub use check::{
    Failover, FaultSpan, Invariant, Report, Stats, TermSpan, Vacancy, Violation, check,
    check_loaded,
};
pub use load::{LoadError, Loaded, load_paths};
pub use timeline::render_html;
