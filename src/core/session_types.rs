//! The session state machine's inputs and outputs (protocol Q1–Q4): what a session key holds,
//! the writes the machine asks for, why a session ends and what it reports. The machine itself
//! is in [`super::session`].

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::types::{DemoteReason, FailureKind};
use crate::value::SessionValue;

/// The state of a session key as seen by the watcher or a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionKeyState {
    /// The key does not exist (never written, purged without a marker, or a lagging replica).
    Absent,
    /// The last entry is a delete, purge or expiry marker.
    Marker {
        /// Revision of the marker.
        revision: u64,
        /// Whether it is an expiry (`MaxAge`) marker rather than a delete or purge.
        expired: bool,
    },
    /// The key holds a value; `None` when it is not a session value (foreign).
    Value {
        /// Revision of the value.
        revision: u64,
        /// The session, if the bytes are one.
        value: Option<SessionValue>,
    },
}

impl SessionKeyState {
    /// Revision of the entry (0 when absent).
    #[must_use]
    pub fn revision(&self) -> u64 {
        match self {
            Self::Absent => 0,
            Self::Marker { revision, .. } | Self::Value { revision, .. } => *revision,
        }
    }

    /// The session uuid in the key, if it holds a session.
    #[must_use]
    pub fn uuid(&self) -> Option<Uuid> {
        match self {
            Self::Value { value: Some(v), .. } => Some(v.session),
            _ => None,
        }
    }
}

/// Which session write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionWriteKind {
    /// Start a session (new uuid) over whatever revision the key was read at.
    Start,
    /// Renew the session on its last revision.
    Renew,
    /// End the session: a delete marker on its last revision.
    End,
}

impl SessionWriteKind {
    /// A short name for logs and spans.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "session_start",
            Self::Renew => "session_renew",
            Self::End => "session_end",
        }
    }
}

/// A session write for the driver to send.
#[derive(Debug, Clone)]
pub struct SessionWrite {
    /// Operation id (report with [`SessionMachine::handle_write`]).
    pub op: u64,
    /// Which write.
    pub kind: SessionWriteKind,
    /// `Nats-Expected-Last-Subject-Sequence`.
    pub expected: u64,
    /// The value (`None` for [`SessionWriteKind::End`], a delete marker).
    pub value: Option<SessionValue>,
    /// Give up after this long.
    pub timeout: Duration,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionLoss {
    /// The local deadline passed without an acknowledged renewal.
    DeadlineExpired,
    /// The key expired on the server (an expiry marker) or was purged.
    Expired,
    /// Somebody deleted the session key (an operator's eviction of the instance).
    Evicted,
    /// Another writer replaced the session (another process with this instance id, or
    /// another client).
    Superseded,
    /// The key is gone or below our revision: the bucket was recreated.
    BucketReset,
    /// The session was ended on purpose (shutdown).
    Ended,
    /// The session was replaced by a new one of this process on purpose: it had more released
    /// terms to list than a session value holds (protocol Q5 rule 5), and a new session makes
    /// every role value naming the old one vacant at once.
    Rotated,
}

impl SessionLoss {
    /// The demotion reason a term resting on a session gets when the session ends this way
    /// (the session driver and the simulation both map it so).
    #[must_use]
    pub fn demote_reason(self) -> DemoteReason {
        match self {
            Self::DeadlineExpired => DemoteReason::DeadlineExpired,
            Self::Expired => DemoteReason::Expired,
            Self::Evicted => DemoteReason::Evicted,
            Self::BucketReset => DemoteReason::BucketReset,
            Self::Superseded | Self::Ended | Self::Rotated => DemoteReason::Superseded,
        }
    }

    /// A short machine-readable name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DeadlineExpired => "deadline_expired",
            Self::Expired => "expired",
            Self::Evicted => "evicted",
            Self::Superseded => "superseded",
            Self::BucketReset => "bucket_reset",
            Self::Ended => "ended",
            Self::Rotated => "rotated",
        }
    }
}

/// What the session machine asks of its driver, or reports.
#[derive(Debug, Clone)]
pub enum SessionAction {
    /// Send this write and report with [`SessionMachine::handle_write`].
    Write(SessionWrite),
    /// Read the key from the stream leader and report with [`SessionMachine::handle_read`].
    Read {
        /// Operation id.
        op: u64,
        /// Give up after this long.
        timeout: Duration,
    },
    /// A session started: terms may rest on it until `acked_sent_at` + their local lease.
    Up {
        /// The session's uuid.
        uuid: Uuid,
        /// Send time of the write that started it.
        acked_sent_at: Instant,
        /// Revision of that write.
        revision: u64,
    },
    /// An acknowledged renewal: the session's deadline moved.
    Renewed {
        /// The session's uuid.
        uuid: Uuid,
        /// Send time of the acknowledged renewal.
        acked_sent_at: Instant,
        /// Revision of the renewal.
        revision: u64,
    },
    /// The session ended: every term resting on it ends now.
    Lost {
        /// The session's uuid.
        uuid: Uuid,
        /// Why.
        reason: SessionLoss,
    },
    /// Another live process writes this instance's session (instance ids must be unique).
    Duplicate {
        /// The other process's incarnation.
        other_incarnation: Uuid,
    },
    /// Writes of the session fail for this reason (reported once per condition).
    Failed(FailureKind),
    /// The server answers normally again.
    Recovered,
    /// The machine finished (after [`SessionMachine::handle_stop`]).
    Stopped,
}
