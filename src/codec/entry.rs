//! [`EntryKind`]: what one entry of a key is before its value is looked at — a value, or a
//! delete, purge or expiry marker (protocol P5, Q5 rules 1–3).

use async_nats::HeaderMap;
use async_nats::jetstream::kv::Operation;

use super::headers::{KV_OPERATION, MARKER_REASON};

/// What one entry of a key is, before its value is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// A value (a put).
    Value,
    /// A delete, purge or expiry marker. `expired`: read as an expiry (the writer is gone:
    /// `DemoteReason::Expired`, a crash vacancy) rather than an eviction (a delete).
    Marker {
        /// Whether the marker reads as an expiry.
        expired: bool,
    },
}

impl EntryKind {
    /// The kind of an entry async-nats delivered: a watcher's, or `kv::Store::entry`'s. It
    /// reads the headers itself: `Purge` is `KV-Operation: PURGE` and the server's `MaxAge` and
    /// `Purge` markers, all read as an expiry (P5); `Delete` is `KV-Operation: DEL` and the
    /// server's `Remove` marker; anything else, unknown header values included, is `Put`.
    pub(crate) fn watched(operation: Operation) -> Self {
        match operation {
            Operation::Put => Self::Value,
            Operation::Delete => Self::Marker { expired: false },
            Operation::Purge => Self::Marker { expired: true },
        }
    }

    /// The kind of a message read from the stream leader with its headers (`LeaseStore::read`,
    /// `LeaseStore::read_session`). A `KV-Operation` of `DEL` or `PURGE` is a marker that is no
    /// expiry; otherwise any `Nats-Marker-Reason` is a marker, an expiry only when it is
    /// `MaxAge`; otherwise a value.
    ///
    /// This is not [`EntryKind::watched`]'s reading: a `PURGE` (a reap, Q5 rule 4, or an
    /// operator's purge) and the server's `Purge` marker are expiries there and not here, and
    /// a marker reason async-nats does not know is a value there and a marker here. Both
    /// readings are kept as they were when this module was made (see the tests).
    pub(crate) fn stored(headers: &HeaderMap) -> Self {
        if let Some(op) = headers.get(KV_OPERATION) {
            let op = op.as_str();
            if op == "DEL" || op == "PURGE" {
                return Self::Marker { expired: false };
            }
        }
        if let Some(reason) = headers.get(MARKER_REASON) {
            return Self::Marker {
                expired: reason.as_str() == "MaxAge",
            };
        }
        Self::Value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, *value);
        }
        h
    }

    #[test]
    fn watched_operations_are_values_deletes_and_expiries() {
        assert_eq!(EntryKind::watched(Operation::Put), EntryKind::Value);
        assert_eq!(
            EntryKind::watched(Operation::Delete),
            EntryKind::Marker { expired: false }
        );
        // async-nats reports expiry markers and purges both as `Purge` (P5).
        assert_eq!(
            EntryKind::watched(Operation::Purge),
            EntryKind::Marker { expired: true }
        );
    }

    #[test]
    fn stored_headers_are_read_as_before() {
        let value = EntryKind::Value;
        let evicted = EntryKind::Marker { expired: false };
        let expired = EntryKind::Marker { expired: true };
        for (h, kind) in [
            (&[][..], value),
            (&[(KV_OPERATION, "DEL")][..], evicted),
            // A reap's or an operator's purge: no expiry on a read (the watcher says expiry).
            (&[(KV_OPERATION, "PURGE")][..], evicted),
            (&[(MARKER_REASON, "MaxAge")][..], expired),
            (&[(MARKER_REASON, "Purge")][..], evicted),
            (&[(MARKER_REASON, "Remove")][..], evicted),
            // A reason nobody defined is still a marker on a read (a value for async-nats).
            (&[(MARKER_REASON, "whatever")][..], evicted),
            (&[(MARKER_REASON, "")][..], evicted),
            // An operation that is no marker leaves the marker reason to decide.
            (&[(KV_OPERATION, "PUT")][..], value),
            (&[(KV_OPERATION, "del")][..], value),
            (
                &[(KV_OPERATION, "PUT"), (MARKER_REASON, "MaxAge")][..],
                expired,
            ),
            (
                &[(KV_OPERATION, "DEL"), (MARKER_REASON, "MaxAge")][..],
                evicted,
            ),
            (&[("Nats-TTL", "3")][..], value),
        ] {
            assert_eq!(EntryKind::stored(&headers(h)), kind, "{h:?}");
        }
    }
}
