//! A broken invariant: what the checker finds in a trace, and what a run reports about itself
//! (a livelock).

use crate::history::Invariant;

use super::clock::Nanos;

/// A broken invariant.
#[derive(Debug, Clone)]
pub(super) struct Violation {
    pub(super) rule: Invariant,
    pub(super) at: Nanos,
    pub(super) node: Option<usize>,
    pub(super) detail: String,
}
