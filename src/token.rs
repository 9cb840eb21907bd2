//! Fencing tokens (protocol P6).

use std::cmp::Ordering;
use std::fmt;

use uuid::Uuid;

/// The fencing token of one term of one role.
///
/// Tokens are ordered by `(epoch, term)`: a resource that remembers the highest token it has
/// accepted can reject writes from every older term. The token is a secret-ish value: its
/// [`Debug`](fmt::Debug) and [`Display`](fmt::Display) forms are redacted; use
/// [`FencingToken::expose`] to hand it to a fenced resource.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FencingToken {
    epoch: u64,
    term: u64,
    nonce: Uuid,
}

impl FencingToken {
    /// Builds a token; `epoch` is the bucket epoch, `term` the revision of the write that
    /// started the term, `nonce` the term's random id.
    #[must_use]
    pub fn new(epoch: u64, term: u64, nonce: Uuid) -> Self {
        Self { epoch, term, nonce }
    }

    /// The bucket epoch (creation time of the bucket's stream, ns since the Unix epoch).
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The term number: the KV revision of the write that started the term.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The term's random id (the `nonce` field of the lease value).
    #[must_use]
    pub fn nonce(&self) -> Uuid {
        self.nonce
    }

    /// The full token as a string `<epoch>.<term>.<nonce>`, for handing to a fenced resource.
    /// Do not log it.
    #[must_use]
    pub fn expose(&self) -> String {
        format!("{}.{}.{}", self.epoch, self.term, self.nonce.simple())
    }
}

impl PartialOrd for FencingToken {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for FencingToken {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.epoch, self.term, self.nonce).cmp(&(other.epoch, other.term, other.nonce))
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken(term={}, <redacted>)", self.term)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "term {} (token redacted)", self.term)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_by_epoch_then_term() {
        let n = Uuid::new_v4();
        assert!(FencingToken::new(1, 10, n) < FencingToken::new(1, 11, n));
        assert!(FencingToken::new(1, 99, n) < FencingToken::new(2, 1, n));
    }

    #[test]
    fn debug_and_display_are_redacted() {
        let n = Uuid::new_v4();
        let t = FencingToken::new(5, 42, n);
        let shown = format!("{t:?} {t}");
        assert!(!shown.contains(&n.simple().to_string()));
        assert!(!shown.contains(&n.to_string()));
        assert!(t.expose().contains(&n.simple().to_string()));
    }
}
