//! The server's answers (protocol P3): a refused or failed write → [`WriteOutcome`], a failed
//! leader read → [`FailureKind`] (or "the key has no entry"), and the JetStream error code
//! inside an async-nats error.

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::stream::LastRawMessageErrorKind;

use crate::core::{FailureKind, ServerCode, WriteOutcome};

/// Maps a publish error to a write outcome (P3).
pub(crate) fn classify_publish(err: &PublishError) -> WriteOutcome {
    match err.kind() {
        PublishErrorKind::WrongLastSequence => WriteOutcome::Conflict,
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe => WriteOutcome::Unknown,
        PublishErrorKind::StreamNotFound => WriteOutcome::Failed(FailureKind::BucketNotFound),
        PublishErrorKind::MaxPayloadExceeded => WriteOutcome::Failed(FailureKind::PayloadTooLarge),
        _ => match jetstream_code(err) {
            Some(code) => classify_code(code),
            None => WriteOutcome::Unknown,
        },
    }
}

/// Maps a JetStream error code of a refused lease write to a write outcome (P3): conflicts
/// by name, everything else a [`FailureKind::Server`] whose class the code decides.
pub(crate) fn classify_code(code: ErrorCode) -> WriteOutcome {
    match code {
        ErrorCode::STREAM_WRONG_LAST_SEQUENCE => WriteOutcome::Conflict,
        ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT => WriteOutcome::Retry,
        ErrorCode::STREAM_NOT_FOUND => WriteOutcome::Failed(FailureKind::BucketNotFound),
        other => WriteOutcome::Failed(FailureKind::Server(server_code(other))),
    }
}

/// What a failed read of a key's last message from the stream leader means: `None` when the
/// key simply has no entry, otherwise the failure.
pub(crate) fn classify_read(kind: &LastRawMessageErrorKind) -> Option<FailureKind> {
    use LastRawMessageErrorKind as K;
    match kind {
        K::NoMessageFound => None,
        K::JetStream(e) if e.error_code() == ErrorCode::NO_MESSAGE_FOUND => None,
        K::JetStream(e) if e.error_code() == ErrorCode::STREAM_NOT_FOUND => {
            Some(FailureKind::BucketNotFound)
        }
        K::JetStream(e) => Some(FailureKind::Server(server_code(e.error_code()))),
        _ => Some(FailureKind::Unavailable),
    }
}

/// The code as a [`ServerCode`] (codes beyond `u16` cannot be JetStream codes; they map to an
/// unknown, hence transient, code).
fn server_code(code: ErrorCode) -> ServerCode {
    ServerCode(u16::try_from(code.0).unwrap_or(u16::MAX))
}

/// The JetStream API error code inside an error's source chain, if any.
///
/// Some async-nats errors keep the server error in their *kind* rather than as a source, so
/// besides downcasting, the rendered message is searched for `error code NNNNN`.
pub(crate) fn jetstream_code(err: &(dyn std::error::Error + 'static)) -> Option<ErrorCode> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(js) = e.downcast_ref::<async_nats::jetstream::Error>() {
            return Some(js.error_code());
        }
        if let Some(code) = code_in_message(&e.to_string()) {
            return Some(code);
        }
        source = e.source();
    }
    None
}

