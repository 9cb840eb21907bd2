//! The NATS side of the protocol: conditional writes, leader reads and error classification
//! (protocol P3). Everything here is I/O; decisions live in [`crate::core`].

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, ErrorCode, context::PublishErrorKind};
use bytes::Bytes;
use tokio::sync::broadcast;

use crate::core::{FailureKind, KeyState, WriteOutcome};
use crate::value::HolderValue;

/// Header names not exported by async-nats as constants.
const EXPECTED_LAST_SUBJECT_SEQUENCE: &str = "Nats-Expected-Last-Subject-Sequence";
const EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT: &str = "Nats-Expected-Last-Subject-Sequence-Subject";
const MESSAGE_TTL: &str = "Nats-TTL";
const KV_OPERATION: &str = "KV-Operation";
const MARKER_REASON: &str = "Nats-Marker-Reason";

/// Key prefix of role leases.
pub const ROLE_PREFIX: &str = "role.";
/// Key prefix of fenced role data.
pub const DATA_PREFIX: &str = "data.";

/// How expiry of a lease key is enforced by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TtlMode {
    /// Per-key TTL (`Nats-TTL` header; bucket with limit markers).
    PerKey,
    /// The bucket's `max_age` (one TTL for the whole bucket).
    BucketMaxAge,
    /// No server-side expiry: crash fail-over relies on followers' observed-expiry backstop.
    None,
}

/// Server errors seen on the connection (`Event::ServerError`), used to turn a publish that
/// only times out into a fast, typed permission error.
#[derive(Debug, Clone)]
pub struct ServerErrors(broadcast::Sender<String>);

impl Default for ServerErrors {
    fn default() -> Self {
        Self(broadcast::channel(64).0)
    }
}

impl ServerErrors {
    /// Records one server error message.
    pub fn record(&self, message: String) {
        // No receiver simply means nobody is waiting.
        let _ = self.0.send(message);
    }

    fn subscribe(&self) -> broadcast::Receiver<String> {
        self.0.subscribe()
    }

    /// Completes when a permission violation naming `needle` arrives.
    pub(crate) fn permission_denied(&self, needle: &str) -> impl Future<Output = ()> + use<> {
        permission_violation(self.subscribe(), needle.to_string())
    }
}

/// Waits for a permission violation that names `needle`.
async fn permission_violation(mut rx: broadcast::Receiver<String>, needle: String) {
    loop {
        match rx.recv().await {
            Ok(msg) if is_permission_violation(&msg, &needle) => return,
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}

fn is_permission_violation(message: &str, needle: &str) -> bool {
    message
        .to_ascii_lowercase()
        .contains("permissions violation")
        && message.contains(needle)
}

/// Conditional writes and reads of one bucket.
#[derive(Clone)]
pub struct LeaseStore {
    js: jetstream::Context,
    stream: jetstream::stream::Stream,
    bucket: String,
    ttl_mode: TtlMode,
    max_age: Duration,
    errors: ServerErrors,
    /// Negative control: lease writes without the expected-revision header (test-only).
    plain_put: bool,
}

impl std::fmt::Debug for LeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseStore")
            .field("bucket", &self.bucket)
            .field("ttl_mode", &self.ttl_mode)
            .finish_non_exhaustive()
    }
}

impl LeaseStore {
    /// Wraps an opened bucket.
    pub(crate) fn new(
        js: jetstream::Context,
        stream: jetstream::stream::Stream,
        bucket: String,
        ttl_mode: TtlMode,
        max_age: Duration,
        errors: ServerErrors,
    ) -> Self {
        Self {
            js,
            stream,
            bucket,
            ttl_mode,
            max_age,
            errors,
            plain_put: false,
        }
    }

    /// Negative control: send lease writes as plain puts (no expected revision). Test-only.
    #[cfg(feature = "negative-controls")]
    pub(crate) fn set_plain_put(&mut self) {
        self.plain_put = true;
    }

