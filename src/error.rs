//! Errors of the public API.

use std::time::Duration;

use crate::core::FailureKind;
pub use crate::core::{SettingError, TimingError};
use crate::names::RoleName;

/// Errors returned by the role manager and leadership handles.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid (see the problems listed).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Connecting to NATS failed. The message names the servers tried (passwords in their
    /// URLs redacted); the client's `async_nats::ConnectError` is in the source chain.
    #[error("cannot connect to NATS: {0}")]
    Connect(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The bucket does not exist and `auto_create` is off, or it disappeared.
    #[error("KV bucket {bucket:?} does not exist (create it, or enable bucket.auto_create)")]
    BucketNotFound {
        /// Bucket name.
        bucket: String,
    },
    /// The bucket has a `max_age` and this instance campaigns for a role in it. Protocol
    /// version 2 writes a role key once per term (the session carries the liveness), and the
    /// server removes every entry `max_age` after it was written whatever its per-key TTL, so
    /// the key of a role held longer than `max_age` would vanish while held and a second
    /// holder could be promoted while the first still acts. Returned by
    /// [`RoleManagerBuilder::start`](crate::RoleManagerBuilder::start) and
    /// [`RoleManager::add_role`](crate::RoleManager::add_role).
    #[error(
        "bucket {bucket:?} has max_age {max_age:?}; role {role} cannot be campaigned for in it: \
         protocol v2 writes a role key once per term, so the server would remove held roles' keys \
         (use a bucket without max_age: bucket.auto_create creates one; sessions expire by per-key TTL)"
    )]
    BucketMaxAge {
        /// Bucket name.
        bucket: String,
        /// The bucket's `max_age`.
        max_age: Duration,
        /// The role.
        role: RoleName,
    },
    /// A role key of the bucket holds a lease of another protocol version (a version 1
    /// instance holds it, or a newer build). One protocol version per bucket: this instance
    /// refuses to start rather than run beside it. Upgrade by a new bucket or stop-the-world
    /// (docs/protocol.md, Q10). Returned by
    /// [`RoleManagerBuilder::start`](crate::RoleManagerBuilder::start); a mismatch that
    /// appears later is reported in the role's status and log, and the role is never taken
    /// over from it.
    #[error(
        "bucket {bucket:?}: role.{role} holds a protocol v{found} lease; this instance speaks v{ours} \
         (one protocol version per bucket: stop every instance of the other version, or use a new \
         bucket; docs/protocol.md, Q10)"
    )]
    IncompatibleProtocol {
        /// Bucket name.
        bucket: String,
        /// The role whose key holds the other version.
        role: RoleName,
        /// The version found.
        found: u64,
        /// This build's version.
        ours: u64,
    },
    /// A role's [`Timing`](crate::Timing) breaks a rule of [`Timing::validate`](crate::Timing::validate)
    /// (returned by [`RoleManagerBuilder::start`](crate::RoleManagerBuilder::start) and
    /// [`RoleManager::add_role`](crate::RoleManager::add_role) before anything is written).
    #[error("invalid timing for role {role}: {source}")]
    InvalidTiming {
        /// The role.
        role: RoleName,
        /// The first rule broken.
        #[source]
        source: TimingError,
    },
    /// A bucket, placement, retry or health setting breaks a rule
    /// ([`BucketSettings::validate`](crate::manager::BucketSettings::validate),
    /// [`PlacementSettings::validate`](crate::manager::PlacementSettings::validate),
    /// [`RetryPolicy::validate`](crate::RetryPolicy::validate),
    /// [`HealthPolicy::validate`](crate::health::HealthPolicy::validate)); returned
    /// by [`RoleManagerBuilder::start`](crate::RoleManagerBuilder::start) before anything is
    /// written.
    #[error("invalid setting {0}")]
    InvalidSetting(#[from] crate::core::SettingError),
    /// The NATS user lacks a permission the manager needs.
    #[error("permission denied by the NATS server: {detail}")]
    PermissionDenied {
        /// What was denied.
        detail: String,
    },
    /// A JetStream request failed: transient (retry later) unless the server answered with a
    /// configuration error code (see [`Error::is_transient`]).
    #[error("JetStream request failed: {0}")]
    JetStream(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// [`RoleManagerBuilder::start`](crate::RoleManagerBuilder::start) kept failing for a
    /// reason that can heal (no leader, no answer) until its
    /// [`StartRetry::deadline`](crate::StartRetry::deadline) passed; `last` is the last
    /// failure. Retrying later can succeed.
    #[error("start-up gave up after {attempts} attempts in {}: {last}", crate::core::fmt_duration(*.elapsed))]
    StartTimeout {
        /// Failed attempts (of the step that gave up).
        attempts: u32,
        /// Time since the start began.
        elapsed: Duration,
        /// The last failure.
        #[source]
        last: Box<Error>,
    },
    /// A KV operation failed for a classified reason.
    #[error("KV operation failed: {}", .0.as_str())]
    Kv(FailureKind),
    /// The operation did not finish in time; its effect is unknown.
    #[error("operation timed out after {0:?}; its outcome is unknown")]
    Timeout(Duration),
    /// A fenced write was rejected: this term is over (or its deadline has passed).
    #[error("fenced write rejected: the term of role {role} is no longer current")]
    Fenced {
        /// The role.
        role: RoleName,
    },
    /// The role is not managed by this manager.
    #[error("role {0} is not managed here")]
    UnknownRole(RoleName),
    /// The role is already managed.
    #[error("role {0} is already managed")]
    RoleExists(RoleName),
    /// A role's number of slots ([`RoleSpec::slots`](crate::RoleSpec::slots)) is neither 1
    /// nor between 2 and [`MAX_SLOTS`](crate::config::MAX_SLOTS).
    #[error(
        "role {role} has {slots} slots: a role has 1 slot (one holder) or 2 to {max} slots",
        max = crate::config::MAX_SLOTS
    )]
    InvalidSlots {
        /// The role.
        role: RoleName,
        /// The number of slots asked for.
        slots: u32,
    },
    /// A role with slots ([`RoleSpec::slots`](crate::RoleSpec::slots)) is configured with
    /// another number of slots than the bucket's slot count record `control.slots.<role>`
    /// holds (protocol Q15): its slots are not added (none of them), so no instance runs
    /// with a bound of its own. A role without slots (`configured` 1) whose name has such a
    /// record is refused at start the same way (it would be one holder more). Every instance of a role must give the same number of
    /// slots; to change it, stop every instance of the role and delete the record. Returned
    /// by [`RoleManagerBuilder::start`](crate::RoleManagerBuilder::start) and
    /// [`RoleManager::add_role_checked`](crate::RoleManager::add_role_checked); `nats-roles
    /// exec` exits 78 with it.
    #[error(
        "role {role} has {configured} slot(s) here, but the bucket's slot count record \
         control.slots.{role} records {recorded}: every instance of a role must give the same \
         number of slots (to change it, stop every instance of the role and delete the record; \
         docs/protocol.md, Q15)"
    )]
    SlotCountConflict {
        /// The role (its name, not a slot's).
        role: RoleName,
        /// The number of slots this instance was given.
        configured: u32,
        /// The number the record holds.
        recorded: u32,
    },
    /// The slot count record `control.slots.<role>` of a role with slots holds a value that
    /// is not a valid record (damaged, foreign, another format version, a count out of
    /// range): nobody's count can be checked against it, so the role's slots are not added
    /// (protocol Q15). Delete the key once no instance of the role runs. Returned like
    /// [`Error::SlotCountConflict`]; `nats-roles exec` exits 78 with it.
    #[error(
        "the slot count record control.slots.{role} is not a valid record ({problem}): role \
         {role}'s slots are not added (delete the key once no instance of the role runs; \
         docs/protocol.md, Q15)"
    )]
    SlotCountRecordInvalid {
        /// The role (its name, not a slot's).
        role: RoleName,
        /// What is wrong with the value.
        problem: String,
    },
    /// A role with slots was given to [`RoleManager::add_role`](crate::RoleManager::add_role)
    /// (which cannot wait for the bucket) before its slot count was checked against the
    /// bucket's record: add it with
    /// [`RoleManager::add_role_checked`](crate::RoleManager::add_role_checked) or the builder.
    #[error(
        "role {role} has {slots} slots, not yet checked against the bucket's slot count record \
         (protocol Q15): add it with RoleManager::add_role_checked"
    )]
    SlotCountUnchecked {
        /// The role.
        role: RoleName,
        /// Its number of slots.
        slots: u32,
    },
    /// The role is a member of one of the manager's groups (protocol Q14): the group's count
    /// decides its members, so it is not removed on its own; change the count
    /// ([`RoleManager::set_group_count`](crate::RoleManager::set_group_count)) instead.
    #[error(
        "role {role} is member {index} of group {group}: change the group's count instead of removing a member"
    )]
    MemberOfGroup {
        /// The role.
        role: RoleName,
        /// Its group.
        group: RoleName,
        /// Its index in the group.
        index: u32,
    },
    /// The role is being removed ([`RoleManager::remove_role`](crate::RoleManager::remove_role)
    /// has not finished: its release and `on_demote` are still running); add it again once the
    /// removal returned.
    #[error(
        "role {0} is still being removed (its release and on_demote are running): add it again after remove_role returned"
    )]
    RoleStopping(RoleName),
    /// The manager has been shut down.
    #[error("the role manager has stopped")]
    Stopped,
    /// Graceful shutdown did not finish in time; the listed roles may still be held until
    /// their TTL expires.
    #[error("shutdown timed out after {timeout:?}; roles not released: {roles:?}")]
    ShutdownTimeout {
        /// The timeout.
        timeout: Duration,
        /// Roles still held or still running their demote callback.
        roles: Vec<RoleName>,
    },
    /// A liveness probe ([`RoleManager::probe`](crate::RoleManager::probe)) found tasks of
    /// the manager that did not answer in time: the manager is wedged (or overloaded).
    #[error("no answer to the liveness probe within {within:?} from {}", tasks.join(", "))]
    Unresponsive {
        /// How long the probe waited.
        within: Duration,
        /// The tasks that did not answer (`the bucket watcher`, `role scheduler`, …), each
        /// with `(its task ended)` when it is gone rather than late.
        tasks: Vec<String>,
    },
}

