//! Permission violations on a connection of its own (what [`Inspector::connect`] opens).
//!
//! The server answers a denied publish or subscription with nothing but an asynchronous
//! `-ERR 'Permissions Violation for Publish to "SUBJECT"'`; the request itself only times out.
//! A tool that owns its connection knows that every violation on it is its own, so the first
//! one fails whatever is pending at once, naming the subject.
//!
//! [`Inspector::connect`]: super::Inspector::connect

use tokio::sync::watch;

/// A permission the NATS server refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Violation {
    /// `publish` or `subscribe`.
    pub operation: &'static str,
    /// The subject named by the server.
    pub subject: String,
}

impl Violation {
    /// Reads a server error message (`Permissions Violation for Publish to "SUBJECT"`, with
    /// or without a `nats:` prefix); `None` for any other message.
    #[must_use]
    pub fn parse(message: &str) -> Option<Self> {
        let lower = message.to_ascii_lowercase();
        let at = lower.find("permissions violation for ")?;
        let rest = &message[at + "permissions violation for ".len()..];
        let operation = if rest.to_ascii_lowercase().starts_with("subscription") {
            "subscribe"
        } else {
            "publish"
        };
        let rest = rest.split_once(" to ").map_or(rest, |(_, s)| s);
        let subject = match rest.split_once('"') {
            Some((_, quoted)) => quoted.split_once('"').map_or(quoted, |(s, _)| s),
            None => rest.split_whitespace().next().unwrap_or_default(),
        };
        Some(Self {
            operation,
            subject: subject.trim_end_matches('\'').to_owned(),
        })
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.subject, self.operation)
    }
}

/// The first permission violation seen on one connection.
#[derive(Debug, Clone)]
pub(crate) struct Denials(watch::Sender<Option<Violation>>);

impl Default for Denials {
    fn default() -> Self {
        Self(watch::channel(None).0)
    }
}

impl Denials {
    /// Records a server error message if it is a permission violation (the first one stays).
    pub(crate) fn note(&self, message: &str) {
        if let Some(v) = Violation::parse(message) {
            self.0.send_if_modified(|first| {
                if first.is_none() {
                    *first = Some(v);
                    true
                } else {
                    false
                }
            });
        }
    }

    /// The first violation, if any.
    pub(crate) fn first(&self) -> Option<Violation> {
        self.0.borrow().clone()
    }

    /// Completes with the first violation (at once if there was one already).
    pub(crate) fn denied(&self) -> impl Future<Output = Violation> + Send + 'static {
        let mut rx = self.0.subscribe();
        async move {
            let first = rx.wait_for(Option::is_some).await.map(|v| v.clone());
            match first {
                Ok(v) => v.unwrap_or_else(unreachable_violation),
                // The sender lives as long as the inspector: never here in practice.
                Err(_) => std::future::pending().await,
            }
        }
    }
}

/// `wait_for(Option::is_some)` only returns `Some`; this keeps the code free of `expect`.
fn unreachable_violation() -> Violation {
    Violation {
        operation: "publish",
        subject: "<unknown subject>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_messages_are_parsed() {
        let v = Violation::parse(
            "nats: Permissions Violation for Publish to \"$JS.API.DIRECT.GET.KV_roles.$KV.roles.role.a\"",
        )
        .expect("a violation");
        assert_eq!(v.operation, "publish");
        assert_eq!(v.subject, "$JS.API.DIRECT.GET.KV_roles.$KV.roles.role.a");
        assert_eq!(
            v.to_string(),
            "$JS.API.DIRECT.GET.KV_roles.$KV.roles.role.a (publish)"
        );
        let v = Violation::parse("Permissions Violation for Subscription to \"_INBOX.x.*\"")
            .expect("a violation");
        assert_eq!(
            (v.operation, v.subject.as_str()),
            ("subscribe", "_INBOX.x.*")
        );
        let v = Violation::parse("'Permissions Violation for Publish to $KV.b.role.a'")
            .expect("unquoted");
        assert_eq!(v.subject, "$KV.b.role.a");
        assert_eq!(Violation::parse("nats: maximum connections exceeded"), None);
    }

    #[tokio::test]
    async fn the_first_violation_wins_and_wakes_waiters() {
        let denials = Denials::default();
        let waiting = tokio::spawn(denials.denied());
        denials.note("nats: slow consumer");
        assert_eq!(denials.first(), None);
        denials.note("Permissions Violation for Publish to \"a.b\"");
        denials.note("Permissions Violation for Publish to \"c.d\"");
        assert_eq!(waiting.await.expect("joined").subject, "a.b");
        assert_eq!(denials.denied().await.subject, "a.b");
    }
}
