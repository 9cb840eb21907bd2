//! Public state of a role.

use std::fmt;

use serde::Serialize;

/// The state of this instance for one role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum RoleState {
    /// Not started yet.
    Init,
    /// Trying to acquire the role.
    Candidate,
    /// Holding the role.
    Leader,
    /// Another instance holds the role (or this instance only observes it).
    Follower,
    /// Gave the role up and waits (cooldown, draining role work before release).
    Demoted,
    /// No longer taking part (stopped or failed).
    Stopped,
}

impl RoleState {
    /// Upper-case name as in the status API.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Init => "INIT",
            Self::Candidate => "CANDIDATE",
            Self::Leader => "LEADER",
            Self::Follower => "FOLLOWER",
            Self::Demoted => "DEMOTED",
            Self::Stopped => "STOPPED",
        }
    }
}

impl fmt::Display for RoleState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