    /// The bucket's `max_age` (zero = none).
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// How the server expires lease keys in this bucket.
    pub fn ttl_mode(&self) -> TtlMode {
        self.ttl_mode
    }

    /// Full subject of a key.
    pub fn subject(&self, key: &str) -> String {
        format!("$KV.{}.{}", self.bucket, key)
    }

    /// Publishes `payload` to `key` only if the key's last revision is `expected` (P3).
    /// `ttl` adds a per-key TTL (whole seconds, rounded up) when the bucket supports it;
    /// `delete` writes a delete marker instead of a value.
    pub async fn cas(
        &self,
        key: &str,
        expected: u64,
        ttl: Option<Duration>,
        payload: Bytes,
        delete: bool,
        timeout: Duration,
    ) -> WriteOutcome {
        let mut headers = HeaderMap::new();
        if !self.plain_put {
            headers.insert(
                EXPECTED_LAST_SUBJECT_SEQUENCE,
                expected.to_string().as_str(),
            );
        }
        if delete {
            headers.insert(KV_OPERATION, "DEL");
        } else if let (Some(ttl), TtlMode::PerKey) = (ttl, self.ttl_mode) {
            headers.insert(MESSAGE_TTL, ttl_header(ttl).as_str());
        }
        self.publish(self.subject(key), headers, payload, timeout)
            .await
    }

    /// Publishes role data to `data_key` only while `fence_key` is still at `fence_revision`
    /// (P7).
    pub async fn fenced_put(
        &self,
        data_key: &str,
        fence_key: &str,
        fence_revision: u64,
        payload: Bytes,
        timeout: Duration,
    ) -> WriteOutcome {
        let mut headers = HeaderMap::new();
        headers.insert(
            EXPECTED_LAST_SUBJECT_SEQUENCE,
            fence_revision.to_string().as_str(),
        );
        headers.insert(
            EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT,
            self.subject(fence_key).as_str(),
        );
        self.publish(self.subject(data_key), headers, payload, timeout)
            .await
    }

    async fn publish(
        &self,
        subject: String,
        headers: HeaderMap,
        payload: Bytes,
        timeout: Duration,
    ) -> WriteOutcome {
        let denied = permission_violation(self.errors.subscribe(), subject.clone());
        let write = async {
            match self
                .js
                .publish_with_headers(subject, headers, payload)
                .await
            {
                Ok(ack) => match ack.await {
                    Ok(ack) => WriteOutcome::Ok {
                        revision: ack.sequence,
                    },
                    Err(err) => classify_publish(&err),
                },
                Err(err) => classify_publish(&err),
            }
        };
        tokio::select! {
            outcome = tokio::time::timeout(timeout, write) => outcome.unwrap_or(WriteOutcome::Unknown),
            () = denied => WriteOutcome::Failed(FailureKind::PermissionDenied),
        }
    }

    /// Reads the last entry of `key` from the stream leader (not a direct get). Used only to
    /// learn revisions (P3) and for `Leadership::validate`.
    ///
    /// # Errors
    /// A classified [`FailureKind`] when the read fails or times out.
    pub async fn read(&self, key: &str, timeout: Duration) -> Result<KeyState, FailureKind> {
        let subject = self.subject(key);
        let denied = permission_violation(self.errors.subscribe(), "STREAM.MSG.GET".to_string());
        let read = self.stream.get_last_raw_message_by_subject(&subject);
        let result = tokio::select! {
            r = tokio::time::timeout(timeout, read) => r,
            () = denied => return Err(FailureKind::PermissionDenied),
        };
        match result {
            Err(_) => Err(FailureKind::Unavailable),
            Ok(Ok(msg)) => Ok(key_state(msg.sequence, &msg.headers, &msg.payload)),
            Ok(Err(err)) => {
                use async_nats::jetstream::stream::LastRawMessageErrorKind as K;
                match err.kind() {
                    K::NoMessageFound => Ok(KeyState::Absent),
                    K::JetStream(e) if e.error_code() == ErrorCode::NO_MESSAGE_FOUND => {
                        Ok(KeyState::Absent)
                    }
                    K::JetStream(e) if e.error_code() == ErrorCode::STREAM_NOT_FOUND => {
                        Err(FailureKind::BucketNotFound)
                    }
                    _ => Err(FailureKind::Unavailable),
                }
            }
        }
    }
}

