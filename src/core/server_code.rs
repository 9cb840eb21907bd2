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
    10076, // JETSTREAM_NOT_ENABLED
    10097, // STREAM_HEADER_EXCEEDS_MAXIMUM
    10109, // STREAM_SEALED
    10157, // PEDANTIC
    10165, // MESSAGE_TTL_INVALID
    10166, // MESSAGE_TTL_DISABLED
];

/// Every code async-nats 0.51 names, with the server's description, sorted by code.
#[rustfmt::skip]
const KNOWN_CODES: &[(u16, &str, &str)] = &[
    (10002, "ACCOUNT_RESOURCES_EXCEEDED", "Resource limits exceeded for account"),
    (10003, "BAD_REQUEST", "Bad request"),
    (10004, "CLUSTER_INCOMPLETE", "Incomplete results"),
    (10005, "CLUSTER_NO_PEERS", "No suitable peers for placement"),
    (10006, "CLUSTER_NOT_ACTIVE", "Jetstream not in clustered mode"),
    (10007, "CLUSTER_NOT_ASSIGNED", "Jetstream cluster not assigned to this server"),
    (10008, "CLUSTER_NOT_AVAILABLE", "Jetstream system temporarily unavailable"),
    (10009, "CLUSTER_NOT_LEADER", "Jetstream cluster can't handle request"),
    (10010, "CLUSTER_REQUIRED", "Jetstream clustering support required"),
    (10011, "CLUSTER_TAGS", "Tags placement not supported for operation"),
    (10012, "CONSUMER_CREATE", "Consumer creation failed"),
    (10013, "CONSUMER_NAME_EXIST", "Consumer name already in use"),
    (10014, "CONSUMER_NOT_FOUND", "Consumer not found"),
    (10015, "SNAPSHOT_DELIVER_SUBJECT_INVALID", "Deliver subject not valid"),
    (10016, "CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT", "Consumer expected to be durable but no durable name set in subject"),
    (10017, "CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT", "Consumer name in subject does not match durable name in request"),
    (10018, "CONSUMER_DURABLE_NAME_NOT_SET", "Consumer expected to be durable but a durable name was not set"),
    (10019, "CONSUMER_EPHEMERAL_WITH_DURABLE", "Consumer expected to be ephemeral but detected a durable name set in subject"),
    (10020, "CONSUMER_EPHEMERAL_WITH_DURABLE_NAME", "Consumer expected to be ephemeral but a durable name was set in request"),
    (10021, "STREAM_EXTERNAL_API_OVERLAP", "Stream external api prefix must not overlap"),
    (10022, "STREAM_EXTERNAL_DELETE_PREFIX_OVERLAPS", "Stream external delivery prefix overlaps with stream subject"),
    (10023, "INSUFFICIENT_RESOURCES", "Insufficient resources"),
    (10024, "STREAM_INVALID_EXTERNAL_DELIVERY_SUBJECT", "Stream external delivery prefix must not contain wildcards"),
    (10025, "INVALID_JSON", "Invalid JSON"),
    (10026, "MAXIMUM_CONSUMERS_LIMIT", "Maximum consumers limit reached"),
    (10027, "MAXIMUM_STREAMS_LIMIT", "Maximum number of streams reached"),
    (10028, "MEMORY_RESOURCES_EXCEEDED", "Insufficient memory resources available"),
    (10029, "MIRROR_CONSUMER_SETUP_FAILED", "Setting up consumer mirror failed"),
    (10030, "MIRROR_MAX_MESSAGE_SIZE_TOO_BIG", "Stream mirror must have max message size >= source"),
    (10031, "MIRROR_WITH_SOURCES", "Stream mirrors can't also contain other sources"),
    (10032, "MIRROR_WITH_START_SEQUENCE_AND_TIME", "Stream mirrors can not have both start seq and start time configured"),
    (10033, "MIRROR_WITH_SUBJECT_FILTERS", "Stream mirrors can not contain filtered subjects"),
    (10034, "MIRROR_WITH_SUBJECTS", "Stream mirrors can not contain subjects"),
    (10035, "NO_ACCOUNT", "Account not found"),
    (10036, "NOT_SUPPORTED_IN_CLUSTER_MODE", "Not currently supported in clustered mode"),
    (10037, "NO_MESSAGE_FOUND", "No message found"),
    (10038, "NOT_EMPTY_REQUEST", "Expected an empty request payload"),
    (10039, "JETSTREAM_NOT_ENABLED_FOR_ACCOUNT", "Jetstream not enabled for account"),
    (10040, "CLUSTER_PEER_NOT_MEMBER", "impl ErrorCode {	Peer not a member"),
    (10041, "RAFT_GENERAL", "General RAFT error"),
    (10042, "RESTORE_SUBSCRIBE_FAILED", "Jetstream unable to subscribe to restore snapshot"),
    (10043, "SEQUENCE_NOT_FOUND", "Sequence not found"),
    (10044, "CLUSTER_SERVER_NOT_MEMBER", "Server is not a member of the cluster"),
    (10045, "SOURCE_CONSUMER_SETUP_FAILED", "General source consumer setup failure"),
    (10046, "SOURCE_MAX_MESSAGE_SIZE_TOO_BIG", "Stream source must have max message size >= target"),
    (10047, "STORAGE_RESOURCES_EXCEEDED", "Insufficient storage resources available"),
    (10048, "STREAM_ASSIGNMENT", "Generic error when stream operation fails."),
    (10049, "STREAM_CREATE", "Stream create failed with a string"),
    (10050, "STREAM_DELETE", "Stream deletion failed"),
    (10051, "STREAM_GENERALOR", "General stream failure"),
    (10052, "STREAM_INVALID_CONFIG", "Invalid stream config"),
    (10053, "STREAM_LIMITS", "Stream limits error"),
    (10054, "STREAM_MESSAGE_EXCEEDS_MAXIMUM", "Message size exceeds maximum allowed"),
    (10055, "STREAM_MIRROR_NOT_UPDATABLE", "Stream mirror configuration can not be updated"),
    (10056, "STREAM_MISMATCH", "Stream name in subject does not match request"),
    (10057, "STREAM_MESSAGE_DELETE_FAILED", "Stream message delete failed"),
    (10058, "STREAM_NAME_EXIST", "Stream name already in use with a different configuration"),
    (10059, "STREAM_NOT_FOUND", "Stream not found"),
    (10060, "STREAM_NOT_MATCH", "Expected stream does not match"),
    (10061, "STREAM_REPLICAS_NOT_UPDATABLE", "Replicas configuration can not be updated"),
    (10062, "STREAM_RESTORE", "Restore failed"),
    (10063, "STREAM_SEQUENCE_NOT_MATCH", "Expected stream sequence does not match"),
    (10064, "STREAM_SNAPSHOT", "Stream snapshot failed"),
    (10065, "STREAM_SUBJECT_OVERLAP", "Subjects overlap with an existing stream"),
    (10066, "STREAM_CREATE_TEMPLATE", "Generic error for stream creation error with a string"),
    (10067, "STREAM_DELETE_FAILED", "Generic error from stream deletion operation"),
    (10068, "STREAM_TEMPLATE_NOT_FOUND", "Template not found"),
    (10069, "STREAM_UPDATE", "Stream update failed"),
    (10070, "STREAM_WRONG_LAST_MESSAGE_ID", "Wrong last msg id"),
    (10071, "STREAM_WRONG_LAST_SEQUENCE", "Wrong last sequence"),
    (10072, "TEMP_STORAGE_FAILED", "Jetstream unable to open temp storage for restore"),
    (10073, "NAME_NOT_MATCH_SUBJECT", "Template name in subject does not match request"),
    (10074, "STREAM_REPLICAS_NOT_SUPPORTED", "Replicas > 1 not supported in non-clustered mode"),
    (10075, "PEER_REMAP", "Peer remap failed"),
    (10076, "JETSTREAM_NOT_ENABLED", "Jetstream not enabled"),
    (10077, "STREAM_STORE_FAILED", "Stream store failed"),
    (10078, "CONSUMER_CONFIG_REQUIRED", "Consumer config required"),
    (10079, "CONSUMER_DELIVER_TO_WILDCARDS", "Consumer deliver subject has wildcards"),
    (10080, "CONSUMER_PUSH_MAX_WAITING", "Consumer in push mode can not set max waiting"),
    (10081, "CONSUMER_DELIVER_CYCLE", "Consumer deliver subject forms a cycle"),
    (10082, "CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED", "Consumer requires ack policy for max ack pending"),
    (10083, "CONSUMER_SMALL_HEARTBEAT", "Consumer idle heartbeat needs to be >= 100ms"),
    (10084, "CONSUMER_PULL_REQUIRES_ACK", "Consumer in pull mode requires ack policy"),
    (10085, "CONSUMER_PULL_NOT_DURABLE", "Consumer in pull mode requires a durable name"),
    (10086, "CONSUMER_PULL_WITH_RATE_LIMIT", "Consumer in pull mode can not have rate limit set"),
    (10087, "CONSUMER_MAX_WAITING_NEGATIVE", "Consumer max waiting needs to be positive"),
    (10088, "CONSUMER_HEARTBEAT_REQUIRES_PUSH", "Consumer idle heartbeat requires a push based consumer"),
    (10089, "CONSUMER_FLOW_CONTROL_REQUIRES_PUSH", "Consumer flow control requires a push based consumer"),
    (10090, "CONSUMER_DIRECT_REQUIRES_PUSH", "Consumer direct requires a push based consumer"),
    (10091, "CONSUMER_DIRECT_REQUIRES_EPHEMERAL", "Consumer direct requires an ephemeral consumer"),
    (10092, "CONSUMER_ON_MAPPED", "Consumer direct on a mapped consumer"),
    (10093, "CONSUMER_FILTER_NOT_SUBSET", "Consumer filter subject is not a valid subset of the interest subjects"),
    (10094, "CONSUMER_INVALID_POLICY", "Invalid consumer policy"),
    (10095, "CONSUMER_INVALID_SAMPLING", "Failed to parse consumer sampling configuration"),
    (10096, "STREAM_INVALID", "Stream not valid"),
    (10097, "STREAM_HEADER_EXCEEDS_MAXIMUM", "Header size exceeds maximum allowed of 64k"),
    (10098, "CONSUMER_WQ_REQUIRES_EXPLICIT_ACK", "Workqueue stream requires explicit ack"),
    (10099, "CONSUMER_WQ_MULTIPLE_UNFILTERED", "Multiple non-filtered consumers not allowed on workqueue stream"),
    (10100, "CONSUMER_WQ_CONSUMER_NOT_UNIQUE", "Filtered consumer not unique on workqueue stream"),
    (10101, "CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL", "Consumer must be deliver all on workqueue stream"),
    (10102, "CONSUMER_NAME_TOO_LONG", "Consumer name is too long"),
    (10103, "CONSUMER_BAD_DURABLE_NAME", "Durable name can not contain token separators and wildcards"),
    (10104, "CONSUMER_STORE_FAILED", "Error creating store for consumer"),
    (10105, "CONSUMER_EXISTING_ACTIVE", "Consumer already exists and is still active"),
    (10106, "CONSUMER_REPLACEMENT_WITH_DIFFERENT_NAME", "Consumer replacement durable config not the same"),
    (10107, "CONSUMER_DESCRIPTION_TOO_LONG", "Consumer description is too long"),
    (10108, "CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS", "Consumer with flow control also needs heartbeats"),
    (10109, "STREAM_SEALED", "Invalid operation on sealed stream"),
    (10110, "STREAM_PURGE_FAILED", "Stream purge failed"),
    (10111, "STREAM_ROLLUP_FAILED", "Stream rollup failed"),
    (10112, "CONSUMER_INVALID_DELIVER_SUBJECT", "Invalid push consumer deliver subject"),
    (10113, "STREAM_MAX_BYTES_REQUIRED", "Account requires a stream config to have max bytes set"),
    (10114, "CONSUMER_MAX_REQUEST_BATCH_NEGATIVE", "Consumer max request batch needs to be > 0"),
    (10115, "CONSUMER_MAX_REQUEST_EXPIRES_TO_SMALL", "Consumer max request expires needs to be >= 1ms"),
    (10116, "CONSUMER_MAX_DELIVER_BACKOFF", "Max deliver is required to be > length of backoff values"),
    (10117, "STREAM_INFO_MAX_SUBJECTS", "Subject details would exceed maximum allowed"),
    (10118, "STREAM_OFFLINE", "Stream is offline"),
    (10119, "CONSUMER_OFFLINE", "Consumer is offline"),
    (10120, "NO_LIMITS", "No jetstream default or applicable tiered limit present"),
    (10121, "CONSUMER_MAX_PENDING_ACK_EXCESS", "Consumer max ack pending exceeds system limit"),
    (10122, "STREAM_MAX_STREAM_BYTES_EXCEEDED", "Stream max bytes exceeds account limit max stream bytes"),
    (10123, "STREAM_MOVE_AND_SCALE", "Can not move and scale a stream in a single update"),
    (10124, "STREAM_MOVE_IN_PROGRESS", "Stream move already in progress"),
    (10125, "CONSUMER_MAX_REQUEST_BATCH_EXCEEDED", "Consumer max request batch exceeds server limit"),
    (10126, "CONSUMER_REPLICAS_EXCEEDS_STREAM", "Consumer config replica count exceeds parent stream"),
    (10127, "CONSUMER_NAME_CONTAINS_PATH_SEPARATORS", "Consumer name can not contain path separators"),
    (10128, "STREAM_NAME_CONTAINS_PATH_SEPARATORS", "Stream name can not contain path separators"),
    (10129, "STREAM_MOVE_NOT_IN_PROGRESS", "Stream move not in progress"),
    (10130, "STREAM_NAME_EXIST_RESTORE_FAILED", "Stream name already in use, cannot restore"),
    (10131, "CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH", "Consumer create request did not match filtered subject from create subject"),
    (10132, "CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH", "Consumer durable and name have to be equal if both are provided"),
    (10133, "REPLICAS_COUNT_CANNOT_BE_NEGATIVE", "Replicas count cannot be negative"),
    (10134, "CONSUMER_REPLICAS_SHOULD_MATCH_STREAM", "Consumer config replicas must match interest retention stream's replicas"),
    (10135, "CONSUMER_METADATA_LENGTH", "Consumer metadata exceeds maximum size"),
    (10136, "CONSUMER_DUPLICATE_FILTER_SUBJECTS", "Consumer cannot have both filter_subject and filter_subjects specified"),
    (10137, "CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED", "Consumer with multiple subject filters cannot use subject based api"),
    (10138, "CONSUMER_OVERLAPPING_SUBJECT_FILTERS", "Consumer subject filters cannot overlap"),
    (10139, "CONSUMER_EMPTY_FILTER", "Consumer filter in filter_subjects cannot be empty"),
    (10140, "SOURCE_DUPLICATE_DETECTED", "Duplicate source configuration detected"),
    (10141, "SOURCE_INVALID_STREAM_NAME", "Sourced stream name is invalid"),
    (10142, "MIRROR_INVALID_STREAM_NAME", "Mirrored stream name is invalid"),
    (10143, "MIRROR_WITH_FIRST_SEQ", "Stream mirrors cannot have first sequence configured"),
    (10144, "SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED", "Source with multiple subject transforms cannot also have a single subject filter"),
    (10145, "SOURCE_INVALID_SUBJECT_FILTER", "Source subject filter is invalid"),
    (10146, "SOURCE_INVALID_TRANSFORM_DESTINATION", "Source transform destination is invalid"),
    (10147, "SOURCE_OVERLAPPING_SUBJECT_FILTERS", "Source filters cannot overlap"),
    (10148, "CONSUMER_ALREADY_EXISTS", "Consumer already exists"),
    (10149, "CONSUMER_DOES_NOT_EXIST", "Consumer does not exist"),
    (10150, "MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED", "Mirror with multiple subject transforms cannot also have a single subject filter"),
    (10151, "MIRROR_INVALID_SUBJECT_FILTER", "Mirror subject filter is invalid"),
    (10152, "MIRROR_OVERLAPPING_SUBJECT_FILTERS", "Mirror subject filters cannot overlap"),
    (10153, "CONSUMER_INACTIVE_THRESHOLD_EXCESS", "Consumer inactive threshold exceeds system limit"),
    (10154, "MIRROR_INVALID_TRANSFORM_DESTINATION", "Mirror invalid transform destination"),
    (10155, "STREAM_TRANSFORM_INVALID_SOURCE", "Stream transform invalid source"),
    (10156, "STREAM_TRANSFORM_INVALID_DESTINATION", "Stream transform invalid destination"),
    (10157, "PEDANTIC", "Pedantic error"),
    (10158, "STREAM_DUPLICATE_MESSAGE_CONFLICT", "Stream duplicate message conflict"),
    (10159, "CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP", "Consumer priority policy without group"),
    (10160, "CONSUMER_INVALID_PRIORITY_GROUP", "Consumer invalid priority group"),
    (10161, "CONSUMER_EMPTY_GROUP_NAME", "Consumer empty group name"),
    (10162, "CONSUMER_INVALID_GROUP_NAME", "Consumer invalid group name"),
    (10163, "STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_NOT_READY", "Stream expected last seq per subject not ready"),
    (10164, "STREAM_WRONG_LAST_SEQUENCE_CONSTANT", "Stream wrong last sequence constant"),
    (10165, "MESSAGE_TTL_INVALID", "Message TTL invalid"),
    (10166, "MESSAGE_TTL_DISABLED", "Message TTL disabled"),
    (10167, "STREAM_TOO_MANY_REQUESTS", "Stream too many requests"),
    (10168, "MESSAGE_INCR_DISABLED", "Message increment disabled"),
    (10169, "MESSAGE_INCR_MISSING", "Message increment missing"),
    (10170, "MESSAGE_INCR_PAYLOAD", "Message increment payload error"),
    (10171, "MESSAGE_INCR_INVALID", "Message increment invalid"),
    (10172, "MESSAGE_COUNTER_BROKEN", "Message counter broken"),
    (10173, "MIRROR_WITH_COUNTERS", "Mirror with counters"),
    (10174, "ATOMIC_PUBLISH_DISABLED", "Atomic publish disabled"),
    (10175, "ATOMIC_PUBLISH_MISSING_SEQ", "Atomic publish sequence missing"),
    (10176, "ATOMIC_PUBLISH_INCOMPLETE_BATCH", "Atomic publish batch incomplete"),
    (10177, "ATOMIC_PUBLISH_UNSUPPORTED_HEADER", "Atomic publish unsupported header"),
    (10178, "CONSUMER_PUSH_WITH_PRIORITY_GROUP", "Consumer push with priority group"),
    (10179, "ATOMIC_PUBLISH_INVALID_BATCH_ID", "Atomic publish batch ID invalid"),
    (10180, "STREAM_MIN_LAST_SEQ", "Stream min last sequence error"),
    (10181, "CONSUMER_ACK_POLICY_INVALID", "Consumer ack policy invalid"),
    (10182, "CONSUMER_REPLAY_POLICY_INVALID", "Consumer replay policy invalid"),
    (10183, "CONSUMER_ACK_WAIT_NEGATIVE", "Consumer ack wait negative"),
    (10184, "CONSUMER_BACKOFF_NEGATIVE", "Consumer backoff negative"),
    (10185, "REQUIRED_API_LEVEL", "Required API level"),
    (10186, "MIRROR_WITH_MSG_SCHEDULES", "Mirror with message schedules"),
    (10187, "SOURCE_WITH_MSG_SCHEDULES", "Source with message schedules"),
    (10188, "MESSAGE_SCHEDULES_DISABLED", "Message schedules disabled"),
    (10189, "MESSAGE_SCHEDULES_PATTERN_INVALID", "Message schedules pattern invalid"),
    (10190, "MESSAGE_SCHEDULES_TARGET_INVALID", "Message schedules target invalid"),
    (10191, "MESSAGE_SCHEDULES_TTL_INVALID", "Message schedules TTL invalid"),
    (10192, "MESSAGE_SCHEDULES_ROLLUP_INVALID", "Message schedules rollup invalid"),
    (10193, "STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID", "Stream expected last seq per subject invalid"),
    (10194, "STREAM_OFFLINE_REASON", "Stream offline reason"),
    (10195, "CONSUMER_OFFLINE_REASON", "Consumer offline reason"),
    (10196, "CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE", "Consumer priority group with policy none"),
    (10197, "CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE", "Consumer pinned TTL without priority policy none"),
    (10198, "MIRROR_WITH_ATOMIC_PUBLISH", "Mirror with atomic publish"),
    (10199, "ATOMIC_PUBLISH_TOO_LARGE_BATCH", "Atomic publish batch too large"),
    (10200, "ATOMIC_PUBLISH_INVALID_BATCH_COMMIT", "Atomic publish batch commit invalid"),
    (10201, "ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE", "Atomic publish batch contains duplicate message id"),
    (10202, "CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT", "Cluster member change is in progress"),
    (10203, "MESSAGE_SCHEDULES_SOURCE_INVALID", "Message schedules source is invalid"),
    (10204, "CONSUMER_INVALID_RESET", "Consumer invalid reset"),
    (10205, "BATCH_PUBLISH_DISABLED", "Batch publish is disabled"),
    (10206, "BATCH_PUBLISH_INVALID_PATTERN", "Batch publish pattern is invalid"),
    (10207, "BATCH_PUBLISH_INVALID_BATCH_ID", "Batch publish ID is invalid"),
    (10208, "BATCH_PUBLISH_UNKNOWN_BATCH_ID", "Batch publish ID unknown"),
    (10209, "MIRROR_WITH_BATCH_PUBLISH", "Stream mirrors can not also use batch publishing"),
    (10210, "ATOMIC_PUBLISH_TOO_MANY_INFLIGHT", "Atomic publish too many inflight"),
    (10211, "BATCH_PUBLISH_TOO_MANY_INFLIGHT", "Batch publish too many inflight"),
    (10212, "MESSAGE_SCHEDULES_SCHEDULER_INVALID", "Message schedules invalid scheduler"),
    (10213, "MIRROR_DURABLE_CONSUMER_CFG_INVALID", "Stream mirror consumer config is invalid"),
    (10214, "MIRROR_CONSUMER_REQUIRES_ACK_FC", "Stream mirror consumer requires flow control ack policy"),
    (10215, "SOURCE_DURABLE_CONSUMER_CFG_INVALID", "Stream source consumer config is invalid"),
    (10216, "SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED", "Duplicate stream source consumer detected"),
    (10217, "SOURCE_CONSUMER_REQUIRES_ACK_FC", "Stream source consumer requires flow control ack policy"),
    (10218, "CONSUMER_ACK_FC_REQUIRES_PUSH", "Flow control ack policy requires a push based consumer"),
    (10219, "CONSUMER_ACK_FC_REQUIRES_FC", "Flow control ack policy requires flow control"),
    (10220, "CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING", "Flow control ack policy requires max ack pending"),
    (10221, "CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT", "Flow control ack policy requires unset ack wait"),
    (10222, "CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER", "Flow control ack policy requires unset max deliver"),
    (10223, "MESSAGE_SCHEDULES_TIME_ZONE_INVALID", "Message schedules time zone is invalid"),
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