fn code_in_message(message: &str) -> Option<ErrorCode> {
    let rest = &message[message.find("error code ")? + "error code ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().map(ErrorCode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn js_error(code: u64) -> async_nats::jetstream::Error {
        serde_json::from_str(&format!(
            r#"{{"code":400,"err_code":{code},"description":"refused"}}"#
        ))
        .expect("a JetStream error")
    }

    #[test]
    fn error_codes_are_found_in_messages() {
        let m = "failed to get the bucket: jetstream error: stream not found (code 404, error code 10059)";
        assert_eq!(code_in_message(m), Some(ErrorCode::STREAM_NOT_FOUND));
        assert_eq!(code_in_message("timed out"), None);
        assert_eq!(code_in_message("error code "), None);
        assert_eq!(code_in_message("error code x10059"), None);
        // More digits than a code has: no code (not a wrapped-around one).
        assert_eq!(code_in_message("error code 99999999999999999999999"), None);
    }

    #[test]
    fn server_codes_are_classified_by_what_retrying_can_change() {
        use crate::core::FailureClass;
        assert_eq!(
            classify_code(ErrorCode::STREAM_WRONG_LAST_SEQUENCE),
            WriteOutcome::Conflict
        );
        assert_eq!(
            classify_code(ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT),
            WriteOutcome::Retry
        );
        for (code, class) in [
            (
                ErrorCode::STORAGE_RESOURCES_EXCEEDED,
                FailureClass::Transient,
            ),
            (ErrorCode::STREAM_STORE_FAILED, FailureClass::Transient),
            (ErrorCode::INSUFFICIENT_RESOURCES, FailureClass::Transient),
            (ErrorCode::CLUSTER_NOT_AVAILABLE, FailureClass::Transient),
            (ErrorCode::STREAM_OFFLINE, FailureClass::Transient),
            (ErrorCode(19_999), FailureClass::Transient),
            (
                ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM,
                FailureClass::Persistent,
            ),
        ] {
            let WriteOutcome::Failed(kind) = classify_code(code) else {
                panic!("{code:?} is not a failure");
            };
            assert_eq!(kind.class(), class, "{code:?}");
            assert_eq!(kind.server_code(), Some(ServerCode(code.0 as u16)));
        }
        // A code no JetStream server sends: unknown, hence transient.
        assert_eq!(
            classify_code(ErrorCode(1 << 20)),
            WriteOutcome::Failed(FailureKind::Server(ServerCode(u16::MAX)))
        );
    }

    #[test]
    fn publish_errors_are_classified() {
        for (kind, outcome) in [
            (PublishErrorKind::WrongLastSequence, WriteOutcome::Conflict),
            (PublishErrorKind::TimedOut, WriteOutcome::Unknown),
            (PublishErrorKind::BrokenPipe, WriteOutcome::Unknown),
            (
                PublishErrorKind::StreamNotFound,
                WriteOutcome::Failed(FailureKind::BucketNotFound),
            ),
            (
                PublishErrorKind::MaxPayloadExceeded,
                WriteOutcome::Failed(FailureKind::PayloadTooLarge),
            ),
            (PublishErrorKind::Other, WriteOutcome::Unknown),
        ] {
            assert_eq!(
                classify_publish(&PublishError::new(kind)),
                outcome,
                "{kind:?}"
            );
        }
        // A refusal carrying the server's error is classified by its code.
        let refused = PublishError::with_source(PublishErrorKind::Other, js_error(10071));
        assert_eq!(classify_publish(&refused), WriteOutcome::Conflict);
        let full = PublishError::with_source(PublishErrorKind::Other, js_error(10047));
        assert_eq!(
            classify_publish(&full),
            WriteOutcome::Failed(FailureKind::Server(ServerCode(10047)))
        );
    }

    #[test]
    fn read_failures_are_classified() {
        use LastRawMessageErrorKind as K;
        assert_eq!(classify_read(&K::NoMessageFound), None);
        assert_eq!(classify_read(&K::JetStream(js_error(10037))), None);
        assert_eq!(
            classify_read(&K::JetStream(js_error(10059))),
            Some(FailureKind::BucketNotFound)
        );
        assert_eq!(
            classify_read(&K::JetStream(js_error(10008))),
            Some(FailureKind::Server(ServerCode(10008)))
        );
        assert_eq!(
            classify_read(&K::InvalidSubject),
            Some(FailureKind::Unavailable)
        );
        assert_eq!(classify_read(&K::Other), Some(FailureKind::Unavailable));
    }
}
