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
    /// `LeaseStore::read_session`), read as [`EntryKind::watched`] reads the same entry: a
    /// `KV-Operation` of `DEL` is a delete, of `PURGE` (a reap, Q5 rule 4, or an operator's
    /// purge) an expiry (P5); otherwise a `Nats-Marker-Reason` of `MaxAge` or `Purge` is an
    /// expiry, `Remove` a delete; otherwise a value.
    ///
    /// One difference is kept: a marker reason nobody defined is a marker here (a delete: the
    /// key's value is gone) and a value to async-nats's watcher (which falls back to a put and
    /// then finds no lease in it: foreign, bounded by the backstop). Before, a purge read here
    /// was a delete, so a reaped session's owner lost it as *evicted* (its roles cooling down
    /// for a TTL) or as *expired* depending on whether it heard of it by a read or from the
    /// watcher.
    pub(crate) fn stored(headers: &HeaderMap) -> Self {
        if let Some(op) = headers.get(KV_OPERATION) {
            match op.as_str() {
                "DEL" => return Self::Marker { expired: false },
                "PURGE" => return Self::Marker { expired: true },
                _ => {}
            }
        }
        if let Some(reason) = headers.get(MARKER_REASON) {
            return Self::Marker {
                expired: matches!(reason.as_str(), "MaxAge" | "Purge"),
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
    fn stored_headers_are_read_as_the_watcher_reads_them() {
        let value = EntryKind::Value;
        let evicted = EntryKind::Marker { expired: false };
        let expired = EntryKind::Marker { expired: true };
        for (h, kind) in [
            (&[][..], value),
            (&[(KV_OPERATION, "DEL")][..], evicted),
            // A reap's or an operator's purge: an expiry, as the watcher reads it.
            (&[(KV_OPERATION, "PURGE")][..], expired),
            (&[(MARKER_REASON, "MaxAge")][..], expired),
            (&[(MARKER_REASON, "Purge")][..], expired),
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
