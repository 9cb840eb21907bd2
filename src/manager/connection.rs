//! Connecting to NATS from configuration, and following the connection state.

use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::role_input::RoleInput;
use super::shared::Shared;
use super::ticker::Ticker;
use crate::config::NatsConfig;
use crate::error::Error;
use crate::store::ServerErrors;
use tokio::time::MissedTickBehavior;

/// Connects to NATS as configured. The returned [`ServerErrors`] collects the server's
/// asynchronous error messages (pass it to the manager builder so permission denials surface
/// as typed errors within a round trip instead of a timeout).
///
/// # Errors
/// [`Error::Connect`] when no server can be reached or the credentials cannot be loaded.
pub async fn connect(
    nats: &NatsConfig,
    default_name: &str,
) -> Result<(async_nats::Client, ServerErrors), Error> {
    connect_observed(nats, default_name, |_| {}).await
}

/// [`connect`], also handing every server error message to `observe` (before it is recorded
/// in the [`ServerErrors`]): a tool that owns its connection can fail on any permission
/// violation (see `crate::inspect::Inspector::connect`).
pub(crate) async fn connect_observed(
    nats: &NatsConfig,
    default_name: &str,
    observe: impl Fn(&str) + Send + Sync + 'static,
) -> Result<(async_nats::Client, ServerErrors), Error> {
    let errors = ServerErrors::default();
    let recorder = errors.clone();
    let observe = Arc::new(observe);
    let mut options = async_nats::ConnectOptions::new()
        .name(
            nats.name
                .clone()
                .unwrap_or_else(|| default_name.to_string()),
        )
        .ping_interval(nats.ping_interval)
        .connection_timeout(nats.connect_timeout)
        .request_timeout(Some(nats.request_timeout))
        .max_reconnects(None)
        .event_callback(move |event| {
            let recorder = recorder.clone();
            let observe = observe.clone();
            async move {
                match event {
                    async_nats::Event::ServerError(err) => {
                        warn!(error = %err, "NATS server error");
                        let message = err.to_string();
                        observe(&message);
                        recorder.record(message);
                    }
                    async_nats::Event::Disconnected => warn!("NATS connection lost"),
                    async_nats::Event::Connected => info!("NATS connected"),
                    other => info!(event = %other, "NATS connection event"),
                }
            }
        });
    if let Some(path) = &nats.creds_file {
        options = options
            .credentials_file(path)
            .await
            .map_err(|e| Error::Connect(Box::new(e)))?;
    }
    if let Some(path) = &nats.nkey_seed_file {
        let seed = std::fs::read_to_string(path).map_err(|e| {
            Error::Connect(Box::new(std::io::Error::new(
                e.kind(),
                format!("loading nkey seed file '{}': {e}", path.display()),
            )))
        })?;
        options = options.nkey(seed.trim().to_string());
    }
    if let (Some(user), Some(password)) = (&nats.user, &nats.password) {
        options = options.user_and_password(user.clone(), password.clone());
    }
    if let Some(token) = &nats.token {
        options = options.token(token.clone());
    }
    if nats.tls.required {
        options = options.require_tls(true);
    }
    if let Some(ca) = &nats.tls.ca_file {
        options = options.add_root_certificates(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&nats.tls.cert_file, &nats.tls.key_file) {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    let client = options
        .connect(nats.servers.clone())
        .await
        .map_err(|source| {
            Error::Connect(Box::new(ConnectFailure {
                servers: tried(&nats.servers),
                source,
            }))
        })?;
    Ok((client, errors))
}

/// A failed connection attempt, naming the servers it tried (the client's own message names
/// none: "DNS error: failed to lookup address information"). Its source is the client's
/// [`async_nats::ConnectError`].
#[derive(Debug, thiserror::Error)]
#[error("tried {servers}: {source}")]
pub(crate) struct ConnectFailure {
    /// The servers, comma-separated, passwords in URLs redacted.
    servers: String,
    /// What the client said.
    #[source]
    source: async_nats::ConnectError,
}

/// The servers for a message: comma-separated, the password of a `user:password@` replaced by
/// `***`.
fn tried(servers: &[String]) -> String {
    servers
        .iter()
        .map(|s| redact_password(s))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `scheme://user:password@host` as `scheme://user:***@host`; anything else as it is.
fn redact_password(server: &str) -> String {
    let (scheme, rest) = match server.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, server),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return server.to_owned();
    };
    let userinfo = &rest[..at];
    let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
    let redacted = if userinfo.contains(':') {
        format!("{user}:***")
    } else {
        // A lone user part is a token (`nats://token@host`).
        "***".to_owned()
    };
    let host = &rest[at..];
    match scheme {
        Some(scheme) => format!("{scheme}://{redacted}{host}"),
        None => format!("{redacted}{host}"),
    }
}

pub(crate) fn is_connected(client: &async_nats::Client) -> bool {
    client.connection_state() == State::Connected
}

/// Follows the connection state (polling works for connections the application owns too) and
/// tells every role runner about changes.
pub(crate) async fn monitor(
    client: async_nats::Client,
    shared: Arc<Shared>,
    connected: watch::Sender<bool>,
    cancel: CancellationToken,
) {
    let mut ticker = Ticker::new(Duration::from_millis(50), MissedTickBehavior::Skip, cancel);
    while ticker.tick().await {
        let up = is_connected(&client);
        if connected.send_if_modified(|c| std::mem::replace(c, up) != up) {
            shared.broadcast(|| RoleInput::Connection(up));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_and_tokens_in_server_urls_are_redacted() {
        assert_eq!(
            tried(&[
                "nats://a:4222".into(),
                "tls://ops:s3cret@b:4443".into(),
                "nats://t0ken@c:4222/x@y".into(),
                "d:4222".into(),
            ]),
            "nats://a:4222, tls://ops:***@b:4443, nats://***@c:4222/x@y, d:4222"
        );
    }

    /// The message names every server tried, and the client's error stays in the chain (so
    /// `Error::is_transient` still tells DNS trouble from refused credentials).
    #[tokio::test]
    async fn a_failed_connection_names_the_servers_it_tried() {
        let nats = NatsConfig {
            servers: vec![
                "nats://127.0.0.1:1".into(),
                "nats://ops:pw@127.0.0.1:2".into(),
            ],
            connect_timeout: std::time::Duration::from_secs(2),
            ..NatsConfig::default()
        };
        let err = connect(&nats, "test").await.expect_err("nothing listens");
        let text = err.to_string();
        assert!(
            text.starts_with(
                "cannot connect to NATS: tried nats://127.0.0.1:1, nats://ops:***@127.0.0.1:2: "
            ),
            "{text}"
        );
        assert!(!text.contains("pw"), "{text}");
        assert!(err.is_transient(), "refused is transient: {text}");
    }
}
