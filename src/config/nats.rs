//! How to connect to NATS ([`NatsConfig`], [`TlsConfig`]).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How to connect to NATS.
///
/// At most one authentication method may be configured: `creds_file`,
/// `nkey_seed_file`, `user` + `password`, or `token`. `Debug` output redacts
/// `password` and `token`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    /// Server URLs (`nats://`, `tls://`, `ws://`, `wss://` or `host:port`).
    /// In YAML also one string of comma-separated URLs (like `NATS_URL`).
    /// Default: `["nats://127.0.0.1:4222"]`.
    #[serde(deserialize_with = "super::lists::servers")]
    pub servers: Vec<String>,
    /// Connection name shown by the server. Default: `None`, in which case the
    /// manager uses `nats-roles/<instance id>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Path of a NATS credentials (`.creds`) file. Default: `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creds_file: Option<PathBuf>,
    /// Path of a file holding an NKey seed. Default: `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nkey_seed_file: Option<PathBuf>,
    /// User name; requires `password`. Default: `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Password; requires `user`. Redacted in `Debug` output. Default: `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// Authentication token. Redacted in `Debug` output. Default: `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// TLS settings. Default: [`TlsConfig::default()`] (TLS not required, no
    /// custom certificates).
    pub tls: TlsConfig,
    /// Interval of client pings to the server. Default: `1s`.
    #[serde(with = "humantime_serde")]
    pub ping_interval: Duration,
    /// Timeout for establishing a connection. Default: `2s`.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Timeout of JetStream API requests. Default: `2s`.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// A JetStream API prefix instead of `$JS.API`, for a bucket in another account imported
    /// under it; not with `bucket.domain` (a JetStream domain is the prefix
    /// `$JS.<domain>.API`). Default: `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jetstream_api_prefix: Option<String>,
    /// The round trip between this instance and the bucket's servers over a WAN (a site
    /// behind a leaf node): `validate` and `run` warn when a role's timing cannot work over
    /// it (docs/operations.md). `run` also measures it at start. Default: `None`.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub round_trip: Option<Duration>,
}

impl Default for NatsConfig {
    fn default() -> Self {
        Self {
            servers: vec!["nats://127.0.0.1:4222".to_owned()],
            name: None,
            creds_file: None,
            nkey_seed_file: None,
            user: None,
            password: None,
            token: None,
            tls: TlsConfig::default(),
            ping_interval: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(2),
            jetstream_api_prefix: None,
            round_trip: None,
        }
    }
}

/// Debug-formats an optional secret as `Some("<redacted>")` or `None`.
pub(super) struct Redacted<'a>(pub(super) &'a Option<String>);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(_) => f.write_str("Some(\"<redacted>\")"),
            None => f.write_str("None"),
        }
    }
}

impl fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsConfig")
            .field("servers", &self.servers)
            .field("name", &self.name)
            .field("creds_file", &self.creds_file)
            .field("nkey_seed_file", &self.nkey_seed_file)
            .field("user", &self.user)
            .field("password", &Redacted(&self.password))
            .field("token", &Redacted(&self.token))
            .field("tls", &self.tls)
            .field("ping_interval", &self.ping_interval)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("jetstream_api_prefix", &self.jetstream_api_prefix)
            .field("round_trip", &self.round_trip)
            .finish()
    }
}

/// TLS settings of the NATS connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Require TLS even for `nats://` URLs. Default: `false`.
    pub required: bool,
    /// PEM file with CA certificates to trust. Default: `None` (system roots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS; requires `key_file`.
    /// Default: `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`; requires `cert_file`. Default: `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}
