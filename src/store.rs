//! The NATS side of the protocol: conditional writes and leader reads (protocol P3).
//! Everything here is I/O: what an entry read or a server's answer means is decided by
//! [`crate::codec`], what to do about it by [`crate::core`].

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, ErrorCode};
use bytes::Bytes;
use tokio::sync::broadcast;

use crate::codec::headers::{
    EXPECTED_LAST_SUBJECT_SEQUENCE, EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT, KV_OPERATION,
    MESSAGE_TTL, ROLLUP,
};
use crate::codec::outcome::{classify_publish, classify_read};
use crate::codec::{self, jetstream_code};
use crate::core::{FailureKind, KeyState, ServerCode, SessionKeyState, WriteOutcome};

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

    /// Completes with what was denied when a permission violation arrives that makes a
    /// start-up step impossible however often it is retried: publishing to exactly one of
    /// `subjects` (the bucket's JetStream API), or subscribing to the reply inbox (a subject
    /// starting with `_INBOX`, the default prefix and its usual custom variants; without it no
    /// request is ever answered). Listens from this call on.
    pub(crate) fn start_denied(
        &self,
        subjects: Vec<String>,
    ) -> impl Future<Output = String> + use<> {
        let mut rx = self.subscribe();
        async move {
            loop {
                match rx.recv().await {
                    Ok(msg) => {
                        if let Some(s) =
                            denied_subject(&msg).filter(|s| subjects.iter().any(|x| x == s))
                        {
                            return format!("publish to {s:?}");
                        }
                        if let Some(s) =
                            denied_subscription(&msg).filter(|s| s.starts_with("_INBOX."))
                        {
                            return format!("subscribe to {s:?}, where replies to requests arrive");
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                }
            }
        }
    }
}

/// Waits for a permission violation for publishing to exactly one of `subjects`.
async fn permission_violation(mut rx: broadcast::Receiver<String>, subjects: Vec<String>) {
    loop {
        match rx.recv().await {
            Ok(msg) if denied_subject(&msg).is_some_and(|s| subjects.iter().any(|x| x == s)) => {
                return;
            }
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}

/// The subject of a publish permission violation (`Permissions Violation for Publish to
/// "SUBJECT"`, as nats-server words it; async-nats prefixes `nats: `), if `message` is one.
/// Only the exact subject counts: a violation on `role.shard-10` says nothing about
/// `role.shard-1`, and one on another stream's API subject nothing about ours.
pub(crate) fn denied_subject(message: &str) -> Option<&str> {
    violation(message, "permissions violation for publish to ")
}

/// The subject of a subscription permission violation (`Permissions Violation for
/// Subscription to "SUBJECT"`), if `message` is one.
pub(crate) fn denied_subscription(message: &str) -> Option<&str> {
    violation(message, "permissions violation for subscription to ")
}

/// The quoted subject after `prefix` (lower case) in `message`, if any.
fn violation<'m>(message: &'m str, prefix: &str) -> Option<&'m str> {
    let lower = message.to_ascii_lowercase();
    let at = lower.find(prefix)? + prefix.len();
    // ASCII lowercasing keeps byte offsets.
    let rest = message.get(at..)?.trim_start();
    let quoted = rest.strip_prefix('"')?;
    let end = quoted.find('"')?;
    Some(&quoted[..end])
}

/// Conditional writes and reads of one bucket.
#[derive(Clone)]
pub struct LeaseStore {
    js: jetstream::Context,
    /// The JetStream API prefix (`$JS.API`, `$JS.<domain>.API`, or an account's).
    api: String,
    /// Shared: a `LeaseStore` is cloned for every write, and the stream handle holds the
    /// stream's whole info.
    stream: std::sync::Arc<jetstream::stream::Stream>,
    bucket: String,
    ttl_mode: TtlMode,
    max_age: Duration,
    errors: ServerErrors,
    /// The server's own description of each error code seen (bounded), for status texts.
    descriptions: ServerDescriptions,
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
        api: &str,
        stream: jetstream::stream::Stream,
        bucket: String,
        ttl_mode: TtlMode,
        max_age: Duration,
        errors: ServerErrors,
    ) -> Self {
        Self {
            js,
            api: api.to_owned(),
            stream: std::sync::Arc::new(stream),
            bucket,
            ttl_mode,
            max_age,
            errors,
            descriptions: ServerDescriptions::default(),
        }
    }

    /// `kind` in words, with the server's own description of its code when the server gave
    /// one (`server_error 10077 (maximum bytes exceeded)`).
    #[must_use]
    pub fn describe(&self, kind: FailureKind) -> String {
        match kind.server_code() {
            Some(code) => format!(
                "{} {} ({})",
                kind.as_str(),
                code.0,
                self.descriptions
                    .get(code)
                    .unwrap_or_else(|| code.description().to_owned())
            ),
            None => kind.to_string(),
        }
    }

    /// Remembers the server's description of a refusal's code; returns `outcome`.
    fn classified(
        &self,
        err: &(dyn std::error::Error + 'static),
        outcome: WriteOutcome,
    ) -> WriteOutcome {
        if let WriteOutcome::Failed(FailureKind::Server(code)) = outcome {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
            while let Some(e) = source {
                if let Some(js) = e.downcast_ref::<async_nats::jetstream::Error>() {
                    self.descriptions.remember(code, js);
                    break;
                }
                source = e.source();
            }
        }
        outcome
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

    /// Full subject of a key (in the stream).
    pub fn subject(&self, key: &str) -> String {
        format!("$KV.{}.{}", self.bucket, key)
    }

    /// The subject writes of a key are published to: the key's subject, behind the API prefix
    /// when the bucket is in another JetStream domain or account (the server strips the
    /// prefix where the domain or account is crossed; ADR-19/20, as every NATS client does).
    fn write_subject(&self, key: &str) -> String {
        if self.api == "$JS.API" {
            self.subject(key)
        } else {
            format!("{}.{}", self.api, self.subject(key))
        }
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
        self.lease_write(key, Some(expected), ttl, payload, delete, timeout)
            .await
    }

    /// A lease write: [`LeaseStore::cas`] when `expected` is given, otherwise a plain put
    /// whatever the key's last revision (which the election never sends, P3; the test-only
    /// negative control `plain-put` does).
    pub(crate) async fn lease_write(
        &self,
        key: &str,
        expected: Option<u64>,
        ttl: Option<Duration>,
        payload: Bytes,
        delete: bool,
        timeout: Duration,
    ) -> WriteOutcome {
        let mut headers = HeaderMap::new();
        if let Some(expected) = expected {
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
        self.publish(self.write_subject(key), headers, payload, timeout)
            .await
    }

    /// Reaps session key `key` (protocol Q5 rule 4): a purge marker stored only if the key is
    /// still at `expected` (0: the key has no entry at all). The marker makes every role value
    /// naming a session of the key vacant (rule 2) and reads as an expiry for the key's owner.
    pub async fn reap(&self, key: &str, expected: u64, timeout: Duration) -> WriteOutcome {
        let mut headers = HeaderMap::new();
        headers.insert(
            EXPECTED_LAST_SUBJECT_SEQUENCE,
            expected.to_string().as_str(),
        );
        headers.insert(KV_OPERATION, "PURGE");
        // The KV purge convention (history 1 keeps one entry anyway).
        headers.insert(ROLLUP, "sub");
        self.publish(self.write_subject(key), headers, Bytes::new(), timeout)
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
        self.publish(self.write_subject(data_key), headers, payload, timeout)
            .await
    }

    async fn publish(
        &self,
        subject: String,
        headers: HeaderMap,
        payload: Bytes,
        timeout: Duration,
    ) -> WriteOutcome {
        let denied = permission_violation(self.errors.subscribe(), vec![subject.clone()]);
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
                    Err(err) => self.classified(&err, classify_publish(&err)),
                },
                Err(err) => self.classified(&err, classify_publish(&err)),
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
        Ok(match self.read_raw(key, timeout).await? {
            None => KeyState::Absent,
            Some((sequence, headers, payload)) => codec::role::stored(sequence, &headers, &payload),
        })
    }

    /// The bucket's current epoch (P1): the creation time of its stream in nanoseconds since
    /// the Unix epoch, asked of the server now (the info cached when the bucket was opened
    /// never shows a recreated bucket).
    ///
    /// # Errors
    /// [`FailureKind::BucketNotFound`] when the stream is gone,
    /// [`FailureKind::PermissionDenied`] when the server refuses the stream-info request to
    /// this user, [`FailureKind::Unavailable`] when the request fails otherwise or times out.
    pub(crate) async fn epoch(&self, timeout: Duration) -> Result<u64, FailureKind> {
        let name = format!("KV_{}", self.bucket);
        let api = format!("{}.STREAM.INFO.{name}", self.api);
        let denied = permission_violation(self.errors.subscribe(), vec![api]);
        let info = tokio::time::timeout(timeout, self.js.get_stream(name));
        let answer = tokio::select! {
            a = info => a,
            () = denied => return Err(FailureKind::PermissionDenied),
        };
        match answer {
            Err(_) => Err(FailureKind::Unavailable),
            Ok(Ok(stream)) => {
                let created = stream.cached_info().created.unix_timestamp_nanos();
                Ok(u64::try_from(created).unwrap_or(0))
            }
            Ok(Err(err)) if jetstream_code(&err) == Some(ErrorCode::STREAM_NOT_FOUND) => {
                Err(FailureKind::BucketNotFound)
            }
            Ok(Err(_)) => Err(FailureKind::Unavailable),
        }
    }

    /// Reads the last entry of session key `key` from the stream leader (protocol Q5 rule 3,
    /// the session backstop, and the session's own re-reads).
    ///
    /// # Errors
    /// A classified [`FailureKind`] when the read fails or times out.
    pub async fn read_session(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<SessionKeyState, FailureKind> {
        Ok(match self.read_raw(key, timeout).await? {
            None => SessionKeyState::Absent,
            Some((sequence, headers, payload)) => {
                codec::session::stored(key, sequence, &headers, &payload)
            }
        })
    }

    /// Whether `key` holds a value (not a marker, not nothing), read from the stream leader
    /// (a direct get may answer from a lagging replica).
    ///
    /// # Errors
    /// A classified [`FailureKind`] when the read fails or times out.
    pub(crate) async fn holds_value(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<bool, FailureKind> {
        Ok(self
            .read_raw(key, timeout)
            .await?
            .is_some_and(|(_, headers, _)| {
                matches!(codec::EntryKind::stored(&headers), codec::EntryKind::Value)
            }))
    }

    /// The last entry of `key` from the stream leader: its sequence, headers and payload, or
    /// `None` when the key has no entry.
    pub(crate) async fn read_raw(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<Option<(u64, HeaderMap, Bytes)>, FailureKind> {
        let subject = self.subject(key);
        // Reads go to the stream leader through exactly this API subject.
        let api = format!("{}.STREAM.MSG.GET.KV_{}", self.api, self.bucket);
        let denied = permission_violation(self.errors.subscribe(), vec![api]);
        let read = self.stream.get_last_raw_message_by_subject(&subject);
        let result = tokio::select! {
            r = tokio::time::timeout(timeout, read) => r,
            () = denied => return Err(FailureKind::PermissionDenied),
        };
        match result {
            Err(_) => Err(FailureKind::Unavailable),
            Ok(Ok(msg)) => Ok(Some((msg.sequence, msg.headers, msg.payload))),
            Ok(Err(err)) => {
                use async_nats::jetstream::stream::LastRawMessageErrorKind as K;
                let kind = err.kind();
                match classify_read(&kind) {
                    None => Ok(None),
                    Some(failure) => {
                        if let (FailureKind::Server(code), K::JetStream(e)) = (failure, &kind) {
                            self.descriptions.remember(code, e);
                        }
                        Err(failure)
                    }
                }
            }
        }
    }
}

/// The server's descriptions of the error codes seen, as it words them (which can be more
/// precise than the generic text of the code: 10077 is "maximum bytes exceeded"). Bounded:
/// at most [`ServerDescriptions::MAX`] codes, each description cut at 200 characters.
#[derive(Debug, Clone, Default)]
struct ServerDescriptions(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<u16, String>>>);

impl ServerDescriptions {
    const MAX: usize = 64;

    fn remember(&self, code: ServerCode, err: &async_nats::jetstream::Error) {
        let text = err.to_string();
        // Display is "<description> (code N, error code M)".
        let description = text
            .rsplit_once(" (code ")
            .map_or(text.as_str(), |(d, _)| d);
        let description: String = description.chars().take(200).collect();
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() < Self::MAX || map.contains_key(&code.0) {
            map.insert(code.0, description);
        }
    }

    fn get(&self, code: ServerCode) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&code.0)
            .cloned()
    }
}

/// `Nats-TTL` value: whole seconds, rounded up, at least 1.
fn ttl_header(ttl: Duration) -> String {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    secs.max(1).to_string()
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
    fn permission_messages_are_matched_by_exact_subject() {
        let msg = "nats: Permissions Violation for Publish to \"$KV.roles.role.shard-10\"";
        assert_eq!(denied_subject(msg), Some("$KV.roles.role.shard-10"));
        // A prefix of the denied subject is another subject.
        assert_ne!(denied_subject(msg), Some("$KV.roles.role.shard-1"));
        // Another stream's read API is not ours.
        let other = "nats: Permissions Violation for Publish to \"$JS.API.STREAM.MSG.GET.orders\"";
        assert_eq!(denied_subject(other), Some("$JS.API.STREAM.MSG.GET.orders"));
        assert_ne!(
            denied_subject(other),
            Some("$JS.API.STREAM.MSG.GET.KV_roles")
        );
        // Subscriptions and other server errors are no publish violations.
        assert_eq!(
            denied_subject("nats: Permissions Violation for Subscription to \"x\""),
            None
        );
        assert_eq!(denied_subject("nats: maximum payload exceeded"), None);
        assert_eq!(
            denied_subject("Permissions Violation for Publish to "),
            None
        );
        assert_eq!(
            denied_subject("Permissions Violation for Publish to \"unterminated"),
            None
        );
    }

    #[tokio::test]
    async fn a_violation_on_a_longer_subject_does_not_deny_a_prefix() {
        let errors = ServerErrors::default();
        let denied = permission_violation(
            errors.subscribe(),
            vec!["$KV.roles.role.shard-1".to_string()],
        );
        tokio::pin!(denied);
        errors.record(
            "nats: Permissions Violation for Publish to \"$KV.roles.role.shard-10\"".into(),
        );
        let early = tokio::time::timeout(Duration::from_millis(50), &mut denied).await;
        assert!(early.is_err(), "shard-10's violation denied shard-1");
        errors
            .record("nats: Permissions Violation for Publish to \"$KV.roles.role.shard-1\"".into());
        tokio::time::timeout(Duration::from_secs(1), denied)
            .await
            .unwrap_or_else(|_| panic!("shard-1's own violation was not matched"));
    }

    #[tokio::test]
    async fn a_start_is_denied_by_its_api_subjects_and_the_reply_inbox_only() {
        let errors = ServerErrors::default();
        let denied = errors.start_denied(vec!["$JS.API.STREAM.INFO.KV_roles".to_string()]);
        tokio::pin!(denied);
        for other in [
            "nats: Permissions Violation for Publish to \"$JS.API.STREAM.INFO.KV_roles2\"",
            "nats: Permissions Violation for Subscription to \"orders.>\"",
            "nats: maximum payload exceeded",
        ] {
            errors.record(other.into());
        }
        let early = tokio::time::timeout(Duration::from_millis(50), &mut denied).await;
        assert!(
            early.is_err(),
            "another subject denied the start: {early:?}"
        );
        errors.record("nats: Permissions Violation for Subscription to \"_INBOX.abc.*\"".into());
        let what = tokio::time::timeout(Duration::from_secs(1), &mut denied)
            .await
            .expect("the inbox subscription denies the start");
        assert_eq!(
            what,
            "subscribe to \"_INBOX.abc.*\", where replies to requests arrive"
        );
        let errors = ServerErrors::default();
        let denied = errors.start_denied(vec!["$JS.API.STREAM.INFO.KV_roles".to_string()]);
        errors.record(
            "nats: Permissions Violation for Publish to \"$JS.API.STREAM.INFO.KV_roles\"".into(),
        );
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(1), denied)
                .await
                .expect("the API subject denies the start"),
            "publish to \"$JS.API.STREAM.INFO.KV_roles\""
        );
    }
}