/// Why an operation of a term ([`Leadership::fenced_put`](crate::Leadership::fenced_put),
/// [`Leadership::validate`](crate::Leadership::validate)) did not succeed. Converts into
/// [`Error`] for callers that use one error type.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The term is over (its deadline passed, or the lease was superseded, released or
    /// evicted): nothing was written and nothing will be.
    #[error("the term of role {role} is no longer current")]
    Fenced {
        /// The role.
        role: RoleName,
    },
    /// The write's outcome is unknown after this long (connection lost, no acknowledgement):
    /// it may still be stored, fenced like any other write of this term.
    #[error("no answer after {0:?}; the write's outcome is unknown")]
    Unknown(Duration),
    /// The server refused for a classified reason (the term may still be valid).
    #[error("KV operation failed: {}", .0.as_str())]
    Kv(FailureKind),
}

impl FenceError {
    /// Whether the term is over (retrying cannot succeed; a new term is needed).
    #[must_use]
    pub fn is_fenced(&self) -> bool {
        matches!(self, Self::Fenced { .. })
    }
}

impl From<FenceError> for Error {
    fn from(e: FenceError) -> Self {
        match e {
            FenceError::Fenced { role } => Self::Fenced { role },
            FenceError::Unknown(after) => Self::Timeout(after),
            FenceError::Kv(kind) => Self::Kv(kind),
        }
    }
}