/// `Nats-TTL` value: whole seconds, rounded up, at least 1.
fn ttl_header(ttl: Duration) -> String {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    secs.max(1).to_string()
}

/// Interprets a stored message of a role key.
pub(crate) fn key_state(sequence: u64, headers: &HeaderMap, payload: &[u8]) -> KeyState {
    if let Some(op) = headers.get(KV_OPERATION) {
        let op = op.as_str();
        if op == "DEL" || op == "PURGE" {
            return KeyState::Vacant {
                revision: sequence,
                expired: false,
            };
        }
    }
    if let Some(reason) = headers.get(MARKER_REASON) {
        let expired = reason.as_str() == "MaxAge";
        return KeyState::Vacant {
            revision: sequence,
            expired,
        };
    }
    KeyState::Held {
        revision: sequence,
        value: HolderValue::parse(payload),
    }
}

/// Maps a publish error to a write outcome (P3).
fn classify_publish(err: &async_nats::jetstream::context::PublishError) -> WriteOutcome {
    match err.kind() {
        PublishErrorKind::WrongLastSequence => WriteOutcome::Conflict,
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe => WriteOutcome::Unknown,
        PublishErrorKind::StreamNotFound => WriteOutcome::Failed(FailureKind::BucketNotFound),
        PublishErrorKind::MaxPayloadExceeded => WriteOutcome::Failed(FailureKind::Rejected),
        _ => match jetstream_code(err) {
            Some(ErrorCode::STREAM_WRONG_LAST_SEQUENCE) => WriteOutcome::Conflict,
            Some(ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT) => WriteOutcome::Retry,
            Some(ErrorCode::STREAM_NOT_FOUND) => WriteOutcome::Failed(FailureKind::BucketNotFound),
            Some(_) => WriteOutcome::Failed(FailureKind::Rejected),
            None => WriteOutcome::Unknown,
        },
    }
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

    #[test]
    fn ttl_header_rounds_up_to_whole_seconds() {
        assert_eq!(ttl_header(Duration::from_secs(3)), "3");
        assert_eq!(ttl_header(Duration::from_millis(1500)), "2");
        assert_eq!(ttl_header(Duration::from_millis(200)), "1");
    }

    #[test]
    fn markers_are_vacancies() {
        let mut h = HeaderMap::new();
        h.insert(KV_OPERATION, "DEL");
        assert_eq!(
            key_state(5, &h, b""),
            KeyState::Vacant {
                revision: 5,
                expired: false
            }
        );
        let mut h = HeaderMap::new();
        h.insert(MARKER_REASON, "MaxAge");
        assert_eq!(
            key_state(6, &h, b""),
            KeyState::Vacant {
                revision: 6,
                expired: true
            }
        );
        let h = HeaderMap::new();
        assert!(matches!(
            key_state(7, &h, b"junk"),
            KeyState::Held {
                revision: 7,
                value: HolderValue::Foreign
            }
        ));
    }

    #[test]
    fn error_codes_are_found_in_messages() {
        let m = "failed to get the bucket: jetstream error: stream not found (code 404, error code 10059)";
        assert_eq!(code_in_message(m), Some(ErrorCode::STREAM_NOT_FOUND));
        assert_eq!(code_in_message("timed out"), None);
    }

    #[test]
    fn permission_messages_are_matched_by_subject() {
        let msg = "Permissions Violation for Publish to \"$KV.roles.role.a\"";
        assert!(is_permission_violation(msg, "$KV.roles.role.a"));
        assert!(!is_permission_violation(msg, "$KV.roles.role.b"));
    }
}
