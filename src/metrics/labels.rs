//! The label values of the election metrics: every `error_type` of the failure counter (so
//! that each gets a zero series) and the `status` of a write outcome.

use crate::core::{FailureKind, WriteKind, WriteOutcome};

/// Every `error_type` of `failures_total`: `timeout` (an unknown outcome), each
/// [`FailureKind`], and `role_failed` (a failure was reported for the role).
pub(crate) const ERROR_TYPES: [&str; 8] = [
    "timeout",
    kind_label(FailureKind::PermissionDenied),
    kind_label(FailureKind::BucketNotFound),
    kind_label(FailureKind::Unavailable),
    kind_label(FailureKind::PayloadTooLarge),
    kind_label(FailureKind::Server(crate::core::ServerCode(0))),
    kind_label(FailureKind::GaveUp),
    "role_failed",
];

/// [`FailureKind::as_str`], matched exhaustively so that a new kind cannot miss its zero series.
pub(super) const fn kind_label(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::PermissionDenied => "permission_denied",
        FailureKind::BucketNotFound => "bucket_not_found",
        FailureKind::Unavailable => "unavailable",
        FailureKind::PayloadTooLarge => "payload_too_large",
        FailureKind::Server(_) => "server_error",
        FailureKind::GaveUp => "gave_up",
    }
}

/// A label value for a write outcome.
pub(super) fn outcome_status(kind: WriteKind, outcome: WriteOutcome) -> &'static str {
    match (kind, outcome) {
        (WriteKind::Acquire, WriteOutcome::Ok { .. }) => "won",
        (WriteKind::Acquire, WriteOutcome::Conflict) => "lost",
        (_, WriteOutcome::Ok { .. }) => "ok",
        (_, WriteOutcome::Conflict) => "conflict",
        (_, WriteOutcome::Retry) => "retry",
        (_, WriteOutcome::Unknown) => "unknown",
        (_, WriteOutcome::Failed(_)) => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_type_labels_are_the_kinds_names() {
        for kind in [
            FailureKind::PermissionDenied,
            FailureKind::BucketNotFound,
            FailureKind::Unavailable,
            FailureKind::PayloadTooLarge,
            FailureKind::Server(crate::core::ServerCode(10077)),
            FailureKind::GaveUp,
        ] {
            assert_eq!(kind_label(kind), kind.as_str());
            assert!(ERROR_TYPES.contains(&kind.as_str()));
        }
    }
}