impl Error {
    /// Whether retrying the same call later can succeed without anybody changing anything:
    /// what [`RoleManagerBuilder::start`](crate::RoleManagerBuilder::start) (and `nats-roles
    /// run` while connecting) retries.
    ///
    /// Transient: a connection that fails for a network reason (refused, unreachable, timed
    /// out, DNS), a JetStream request that times out or finds no responders, a JetStream
    /// error code that is not a configuration error ([`ServerCode::class`](crate::ServerCode::class):
    /// 10008 JetStream temporarily unavailable, 10118 stream offline, any unknown code),
    /// [`Error::Timeout`], [`Error::StartTimeout`], and [`Error::Kv`] of a transient
    /// [`FailureKind`]. Everything else is persistent: refused credentials (authorization
    /// violation, authentication, TLS), a credentials file that cannot be loaded, a permission
    /// violation, a missing bucket, a configuration error code, a bucket the client cannot
    /// create as asked (limit markers on a server before 2.11), invalid settings, another
    /// protocol version in the bucket.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Connect(e) => connect_error_is_transient(&**e),
            Self::JetStream(e) => jetstream_error_is_transient(&**e),
            Self::Timeout(_) | Self::StartTimeout { .. } => true,
            Self::Kv(kind) => !kind.is_permanent(),
            _ => false,
        }
    }
}

