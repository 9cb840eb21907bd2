//! Inputs, outputs and small value types of the pure election core.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use uuid::Uuid;

pub use super::server_code::{FailureClass, ServerCode};
use super::timing_error::TimingError;
use crate::token::FencingToken;
use crate::value::{HolderValue, LeaseValue};

// The lease format's reader bound (`value::MAX_TTL_MS`) is the largest TTL a role can have.
const _: () = assert!(Timing::MAX_TTL.as_millis() == crate::value::MAX_TTL_MS as u128);

/// Timing of one role's election (effective values after per-role overrides); the
/// configuration's `timing` section. Every field is optional in YAML; a missing one takes its
/// value from [`Timing::default`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timing {
    /// Lifetime of a role key on the server without a heartbeat (written with every
    /// acquire/renew); at least `1s` and at least 3 × `heartbeat` (the configuration wants a
    /// whole number of seconds). Default: `3s`.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Interval at which the holder renews its role key; greater than zero. Default: `750ms`.
    #[serde(with = "humantime_serde")]
    pub heartbeat: Duration,
    /// Fraction of `ttl` by which the holder's local lease ends before the server-side key
    /// expires, `0.0 < m < 0.5`. Default: `0.1`.
    pub deadline_margin: f64,
    /// Timeout of one KV write or read; greater than zero and less than
    /// `ttl × (1 − deadline_margin)`. Default: `1s`.
    #[serde(with = "humantime_serde")]
    pub operation_timeout: Duration,
    /// How long a holder keeps a role while disconnected from NATS before demoting itself; at
    /// most `ttl`. Default: `2s`.
    #[serde(with = "humantime_serde")]
    pub disconnect_grace: Duration,
    /// Maximum random delay before contending for a vacant role; less than `heartbeat`.
    /// Default: `0s` (contend at once: the CAS picks one winner and losers' conflicts are cheap;
    /// tokio timers round any delay up to whole milliseconds, so even a sub-millisecond jitter
    /// costs 1–2 ms of hand-over). Raise it for very large herds.
    #[serde(with = "humantime_serde")]
    pub campaign_jitter: Duration,
}

/// Per-role overrides of [`Timing`]: every field set replaces the inherited value
/// ([`Timing::with`]). In the configuration they are written inline in a role's entry.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimingOverrides {
    /// Overrides [`Timing::ttl`].
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub ttl: Option<Duration>,
    /// Overrides [`Timing::heartbeat`].
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<Duration>,
    /// Overrides [`Timing::deadline_margin`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_margin: Option<f64>,
    /// Overrides [`Timing::operation_timeout`].
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub operation_timeout: Option<Duration>,
    /// Overrides [`Timing::disconnect_grace`].
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub disconnect_grace: Option<Duration>,
    /// Overrides [`Timing::campaign_jitter`].
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub campaign_jitter: Option<Duration>,
}

impl TimingOverrides {
    /// `self`, with the fields it leaves unset taken from `earlier`.
    #[must_use]
    pub fn or(self, earlier: TimingOverrides) -> TimingOverrides {
        TimingOverrides {
            ttl: self.ttl.or(earlier.ttl),
            heartbeat: self.heartbeat.or(earlier.heartbeat),
            deadline_margin: self.deadline_margin.or(earlier.deadline_margin),
            operation_timeout: self.operation_timeout.or(earlier.operation_timeout),
            disconnect_grace: self.disconnect_grace.or(earlier.disconnect_grace),
            campaign_jitter: self.campaign_jitter.or(earlier.campaign_jitter),
        }
    }

    /// Whether the field called `field` (a [`Timing`] field name, as in
    /// [`TimingError::field`]) is overridden.
    #[must_use]
    pub fn overrides(&self, field: &str) -> bool {
        match field {
            "ttl" => self.ttl.is_some(),
            "heartbeat" => self.heartbeat.is_some(),
            "deadline_margin" => self.deadline_margin.is_some(),
            "operation_timeout" => self.operation_timeout.is_some(),
            "disconnect_grace" => self.disconnect_grace.is_some(),
            "campaign_jitter" => self.campaign_jitter.is_some(),
            _ => false,
        }
    }
}

impl Timing {
    /// This timing with `overrides` applied: each field set there replaces the value here.
    #[must_use]
    pub fn with(&self, overrides: &TimingOverrides) -> Timing {
        Timing {
            ttl: overrides.ttl.unwrap_or(self.ttl),
            heartbeat: overrides.heartbeat.unwrap_or(self.heartbeat),
            deadline_margin: overrides.deadline_margin.unwrap_or(self.deadline_margin),
            operation_timeout: overrides
                .operation_timeout
                .unwrap_or(self.operation_timeout),
            disconnect_grace: overrides.disconnect_grace.unwrap_or(self.disconnect_grace),
            campaign_jitter: overrides.campaign_jitter.unwrap_or(self.campaign_jitter),
        }
    }

