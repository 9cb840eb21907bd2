//! The one place where what the bucket holds becomes the crate's own types, and back: the
//! bytes of every record kind, the entries a watcher or a read delivers (value, delete, purge
//! or expiry marker, docs/protocol.md P5, Q1–Q10) and the server's answers to writes and reads.
//!
//! Everything here is pure: bytes, headers, operation, revision in, a typed value out — never
//! an error for content another client wrote (foreign, garbage, another version: a variant
//! says so). The I/O around it (`store.rs`, the watcher, placement, the inspector, the move
//! requester) only fetches entries and acts on what this module makes of them.
//!
//! | file | owns |
//! |---|---|
//! | `entry.rs` | what an entry is before its value is looked at ([`EntryKind`]): a value, or a delete/purge/expiry marker — from async-nats's `Operation` (watched entries, `kv::Store::entry`) or from the headers of a message read from the stream leader |
//! | `role.rs` | `role.<name>`: bytes ⇄ [`LeaseValue`](crate::value::LeaseValue) / [`HolderValue`](crate::value::HolderValue) (P2, Q2, Q10), entries → [`KeyState`](crate::core::KeyState) |
//! | `session.rs` | `session.<instance>.<ttl_ms>`: bytes ⇄ [`SessionValue`](crate::value::SessionValue), entries → [`SessionKeyState`](crate::core::SessionKeyState) |
//! | `member.rs` | `member.<instance>`: bytes ⇄ [`MemberRecord`](crate::placement::MemberRecord) (P10, Q9), entries → [`member::MemberEntry`] |
//! | `presence.rs` | `member.<instance>` as presence reads it (Q8): entries → [`presence::PresenceEntry`] (the sessions a record lists, or its end) |
//! | `control.rs` | `control.freeze`, `control.drain.<instance>`, `control.move.<role>`: bytes ⇄ the freeze, drain and move records, entries → [`control::Control`] |
//! | `outcome.rs` | the server's answer to a write or a leader read → [`WriteOutcome`](crate::core::WriteOutcome) / [`FailureKind`](crate::core::FailureKind) (P3) |
//!
//! The record types themselves stay with what they mean (`value.rs`, `placement/`, `moves/`);
//! their `parse` and `to_bytes` are defined here.

pub(crate) mod control;
mod entry;
pub(crate) mod member;
pub(crate) mod outcome;
pub(crate) mod presence;
pub(crate) mod role;
pub(crate) mod session;

pub(crate) use entry::EntryKind;
pub(crate) use outcome::jetstream_code;

/// Header names the protocol reads and writes that async-nats does not export.
pub(crate) mod headers {
    /// `Nats-Expected-Last-Subject-Sequence`: the revision a conditional write expects (P3).
    pub(crate) const EXPECTED_LAST_SUBJECT_SEQUENCE: &str = "Nats-Expected-Last-Subject-Sequence";
    /// `Nats-Expected-Last-Subject-Sequence-Subject`: the key a fenced write's expectation is
    /// on (P7).
    pub(crate) const EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT: &str =
        "Nats-Expected-Last-Subject-Sequence-Subject";
    /// `Nats-TTL`: a per-key TTL in whole seconds.
    pub(crate) const MESSAGE_TTL: &str = "Nats-TTL";
    /// `KV-Operation`: `DEL` or `PURGE` on a marker a client wrote.
    pub(crate) const KV_OPERATION: &str = "KV-Operation";
    /// `Nats-Marker-Reason`: on a marker the server wrote (`MaxAge`: an expiry).
    pub(crate) const MARKER_REASON: &str = "Nats-Marker-Reason";
    /// `Nats-Rollup`: the KV purge convention.
    pub(crate) const ROLLUP: &str = "Nats-Rollup";
}

/// A watched entry for tests: `key` at `revision`, `operation`, `value`.
#[cfg(test)]
pub(crate) fn test_entry(
    key: &str,
    revision: u64,
    operation: async_nats::jetstream::kv::Operation,
    value: &[u8],
) -> async_nats::jetstream::kv::Entry {
    async_nats::jetstream::kv::Entry {
        bucket: "roles".into(),
        key: key.into(),
        value: bytes::Bytes::copy_from_slice(value),
        revision,
        delta: 0,
        created: time::OffsetDateTime::UNIX_EPOCH,
        operation,
        seen_current: true,
    }
}
