//! The rules a lease `Timing` must follow, as errors.

use std::time::Duration;

/// A lease [`Timing`](crate::Timing) that breaks a rule (see
/// [`Timing::validate`](crate::Timing::validate)). The same rules apply to the YAML `timing`
/// section and role overrides, where each one is reported with its line and column.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TimingError {
    /// `ttl` is shorter than [`Timing::MIN_TTL`](crate::Timing::MIN_TTL) (1 s: NATS per-key
    /// TTLs have one-second granularity).
    #[error("ttl {} is shorter than 1s (NATS per-key TTLs are whole seconds)", fmt_duration(*ttl))]
    TtlTooShort {
        /// The TTL.
        ttl: Duration,
    },
    /// `ttl` is longer than [`Timing::MAX_TTL`](crate::Timing::MAX_TTL) (1 hour).
    #[error("ttl {} is longer than the maximum {}", fmt_duration(*ttl), fmt_duration(Duration::from_millis(crate::value::MAX_TTL_MS)))]
    TtlTooLong {
        /// The TTL.
        ttl: Duration,
    },
    /// `heartbeat` is zero.
    #[error("heartbeat must be greater than 0s")]
    HeartbeatZero,
    /// Fewer than three heartbeats fit in the TTL (`3 × heartbeat > ttl`).
    #[error(
        "heartbeat {} is too long for ttl {}: at least 3 heartbeats must fit in the ttl",
        fmt_duration(*heartbeat),
        fmt_duration(*ttl)
    )]
    HeartbeatTooLong {
        /// The heartbeat.
        heartbeat: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// `deadline_margin` is not a number in `(0, 0.5)` (NaN and infinities included).
    #[error(
        "deadline_margin {margin} is out of range: it must be greater than 0.0 and less than 0.5"
    )]
    DeadlineMarginOutOfRange {
        /// The margin.
        margin: f64,
    },
    /// `operation_timeout` is zero.
    #[error("operation_timeout must be greater than 0s")]
    OperationTimeoutZero,
    /// `operation_timeout` is not below the local lease `ttl × (1 − deadline_margin)`: not even
    /// one renewal could complete before the holder's deadline.
    #[error(
        "operation_timeout {} must be less than the local lease ttl × (1 − deadline_margin) = {} × (1 − {margin}) = {}",
        fmt_duration(*operation_timeout),
        fmt_duration(*ttl),
        fmt_duration(*local_lease)
    )]
    OperationTimeoutTooLong {
        /// The operation timeout.
        operation_timeout: Duration,
        /// The TTL.
        ttl: Duration,
        /// The deadline margin.
        margin: f64,
        /// `ttl × (1 − deadline_margin)`.
        local_lease: Duration,
    },
    /// `disconnect_grace` is longer than the TTL.
    #[error(
        "disconnect_grace {} must not exceed ttl {}",
        fmt_duration(*disconnect_grace),
        fmt_duration(*ttl)
    )]
    DisconnectGraceTooLong {
        /// The grace.
        disconnect_grace: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// `campaign_jitter` is not below `heartbeat`.
    #[error(
        "campaign_jitter {} must be less than heartbeat {}",
        fmt_duration(*campaign_jitter),
        fmt_duration(*heartbeat)
    )]
    CampaignJitterTooLong {
        /// The jitter.
        campaign_jitter: Duration,
        /// The heartbeat.
        heartbeat: Duration,
    },
}

impl TimingError {
    /// The field the rule is about (`ttl`, `heartbeat`, `deadline_margin`,
    /// `operation_timeout`, `disconnect_grace` or `campaign_jitter`).
    #[must_use]
    pub fn field(&self) -> &'static str {
        self.involved().first().copied().unwrap_or("ttl")
    }

    /// Every field the rule depends on, [`field`](Self::field) first.
    #[must_use]
    pub fn involved(&self) -> &'static [&'static str] {
        match self {
            Self::TtlTooShort { .. } | Self::TtlTooLong { .. } => &["ttl"],
            Self::HeartbeatZero => &["heartbeat"],
            Self::HeartbeatTooLong { .. } => &["heartbeat", "ttl"],
            Self::DeadlineMarginOutOfRange { .. } => &["deadline_margin"],
            Self::OperationTimeoutZero => &["operation_timeout"],
            Self::OperationTimeoutTooLong { .. } => {
                &["operation_timeout", "ttl", "deadline_margin"]
            }
            Self::DisconnectGraceTooLong { .. } => &["disconnect_grace", "ttl"],
            Self::CampaignJitterTooLong { .. } => &["campaign_jitter", "heartbeat"],
        }
    }

    /// The message without the leading field name (the YAML validation puts the field's path
    /// there instead).
    pub(crate) fn detail(&self) -> String {
        let full = self.to_string();
        full.strip_prefix(self.field())
            .map_or_else(|| full.clone(), |rest| rest.trim_start().to_owned())
    }
}

/// `d` in humantime notation (`0s` for zero).
pub(crate) fn fmt_duration(d: Duration) -> String {
    if d.is_zero() {
        "0s".to_owned()
    } else {
        humantime::format_duration(d).to_string()
    }
}