    /// The per-key TTL to give the server, in whole seconds (NATS per-message TTLs have
    /// one-second granularity).
    ///
    /// The configuration requires `ttl` to be a whole number of seconds, so for a validated
    /// configuration this is exact; otherwise it rounds up, so the server never expires a key
    /// before the holder's local lease ends.
    #[must_use]
    pub fn ttl_whole_seconds(&self) -> u64 {
        let secs = self.ttl.as_secs();
        if self.ttl.subsec_nanos() == 0 {
            secs
        } else {
            secs.saturating_add(1)
        }
    }

    /// Shortest accepted [`ttl`](Self::ttl): 1 s (NATS per-key TTLs have one-second
    /// granularity).
    pub const MIN_TTL: Duration = Duration::from_secs(1);

    /// Longest accepted [`ttl`](Self::ttl): 1 hour. The server must be able to honour every TTL
    /// (nats-server's expiry arithmetic overflows for TTLs of about 240 years), and a lease
    /// written by another client that claims a longer TTL is not believed beyond it. The other
    /// durations are bounded through the TTL: `heartbeat ≤ ttl / 3`, `disconnect_grace ≤ ttl`,
    /// `operation_timeout` below the local lease, `campaign_jitter` below the heartbeat.
    pub const MAX_TTL: Duration = Duration::from_secs(3600);

    /// Checks the rules every role's timing must follow, the same as the YAML
    /// configuration's `timing` section:
    ///
    /// - [`MIN_TTL`](Self::MIN_TTL) `≤ ttl ≤` [`MAX_TTL`](Self::MAX_TTL);
    /// - `heartbeat > 0` and `3 × heartbeat ≤ ttl`;
    /// - `0 < deadline_margin < 0.5` (a number: NaN and infinities are refused);
    /// - `0 < operation_timeout <` the local lease `ttl × (1 − deadline_margin)`;
    /// - `disconnect_grace ≤ ttl`;
    /// - `campaign_jitter < heartbeat`.
    ///
    /// (The YAML configuration also requires a whole number of seconds for `ttl`; the library
    /// accepts fractions and sends the per-key TTL rounded up.)
    ///
    /// # Errors
    /// The first broken rule; [`Timing::problems`] lists all of them.
    pub fn validate(&self) -> Result<(), TimingError> {
        self.problems().into_iter().next().map_or(Ok(()), Err)
    }

    /// Every rule of [`Timing::validate`] this timing breaks (empty when valid).
    #[must_use]
    pub fn problems(&self) -> Vec<TimingError> {
        let mut problems = Vec::new();
        if self.ttl < Self::MIN_TTL {
            problems.push(TimingError::TtlTooShort { ttl: self.ttl });
        } else if self.ttl > Self::MAX_TTL {
            problems.push(TimingError::TtlTooLong { ttl: self.ttl });
        }
        let heartbeat_ok = !self.heartbeat.is_zero();
        if !heartbeat_ok {
            problems.push(TimingError::HeartbeatZero);
        } else if self.heartbeat.saturating_mul(3) > self.ttl {
            problems.push(TimingError::HeartbeatTooLong {
                heartbeat: self.heartbeat,
                ttl: self.ttl,
            });
        }
        let margin = self.deadline_margin;
        let margin_ok = margin > 0.0 && margin < 0.5;
        if !margin_ok {
            problems.push(TimingError::DeadlineMarginOutOfRange { margin });
        }
        if self.operation_timeout.is_zero() {
            problems.push(TimingError::OperationTimeoutZero);
        } else if margin_ok
            && self.ttl <= Self::MAX_TTL
            && self.operation_timeout >= self.local_lease()
        {
            problems.push(TimingError::OperationTimeoutTooLong {
                operation_timeout: self.operation_timeout,
                ttl: self.ttl,
                margin,
                local_lease: self.local_lease(),
            });
        }
        if self.disconnect_grace > self.ttl {
            problems.push(TimingError::DisconnectGraceTooLong {
                disconnect_grace: self.disconnect_grace,
                ttl: self.ttl,
            });
        }
        if heartbeat_ok && self.campaign_jitter >= self.heartbeat {
            problems.push(TimingError::CampaignJitterTooLong {
                campaign_jitter: self.campaign_jitter,
                heartbeat: self.heartbeat,
            });
        }
        problems
    }

