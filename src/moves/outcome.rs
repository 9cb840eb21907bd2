//! What a move request asks for ([`MoveOptions`]) and what it came to ([`MoveOutcome`]).

use std::time::Duration;

use super::record::MoveRefusal;
use crate::names::InstanceId;

/// How a move request behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MoveOptions {
    /// How long to wait for the target to hold the role (default 10 s).
    pub timeout: Duration,
    /// How long the other candidates hold back at the vacancy (default 1 s; at most the
    /// role's TTL).
    pub grace: Duration,
    /// How long placement keeps the role on the target once moved (default 10 min; zero:
    /// not at all).
    pub hold: Duration,
    /// Who asks (`user@host`), recorded in the record.
    pub by: String,
}

impl Default for MoveOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            grace: Duration::from_secs(1),
            hold: Duration::from_secs(600),
            by: String::new(),
        }
    }
}

impl MoveOptions {
    /// Longest timeout a request may ask for.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
    /// Longest hold a request may ask for.
    pub const MAX_HOLD: Duration = Duration::from_secs(7 * 24 * 3600);

    /// Sets [`MoveOptions::timeout`] (builder style).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets [`MoveOptions::grace`] (builder style).
    #[must_use]
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Sets [`MoveOptions::hold`] (builder style).
    #[must_use]
    pub fn with_hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// Sets [`MoveOptions::by`] (builder style).
    #[must_use]
    pub fn with_by(mut self, by: impl Into<String>) -> Self {
        self.by = by.into();
        self
    }
}

/// What a move request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MoveOutcome {
    /// The target holds the role now, in term `term`, `took` after the request was written.
    Moved {
        /// The target's term (revision of its acquire).
        term: u64,
        /// From writing the request to seeing the target's lease.
        took: Duration,
    },
    /// The target held the role already: nothing was written.
    AlreadyThere {
        /// Its term.
        term: u64,
    },
    /// Nothing to move: nobody holds the role.
    Vacant,
    /// The target has no live session of the role's TTL class (not running, or not
    /// connected): nothing was written.
    TargetNotLive,
    /// Another move of the role is in progress (or holds it on its target): nothing was
    /// written.
    InProgress {
        /// That move's target.
        to: InstanceId,
        /// That move's state.
        state: super::MoveState,
    },
    /// The target refused.
    Refused(MoveRefusal),
    /// The target did not hold the role within the timeout; the request was withdrawn.
    TimedOut {
        /// Who holds the role now (`None`: nobody).
        holder: Option<InstanceId>,
    },
}

impl MoveOutcome {
    /// Whether the role is on the target now.
    #[must_use]
    pub fn is_moved(&self) -> bool {
        matches!(self, Self::Moved { .. } | Self::AlreadyThere { .. })
    }

    /// A short machine-readable name (`moved`, `already_there`, `vacant`, `target_not_live`,
    /// `in_progress`, `refused`, `timed_out`).
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Moved { .. } => "moved",
            Self::AlreadyThere { .. } => "already_there",
            Self::Vacant => "vacant",
            Self::TargetNotLive => "target_not_live",
            Self::InProgress { .. } => "in_progress",
            Self::Refused(_) => "refused",
            Self::TimedOut { .. } => "timed_out",
        }
    }
}
