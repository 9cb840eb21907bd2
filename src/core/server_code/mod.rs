//! JetStream API error codes and what retrying can change about them (protocol P3).
//!
//! Every failure of a lease write or read that carries a server error code is classified by
//! one rule: only a **configuration error** — something about the bucket or the message that
//! no amount of waiting changes until an operator changes the configuration — is
//! [`FailureClass::Persistent`]. Every other code, including codes this table does not know
//! (a newer server), is [`FailureClass::Transient`]: full storage, lost quorum, an offline
//! stream, insufficient resources all heal by themselves or by an operator freeing space,
//! and the role must come back without a restart. Persistent failures are still retried, at a
//! slow cadence (see `docs/failure-semantics.md`), so no server condition leaves a role in a
//! state that only a restart leaves.

mod known;

use known::KNOWN_CODES;

/// How retrying can help with a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureClass {
    /// Likely to heal by itself (or as soon as an operator frees resources): retried with the
    /// configured backoff.
    Transient,
    /// Needs a configuration change (a permission for exactly this subject, a bucket or
    /// message setting): reported at once and retried at a slow cadence.
    Persistent,
}

impl FailureClass {
    /// A short machine-readable name (`transient`, `persistent`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Persistent => "persistent",
        }
    }
}

/// A JetStream API error code (`err_code` of a JetStream error, e.g. 10047).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerCode(pub u16);

impl ServerCode {
    /// The name async-nats gives this code (`STORAGE_RESOURCES_EXCEEDED`), if known.
    #[must_use]
    pub fn name(self) -> Option<&'static str> {
        lookup(self.0).map(|(_, name, _)| name)
    }

    /// The server's description of this code ("Storage resources exceeded for account"), or
    /// a generic text for a code this version does not know.
    #[must_use]
    pub fn description(self) -> &'static str {
        lookup(self.0).map_or("unknown JetStream error code", |(_, _, d)| d)
    }

    /// What retrying can change: [`FailureClass::Persistent`] only for configuration errors.
    #[must_use]
    pub fn class(self) -> FailureClass {
        if CONFIGURATION_ERRORS.contains(&self.0) {
            FailureClass::Persistent
        } else {
            FailureClass::Transient
        }
    }
}

impl std::fmt::Display for ServerCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.0, self.description())
    }
}

fn lookup(code: u16) -> Option<(u16, &'static str, &'static str)> {
    KNOWN_CODES
        .binary_search_by_key(&code, |(c, _, _)| *c)
        .ok()
        .map(|i| KNOWN_CODES[i])
}

/// Codes that mean the bucket or the message is configured so that the write can never be
/// stored as it is (documented in `docs/failure-semantics.md`, "Error classes").
pub const CONFIGURATION_ERRORS: &[u16] = &[
    10003, // BAD_REQUEST
    10025, // INVALID_JSON
    10039, // JETSTREAM_NOT_ENABLED_FOR_ACCOUNT
    10052, // STREAM_INVALID_CONFIG
    10054, // STREAM_MESSAGE_EXCEEDS_MAXIMUM (max_msg_size)
    10074, // STREAM_REPLICAS_NOT_SUPPORTED (replicas > 1 on a server that is not clustered)
    10076, // JETSTREAM_NOT_ENABLED
    10097, // STREAM_HEADER_EXCEEDS_MAXIMUM
    10109, // STREAM_SEALED
    10157, // PEDANTIC
    10165, // MESSAGE_TTL_INVALID
    10166, // MESSAGE_TTL_DISABLED
];