    /// `ttl × (1 − deadline_margin)`: how long after sending a successful write a holder may act.
    ///
    /// The factor is clamped to `0.0..=1.0` (an unvalidated, out-of-range or NaN margin never
    /// yields a lease longer than `ttl`, and never panics).
    #[must_use]
    pub fn local_lease(&self) -> Duration {
        let factor = 1.0 - self.deadline_margin;
        if factor.is_nan() {
            return Duration::ZERO;
        }
        let factor = factor.clamp(0.0, 1.0);
        Duration::try_from_secs_f64(self.ttl.as_secs_f64() * factor)
            .map_or(self.ttl, |lease| lease.min(self.ttl))
    }
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(3),
            heartbeat: Duration::from_millis(750),
            deadline_margin: 0.1,
            operation_timeout: Duration::from_secs(1),
            disconnect_grace: Duration::from_secs(2),
            campaign_jitter: Duration::ZERO,
        }
    }
}

/// The state of a role key as seen by the watcher or a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyState {
    /// The key has never been written (or was purged without a marker).
    Absent,
    /// The last entry is a delete, purge or expiry marker.
    Vacant {
        /// Revision of the marker.
        revision: u64,
        /// Whether the marker is an expiry (`MaxAge`) rather than a delete or purge.
        expired: bool,
    },
    /// The key holds a value.
    Held {
        /// Revision of the value.
        revision: u64,
        /// What the value says.
        value: HolderValue,
    },
    /// Something newer than `revision` may exist (after a lost race); re-learn it.
    Unknown {
        /// Last revision known.
        revision: u64,
    },
}

impl KeyState {
    /// Revision of the entry (0 when absent).
    #[must_use]
    pub fn revision(&self) -> u64 {
        match self {
            Self::Absent => 0,
            Self::Vacant { revision, .. }
            | Self::Held { revision, .. }
            | Self::Unknown { revision } => *revision,
        }
    }

    /// The lease in the key, if it holds one of ours.
    #[must_use]
    pub fn lease(&self) -> Option<&LeaseValue> {
        match self {
            Self::Held { value, .. } => value.lease(),
            _ => None,
        }
    }
}

/// Outcome of a conditional write (P3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Stored at this revision.
    Ok {
        /// Stream sequence of the stored message.
        revision: u64,
    },
    /// Wrong last sequence (10071): the key is not at the expected revision.
    Conflict,
    /// Rejected but worth a re-check and retry (10164 on replicated streams).
    Retry,
    /// No answer in time: the write may still be stored later.
    Unknown,
    /// Failed for a known reason.
    Failed(FailureKind),
}

/// Classified failures of KV operations (protocol P3, `docs/failure-semantics.md`).
///
/// No failure stops a role for good: [`FailureClass::Transient`] ones are retried with the
/// configured backoff, [`FailureClass::Persistent`] ones (a permission violation for exactly
/// the subject written or read, a configuration error) at a slow cadence, so that a fixed
/// permission (server config reload) or bucket setting brings the role back without a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// The NATS user may not publish to or read exactly this subject (persistent).
    PermissionDenied,
    /// The bucket's stream does not exist (transient during stream fail-over; the manager
    /// checks and reports a missing bucket).
    BucketNotFound,
    /// Connection-level trouble: no responders, broken pipe, disconnected (transient).
    Unavailable,
    /// The message is larger than the server's `max_payload` (persistent: a configuration
    /// error, e.g. too much `meta`).
    PayloadTooLarge,
    /// The server refused with this JetStream error code; [`ServerCode::class`] says whether
    /// it is a configuration error (persistent) or a condition that heals (transient: full
    /// storage, lost quorum, an offline stream, any code this version does not know).
    Server(ServerCode),
    /// `retry.max_attempts` consecutive attempts failed (persistent: from then on the role
    /// retries at the slow cadence).
    GaveUp,
}

impl FailureKind {
    /// Whether retrying soon cannot help (retried at the slow cadence instead).
    #[must_use]
    pub fn is_permanent(self) -> bool {
        self.class() == FailureClass::Persistent
    }

    /// What retrying can change.
    #[must_use]
    pub fn class(self) -> FailureClass {
        match self {
            Self::PermissionDenied | Self::PayloadTooLarge | Self::GaveUp => {
                FailureClass::Persistent
            }
            Self::BucketNotFound | Self::Unavailable => FailureClass::Transient,
            Self::Server(code) => code.class(),
        }
    }