/// Whether a failed JetStream request can succeed later as it is: not when the server answered
/// with a configuration error code, nor when the client refused to send it (a bucket the
/// server cannot create as asked: limit markers on a server before 2.11, an invalid name).
fn jetstream_error_is_transient(err: &(dyn std::error::Error + 'static)) -> bool {
    use async_nats::jetstream::context::{CreateKeyValueErrorKind as C, KeyValueErrorKind as K};
    let mut source = Some(err);
    while let Some(e) = source {
        if let Some(e) = e.downcast_ref::<async_nats::jetstream::context::CreateKeyValueError>()
            && matches!(
                e.kind(),
                C::InvalidStoreName | C::TooLongHistory | C::LimitMarkersNotSupported
            )
        {
            return false;
        }
        if let Some(e) = e.downcast_ref::<async_nats::jetstream::context::KeyValueError>()
            && e.kind() == K::InvalidStoreName
        {
            return false;
        }
        source = e.source();
    }
    crate::codec::jetstream_code(err).is_none_or(|code| {
        crate::core::ServerCode(u16::try_from(code.0).unwrap_or(u16::MAX)).class()
            == crate::core::FailureClass::Transient
    })
}

/// Whether a failed connection attempt can succeed later as it is: network trouble can heal;
/// refused credentials, TLS problems, an address that does not parse, and credentials that
/// cannot be loaded (not a connection error at all) cannot.
fn connect_error_is_transient(err: &(dyn std::error::Error + 'static)) -> bool {
    use async_nats::ConnectErrorKind as K;
    // The client's error, itself or as the source of the failure naming the servers.
    let client = std::iter::successors(Some(err), |e| e.source())
        .find_map(|e| e.downcast_ref::<async_nats::ConnectError>());
    match client.map(async_nats::ConnectError::kind) {
        Some(K::Io | K::TimedOut | K::Dns | K::MaxReconnects) => true,
        Some(K::Authentication | K::AuthorizationViolation | K::Tls | K::ServerParse) | None => {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Timing;
    use proptest::prelude::*;

    fn with(f: impl FnOnce(&mut Timing)) -> Timing {
        let mut t = Timing::default();
        f(&mut t);
        t
    }

    #[test]
    fn default_timing_is_valid() {
        assert_eq!(Timing::default().validate(), Ok(()));
        assert!(Timing::default().problems().is_empty());
    }

    #[test]
    fn each_rule_has_its_own_error() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let cases: Vec<(Timing, TimingError)> = vec![
            (
                with(|t| {
                    t.ttl = ms(900);
                    t.heartbeat = ms(100);
                    t.operation_timeout = ms(100);
                    t.disconnect_grace = ms(100);
                }),
                TimingError::TtlTooShort { ttl: ms(900) },
            ),
            (
                with(|t| t.ttl = s(3601)),
                TimingError::TtlTooLong { ttl: s(3601) },
            ),
            (
                with(|t| t.heartbeat = Duration::ZERO),
                TimingError::HeartbeatZero,
            ),
            (
                with(|t| t.heartbeat = ms(1001)),
                TimingError::HeartbeatTooLong {
                    heartbeat: ms(1001),
                    ttl: s(3),
                },
            ),
            (
                with(|t| t.deadline_margin = 0.5),
                TimingError::DeadlineMarginOutOfRange { margin: 0.5 },
            ),
            (
                with(|t| t.deadline_margin = 0.0),
                TimingError::DeadlineMarginOutOfRange { margin: 0.0 },
            ),
            (
                with(|t| t.operation_timeout = Duration::ZERO),
                TimingError::OperationTimeoutZero,
            ),
            (
                with(|t| t.operation_timeout = ms(2700)),
                TimingError::OperationTimeoutTooLong {
                    operation_timeout: ms(2700),
                    ttl: s(3),
                    margin: 0.1,
                    local_lease: ms(2700),
                },
            ),
            (
                with(|t| t.disconnect_grace = ms(3001)),
                TimingError::DisconnectGraceTooLong {
                    disconnect_grace: ms(3001),
                    ttl: s(3),
                },
            ),
            (
                with(|t| t.campaign_jitter = ms(750)),
                TimingError::CampaignJitterTooLong {
                    campaign_jitter: ms(750),
                    heartbeat: ms(750),
                },
            ),
        ];
        for (timing, expected) in cases {
            assert_eq!(
                timing.problems(),
                std::slice::from_ref(&expected),
                "{timing:?}"
            );
            assert_eq!(timing.validate(), Err(expected));
        }
        // The boundaries themselves are valid.
        for ok in [
            with(|t| {
                t.ttl = Timing::MIN_TTL;
                t.heartbeat = ms(333);
                t.operation_timeout = ms(100);
                t.disconnect_grace = ms(100);
            }),
            with(|t| t.ttl = Timing::MAX_TTL),
            with(|t| t.heartbeat = s(1)),
            with(|t| t.disconnect_grace = s(3)),
            with(|t| t.operation_timeout = ms(2699)),
            with(|t| t.deadline_margin = 0.49),
            // Fractions of a second are fine in the library (sent rounded up).
            with(|t| {
                t.ttl = ms(1500);
                t.heartbeat = ms(500);
                t.disconnect_grace = s(1);
            }),
        ] {
            assert_eq!(ok.validate(), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn non_finite_margins_and_absurd_durations_are_errors_not_panics() {
        for margin in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 1e-300] {
            let t = with(|t| t.deadline_margin = margin);
            let problems = t.problems();
            if margin > 0.0 && margin < 0.5 {
                assert_eq!(problems, [], "{margin}");
            } else {
                assert!(
                    matches!(
                        problems.as_slice(),
                        [TimingError::DeadlineMarginOutOfRange { .. }]
                    ),
                    "{margin}: {problems:?}"
                );
            }
        }
        let t = Timing {
            ttl: Duration::MAX,
            heartbeat: Duration::MAX,
            deadline_margin: 1e-300,
            operation_timeout: Duration::MAX,
            disconnect_grace: Duration::MAX,
            campaign_jitter: Duration::MAX,
        };
        assert_eq!(
            t.validate(),
            Err(TimingError::TtlTooLong { ttl: Duration::MAX })
        );
        // 1000000000 years, as a YAML file could say.
        let t = with(|t| t.ttl = Duration::from_secs(31_557_600_000_000_000));
        assert!(matches!(t.validate(), Err(TimingError::TtlTooLong { .. })));
    }

    #[test]
    fn all_problems_are_listed_and_the_first_is_returned() {
        let t = Timing {
            ttl: Duration::from_secs(2),
            heartbeat: Duration::from_secs(1),
            deadline_margin: f64::NAN,
            operation_timeout: Duration::ZERO,
            disconnect_grace: Duration::from_secs(3),
            campaign_jitter: Duration::from_secs(1),
        };
        let problems = t.problems();
        let fields: Vec<&str> = problems.iter().map(TimingError::field).collect();
        assert_eq!(
            fields,
            [
                "heartbeat",
                "deadline_margin",
                "operation_timeout",
                "disconnect_grace",
                "campaign_jitter"
            ]
        );
        assert_eq!(t.validate(), Err(problems[0].clone()));
    }

    #[test]
    fn messages_name_the_field_and_the_values() {
        let e = with(|t| t.heartbeat = Duration::from_secs(2))
            .validate()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "heartbeat 2s is too long for ttl 3s: at least 3 heartbeats must fit in the ttl"
        );
        assert_eq!(
            e.detail(),
            "2s is too long for ttl 3s: at least 3 heartbeats must fit in the ttl"
        );
        assert_eq!(e.involved(), ["heartbeat", "ttl"]);
        let e = with(|t| t.ttl = Duration::from_secs(7200))
            .validate()
            .unwrap_err();
        assert_eq!(e.to_string(), "ttl 2h is longer than the maximum 1h");
        let e = Error::InvalidTiming {
            role: crate::RoleName::new("r").unwrap(),
            source: TimingError::HeartbeatZero,
        };
        assert_eq!(
            e.to_string(),
            "invalid timing for role r: heartbeat must be greater than 0s"
        );
        assert!(!e.is_transient());
    }

    #[test]
    fn start_up_failures_are_transient_only_when_waiting_can_heal_them() {
        use async_nats::{ConnectError, ConnectErrorKind as K};
        let connect = |kind| Error::Connect(Box::new(ConnectError::new(kind)));
        for kind in [K::Io, K::TimedOut, K::Dns] {
            assert!(connect(kind).is_transient(), "{kind:?}");
        }
        for kind in [
            K::AuthorizationViolation,
            K::Authentication,
            K::Tls,
            K::ServerParse,
        ] {
            assert!(!connect(kind).is_transient(), "{kind:?}");
        }
        // A credentials file that cannot be loaded is no connection error.
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "no creds file");
        assert!(!Error::Connect(Box::new(missing)).is_transient());
        let js = |message: &str| Error::JetStream(message.into());
        for healing in [
            "failed to get the bucket: request error: timed out",
            "failed to get the bucket: no responders",
            "jetstream error: JetStream system temporarily unavailable (code 503, error code 10008)",
            "jetstream error: stream is offline (code 500, error code 10118)",
            "jetstream error: something new (code 500, error code 19999)",
        ] {
            assert!(js(healing).is_transient(), "{healing}");
        }
        let unsupported = async_nats::jetstream::context::CreateKeyValueError::new(
            async_nats::jetstream::context::CreateKeyValueErrorKind::LimitMarkersNotSupported,
        );
        assert!(!Error::JetStream(Box::new(unsupported)).is_transient());
        let timed_out = async_nats::jetstream::context::CreateKeyValueError::new(
            async_nats::jetstream::context::CreateKeyValueErrorKind::TimedOut,
        );
        assert!(Error::JetStream(Box::new(timed_out)).is_transient());
        for configuration in [
            "jetstream error: invalid stream config (code 500, error code 10052)",
            "jetstream error: JetStream not enabled for account (code 503, error code 10039)",
        ] {
            assert!(!js(configuration).is_transient(), "{configuration}");
        }
        for persistent in [
            Error::BucketNotFound { bucket: "b".into() },
            Error::PermissionDenied { detail: "x".into() },
            Error::Kv(FailureKind::PermissionDenied),
        ] {
            assert!(!persistent.is_transient(), "{persistent}");
        }
        let gave_up = Error::StartTimeout {
            attempts: 3,
            elapsed: Duration::from_millis(61_500),
            last: Box::new(Error::Timeout(Duration::from_secs(2))),
        };
        assert!(gave_up.is_transient());
        assert_eq!(
            gave_up.to_string(),
            "start-up gave up after 3 attempts in 1m 1s 500ms: operation timed out after 2s; its \
             outcome is unknown"
        );
        assert!(Error::Kv(FailureKind::Unavailable).is_transient());
    }

    proptest! {
        #[test]
        fn validation_never_panics(
            ttl in any::<u64>(), ttl_nanos in 0u32..1_000_000_000,
            heartbeat in any::<u64>(), margin in any::<f64>(),
            op in any::<u64>(), grace in any::<u64>(), jitter in any::<u64>(),
        ) {
            let t = Timing {
                ttl: Duration::new(ttl, ttl_nanos),
                heartbeat: Duration::from_millis(heartbeat),
                deadline_margin: margin,
                operation_timeout: Duration::from_nanos(op),
                disconnect_grace: Duration::from_secs(grace),
                campaign_jitter: Duration::from_micros(jitter),
            };
            let problems = t.problems();
            prop_assert_eq!(t.validate().err(), problems.first().cloned());
            for p in &problems {
                prop_assert!(!p.to_string().is_empty());
            }
            if problems.is_empty() {
                prop_assert!(t.ttl <= Timing::MAX_TTL && t.local_lease() <= t.ttl);
            }
        }
    }
}