#[cfg(test)]
mod tests {
    use async_nats::jetstream::ErrorCode;

    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        assert!(KNOWN_CODES.windows(2).all(|w| w[0].0 < w[1].0));
        for code in CONFIGURATION_ERRORS {
            assert!(lookup(*code).is_some(), "{code} is not a known code");
        }
    }

    #[test]
    fn conditions_that_heal_are_transient() {
        for code in [
            ErrorCode::STORAGE_RESOURCES_EXCEEDED,
            ErrorCode::STREAM_STORE_FAILED,
            ErrorCode::INSUFFICIENT_RESOURCES,
            ErrorCode::CLUSTER_NOT_AVAILABLE,
            ErrorCode::STREAM_OFFLINE,
            ErrorCode::ACCOUNT_RESOURCES_EXCEEDED,
            ErrorCode::MEMORY_RESOURCES_EXCEEDED,
            ErrorCode::STREAM_NOT_FOUND,
            ErrorCode::CLUSTER_NOT_LEADER,
        ] {
            let code = ServerCode(u16::try_from(code.0).unwrap_or(u16::MAX));
            assert_eq!(code.class(), FailureClass::Transient, "{code}");
        }
        // A code a future server adds is transient.
        assert_eq!(ServerCode(19_999).class(), FailureClass::Transient);
        assert_eq!(
            ServerCode(19_999).description(),
            "unknown JetStream error code"
        );
    }

    #[test]
    fn configuration_errors_are_persistent() {
        for code in [
            ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM,
            ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM,
            ErrorCode::MESSAGE_TTL_DISABLED,
            ErrorCode::MESSAGE_TTL_INVALID,
            ErrorCode::STREAM_SEALED,
            ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED,
        ] {
            let code = ServerCode(u16::try_from(code.0).unwrap_or(u16::MAX));
            assert_eq!(code.class(), FailureClass::Persistent, "{code}");
        }
    }

    /// Every `ErrorCode` constant async-nats knows maps to a documented class and carries the
    /// server's description (a new async-nats constant that is missing here fails the
    /// compile-time list below only when renamed; the count check catches additions).
    #[test]
    fn every_async_nats_code_has_a_documented_class() {
        let constants: &[(ErrorCode, &str)] = &[
            (
                ErrorCode::ACCOUNT_RESOURCES_EXCEEDED,
                "ACCOUNT_RESOURCES_EXCEEDED",
            ),
            (ErrorCode::BAD_REQUEST, "BAD_REQUEST"),
            (ErrorCode::CLUSTER_INCOMPLETE, "CLUSTER_INCOMPLETE"),
            (ErrorCode::CLUSTER_NO_PEERS, "CLUSTER_NO_PEERS"),
            (ErrorCode::CLUSTER_NOT_ACTIVE, "CLUSTER_NOT_ACTIVE"),
            (ErrorCode::CLUSTER_NOT_ASSIGNED, "CLUSTER_NOT_ASSIGNED"),
            (ErrorCode::CLUSTER_NOT_AVAILABLE, "CLUSTER_NOT_AVAILABLE"),
            (ErrorCode::CLUSTER_NOT_LEADER, "CLUSTER_NOT_LEADER"),
            (ErrorCode::CLUSTER_REQUIRED, "CLUSTER_REQUIRED"),
            (ErrorCode::CLUSTER_TAGS, "CLUSTER_TAGS"),
            (ErrorCode::CONSUMER_CREATE, "CONSUMER_CREATE"),
            (ErrorCode::CONSUMER_NAME_EXIST, "CONSUMER_NAME_EXIST"),
            (ErrorCode::CONSUMER_NOT_FOUND, "CONSUMER_NOT_FOUND"),
            (
                ErrorCode::SNAPSHOT_DELIVER_SUBJECT_INVALID,
                "SNAPSHOT_DELIVER_SUBJECT_INVALID",
            ),
            (
                ErrorCode::CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT,
                "CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT",
            ),
            (
                ErrorCode::CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT,
                "CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT",
            ),
            (
                ErrorCode::CONSUMER_DURABLE_NAME_NOT_SET,
                "CONSUMER_DURABLE_NAME_NOT_SET",
            ),
            (
                ErrorCode::CONSUMER_EPHEMERAL_WITH_DURABLE,
                "CONSUMER_EPHEMERAL_WITH_DURABLE",
            ),
            (
                ErrorCode::CONSUMER_EPHEMERAL_WITH_DURABLE_NAME,
                "CONSUMER_EPHEMERAL_WITH_DURABLE_NAME",
            ),
            (
                ErrorCode::STREAM_EXTERNAL_API_OVERLAP,
                "STREAM_EXTERNAL_API_OVERLAP",
            ),
            (
                ErrorCode::STREAM_EXTERNAL_DELETE_PREFIX_OVERLAPS,
                "STREAM_EXTERNAL_DELETE_PREFIX_OVERLAPS",
            ),
            (ErrorCode::INSUFFICIENT_RESOURCES, "INSUFFICIENT_RESOURCES"),
            (
                ErrorCode::STREAM_INVALID_EXTERNAL_DELIVERY_SUBJECT,
                "STREAM_INVALID_EXTERNAL_DELIVERY_SUBJECT",
            ),
            (ErrorCode::INVALID_JSON, "INVALID_JSON"),
            (
                ErrorCode::MAXIMUM_CONSUMERS_LIMIT,
                "MAXIMUM_CONSUMERS_LIMIT",
            ),
            (ErrorCode::MAXIMUM_STREAMS_LIMIT, "MAXIMUM_STREAMS_LIMIT"),
            (
                ErrorCode::MEMORY_RESOURCES_EXCEEDED,
                "MEMORY_RESOURCES_EXCEEDED",
            ),
            (
                ErrorCode::MIRROR_CONSUMER_SETUP_FAILED,
                "MIRROR_CONSUMER_SETUP_FAILED",
            ),
            (
                ErrorCode::MIRROR_MAX_MESSAGE_SIZE_TOO_BIG,
                "MIRROR_MAX_MESSAGE_SIZE_TOO_BIG",
            ),
            (ErrorCode::MIRROR_WITH_SOURCES, "MIRROR_WITH_SOURCES"),
            (
                ErrorCode::MIRROR_WITH_START_SEQUENCE_AND_TIME,
                "MIRROR_WITH_START_SEQUENCE_AND_TIME",
            ),
            (
                ErrorCode::MIRROR_WITH_SUBJECT_FILTERS,
                "MIRROR_WITH_SUBJECT_FILTERS",
            ),
            (ErrorCode::MIRROR_WITH_SUBJECTS, "MIRROR_WITH_SUBJECTS"),
            (ErrorCode::NO_ACCOUNT, "NO_ACCOUNT"),
            (
                ErrorCode::NOT_SUPPORTED_IN_CLUSTER_MODE,
                "NOT_SUPPORTED_IN_CLUSTER_MODE",
            ),
            (ErrorCode::NO_MESSAGE_FOUND, "NO_MESSAGE_FOUND"),
            (ErrorCode::NOT_EMPTY_REQUEST, "NOT_EMPTY_REQUEST"),
            (
                ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT,
                "JETSTREAM_NOT_ENABLED_FOR_ACCOUNT",
            ),
            (
                ErrorCode::CLUSTER_PEER_NOT_MEMBER,
                "CLUSTER_PEER_NOT_MEMBER",
            ),
            (ErrorCode::RAFT_GENERAL, "RAFT_GENERAL"),
            (
                ErrorCode::RESTORE_SUBSCRIBE_FAILED,
                "RESTORE_SUBSCRIBE_FAILED",
            ),
            (ErrorCode::SEQUENCE_NOT_FOUND, "SEQUENCE_NOT_FOUND"),
            (
                ErrorCode::CLUSTER_SERVER_NOT_MEMBER,
                "CLUSTER_SERVER_NOT_MEMBER",
            ),
            (
                ErrorCode::SOURCE_CONSUMER_SETUP_FAILED,
                "SOURCE_CONSUMER_SETUP_FAILED",
            ),
            (
                ErrorCode::SOURCE_MAX_MESSAGE_SIZE_TOO_BIG,
                "SOURCE_MAX_MESSAGE_SIZE_TOO_BIG",
            ),
            (
                ErrorCode::STORAGE_RESOURCES_EXCEEDED,
                "STORAGE_RESOURCES_EXCEEDED",
            ),
            (ErrorCode::STREAM_ASSIGNMENT, "STREAM_ASSIGNMENT"),
            (ErrorCode::STREAM_CREATE, "STREAM_CREATE"),
            (ErrorCode::STREAM_DELETE, "STREAM_DELETE"),
            (ErrorCode::STREAM_GENERALOR, "STREAM_GENERALOR"),
            (ErrorCode::STREAM_INVALID_CONFIG, "STREAM_INVALID_CONFIG"),
            (ErrorCode::STREAM_LIMITS, "STREAM_LIMITS"),
            (
                ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM,
                "STREAM_MESSAGE_EXCEEDS_MAXIMUM",
            ),
            (
                ErrorCode::STREAM_MIRROR_NOT_UPDATABLE,
                "STREAM_MIRROR_NOT_UPDATABLE",
            ),
            (ErrorCode::STREAM_MISMATCH, "STREAM_MISMATCH"),
            (
                ErrorCode::STREAM_MESSAGE_DELETE_FAILED,
                "STREAM_MESSAGE_DELETE_FAILED",
            ),
            (ErrorCode::STREAM_NAME_EXIST, "STREAM_NAME_EXIST"),
            (ErrorCode::STREAM_NOT_FOUND, "STREAM_NOT_FOUND"),
            (ErrorCode::STREAM_NOT_MATCH, "STREAM_NOT_MATCH"),
            (
                ErrorCode::STREAM_REPLICAS_NOT_UPDATABLE,
                "STREAM_REPLICAS_NOT_UPDATABLE",
            ),
            (ErrorCode::STREAM_RESTORE, "STREAM_RESTORE"),
            (
                ErrorCode::STREAM_SEQUENCE_NOT_MATCH,
                "STREAM_SEQUENCE_NOT_MATCH",
            ),
            (ErrorCode::STREAM_SNAPSHOT, "STREAM_SNAPSHOT"),
            (ErrorCode::STREAM_SUBJECT_OVERLAP, "STREAM_SUBJECT_OVERLAP"),
            (ErrorCode::STREAM_CREATE_TEMPLATE, "STREAM_CREATE_TEMPLATE"),
            (ErrorCode::STREAM_DELETE_FAILED, "STREAM_DELETE_FAILED"),
            (
                ErrorCode::STREAM_TEMPLATE_NOT_FOUND,
                "STREAM_TEMPLATE_NOT_FOUND",
            ),
            (ErrorCode::STREAM_UPDATE, "STREAM_UPDATE"),
            (
                ErrorCode::STREAM_WRONG_LAST_MESSAGE_ID,
                "STREAM_WRONG_LAST_MESSAGE_ID",
            ),
            (
                ErrorCode::STREAM_WRONG_LAST_SEQUENCE,
                "STREAM_WRONG_LAST_SEQUENCE",
            ),
            (ErrorCode::TEMP_STORAGE_FAILED, "TEMP_STORAGE_FAILED"),
            (ErrorCode::NAME_NOT_MATCH_SUBJECT, "NAME_NOT_MATCH_SUBJECT"),
            (
                ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED,
                "STREAM_REPLICAS_NOT_SUPPORTED",
            ),
            (ErrorCode::PEER_REMAP, "PEER_REMAP"),
            (ErrorCode::JETSTREAM_NOT_ENABLED, "JETSTREAM_NOT_ENABLED"),
            (ErrorCode::STREAM_STORE_FAILED, "STREAM_STORE_FAILED"),
            (
                ErrorCode::CONSUMER_CONFIG_REQUIRED,
                "CONSUMER_CONFIG_REQUIRED",
            ),
            (
                ErrorCode::CONSUMER_DELIVER_TO_WILDCARDS,
                "CONSUMER_DELIVER_TO_WILDCARDS",
            ),
            (
                ErrorCode::CONSUMER_PUSH_MAX_WAITING,
                "CONSUMER_PUSH_MAX_WAITING",
            ),
            (ErrorCode::CONSUMER_DELIVER_CYCLE, "CONSUMER_DELIVER_CYCLE"),
            (
                ErrorCode::CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED,
                "CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED",
            ),
            (
                ErrorCode::CONSUMER_SMALL_HEARTBEAT,
                "CONSUMER_SMALL_HEARTBEAT",
            ),
            (
                ErrorCode::CONSUMER_PULL_REQUIRES_ACK,
                "CONSUMER_PULL_REQUIRES_ACK",
            ),
            (
                ErrorCode::CONSUMER_PULL_NOT_DURABLE,
                "CONSUMER_PULL_NOT_DURABLE",
            ),
            (
                ErrorCode::CONSUMER_PULL_WITH_RATE_LIMIT,
                "CONSUMER_PULL_WITH_RATE_LIMIT",
            ),
            (
                ErrorCode::CONSUMER_MAX_WAITING_NEGATIVE,
                "CONSUMER_MAX_WAITING_NEGATIVE",
            ),
            (
                ErrorCode::CONSUMER_HEARTBEAT_REQUIRES_PUSH,
                "CONSUMER_HEARTBEAT_REQUIRES_PUSH",
            ),
            (
                ErrorCode::CONSUMER_FLOW_CONTROL_REQUIRES_PUSH,
                "CONSUMER_FLOW_CONTROL_REQUIRES_PUSH",
            ),
            (
                ErrorCode::CONSUMER_DIRECT_REQUIRES_PUSH,
                "CONSUMER_DIRECT_REQUIRES_PUSH",
            ),
            (
                ErrorCode::CONSUMER_DIRECT_REQUIRES_EPHEMERAL,
                "CONSUMER_DIRECT_REQUIRES_EPHEMERAL",
            ),
            (ErrorCode::CONSUMER_ON_MAPPED, "CONSUMER_ON_MAPPED"),
            (
                ErrorCode::CONSUMER_FILTER_NOT_SUBSET,
                "CONSUMER_FILTER_NOT_SUBSET",
            ),
            (
                ErrorCode::CONSUMER_INVALID_POLICY,
                "CONSUMER_INVALID_POLICY",
            ),
            (
                ErrorCode::CONSUMER_INVALID_SAMPLING,
                "CONSUMER_INVALID_SAMPLING",
            ),
            (ErrorCode::STREAM_INVALID, "STREAM_INVALID"),
            (
                ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM,
                "STREAM_HEADER_EXCEEDS_MAXIMUM",
            ),
            (
                ErrorCode::CONSUMER_WQ_REQUIRES_EXPLICIT_ACK,
                "CONSUMER_WQ_REQUIRES_EXPLICIT_ACK",
            ),
            (
                ErrorCode::CONSUMER_WQ_MULTIPLE_UNFILTERED,
                "CONSUMER_WQ_MULTIPLE_UNFILTERED",
            ),
            (
                ErrorCode::CONSUMER_WQ_CONSUMER_NOT_UNIQUE,
                "CONSUMER_WQ_CONSUMER_NOT_UNIQUE",
            ),
            (
                ErrorCode::CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL,
                "CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL",
            ),
            (ErrorCode::CONSUMER_NAME_TOO_LONG, "CONSUMER_NAME_TOO_LONG"),
            (
                ErrorCode::CONSUMER_BAD_DURABLE_NAME,
                "CONSUMER_BAD_DURABLE_NAME",
            ),
            (ErrorCode::CONSUMER_STORE_FAILED, "CONSUMER_STORE_FAILED"),
            (
                ErrorCode::CONSUMER_EXISTING_ACTIVE,
                "CONSUMER_EXISTING_ACTIVE",
            ),
            (
                ErrorCode::CONSUMER_REPLACEMENT_WITH_DIFFERENT_NAME,
                "CONSUMER_REPLACEMENT_WITH_DIFFERENT_NAME",
            ),
            (
                ErrorCode::CONSUMER_DESCRIPTION_TOO_LONG,
                "CONSUMER_DESCRIPTION_TOO_LONG",
            ),
            (
                ErrorCode::CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS,
                "CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS",
            ),
            (ErrorCode::STREAM_SEALED, "STREAM_SEALED"),
            (ErrorCode::STREAM_PURGE_FAILED, "STREAM_PURGE_FAILED"),
            (ErrorCode::STREAM_ROLLUP_FAILED, "STREAM_ROLLUP_FAILED"),
            (
                ErrorCode::CONSUMER_INVALID_DELIVER_SUBJECT,
                "CONSUMER_INVALID_DELIVER_SUBJECT",
            ),
            (
                ErrorCode::STREAM_MAX_BYTES_REQUIRED,
                "STREAM_MAX_BYTES_REQUIRED",
            ),
            (
                ErrorCode::CONSUMER_MAX_REQUEST_BATCH_NEGATIVE,
                "CONSUMER_MAX_REQUEST_BATCH_NEGATIVE",
            ),
            (
                ErrorCode::CONSUMER_MAX_REQUEST_EXPIRES_TO_SMALL,
                "CONSUMER_MAX_REQUEST_EXPIRES_TO_SMALL",
            ),
            (
                ErrorCode::CONSUMER_MAX_DELIVER_BACKOFF,
                "CONSUMER_MAX_DELIVER_BACKOFF",
            ),
            (
                ErrorCode::STREAM_INFO_MAX_SUBJECTS,
                "STREAM_INFO_MAX_SUBJECTS",
            ),
            (ErrorCode::STREAM_OFFLINE, "STREAM_OFFLINE"),
            (ErrorCode::CONSUMER_OFFLINE, "CONSUMER_OFFLINE"),
            (ErrorCode::NO_LIMITS, "NO_LIMITS"),
            (
                ErrorCode::CONSUMER_MAX_PENDING_ACK_EXCESS,
                "CONSUMER_MAX_PENDING_ACK_EXCESS",
            ),
            (
                ErrorCode::STREAM_MAX_STREAM_BYTES_EXCEEDED,
                "STREAM_MAX_STREAM_BYTES_EXCEEDED",
            ),
            (ErrorCode::STREAM_MOVE_AND_SCALE, "STREAM_MOVE_AND_SCALE"),
            (
                ErrorCode::STREAM_MOVE_IN_PROGRESS,
                "STREAM_MOVE_IN_PROGRESS",
            ),
            (
                ErrorCode::CONSUMER_MAX_REQUEST_BATCH_EXCEEDED,
                "CONSUMER_MAX_REQUEST_BATCH_EXCEEDED",
            ),
            (
                ErrorCode::CONSUMER_REPLICAS_EXCEEDS_STREAM,
                "CONSUMER_REPLICAS_EXCEEDS_STREAM",
            ),
            (
                ErrorCode::CONSUMER_NAME_CONTAINS_PATH_SEPARATORS,
                "CONSUMER_NAME_CONTAINS_PATH_SEPARATORS",
            ),
            (
                ErrorCode::STREAM_NAME_CONTAINS_PATH_SEPARATORS,
                "STREAM_NAME_CONTAINS_PATH_SEPARATORS",
            ),
            (
                ErrorCode::STREAM_MOVE_NOT_IN_PROGRESS,
                "STREAM_MOVE_NOT_IN_PROGRESS",
            ),
            (
                ErrorCode::STREAM_NAME_EXIST_RESTORE_FAILED,
                "STREAM_NAME_EXIST_RESTORE_FAILED",
            ),
            (
                ErrorCode::CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH,
                "CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH",
            ),
            (
                ErrorCode::CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH,
                "CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH",
            ),
            (
                ErrorCode::REPLICAS_COUNT_CANNOT_BE_NEGATIVE,
                "REPLICAS_COUNT_CANNOT_BE_NEGATIVE",
            ),
            (
                ErrorCode::CONSUMER_REPLICAS_SHOULD_MATCH_STREAM,
                "CONSUMER_REPLICAS_SHOULD_MATCH_STREAM",
            ),
            (
                ErrorCode::CONSUMER_METADATA_LENGTH,
                "CONSUMER_METADATA_LENGTH",
            ),
            (
                ErrorCode::CONSUMER_DUPLICATE_FILTER_SUBJECTS,
                "CONSUMER_DUPLICATE_FILTER_SUBJECTS",
            ),
            (
                ErrorCode::CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED,
                "CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED",
            ),
            (
                ErrorCode::CONSUMER_OVERLAPPING_SUBJECT_FILTERS,
                "CONSUMER_OVERLAPPING_SUBJECT_FILTERS",
            ),
            (ErrorCode::CONSUMER_EMPTY_FILTER, "CONSUMER_EMPTY_FILTER"),
            (
                ErrorCode::SOURCE_DUPLICATE_DETECTED,
                "SOURCE_DUPLICATE_DETECTED",
            ),
            (
                ErrorCode::SOURCE_INVALID_STREAM_NAME,
                "SOURCE_INVALID_STREAM_NAME",
            ),
            (
                ErrorCode::MIRROR_INVALID_STREAM_NAME,
                "MIRROR_INVALID_STREAM_NAME",
            ),
            (ErrorCode::MIRROR_WITH_FIRST_SEQ, "MIRROR_WITH_FIRST_SEQ"),
            (
                ErrorCode::SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED,
                "SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED",
            ),
            (
                ErrorCode::SOURCE_INVALID_SUBJECT_FILTER,
                "SOURCE_INVALID_SUBJECT_FILTER",
            ),
            (
                ErrorCode::SOURCE_INVALID_TRANSFORM_DESTINATION,
                "SOURCE_INVALID_TRANSFORM_DESTINATION",
            ),
            (
                ErrorCode::SOURCE_OVERLAPPING_SUBJECT_FILTERS,
                "SOURCE_OVERLAPPING_SUBJECT_FILTERS",
            ),
            (
                ErrorCode::CONSUMER_ALREADY_EXISTS,
                "CONSUMER_ALREADY_EXISTS",
            ),
            (
                ErrorCode::CONSUMER_DOES_NOT_EXIST,
                "CONSUMER_DOES_NOT_EXIST",
            ),
            (
                ErrorCode::MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED,
                "MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED",
            ),
            (
                ErrorCode::MIRROR_INVALID_SUBJECT_FILTER,
                "MIRROR_INVALID_SUBJECT_FILTER",
            ),
            (
                ErrorCode::MIRROR_OVERLAPPING_SUBJECT_FILTERS,
                "MIRROR_OVERLAPPING_SUBJECT_FILTERS",
            ),
            (
                ErrorCode::CONSUMER_INACTIVE_THRESHOLD_EXCESS,
                "CONSUMER_INACTIVE_THRESHOLD_EXCESS",
            ),
            (
                ErrorCode::MIRROR_INVALID_TRANSFORM_DESTINATION,
                "MIRROR_INVALID_TRANSFORM_DESTINATION",
            ),
            (
                ErrorCode::STREAM_TRANSFORM_INVALID_SOURCE,
                "STREAM_TRANSFORM_INVALID_SOURCE",
            ),
            (
                ErrorCode::STREAM_TRANSFORM_INVALID_DESTINATION,
                "STREAM_TRANSFORM_INVALID_DESTINATION",
            ),
            (ErrorCode::PEDANTIC, "PEDANTIC"),
            (
                ErrorCode::STREAM_DUPLICATE_MESSAGE_CONFLICT,
                "STREAM_DUPLICATE_MESSAGE_CONFLICT",
            ),
            (
                ErrorCode::CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP,
                "CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP",
            ),
            (
                ErrorCode::CONSUMER_INVALID_PRIORITY_GROUP,
                "CONSUMER_INVALID_PRIORITY_GROUP",
            ),
            (
                ErrorCode::CONSUMER_EMPTY_GROUP_NAME,
                "CONSUMER_EMPTY_GROUP_NAME",
            ),
            (
                ErrorCode::CONSUMER_INVALID_GROUP_NAME,
                "CONSUMER_INVALID_GROUP_NAME",
            ),
            (
                ErrorCode::STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_NOT_READY,
                "STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_NOT_READY",
            ),
            (
                ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT,
                "STREAM_WRONG_LAST_SEQUENCE_CONSTANT",
            ),
            (ErrorCode::MESSAGE_TTL_INVALID, "MESSAGE_TTL_INVALID"),
            (ErrorCode::MESSAGE_TTL_DISABLED, "MESSAGE_TTL_DISABLED"),
            (
                ErrorCode::STREAM_TOO_MANY_REQUESTS,
                "STREAM_TOO_MANY_REQUESTS",
            ),
            (ErrorCode::MESSAGE_INCR_DISABLED, "MESSAGE_INCR_DISABLED"),
            (ErrorCode::MESSAGE_INCR_MISSING, "MESSAGE_INCR_MISSING"),
            (ErrorCode::MESSAGE_INCR_PAYLOAD, "MESSAGE_INCR_PAYLOAD"),
            (ErrorCode::MESSAGE_INCR_INVALID, "MESSAGE_INCR_INVALID"),
            (ErrorCode::MESSAGE_COUNTER_BROKEN, "MESSAGE_COUNTER_BROKEN"),
            (ErrorCode::MIRROR_WITH_COUNTERS, "MIRROR_WITH_COUNTERS"),
            (
                ErrorCode::ATOMIC_PUBLISH_DISABLED,
                "ATOMIC_PUBLISH_DISABLED",
            ),
            (
                ErrorCode::ATOMIC_PUBLISH_MISSING_SEQ,
                "ATOMIC_PUBLISH_MISSING_SEQ",
            ),
            (
                ErrorCode::ATOMIC_PUBLISH_INCOMPLETE_BATCH,
                "ATOMIC_PUBLISH_INCOMPLETE_BATCH",
            ),
            (
                ErrorCode::ATOMIC_PUBLISH_UNSUPPORTED_HEADER,
                "ATOMIC_PUBLISH_UNSUPPORTED_HEADER",
            ),
            (
                ErrorCode::CONSUMER_PUSH_WITH_PRIORITY_GROUP,
                "CONSUMER_PUSH_WITH_PRIORITY_GROUP",
            ),
            (
                ErrorCode::ATOMIC_PUBLISH_INVALID_BATCH_ID,
                "ATOMIC_PUBLISH_INVALID_BATCH_ID",
            ),
            (ErrorCode::STREAM_MIN_LAST_SEQ, "STREAM_MIN_LAST_SEQ"),
            (
                ErrorCode::CONSUMER_ACK_POLICY_INVALID,
                "CONSUMER_ACK_POLICY_INVALID",
            ),
            (
                ErrorCode::CONSUMER_REPLAY_POLICY_INVALID,
                "CONSUMER_REPLAY_POLICY_INVALID",
            ),
            (
                ErrorCode::CONSUMER_ACK_WAIT_NEGATIVE,
                "CONSUMER_ACK_WAIT_NEGATIVE",
            ),
            (
                ErrorCode::CONSUMER_BACKOFF_NEGATIVE,
                "CONSUMER_BACKOFF_NEGATIVE",
            ),
            (ErrorCode::REQUIRED_API_LEVEL, "REQUIRED_API_LEVEL"),
            (
                ErrorCode::MIRROR_WITH_MSG_SCHEDULES,
                "MIRROR_WITH_MSG_SCHEDULES",
            ),
            (
                ErrorCode::SOURCE_WITH_MSG_SCHEDULES,
                "SOURCE_WITH_MSG_SCHEDULES",
            ),
            (
                ErrorCode::MESSAGE_SCHEDULES_DISABLED,
                "MESSAGE_SCHEDULES_DISABLED",
            ),
            (
                ErrorCode::MESSAGE_SCHEDULES_PATTERN_INVALID,
                "MESSAGE_SCHEDULES_PATTERN_INVALID",
            ),
            (
                ErrorCode::MESSAGE_SCHEDULES_TARGET_INVALID,
                "MESSAGE_SCHEDULES_TARGET_INVALID",
            ),
            (
                ErrorCode::MESSAGE_SCHEDULES_TTL_INVALID,
                "MESSAGE_SCHEDULES_TTL_INVALID",
            ),
            (
                ErrorCode::MESSAGE_SCHEDULES_ROLLUP_INVALID,
                "MESSAGE_SCHEDULES_ROLLUP_INVALID",
            ),
            (
                ErrorCode::STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID,
                "STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID",
            ),
            (ErrorCode::STREAM_OFFLINE_REASON, "STREAM_OFFLINE_REASON"),
            (
                ErrorCode::CONSUMER_OFFLINE_REASON,
                "CONSUMER_OFFLINE_REASON",
            ),
            (
                ErrorCode::CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE,
                "CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE",
            ),
            (
                ErrorCode::CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE,
                "CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE",
            ),
            (
                ErrorCode::MIRROR_WITH_ATOMIC_PUBLISH,
                "MIRROR_WITH_ATOMIC_PUBLISH",
            ),
            (
                ErrorCode::ATOMIC_PUBLISH_TOO_LARGE_BATCH,
                "ATOMIC_PUBLISH_TOO_LARGE_BATCH",
            ),
            (
                ErrorCode::ATOMIC_PUBLISH_INVALID_BATCH_COMMIT,
                "ATOMIC_PUBLISH_INVALID_BATCH_COMMIT",
            ),
            (
                ErrorCode::ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE,
                "ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE",
            ),
            (
                ErrorCode::CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT,
                "CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT",
            ),
            (
                ErrorCode::MESSAGE_SCHEDULES_SOURCE_INVALID,
                "MESSAGE_SCHEDULES_SOURCE_INVALID",
            ),
            (ErrorCode::CONSUMER_INVALID_RESET, "CONSUMER_INVALID_RESET"),
            (ErrorCode::BATCH_PUBLISH_DISABLED, "BATCH_PUBLISH_DISABLED"),
            (
                ErrorCode::BATCH_PUBLISH_INVALID_PATTERN,
                "BATCH_PUBLISH_INVALID_PATTERN",
            ),
            (
                ErrorCode::BATCH_PUBLISH_INVALID_BATCH_ID,
                "BATCH_PUBLISH_INVALID_BATCH_ID",
            ),
            (
                ErrorCode::BATCH_PUBLISH_UNKNOWN_BATCH_ID,
                "BATCH_PUBLISH_UNKNOWN_BATCH_ID",
            ),
            (
                ErrorCode::MIRROR_WITH_BATCH_PUBLISH,
                "MIRROR_WITH_BATCH_PUBLISH",
            ),
            (
                ErrorCode::ATOMIC_PUBLISH_TOO_MANY_INFLIGHT,
                "ATOMIC_PUBLISH_TOO_MANY_INFLIGHT",
            ),
            (
                ErrorCode::BATCH_PUBLISH_TOO_MANY_INFLIGHT,
                "BATCH_PUBLISH_TOO_MANY_INFLIGHT",
            ),
            (
                ErrorCode::MESSAGE_SCHEDULES_SCHEDULER_INVALID,
                "MESSAGE_SCHEDULES_SCHEDULER_INVALID",
            ),
            (
                ErrorCode::MIRROR_DURABLE_CONSUMER_CFG_INVALID,
                "MIRROR_DURABLE_CONSUMER_CFG_INVALID",
            ),
            (
                ErrorCode::MIRROR_CONSUMER_REQUIRES_ACK_FC,
                "MIRROR_CONSUMER_REQUIRES_ACK_FC",
            ),
            (
                ErrorCode::SOURCE_DURABLE_CONSUMER_CFG_INVALID,
                "SOURCE_DURABLE_CONSUMER_CFG_INVALID",
            ),
            (
                ErrorCode::SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED,
                "SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED",
            ),
            (
                ErrorCode::SOURCE_CONSUMER_REQUIRES_ACK_FC,
                "SOURCE_CONSUMER_REQUIRES_ACK_FC",
            ),
            (
                ErrorCode::CONSUMER_ACK_FC_REQUIRES_PUSH,
                "CONSUMER_ACK_FC_REQUIRES_PUSH",
            ),
            (
                ErrorCode::CONSUMER_ACK_FC_REQUIRES_FC,
                "CONSUMER_ACK_FC_REQUIRES_FC",
            ),
            (
                ErrorCode::CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING,
                "CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING",
            ),
            (
                ErrorCode::CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT,
                "CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT",
            ),
            (
                ErrorCode::CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER,
                "CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER",
            ),
            (
                ErrorCode::MESSAGE_SCHEDULES_TIME_ZONE_INVALID,
                "MESSAGE_SCHEDULES_TIME_ZONE_INVALID",
            ),
        ];
        assert_eq!(constants.len(), KNOWN_CODES.len());
        for (code, name) in constants {
            let code = ServerCode(u16::try_from(code.0).unwrap_or(u16::MAX));
            assert_eq!(code.name(), Some(*name), "{code:?}");
            assert_ne!(code.description(), "unknown JetStream error code");
            let expected = if CONFIGURATION_ERRORS.contains(&code.0) {
                FailureClass::Persistent
            } else {
                FailureClass::Transient
            };
            assert_eq!(code.class(), expected, "{name}");
        }
    }
}