    /// The server's JetStream error code, if the server gave one.
    #[must_use]
    pub fn server_code(self) -> Option<ServerCode> {
        match self {
            Self::Server(code) => Some(code),
            _ => None,
        }
    }

    /// A short machine-readable name (metrics label, logs).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PermissionDenied => "permission_denied",
            Self::BucketNotFound => "bucket_not_found",
            Self::Unavailable => "unavailable",
            Self::PayloadTooLarge => "payload_too_large",
            Self::Server(_) => "server_error",
            Self::GaveUp => "gave_up",
        }
    }
}

impl std::fmt::Display for FailureKind {
    /// `server_error 10047 (Storage resources exceeded for account)`, `permission_denied`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Server(code) => write!(f, "server_error {} ({})", code.0, code.description()),
            other => f.write_str(other.as_str()),
        }
    }
}

/// Why a voluntary release happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReleaseReason {
    /// The manager (or the role) is stopping.
    Shutdown,
    /// The health checker failed too often.
    Unhealthy,
    /// The application or an operator asked for it.
    Requested,
    /// Placement moved the role to a preferred instance (priority, load spreading, draining).
    Placement,
    /// An operator moved the role to a named instance (`nats-roles move`, protocol Q13).
    Move,
}

/// Why a term ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DemoteReason {
    /// Released on purpose.
    Released(ReleaseReason),
    /// The local deadline passed without a successful renewal.
    DeadlineExpired,
    /// The NATS connection stayed down longer than the disconnect grace.
    Disconnected,
    /// Another writer replaced our lease.
    Superseded,
    /// Somebody deleted our lease key.
    Evicted,
    /// The server expired our lease key.
    Expired,
    /// Background validation found the key no longer ours.
    ValidationFailed,
    /// The bucket was deleted and recreated.
    BucketReset,
    /// A permanent error.
    Failed(FailureKind),
    /// The role's driver failed (a panic: a bug): the term was abandoned with its session,
    /// which stops renewing without ending, so that the role moves elsewhere once the session
    /// expires (fail-stop).
    Abandoned,
}

impl DemoteReason {
    /// A short machine-readable name (metrics label, logs).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Released(ReleaseReason::Shutdown) => "shutdown",
            Self::Released(ReleaseReason::Unhealthy) => "unhealthy",
            Self::Released(ReleaseReason::Requested) => "released",
            Self::Released(ReleaseReason::Placement) => "placement",
            Self::Released(ReleaseReason::Move) => "move",
            Self::DeadlineExpired => "deadline_expired",
            Self::Disconnected => "disconnected",
            Self::Superseded => "superseded",
            Self::Evicted => "evicted",
            Self::Expired => "expired",
            Self::ValidationFailed => "validation_failed",
            Self::BucketReset => "bucket_reset",
            Self::Failed(_) => "failed",
            Self::Abandoned => "abandoned",
        }
    }

    /// Whether the term ended by a **loss**: another party's write ended it (a takeover
    /// [`Superseded`](Self::Superseded), an eviction [`Evicted`](Self::Evicted), the session
    /// gone [`Expired`](Self::Expired), validation found the key not ours
    /// [`ValidationFailed`](Self::ValidationFailed), a recreated bucket
    /// [`BucketReset`](Self::BucketReset)). A successor **may already be promoted** when the
    /// holder learns of a loss, so work of the term must stop at once (the binary `SIGKILL`s
    /// an `exec` role's child, docs/protocol.md Q12), not gracefully.
    ///
    /// Not a loss: a release (the lease is deleted only after the work ended) and the ends
    /// the holder reaches on its own before anyone can be promoted ([`DeadlineExpired`],
    /// [`Disconnected`], [`Failed`], [`Abandoned`]): nobody is promoted before the term's
    /// deadline, which still bounds the work.
    ///
    /// [`DeadlineExpired`]: Self::DeadlineExpired
    /// [`Disconnected`]: Self::Disconnected
    /// [`Failed`]: Self::Failed
    /// [`Abandoned`]: Self::Abandoned
    #[must_use]
    pub fn is_loss(self) -> bool {
        match self {
            Self::Superseded
            | Self::Evicted
            | Self::Expired
            | Self::ValidationFailed
            | Self::BucketReset => true,
            Self::Released(_)
            | Self::DeadlineExpired
            | Self::Disconnected
            | Self::Failed(_)
            | Self::Abandoned => false,
        }
    }
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Term")
            .field("token", &self.token)
            .field("nonce", &"<redacted>")
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl std::fmt::Display for DemoteReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One term of leadership as the core sees it (`Debug` redacts the token and the nonce).
#[derive(Clone, PartialEq, Eq)]
pub struct Term {
    /// The term's fencing token.
    pub token: FencingToken,
    /// The term's nonce (also inside the token).
    pub nonce: Uuid,
    /// Local deadline: the holder must stop acting at this monotonic instant.
    pub deadline: Instant,
}

/// Which write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// Start a term.
    Acquire,
    /// Extend the term.
    Renew,
    /// CAS-delete our lease.
    Release,
}

impl WriteKind {
    /// A short machine-readable name (span field, logs).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Renew => "renew",
            Self::Release => "release",
        }
    }
}

/// A conditional write the driver must perform.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteRequest {
    /// Operation id; pass it back with the outcome.
    pub op: u64,
    /// Which write.
    pub kind: WriteKind,
    /// Expected last revision of the key (0 = must not exist).
    pub expected: u64,
    /// The lease to write (`None` for a release).
    pub value: Option<LeaseValue>,
    /// Give up waiting after this long and report [`WriteOutcome::Unknown`].
    pub timeout: Duration,
}

/// Something noteworthy that is not a state change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// Another live process uses our instance id.
    DuplicateInstance {
        /// Its incarnation id.
        other_incarnation: Uuid,
    },
    /// An acquire was stored at a revision below one already seen, so it was not promoted:
    /// either the term was superseded before its acknowledgement arrived, or the bucket was
    /// deleted and recreated. The driver checks the bucket's epoch and reports
    /// `handle_bucket_reset` if it changed.
    RevisionRegressed {
        /// The revision just stored.
        revision: u64,
        /// The highest revision seen before it.
        high_water: u64,
    },
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Perform a conditional write and report with `handle_write(op, ..)`.
    Write(WriteRequest),
    /// Read the key and report with `handle_read(op, ..)`.
    Read {
        /// Operation id.
        op: u64,
        /// Give up after this long.
        timeout: Duration,
    },
    /// A term began.
    Promote {
        /// The term.
        term: Term,
        /// Revision of the acquiring write (= term number).
        revision: u64,
    },
    /// A renewal succeeded: the term's deadline and revision moved.
    Renewed {
        /// The term with its new deadline.
        term: Term,
        /// Current revision of the lease.
        revision: u64,
    },
    /// A term ended. When `drain` is set the driver reports `handle_drained` once the
    /// application's demote callback returned (or the drain timeout passed).
    Demote {
        /// The term that ended.
        term: Term,
        /// Why.
        reason: DemoteReason,
        /// Whether the lease is still held and waits for the drain before release.
        drain: bool,
    },
    /// The role cannot campaign or renew because of this failure (a server error code or a
    /// persistent failure). Reported when the condition begins or changes; the machine keeps
    /// retrying (backoff, or the slow cadence for persistent failures) and reports
    /// [`Action::Recovered`] when a write or read succeeds again.
    Failed(FailureKind),
    /// The server answered normally again after a reported [`Action::Failed`].
    Recovered,
    /// Something to report.
    Notice(Notice),
    /// Nobody acts on the role value at `revision`, which names this instance's session
    /// `session`: a term whose delete did not go through (refused, or its outcome is unknown;
    /// the delete is still retried while the term's session lives), or a value somebody else
    /// wrote that this machine will not take over now (it cools down after a release, or its
    /// role-key writes are refused). Have the session list it as released, so that candidates
    /// take the role over (protocol Q4, Q5 rule 5).
    ReleaseTerm {
        /// Revision of the role value.
        revision: u64,
        /// The session the value names.
        session: Uuid,
    },
    /// A term whose graceful release was under way (already demoted, its work draining) was
    /// lost before its delete went through (its session ended, another writer took the key):
    /// a successor may be promoted now, so work still draining must stop at once (Q12).
    LostDuringRelease {
        /// The term.
        term: Term,
        /// How it was lost ([`DemoteReason::is_loss`]).
        reason: DemoteReason,
    },
    /// The machine finished.
    Stopped,
}

/// Longest accepted value of every duration setting that has no tighter bound
/// of its own: 1 hour. It applies to `nats.ping_interval`, `nats.connect_timeout`,
/// `nats.request_timeout`, `retry.initial_backoff`, `retry.max_backoff`,
/// `health.interval`, `health.timeout`, `health.cooldown`,
/// `fencing.validation_interval`, `shutdown.timeout`, `shutdown.drain_timeout`,
/// the `placement` durations and `telemetry.otlp.export_interval` / `timeout`.
/// Lease durations are bounded by [`Timing::MAX_TTL`] (`ttl`, `member_ttl`) and
/// through the TTL (see [`Timing::validate`]).
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
