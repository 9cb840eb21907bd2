//! Configuration of a role manager: loaded from YAML, overridable from the
//! environment, and validated as a whole.
//!
//! Every section and nearly every field is optional; [`Config::default()`] is a
//! valid configuration (connecting to `nats://127.0.0.1:4222`, bucket `roles`,
//! no roles). The only required value is `name` of each entry under `roles`.
//!
//! ```yaml
//! nats:
//!   servers: ["nats://nats-1:4222", "nats://nats-2:4222"]
//!   creds_file: /etc/nats/roles.creds
//! bucket:
//!   name: roles
//! timing:
//!   ttl: 3s
//!   heartbeat: 750ms
//! roles:
//!   - name: scheduler
//!   - name: billing-sweeper
//!     priority: 10
//!     ttl: 5s
//! ```
//!
//! Parsing ([`Config::from_yaml_str`], [`Config::load`]) treats the input as
//! untrusted: it is size-limited and parsed with `serde-saphyr` resource budgets
//! (nesting depth, node and alias counts), unknown keys are rejected, and
//! duplicate keys are errors. [`Config::validate`] reports *all* semantic
//! problems at once, each naming the offending field (`roles[2].ttl`,
//! `timing.heartbeat`, ...) and, when the configuration came from YAML, the
//! line and column it was written at.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::Timing;
use crate::names::{InstanceId, NameError, RoleName};

mod telemetry;
pub use telemetry::{DEFAULT_SERVICE_NAME, LogFormat, OtlpConfig, OtlpProtocol, TelemetryConfig};

/// Largest configuration document accepted by [`Config::from_yaml_str`] and
/// [`Config::load`], in bytes (1 MiB).
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;

/// Longest accepted value of every duration setting that has no tighter bound
/// of its own: 1 hour. It applies to `nats.ping_interval`, `nats.connect_timeout`,
/// `nats.request_timeout`, `retry.initial_backoff`, `retry.max_backoff`,
/// `health.interval`, `health.timeout`, `health.cooldown`,
/// `fencing.validation_interval`, `shutdown.timeout`, `shutdown.drain_timeout`,
/// the `placement` durations and `telemetry.otlp.export_interval` / `timeout`.
/// Lease durations are bounded by [`Timing::MAX_TTL`] (`ttl`, `member_ttl`) and
/// through the TTL (see [`Timing::validate`]).
pub const MAX_DURATION: Duration = Duration::from_secs(3600);

/// Most entries allowed in [`InstanceConfig::meta`].
pub const MAX_META_ENTRIES: usize = 32;

/// Longest key or value allowed in [`InstanceConfig::meta`], in bytes.
pub const MAX_META_LEN: usize = 256;

/// Most replicas allowed for the KV bucket ([`BucketConfig::replicas`]).
pub const MAX_BUCKET_REPLICAS: usize = 5;

/// Environment variable read by [`Config::apply_env`]: comma-separated NATS
/// server URLs, replacing [`NatsConfig::servers`].
pub const ENV_NATS_URL: &str = "NATS_URL";

/// Environment variable read by [`Config::apply_env`]: path of a NATS
/// credentials file, replacing [`NatsConfig::creds_file`].
pub const ENV_NATS_CREDS: &str = "NATS_CREDS";

/// Environment variable read by [`Config::apply_env`]: this instance's id,
/// replacing [`InstanceConfig::id`].
pub const ENV_INSTANCE_ID: &str = "NATS_ROLES_INSTANCE_ID";

/// Environment variable read by [`Config::apply_env`]: the KV bucket name,
/// replacing [`BucketConfig::name`].
pub const ENV_BUCKET: &str = "NATS_ROLES_BUCKET";

/// Environment variable read by [`Config::apply_env`]: the admin bearer token
/// of the HTTP API, replacing [`HttpConfig::admin_token`].
pub const ENV_ADMIN_TOKEN: &str = "NATS_ROLES_ADMIN_TOKEN";

/// Address the HTTP dashboard and API listen on when [`HttpConfig::listen`] is
/// not set.
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:8080";

/// Shortest accepted [`HttpConfig::admin_token`], in bytes.
pub const MIN_ADMIN_TOKEN_LEN: usize = 16;

// ---------------------------------------------------------------------------
// Configuration structs
// ---------------------------------------------------------------------------

/// The complete configuration of a role manager.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How to connect to NATS. Default: [`NatsConfig::default()`].
    pub nats: NatsConfig,
    /// The JetStream KV bucket holding the role keys. Default:
    /// [`BucketConfig::default()`] (bucket `roles`).
    pub bucket: BucketConfig,
    /// Identity and defaults of this manager instance. Default:
    /// [`InstanceConfig::default()`] (no id, priority 0).
    pub instance: InstanceConfig,
    /// Lease timing for every role; each role may override individual values.
    /// Default: [`TimingConfig::default()`] (ttl 3s, heartbeat 750ms).
    pub timing: TimingConfig,
    /// Backoff for retrying failed NATS operations. Default:
    /// [`RetryConfig::default()`].
    pub retry: RetryConfig,
    /// Optional health command gating whether this instance may hold roles.
    /// Default: [`HealthConfig::default()`] (no health checking).
    pub health: HealthConfig,
    /// Fencing (lease re-validation) settings. Default:
    /// [`FencingConfig::default()`] (no background validation).
    pub fencing: FencingConfig,
    /// Graceful shutdown limits. Default: [`ShutdownConfig::default()`]
    /// (10s total, 5s drain).
    pub shutdown: ShutdownConfig,
    /// The HTTP dashboard, JSON API and health probes of `nats-roles run`.
    /// Default: [`HttpConfig::default()`] (on, `127.0.0.1:8080`, admin actions
    /// off).
    pub http: HttpConfig,
    /// Log format and OTLP export of metrics and traces (`nats-roles run`). Default:
    /// [`TelemetryConfig::default()`] (text logs, no OTLP export).
    pub telemetry: TelemetryConfig,
    /// Placement: priority takeover and load spreading across instances
    /// (docs/placement.md). Default: [`PlacementConfig::default()`] (off).
    pub placement: PlacementConfig,
    /// The roles this instance takes part in. Default: empty (roles may also
    /// be added at runtime).
    pub roles: Vec<RoleConfig>,
}

/// How to connect to NATS.
///
/// At most one authentication method may be configured: `creds_file`,
/// `nkey_seed_file`, `user` + `password`, or `token`. `Debug` output redacts
/// `password` and `token`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    /// Server URLs (`nats://`, `tls://`, `ws://`, `wss://` or `host:port`).
    /// Default: `["nats://127.0.0.1:4222"]`.
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
        }
    }
}

/// Debug-formats an optional secret as `Some("<redacted>")` or `None`.
struct Redacted<'a>(&'a Option<String>);

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

/// The JetStream KV bucket holding one key per role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BucketConfig {
    /// Bucket name: non-empty, ASCII letters, digits, `-` and `_`.
    /// Default: `"roles"`.
    pub name: String,
    /// Number of replicas when the bucket is created, `1..=5`. Default: `1`.
    pub replicas: usize,
    /// Create the bucket if it does not exist. Production deployments should
    /// pre-create it. Default: `false`.
    pub auto_create: bool,
}

impl Default for BucketConfig {
    fn default() -> Self {
        Self {
            name: "roles".to_owned(),
            replicas: 1,
            auto_create: false,
        }
    }
}

/// Identity and defaults of this manager instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct InstanceConfig {
    /// This instance's id. Default: `None`, meaning it must come from the
    /// command line or `NATS_ROLES_INSTANCE_ID` (see
    /// [`Config::require_instance_id`]).
    #[serde(
        deserialize_with = "de_instance_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<InstanceId>,
    /// Priority of this instance for roles that do not set their own; higher
    /// wins. Default: `0`.
    pub priority: i32,
    /// Free-form metadata published with held roles (e.g. `host`, an HTTP
    /// address); at most 32 entries, keys and values at most 256 bytes.
    /// Default: empty.
    pub meta: BTreeMap<String, String>,
}

/// Lease timing. The top-level `timing` section applies to every role; each
/// [`RoleConfig`] may override individual values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimingConfig {
    /// Lifetime of a role key on the server without a heartbeat; a whole
    /// number of seconds, at least `1s` and at least 3 × `heartbeat`.
    /// Default: `3s`.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Interval at which the holder renews its role key; greater than zero.
    /// Default: `750ms`.
    #[serde(with = "humantime_serde")]
    pub heartbeat: Duration,
    /// Fraction of `ttl` by which the holder's local lease ends before the
    /// server-side key expires, `0.0 < m < 0.5`. Default: `0.1`.
    pub deadline_margin: f64,
    /// Timeout of one KV write; greater than zero and less than
    /// `ttl × (1 − deadline_margin)`. Default: `1s`.
    #[serde(with = "humantime_serde")]
    pub operation_timeout: Duration,
    /// How long a holder keeps a role while disconnected from NATS before
    /// demoting itself; at most `ttl`. Default: `2s`.
    #[serde(with = "humantime_serde")]
    pub disconnect_grace: Duration,
    /// Maximum random delay before contending for a vacant role; less than
    /// `heartbeat`. Default: `0s` (contend at once: the CAS picks one winner and losers'
    /// conflicts are cheap; tokio timers round any delay up to whole milliseconds, so even a
    /// sub-millisecond jitter costs 1–2 ms of hand-over). Raise it for very large herds.
    #[serde(with = "humantime_serde")]
    pub campaign_jitter: Duration,
}

impl Default for TimingConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(3),
            heartbeat: Duration::from_millis(750),
            deadline_margin: 0.1,
            operation_timeout: Duration::from_secs(1),
            disconnect_grace: Duration::from_secs(2),
            campaign_jitter: Duration::ZERO,
        }
    }
}

/// Exponential backoff for retrying failed NATS operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// First backoff delay; greater than zero. Default: `50ms`.
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Largest backoff delay; at least `initial_backoff`. Default: `2s`.
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// Factor applied to the delay after each failure; at least `1.0`.
    /// Default: `2.0`.
    pub multiplier: f64,
    /// Random variation of each delay as a ± fraction, `0.0..=1.0`.
    /// Default: `0.2`.
    pub jitter: f64,
    /// Consecutive failed attempts after which the fast retries end and the role retries at
    /// `persistent_interval` (never stopped); `0` means never. Default: `0`.
    pub max_attempts: u32,
    /// Cadence of retries after a persistent failure (a permission violation for exactly the
    /// role's subject, a configuration error, `max_attempts` reached); at least `100ms`.
    /// Default: `10s`.
    #[serde(with = "humantime_serde")]
    pub persistent_interval: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            multiplier: 2.0,
            jitter: 0.2,
            max_attempts: 0,
            persistent_interval: Duration::from_secs(10),
        }
    }
}

/// An optional health command: while it fails, this instance gives up and
/// does not contend for roles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    /// Argument vector of the health command (exit status 0 = healthy); must
    /// not be empty when given. Default: `None` (no health checking).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Interval between health checks; greater than zero. Default: `1s`.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Timeout of one health check; greater than zero and at most `interval`.
    /// Default: `500ms`.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Consecutive failures after which the instance is unhealthy; at least
    /// `1`. Default: `3`.
    pub failure_threshold: u32,
    /// Time after becoming unhealthy before contending for roles again.
    /// Default: `10s`.
    #[serde(with = "humantime_serde")]
    pub cooldown: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            command: None,
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            failure_threshold: 3,
            cooldown: Duration::from_secs(10),
        }
    }
}

/// Fencing settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct FencingConfig {
    /// Interval at which held leases are re-validated against the server in
    /// the background; greater than zero when given. Default: `None` (no
    /// background validation).
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub validation_interval: Option<Duration>,
}

/// Graceful shutdown limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShutdownConfig {
    /// Total time allowed for a graceful shutdown. Default: `10s`.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Longest wait for role work to stop (demote callbacks) before the roles
    /// are released; at most `timeout`. Default: `5s`.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(5),
        }
    }
}

/// The HTTP dashboard, JSON API and health probes served by `nats-roles run`.
///
/// `Debug` output redacts `admin_token`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Serve the dashboard and API at all. Default: `true`.
    pub enabled: bool,
    /// Address to listen on, `IP:port` (`[IPv6]:port` for IPv6); port `0`
    /// picks any free port. Default: `None`, meaning [`DEFAULT_HTTP_LISTEN`]
    /// (`127.0.0.1:8080`, loopback only) or, when another process already uses
    /// that port (several instances on one host), any free loopback port. An
    /// address given here (or with `--http`) that cannot be bound is an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Bearer token that enables the admin actions (release, evict); at least
    /// [`MIN_ADMIN_TOKEN_LEN`] bytes, no whitespace. Redacted in `Debug`
    /// output; prefer `NATS_ROLES_ADMIN_TOKEN` over writing it into the file.
    /// Default: `None` (admin actions off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: None,
            admin_token: None,
        }
    }
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("enabled", &self.enabled)
            .field("listen", &self.listen)
            .field("admin_token", &Redacted(&self.admin_token))
            .finish()
    }
}

impl HttpConfig {
    /// The configured listen address, or `None` when `listen` is not set (the
    /// default applies) or does not parse (see [`Config::validate`]).
    #[must_use]
    pub fn listen_addr(&self) -> Option<std::net::SocketAddr> {
        self.listen.as_deref().and_then(|l| l.trim().parse().ok())
    }
}

fn default_true() -> bool {
    true
}

/// `value` for an error message, shortened if it is long.
fn shorten(value: &str) -> String {
    const SHOWN: usize = 64;
    if value.chars().count() <= SHOWN {
        format!("{value:?}")
    } else {
        let head: String = value.chars().take(SHOWN).collect();
        format!("{head:?}...")
    }
}

fn name_message(what: &str, value: &str, err: &NameError) -> String {
    format!("invalid {what} {}: {err}", shorten(value))
}

fn de_role_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<RoleName, D::Error> {
    let name = String::deserialize(d)?;
    RoleName::new(name.as_str())
        .map_err(|e| serde::de::Error::custom(name_message("role name", &name, &e)))
}

fn de_instance_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<InstanceId>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(id) => InstanceId::new(id.as_str())
            .map(Some)
            .map_err(|e| serde::de::Error::custom(name_message("instance id", &id, &e))),
    }
}

/// Whether placement may move a role away from this instance voluntarily.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Takeover {
    /// Hand the role over gracefully when placement prefers another instance. The default.
    #[default]
    Voluntary,
    /// Never release the role for placement (it still moves on stop, failure or health).
    Never,
}

/// Placement: membership records, priority takeover and load spreading
/// (docs/placement.md). Every knob applies to this instance only; all instances
/// of a deployment should use the same values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementConfig {
    /// Publish a membership record and move roles to their preferred instance.
    /// Default: `false`.
    pub enabled: bool,
    /// Capacity: this instance's fair share is proportional to it; 1 to 1000.
    /// Default: `1`.
    pub weight: u32,
    /// New members count only once no further member joined for this long.
    /// Default: `5s`.
    #[serde(with = "humantime_serde")]
    pub stability_window: Duration,
    /// A member that vanished without a graceful stop still counts for this long
    /// (a flapping member moves nothing). Default: `10s`.
    #[serde(with = "humantime_serde")]
    pub leave_delay: Duration,
    /// How long an instance holds back its campaign for a vacancy another live
    /// member is preferred for; it takes the role if that member does not.
    /// Default: `500ms`.
    #[serde(with = "humantime_serde")]
    pub claim_grace: Duration,
    /// A role moved voluntarily is not moved voluntarily again for this long (the
    /// instance that released it may take it again whenever the plan prefers it: there is
    /// no campaign cooldown after a placement release). Default: `30s`.
    #[serde(with = "humantime_serde")]
    pub cooldown: Duration,
    /// At most this many voluntary moves per `move_interval`; at least 1.
    /// Default: `10`.
    pub move_budget: u32,
    /// The interval of `move_budget`; greater than zero. Default: `1s`.
    #[serde(with = "humantime_serde")]
    pub move_interval: Duration,
    /// Spreading releases roles only while this instance holds more than its
    /// share in the plan plus this many. Default: `0`.
    pub hysteresis: u32,
    /// Start draining: move every role away and take none another member is
    /// preferred for. Default: `false`.
    pub draining: bool,
    /// TTL of the membership record (heartbeated every quarter of it); whole
    /// seconds, at least `1s`. Default: `None` (the top-level `timing.ttl`).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub member_ttl: Option<Duration>,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            weight: 1,
            stability_window: Duration::from_secs(5),
            leave_delay: Duration::from_secs(10),
            claim_grace: Duration::from_millis(500),
            cooldown: Duration::from_secs(30),
            move_budget: 10,
            move_interval: Duration::from_secs(1),
            hysteresis: 0,
            draining: false,
            member_ttl: None,
        }
    }
}

/// One role this instance takes part in. Timing fields left unset inherit the
/// top-level [`TimingConfig`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleConfig {
    /// The role's name. Required.
    #[serde(deserialize_with = "de_role_name")]
    pub name: RoleName,
    /// Human-readable description. Default: `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether this instance contends for the role; `false` only observes who
    /// holds it. Default: `true`.
    #[serde(default = "default_true")]
    pub campaign: bool,
    /// Priority for this role, overriding [`InstanceConfig::priority`].
    /// Default: `None` (use the instance priority).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Whether placement may hand this role over to a preferred instance.
    /// Default: `voluntary`.
    #[serde(default)]
    pub takeover: Takeover,
    /// Overrides [`TimingConfig::ttl`]. Default: `None` (inherit).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub ttl: Option<Duration>,
    /// Overrides [`TimingConfig::heartbeat`]. Default: `None` (inherit).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub heartbeat: Option<Duration>,
    /// Overrides [`TimingConfig::deadline_margin`]. Default: `None` (inherit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_margin: Option<f64>,
    /// Overrides [`TimingConfig::operation_timeout`]. Default: `None`
    /// (inherit).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub operation_timeout: Option<Duration>,
    /// Overrides [`TimingConfig::disconnect_grace`]. Default: `None`
    /// (inherit).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub disconnect_grace: Option<Duration>,
    /// Overrides [`TimingConfig::campaign_jitter`]. Default: `None` (inherit).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub campaign_jitter: Option<Duration>,
}

impl RoleConfig {
    /// A role named `name` that this instance contends for, with no priority
    /// or timing overrides.
    #[must_use]
    pub fn new(name: RoleName) -> Self {
        Self {
            name,
            description: None,
            campaign: true,
            priority: None,
            takeover: Takeover::Voluntary,
            ttl: None,
            heartbeat: None,
            deadline_margin: None,
            operation_timeout: None,
            disconnect_grace: None,
            campaign_jitter: None,
        }
    }

    /// This role's priority: its own `priority` if set, otherwise the
    /// instance's.
    #[must_use]
    pub fn effective_priority(&self, instance: &InstanceConfig) -> i32 {
        self.priority.unwrap_or(instance.priority)
    }

    fn overrides(&self, field: TimingField) -> bool {
        match field {
            TimingField::Ttl => self.ttl.is_some(),
            TimingField::Heartbeat => self.heartbeat.is_some(),
            TimingField::DeadlineMargin => self.deadline_margin.is_some(),
            TimingField::OperationTimeout => self.operation_timeout.is_some(),
            TimingField::DisconnectGrace => self.disconnect_grace.is_some(),
            TimingField::CampaignJitter => self.campaign_jitter.is_some(),
        }
    }
}

impl TimingConfig {
    /// The effective timing of `role`: `self` with the role's overrides
    /// applied.
    #[must_use]
    pub fn for_role(&self, role: &RoleConfig) -> TimingConfig {
        TimingConfig {
            ttl: role.ttl.unwrap_or(self.ttl),
            heartbeat: role.heartbeat.unwrap_or(self.heartbeat),
            deadline_margin: role.deadline_margin.unwrap_or(self.deadline_margin),
            operation_timeout: role.operation_timeout.unwrap_or(self.operation_timeout),
            disconnect_grace: role.disconnect_grace.unwrap_or(self.disconnect_grace),
            campaign_jitter: role.campaign_jitter.unwrap_or(self.campaign_jitter),
        }
    }

    /// The library's [`Timing`] with these values (what [`Timing::validate`]
    /// checks; `RoleManager::from_config` runs roles with it).
    #[must_use]
    pub fn timing(&self) -> Timing {
        Timing {
            ttl: self.ttl,
            heartbeat: self.heartbeat,
            deadline_margin: self.deadline_margin,
            operation_timeout: self.operation_timeout,
            disconnect_grace: self.disconnect_grace,
            campaign_jitter: self.campaign_jitter,
        }
    }

    /// How long a holder may consider itself the holder after a successful
    /// write: `ttl × (1 − deadline_margin)`.
    ///
    /// The factor is clamped to `0.0..=1.0` (an unvalidated, out-of-range or
    /// NaN margin never yields a lease longer than `ttl`, and never panics).
    #[must_use]
    pub fn local_lease(&self) -> Duration {
        let factor = 1.0 - self.deadline_margin;
        if factor.is_nan() {
            return Duration::ZERO;
        }
        let factor = factor.clamp(0.0, 1.0);
        Duration::try_from_secs_f64(self.ttl.as_secs_f64() * factor)
            .map_or(self.ttl, |lease| lease.min(self.ttl))
    }

    /// The per-key TTL to give the server, in whole seconds (NATS per-message
    /// TTLs have one-second granularity).
    ///
    /// [`Config::validate`] requires `ttl` to be a whole number of seconds, so
    /// for a validated configuration this is exact; otherwise it rounds up,
    /// so the server never expires a key before the holder's local lease ends.
    #[must_use]
    pub fn ttl_whole_seconds(&self) -> u64 {
        let secs = self.ttl.as_secs();
        if self.ttl.subsec_nanos() == 0 {
            secs
        } else {
            secs.saturating_add(1)
        }
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// One semantic problem found by [`Config::validate`] or
/// [`Config::apply_env`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The offending field as a path, e.g. `roles[2].ttl` or
    /// `timing.heartbeat`, or the name of an environment variable.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
    /// 1-based line in the YAML source the problem points at, when known.
    pub line: Option<usize>,
    /// 1-based column in the YAML source the problem points at, when known.
    pub column: Option<usize>,
}

impl ConfigProblem {
    /// A problem with `field` without a source location.
    #[must_use]
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
            line: None,
            column: None,
        }
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)?;
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, " (line {line}, column {column})"),
            (Some(line), None) => write!(f, " (line {line})"),
            _ => Ok(()),
        }
    }
}

/// Why a configuration could not be loaded or is invalid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The configuration file could not be read (returned by
    /// [`Config::load`]).
    #[error("cannot read configuration file {}: {source}", path.display())]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The configuration path names something other than a regular file (a
    /// FIFO, socket, device or directory); returned by [`Config::load`]
    /// without reading from it.
    #[error("cannot read configuration file {}: it is {kind}, not a regular file", path.display())]
    NotAFile {
        /// The path given.
        path: PathBuf,
        /// What it is instead (e.g. `a FIFO (named pipe)`, `a directory`).
        kind: &'static str,
    },
    /// The input is not valid YAML, does not match the configuration's shape
    /// (wrong type, unknown or duplicate key, missing role name), is too large
    /// (the message names its size), is not UTF-8 (line, column and byte
    /// offset of the first invalid byte), or exceeds a parser resource budget
    /// (nesting, node or alias counts).
    #[error("{}", display_parse(*line, *column, message))]
    Parse {
        /// 1-based line of the error, when known.
        line: Option<usize>,
        /// 1-based column of the error, when known.
        column: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// The configuration is well-formed but breaks one or more rules
    /// (returned by [`Config::validate`] and [`Config::apply_env`]); lists
    /// every problem found.
    #[error("{}", display_problems(.0))]
    Invalid(Vec<ConfigProblem>),
}

impl ConfigError {
    /// The problems of an [`ConfigError::Invalid`] error; empty for other
    /// kinds.
    #[must_use]
    pub fn problems(&self) -> &[ConfigProblem] {
        match self {
            ConfigError::Invalid(problems) => problems,
            _ => &[],
        }
    }
}

fn display_parse(line: Option<usize>, column: Option<usize>, message: &str) -> String {
    match (line, column) {
        (Some(line), Some(column)) => {
            format!("invalid configuration at line {line}, column {column}: {message}")
        }
        (Some(line), None) => format!("invalid configuration at line {line}: {message}"),
        _ => format!("invalid configuration: {message}"),
    }
}

fn display_problems(problems: &[ConfigProblem]) -> String {
    let mut out = match problems.len() {
        1 => "invalid configuration (1 problem):".to_owned(),
        n => format!("invalid configuration ({n} problems):"),
    };
    for problem in problems {
        out.push_str("\n  ");
        out.push_str(&problem.to_string());
    }
    out
}

// ---------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------

fn parse_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_events: 100_000,
            max_aliases: 1_000,
            max_anchors: 1_000,
            max_depth: 32,
            flow_nesting_limit: 32,
            max_documents: 1,
            max_nodes: 50_000,
            max_total_scalar_bytes: MAX_CONFIG_BYTES,
            max_total_comment_bytes: MAX_CONFIG_BYTES,
            max_merge_keys: 1_000,
            max_recorded_anchor_events: 100_000,
            max_recorded_anchor_bytes: MAX_CONFIG_BYTES,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 100_000,
            max_replay_stack_depth: 16,
        },
        strict_booleans: true,
        with_snippet: false,
    }
}

fn to_usize(n: u64) -> Option<usize> {
    usize::try_from(n).ok().filter(|n| *n > 0)
}

/// Keeps serde-saphyr from appending " at line X, column Y" to messages: the
/// location is reported in separate fields.
struct NoLocationSuffix;

impl serde_saphyr::Localizer for NoLocationSuffix {
    fn attach_location<'a>(
        &self,
        base: std::borrow::Cow<'a, str>,
        _location: serde_saphyr::Location,
    ) -> std::borrow::Cow<'a, str> {
        base
    }
}

fn parse_error(err: &serde_saphyr::Error) -> ConfigError {
    let location = err.location();
    let formatter = serde_saphyr::UserMessageFormatter.with_localizer(&NoLocationSuffix);
    ConfigError::Parse {
        line: location.and_then(|l| to_usize(l.line())),
        column: location.and_then(|l| to_usize(l.column())),
        message: err.without_snippet().render_with_formatter(&formatter),
    }
}

/// The configuration is `len` bytes long (or, when `at_least`, longer than that).
fn too_large(len: u64, at_least: bool) -> ConfigError {
    let size = if at_least {
        format!("more than {}", fmt_size(len))
    } else {
        fmt_size(len)
    };
    ConfigError::Parse {
        line: None,
        column: None,
        message: format!(
            "the configuration is {size}; at most {} are accepted",
            fmt_size(MAX_CONFIG_BYTES as u64)
        ),
    }
}

/// `n` bytes, with the size in KiB/MiB/GiB when that is shorter to read.
fn fmt_size(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    match UNITS.iter().find(|(_, unit)| n >= *unit) {
        Some((name, unit)) if n.is_multiple_of(*unit) => format!("{n} bytes ({} {name})", n / unit),
        Some((name, unit)) => format!("{n} bytes ({:.1} {name})", n as f64 / *unit as f64),
        None => format!("{n} bytes"),
    }
}

/// Where the first invalid UTF-8 sequence of `bytes` starts.
fn invalid_utf8(bytes: &[u8], err: &std::str::Utf8Error) -> ConfigError {
    let offset = err.valid_up_to();
    let valid = std::str::from_utf8(bytes.get(..offset).unwrap_or_default()).unwrap_or_default();
    let line = valid.matches('\n').count() + 1;
    let column = valid
        .rsplit('\n')
        .next()
        .map_or(0, |last| last.chars().count())
        + 1;
    let shown: Vec<String> = bytes
        .iter()
        .skip(offset)
        .take(err.error_len().unwrap_or(1).max(1))
        .map(|b| format!("0x{b:02x}"))
        .collect();
    ConfigError::Parse {
        line: Some(line),
        column: Some(column),
        message: format!(
            "the file is not valid UTF-8: invalid byte {} at byte offset {offset}",
            shown.join(" ")
        ),
    }
}

/// What kind of file `file_type` is, for a message refusing it.
fn file_kind(file_type: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if file_type.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading only if it is a regular file (after following symlinks).
///
/// The type is checked with `stat` before opening, so that opening a FIFO without a writer
/// cannot block; the file is opened non-blocking and checked again on the open descriptor, so
/// a file swapped for a FIFO or device in between is refused as well. Returns the file and its
/// size.
fn open_regular(path: &Path) -> Result<(std::fs::File, u64), ConfigError> {
    let io_error = |source| ConfigError::Io {
        path: path.to_owned(),
        source,
    };
    let not_a_file = |file_type| ConfigError::NotAFile {
        path: path.to_owned(),
        kind: file_kind(file_type),
    };
    let meta = std::fs::metadata(path).map_err(io_error)?;
    if !meta.is_file() {
        return Err(not_a_file(meta.file_type()));
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = options.open(path).map_err(io_error)?;
    let meta = file.metadata().map_err(io_error)?;
    if !meta.is_file() {
        return Err(not_a_file(meta.file_type()));
    }
    Ok((file, meta.len()))
}

impl Config {
    /// Parses a YAML configuration and validates it.
    ///
    /// The input is treated as untrusted: it may be at most
    /// [`MAX_CONFIG_BYTES`] long and is parsed with resource budgets (nesting
    /// depth, node, alias and anchor counts, a single document). Unknown and
    /// duplicate keys are rejected; booleans must be spelled `true`/`false`.
    /// An empty document yields the defaults.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] (with line and column where known) when the
    /// input is not a well-formed configuration; [`ConfigError::Invalid`]
    /// listing every problem (with line and column of the offending value
    /// where it appears in `text`) when it breaks a rule.
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigError> {
        if text.len() > MAX_CONFIG_BYTES {
            return Err(too_large(text.len() as u64, false));
        }
        let config: Config = serde_saphyr::from_str_with_options(text, parse_options())
            .map_err(|e| parse_error(&e))?;
        let problems = config.collect_problems();
        if problems.is_empty() {
            return Ok(config);
        }
        let locations = source_locations(text);
        Err(ConfigError::Invalid(
            problems
                .into_iter()
                .map(|p| p.locate(locations.as_ref()))
                .collect(),
        ))
    }

    /// Reads the YAML file at `path`, parses and validates it (see
    /// [`Config::from_yaml_str`]).
    ///
    /// Only regular files (or symlinks to them) are read: a FIFO, socket,
    /// device or directory is refused before it is opened for reading, so a
    /// pipe without a writer cannot block the caller. A file larger than
    /// [`MAX_CONFIG_BYTES`] is refused from its size, unread.
    ///
    /// # Errors
    /// [`ConfigError::Io`] naming `path` when the file cannot be read;
    /// [`ConfigError::NotAFile`] when it is not a regular file;
    /// [`ConfigError::Parse`] with the size when it is too large, or with the
    /// line, column and byte offset of the first invalid byte when it is not
    /// UTF-8; otherwise as [`Config::from_yaml_str`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let io_error = |source| ConfigError::Io {
            path: path.to_owned(),
            source,
        };
        let (file, len) = open_regular(path)?;
        let limit = MAX_CONFIG_BYTES as u64;
        if len > limit {
            return Err(too_large(len, false));
        }
        let mut bytes = Vec::new();
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(io_error)?;
        if bytes.len() > MAX_CONFIG_BYTES {
            // It grew after it was measured.
            return Err(too_large(limit, true));
        }
        let text = std::str::from_utf8(&bytes).map_err(|e| invalid_utf8(&bytes, &e))?;
        Config::from_yaml_str(text)
    }

    /// Checks every rule and reports all problems found, not just the first.
    ///
    /// A missing `instance.id` is not a problem here (it is usually given on
    /// the command line); use [`Config::require_instance_id`] once all sources
    /// have been applied. No roles is not a problem either (roles may be added
    /// at runtime).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] listing every problem. The problems carry no
    /// line/column; [`Config::from_yaml_str`] and [`Config::load`] add them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let problems = self.collect_problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(
                problems.into_iter().map(|p| p.problem).collect(),
            ))
        }
    }

    /// This instance's id.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with a problem for `instance.id` when no id was
    /// configured (in YAML, on the command line, or via
    /// `NATS_ROLES_INSTANCE_ID`).
    pub fn require_instance_id(&self) -> Result<&InstanceId, ConfigError> {
        self.instance.id.as_ref().ok_or_else(|| {
            ConfigError::Invalid(vec![ConfigProblem::new(
                "instance.id",
                format!(
                    "no instance id configured; set instance.id, pass it on the command line \
                     or set {ENV_INSTANCE_ID}"
                ),
            )])
        })
    }

    /// Applies overrides from environment variables, read through `env` (so
    /// callers and tests need not touch the process environment; pass
    /// `|name| std::env::var(name).ok()` for the real one).
    ///
    /// - `NATS_URL`: comma-separated server URLs, replacing `nats.servers`;
    /// - `NATS_CREDS`: credentials file, replacing `nats.creds_file`;
    /// - `NATS_ROLES_INSTANCE_ID`: replacing `instance.id`;
    /// - `NATS_ROLES_BUCKET`: replacing `bucket.name`;
    /// - `NATS_ROLES_ADMIN_TOKEN`: replacing `http.admin_token`.
    ///
    /// Unset variables and variables whose value is empty or only whitespace
    /// are ignored. Either all overrides are applied or, on error, none.
    /// The result is not re-validated; call [`Config::validate`] afterwards.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with one problem per invalid variable, each
    /// naming the variable.
    pub fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        let get = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let mut problems = Vec::new();

        let servers = get(ENV_NATS_URL).map(|value| {
            let servers: Vec<String> = value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            if servers.is_empty() {
                problems.push(ConfigProblem::new(
                    ENV_NATS_URL,
                    format!("{value:?} contains no server URL"),
                ));
            }
            for server in &servers {
                if let Err(why) = check_server(server) {
                    problems.push(ConfigProblem::new(ENV_NATS_URL, why));
                }
            }
            servers
        });
        let creds = get(ENV_NATS_CREDS).map(|v| PathBuf::from(v.trim()));
        let id = get(ENV_INSTANCE_ID).and_then(|v| match InstanceId::new(v.trim()) {
            Ok(id) => Some(id),
            Err(e) => {
                problems.push(ConfigProblem::new(
                    ENV_INSTANCE_ID,
                    name_message("instance id", v.trim(), &e),
                ));
                None
            }
        });
        let bucket = get(ENV_BUCKET).map(|v| v.trim().to_owned());
        if let Some(Err(why)) = bucket.as_deref().map(check_bucket_name) {
            problems.push(ConfigProblem::new(ENV_BUCKET, why));
        }
        let admin_token = get(ENV_ADMIN_TOKEN).map(|t| t.trim().to_owned());
        if let Some(Err(why)) = admin_token.as_deref().map(check_admin_token) {
            problems.push(ConfigProblem::new(ENV_ADMIN_TOKEN, why));
        }

        if !problems.is_empty() {
            return Err(ConfigError::Invalid(problems));
        }
        if let Some(servers) = servers {
            self.nats.servers = servers;
        }
        if let Some(creds) = creds {
            self.nats.creds_file = Some(creds);
        }
        if let Some(id) = id {
            self.instance.id = Some(id);
        }
        if let Some(bucket) = bucket {
            self.bucket.name = bucket;
        }
        if let Some(token) = admin_token {
            self.http.admin_token = Some(token);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

/// A problem plus the paths of other YAML values involved in it, tried in
/// order (after the problem's own field) when looking up its location.
struct Found {
    problem: ConfigProblem,
    related: Vec<String>,
}

impl Found {
    fn locate(mut self, locations: Option<&LocationMap>) -> ConfigProblem {
        if let Some((line, column)) =
            locations.and_then(|map| map.find(&self.problem.field, &self.related))
        {
            self.problem.line = Some(line);
            self.problem.column = Some(column);
        }
        self.problem
    }
}

#[derive(Default)]
struct Problems(Vec<Found>);

impl Problems {
    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.push_related(field, message, Vec::new());
    }

    /// Reports `field` when `value` is longer than `max`.
    fn at_most(&mut self, field: &str, value: Duration, max: Duration) {
        if value > max {
            self.push(
                field,
                format!(
                    "{} is longer than the maximum {}",
                    fmt_duration(value),
                    fmt_duration(max)
                ),
            );
        }
    }

    fn push_related(
        &mut self,
        field: impl Into<String>,
        message: impl Into<String>,
        related: Vec<String>,
    ) {
        self.0.push(Found {
            problem: ConfigProblem::new(field, message),
            related,
        });
    }
}

use crate::error::fmt_duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimingField {
    Ttl,
    Heartbeat,
    DeadlineMargin,
    OperationTimeout,
    DisconnectGrace,
    CampaignJitter,
}

impl TimingField {
    const ALL: [TimingField; 6] = [
        TimingField::Ttl,
        TimingField::Heartbeat,
        TimingField::DeadlineMargin,
        TimingField::OperationTimeout,
        TimingField::DisconnectGrace,
        TimingField::CampaignJitter,
    ];

    /// The field called `name` ([`crate::error::TimingError::field`]); `ttl` for an unknown name.
    fn named(name: &str) -> TimingField {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .unwrap_or(TimingField::Ttl)
    }

    /// The fields called `names`, as a static slice (the lists [`crate::error::TimingError::involved`]
    /// returns).
    fn all_named(names: &[&str]) -> &'static [TimingField] {
        use TimingField::*;
        match names {
            ["heartbeat", "ttl"] => &[Heartbeat, Ttl],
            ["operation_timeout", "ttl", "deadline_margin"] => {
                &[OperationTimeout, Ttl, DeadlineMargin]
            }
            ["disconnect_grace", "ttl"] => &[DisconnectGrace, Ttl],
            ["campaign_jitter", "heartbeat"] => &[CampaignJitter, Heartbeat],
            ["heartbeat"] => &[Heartbeat],
            ["deadline_margin"] => &[DeadlineMargin],
            ["operation_timeout"] => &[OperationTimeout],
            ["disconnect_grace"] => &[DisconnectGrace],
            ["campaign_jitter"] => &[CampaignJitter],
            _ => &[Ttl],
        }
    }

    fn name(self) -> &'static str {
        match self {
            TimingField::Ttl => "ttl",
            TimingField::Heartbeat => "heartbeat",
            TimingField::DeadlineMargin => "deadline_margin",
            TimingField::OperationTimeout => "operation_timeout",
            TimingField::DisconnectGrace => "disconnect_grace",
            TimingField::CampaignJitter => "campaign_jitter",
        }
    }

    fn value(self, t: &TimingConfig) -> String {
        match self {
            TimingField::Ttl => fmt_duration(t.ttl),
            TimingField::Heartbeat => fmt_duration(t.heartbeat),
            TimingField::DeadlineMargin => t.deadline_margin.to_string(),
            TimingField::OperationTimeout => fmt_duration(t.operation_timeout),
            TimingField::DisconnectGrace => fmt_duration(t.disconnect_grace),
            TimingField::CampaignJitter => fmt_duration(t.campaign_jitter),
        }
    }
}

/// A broken timing rule: `field` is the value the message is about,
/// `involved` every field the rule depends on (including `field`).
struct TimingIssue {
    field: TimingField,
    involved: &'static [TimingField],
    message: String,
}

fn timing_issues(t: &TimingConfig) -> Vec<TimingIssue> {
    use TimingField::*;
    let mut issues: Vec<TimingIssue> = t
        .timing()
        .problems()
        .into_iter()
        .map(|e| TimingIssue {
            field: TimingField::named(e.field()),
            involved: TimingField::all_named(e.involved()),
            message: e.detail(),
        })
        .collect();
    // The file format also wants the TTL the server is given (whole seconds) written exactly.
    if (Timing::MIN_TTL..=Timing::MAX_TTL).contains(&t.ttl) && t.ttl.subsec_nanos() != 0 {
        issues.insert(
            0,
            TimingIssue {
                field: Ttl,
                involved: &[Ttl],
                message: format!(
                    "{} is not a whole number of seconds (NATS per-key TTLs are whole seconds)",
                    fmt_duration(t.ttl)
                ),
            },
        );
    }
    issues
}

/// Checks a bucket name: non-empty, `[A-Za-z0-9_-]+`.
fn check_bucket_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("bucket name must not be empty".to_owned());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "bucket name {name:?} contains {c:?}; only ASCII letters, digits, '-' and '_' are allowed"
        ));
    }
    Ok(())
}

/// Checks that `authority` (no scheme, no path) is `[user[:pass]@]host[:port]`
/// with a non-empty host and, if given, a valid port.
fn check_authority(authority: &str, port_required: bool) -> Result<(), String> {
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    // IPv6 literal: [::1]:4222
    let (host, port) = if let Some(rest) = host_port.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err("has an unterminated IPv6 address".to_owned());
        };
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return Err("has unexpected characters after the IPv6 address".to_owned()),
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Err("has no host".to_owned());
    }
    match port {
        Some(port) if port.parse::<u16>().map_or(true, |p| p == 0) => {
            Err(format!("has an invalid port {port:?}"))
        }
        None if port_required => Err("needs a port (host:port) or a scheme".to_owned()),
        _ => Ok(()),
    }
}

/// A simple plausibility check of one server URL.
fn check_server(server: &str) -> Result<(), String> {
    let describe = |why: String| format!("server {server:?} {why}");
    if server.is_empty() {
        return Err("server URL must not be empty".to_owned());
    }
    if server.chars().any(char::is_whitespace) {
        return Err(describe("contains whitespace".to_owned()));
    }
    if let Some((scheme, rest)) = server.split_once("://") {
        if !matches!(
            scheme.to_ascii_lowercase().as_str(),
            "nats" | "tls" | "ws" | "wss"
        ) {
            return Err(describe(format!(
                "has unsupported scheme {scheme:?}; use nats://, tls://, ws:// or wss://"
            )));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        check_authority(authority, false).map_err(describe)
    } else {
        check_authority(server, true).map_err(describe)
    }
}

impl Config {
    fn collect_problems(&self) -> Vec<Found> {
        let mut p = Problems::default();
        self.check_nats(&mut p);
        self.check_bucket(&mut p);
        self.check_instance(&mut p);
        self.check_timing(&mut p);
        self.check_roles(&mut p);
        self.check_retry(&mut p);
        self.check_health(&mut p);
        self.check_fencing_and_shutdown(&mut p);
        self.check_http(&mut p);
        self.check_telemetry(&mut p);
        self.check_placement(&mut p);
        p.0
    }

    fn check_nats(&self, p: &mut Problems) {
        let nats = &self.nats;
        if nats.servers.is_empty() {
            p.push("nats.servers", "at least one server is required");
        }
        for (i, server) in nats.servers.iter().enumerate() {
            if let Err(why) = check_server(server) {
                p.push(format!("nats.servers[{i}]"), why);
            }
        }
        match (&nats.user, &nats.password) {
            (Some(_), None) => p.push("nats.user", "user is set but password is not"),
            (None, Some(_)) => p.push("nats.password", "password is set but user is not"),
            _ => {}
        }
        let mut methods = Vec::new();
        if nats.creds_file.is_some() {
            methods.push("creds_file");
        }
        if nats.nkey_seed_file.is_some() {
            methods.push("nkey_seed_file");
        }
        if nats.user.is_some() || nats.password.is_some() {
            methods.push("user/password");
        }
        if nats.token.is_some() {
            methods.push("token");
        }
        if methods.len() > 1 {
            p.push_related(
                "nats",
                format!(
                    "more than one authentication method is configured ({}); use at most one",
                    methods.join(", ")
                ),
                methods
                    .iter()
                    .map(|m| format!("nats.{}", m.split('/').next().unwrap_or(m)))
                    .collect(),
            );
        }
        p.at_most("nats.ping_interval", nats.ping_interval, MAX_DURATION);
        p.at_most("nats.connect_timeout", nats.connect_timeout, MAX_DURATION);
        p.at_most("nats.request_timeout", nats.request_timeout, MAX_DURATION);
        match (&nats.tls.cert_file, &nats.tls.key_file) {
            (Some(_), None) => p.push("nats.tls.cert_file", "cert_file is set but key_file is not"),
            (None, Some(_)) => p.push("nats.tls.key_file", "key_file is set but cert_file is not"),
            _ => {}
        }
    }

    fn check_bucket(&self, p: &mut Problems) {
        if let Err(why) = check_bucket_name(&self.bucket.name) {
            p.push("bucket.name", why);
        }
        if !(1..=MAX_BUCKET_REPLICAS).contains(&self.bucket.replicas) {
            p.push(
                "bucket.replicas",
                format!(
                    "{} is out of range: it must be between 1 and {MAX_BUCKET_REPLICAS}",
                    self.bucket.replicas
                ),
            );
        }
    }

    fn check_instance(&self, p: &mut Problems) {
        let meta = &self.instance.meta;
        if meta.len() > MAX_META_ENTRIES {
            p.push(
                "instance.meta",
                format!(
                    "has {} entries; at most {MAX_META_ENTRIES} are allowed",
                    meta.len()
                ),
            );
        }
        for (key, value) in meta {
            if key.len() > MAX_META_LEN {
                let shown: String = key.chars().take(32).collect();
                p.push(
                    "instance.meta",
                    format!(
                        "key {shown:?}... is {} bytes long; at most {MAX_META_LEN} are allowed",
                        key.len()
                    ),
                );
            } else if value.len() > MAX_META_LEN {
                p.push(
                    format!("instance.meta.{key}"),
                    format!(
                        "value is {} bytes long; at most {MAX_META_LEN} are allowed",
                        value.len()
                    ),
                );
            }
        }
    }

    fn check_timing(&self, p: &mut Problems) {
        for issue in timing_issues(&self.timing) {
            p.push_related(
                format!("timing.{}", issue.field.name()),
                issue.message,
                issue
                    .involved
                    .iter()
                    .map(|f| format!("timing.{}", f.name()))
                    .collect(),
            );
        }
    }

    fn check_roles(&self, p: &mut Problems) {
        let mut first_index: HashMap<&RoleName, usize> = HashMap::new();
        for (i, role) in self.roles.iter().enumerate() {
            if let Some(first) = first_index.get(&role.name) {
                p.push(
                    format!("roles[{i}].name"),
                    format!(
                        "duplicate role name {:?}: roles[{first}] and roles[{i}] have the same name",
                        role.name.as_str()
                    ),
                );
            } else {
                first_index.insert(&role.name, i);
            }

            // Rules whose fields are all inherited fail (and are reported) for
            // the top-level timing already; report only those an override
            // takes part in.
            let effective = self.timing.for_role(role);
            for issue in timing_issues(&effective) {
                let overridden: Vec<TimingField> = issue
                    .involved
                    .iter()
                    .copied()
                    .filter(|f| role.overrides(*f))
                    .collect();
                let Some(&first_overridden) = overridden.first() else {
                    continue;
                };
                let named = if role.overrides(issue.field) {
                    issue.field
                } else {
                    first_overridden
                };
                let inherited: Vec<String> = issue
                    .involved
                    .iter()
                    .filter(|f| !role.overrides(**f))
                    .map(|f| {
                        format!(
                            "{} {} inherited from timing.{}",
                            f.name(),
                            f.value(&effective),
                            f.name()
                        )
                    })
                    .collect();
                let mut message = if named == issue.field {
                    issue.message
                } else {
                    format!("{} {}", issue.field.name(), issue.message)
                };
                message.push_str(&format!(" (role {:?}", role.name.as_str()));
                for note in inherited {
                    message.push_str("; ");
                    message.push_str(&note);
                }
                message.push(')');
                p.push_related(
                    format!("roles[{i}].{}", named.name()),
                    message,
                    overridden
                        .iter()
                        .map(|f| format!("roles[{i}].{}", f.name()))
                        .collect(),
                );
            }
        }
    }

    fn check_retry(&self, p: &mut Problems) {
        let r = &self.retry;
        if r.initial_backoff.is_zero() {
            p.push("retry.initial_backoff", "must be greater than 0s");
        }
        p.at_most("retry.initial_backoff", r.initial_backoff, MAX_DURATION);
        p.at_most("retry.max_backoff", r.max_backoff, MAX_DURATION);
        p.at_most(
            "retry.persistent_interval",
            r.persistent_interval,
            MAX_DURATION,
        );
        if r.persistent_interval < Duration::from_millis(100) {
            p.push(
                "retry.persistent_interval",
                format!(
                    "{} is too short: persistent failures are retried slowly, at least 100ms",
                    fmt_duration(r.persistent_interval)
                ),
            );
        }
        if r.max_backoff < r.initial_backoff {
            p.push_related(
                "retry.max_backoff",
                format!(
                    "{} must be at least initial_backoff {}",
                    fmt_duration(r.max_backoff),
                    fmt_duration(r.initial_backoff)
                ),
                vec!["retry.initial_backoff".to_owned()],
            );
        }
        if !(r.multiplier.is_finite() && r.multiplier >= 1.0) {
            p.push(
                "retry.multiplier",
                format!("{} must be a finite number of at least 1.0", r.multiplier),
            );
        }
        if !(0.0..=1.0).contains(&r.jitter) {
            p.push(
                "retry.jitter",
                format!(
                    "{} is out of range: it must be between 0.0 and 1.0",
                    r.jitter
                ),
            );
        }
    }

    fn check_health(&self, p: &mut Problems) {
        let h = &self.health;
        match h.command.as_deref() {
            Some([]) => p.push(
                "health.command",
                "must not be empty; omit it to disable health checking",
            ),
            Some([program, ..]) if program.is_empty() => {
                p.push("health.command[0]", "the program must not be empty");
            }
            _ => {}
        }
        if h.interval.is_zero() {
            p.push("health.interval", "must be greater than 0s");
        }
        if h.timeout.is_zero() {
            p.push("health.timeout", "must be greater than 0s");
        } else if h.timeout > h.interval {
            p.push_related(
                "health.timeout",
                format!(
                    "{} must not exceed interval {}",
                    fmt_duration(h.timeout),
                    fmt_duration(h.interval)
                ),
                vec!["health.interval".to_owned()],
            );
        }
        p.at_most("health.interval", h.interval, MAX_DURATION);
        p.at_most("health.cooldown", h.cooldown, MAX_DURATION);
        if h.failure_threshold == 0 {
            p.push("health.failure_threshold", "must be at least 1");
        }
    }

    fn check_fencing_and_shutdown(&self, p: &mut Problems) {
        if self.fencing.validation_interval == Some(Duration::ZERO) {
            p.push(
                "fencing.validation_interval",
                "must be greater than 0s; omit it to disable background validation",
            );
        }
        if let Some(interval) = self.fencing.validation_interval {
            p.at_most("fencing.validation_interval", interval, MAX_DURATION);
        }
        let s = &self.shutdown;
        p.at_most("shutdown.timeout", s.timeout, MAX_DURATION);
        if s.drain_timeout > s.timeout {
            p.push_related(
                "shutdown.drain_timeout",
                format!(
                    "{} must not exceed timeout {}",
                    fmt_duration(s.drain_timeout),
                    fmt_duration(s.timeout)
                ),
                vec!["shutdown.timeout".to_owned()],
            );
        }
    }
}

impl Config {
    fn check_placement(&self, p: &mut Problems) {
        let c = &self.placement;
        if !(1..=1000).contains(&c.weight) {
            p.push(
                "placement.weight",
                format!(
                    "{} is out of range: it must be between 1 and 1000",
                    c.weight
                ),
            );
        }
        if c.move_budget == 0 {
            p.push("placement.move_budget", "must be at least 1");
        }
        if c.move_interval.is_zero() {
            p.push("placement.move_interval", "must be greater than zero");
        }
        for (field, value) in [
            ("placement.stability_window", c.stability_window),
            ("placement.leave_delay", c.leave_delay),
            ("placement.claim_grace", c.claim_grace),
            ("placement.cooldown", c.cooldown),
            ("placement.move_interval", c.move_interval),
        ] {
            p.at_most(field, value, MAX_DURATION);
        }
        if let Some(ttl) = c.member_ttl
            && (ttl < Timing::MIN_TTL || ttl > Timing::MAX_TTL || ttl.subsec_nanos() != 0)
        {
            p.push(
                "placement.member_ttl",
                format!(
                    "{} must be a whole number of seconds, at least {} and at most {}",
                    fmt_duration(ttl),
                    fmt_duration(Timing::MIN_TTL),
                    fmt_duration(Timing::MAX_TTL)
                ),
            );
        }
    }

    /// TTL of this instance's membership record: `placement.member_ttl` or `timing.ttl`.
    #[must_use]
    pub fn member_ttl(&self) -> Duration {
        self.placement.member_ttl.unwrap_or(self.timing.ttl)
    }

    fn check_http(&self, p: &mut Problems) {
        let h = &self.http;
        if let Some(listen) = &h.listen
            && let Err(why) = check_listen(listen)
        {
            p.push("http.listen", why);
        }
        if let Some(Err(why)) = h.admin_token.as_deref().map(check_admin_token) {
            p.push("http.admin_token", why);
        }
    }
}

/// Checks an HTTP listen address: `IP:port` or `[IPv6]:port`.
fn check_listen(listen: &str) -> Result<(), String> {
    listen
        .trim()
        .parse::<std::net::SocketAddr>()
        .map(|_| ())
        .map_err(|_| {
            format!(
                "{} is not an IP:port address (e.g. \"127.0.0.1:8080\", \"0.0.0.0:8080\" \
                 or \"[::1]:8080\"; port 0 picks a free port)",
                shorten(listen)
            )
        })
}

/// Checks an admin bearer token (never echoes it).
fn check_admin_token(token: &str) -> Result<(), String> {
    if token.chars().any(char::is_whitespace) {
        return Err("must not contain whitespace".to_owned());
    }
    if token.len() < MIN_ADMIN_TOKEN_LEN {
        return Err(format!(
            "is {} bytes long; at least {MIN_ADMIN_TOKEN_LEN} are required (e.g. `openssl rand \
             -hex 24`)",
            token.len()
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Source locations of YAML values
// ---------------------------------------------------------------------------

/// Line and column of every value in a YAML document, by path
/// (`roles[2].ttl`, `nats.servers[0]`, ...).
struct LocationMap(HashMap<String, (usize, usize)>);

impl LocationMap {
    /// The location of `field`, else of the first of `related` present, else
    /// of the nearest enclosing value of `field` (other than the document).
    fn find(&self, field: &str, related: &[String]) -> Option<(usize, usize)> {
        if let Some(loc) = std::iter::once(field)
            .chain(related.iter().map(String::as_str))
            .find_map(|path| self.0.get(path))
        {
            return Some(*loc);
        }
        let mut path = field;
        while let Some(end) = path.rfind(['.', '[']) {
            path = path.get(..end).unwrap_or_default();
            if let Some(loc) = self.0.get(path) {
                return Some(*loc);
            }
        }
        None
    }
}

/// A YAML node with the locations of its children, used only to find where
/// values are written.
enum Node {
    Map(Vec<(String, serde_saphyr::Spanned<Node>)>),
    Seq(Vec<serde_saphyr::Spanned<Node>>),
    Scalar,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

macro_rules! visit_scalars {
    ($($name:ident: $t:ty),*) => {
        $(
            fn $name<E: serde::de::Error>(self, _: $t) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
        )*
    };
}

impl<'de> serde::de::Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    visit_scalars!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_i128: i128,
        visit_u128: u128, visit_f64: f64, visit_str: &str, visit_bytes: &[u8]);

    fn visit_unit<E: serde::de::Error>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(Key(key)) = map.next_key()? {
            entries.push((key, map.next_value()?));
        }
        Ok(Node::Map(entries))
    }
}

/// A mapping key rendered as a string (non-scalar keys become `?`).
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping key")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_owned()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Key, E> {
                Ok(Key("~".to_owned()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Key, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Key("?".to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Key, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Key("?".to_owned()))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}

fn record(
    node: &serde_saphyr::Spanned<Node>,
    path: &mut String,
    out: &mut HashMap<String, (usize, usize)>,
) {
    let loc = node.referenced;
    if let (Some(line), Some(column)) = (to_usize(loc.line()), to_usize(loc.column())) {
        out.entry(path.clone()).or_insert((line, column));
    }
    let len = path.len();
    match &node.value {
        Node::Map(entries) => {
            for (key, child) in entries {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                record(child, path, out);
                path.truncate(len);
            }
        }
        Node::Seq(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push_str(&format!("[{i}]"));
                record(child, path, out);
                path.truncate(len);
            }
        }
        Node::Scalar => {}
    }
}

/// Locations of the values in `text`, or `None` if it cannot be parsed as a
/// generic YAML tree.
fn source_locations(text: &str) -> Option<LocationMap> {
    // The tree is typeless: let `.nan` / `.inf` through so that a validation problem about
    // them (e.g. `deadline_margin: .nan`) still gets its line and column.
    let mut options = parse_options();
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
    let root: serde_saphyr::Spanned<Node> =
        serde_saphyr::from_str_with_options(text, options).ok()?;
    let mut out = HashMap::new();
    record(&root, &mut String::new(), &mut out);
    // The document itself is never a useful location.
    out.remove("");
    Some(LocationMap(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn role(name: &str) -> RoleConfig {
        RoleConfig::new(RoleName::new(name).unwrap())
    }

    fn problems(config: &Config) -> Vec<ConfigProblem> {
        match config.validate() {
            Ok(()) => Vec::new(),
            Err(e) => e.problems().to_vec(),
        }
    }

    fn fields(config: &Config) -> Vec<String> {
        problems(config).into_iter().map(|p| p.field).collect()
    }

    /// The only problem of `config`, which must name `field`.
    fn only_problem(config: &Config, field: &str) -> ConfigProblem {
        let found = problems(config);
        assert_eq!(
            found.iter().map(|p| p.field.as_str()).collect::<Vec<_>>(),
            [field],
            "{found:#?}"
        );
        found.into_iter().next().unwrap()
    }

    #[test]
    fn placement_section_parses_with_defaults_and_takeover() {
        let c = Config::from_yaml_str(
            "placement:\n  enabled: true\n  weight: 3\n  claim_grace: 200ms\n\
             roles:\n  - name: a\n    takeover: never\n  - name: b\n",
        )
        .expect("valid");
        assert!(c.placement.enabled);
        assert_eq!(c.placement.weight, 3);
        assert_eq!(c.placement.claim_grace, Duration::from_millis(200));
        assert_eq!(c.placement.stability_window, Duration::from_secs(5));
        assert_eq!(c.roles[0].takeover, Takeover::Never);
        assert_eq!(c.roles[1].takeover, Takeover::Voluntary);
        assert_eq!(c.member_ttl(), c.timing.ttl);
        assert!(!Config::default().placement.enabled);
    }

    #[test]
    fn placement_problems_name_their_field_and_line() {
        let found = yaml_problems(
            "placement:\n  weight: 0\n  move_budget: 0\n  move_interval: 0s\n  member_ttl: 1500ms\n",
        );
        let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "placement.weight",
                "placement.move_budget",
                "placement.move_interval",
                "placement.member_ttl"
            ],
            "{found:#?}"
        );
        assert_eq!(found[0].line, Some(2), "{found:#?}");
        let bad = parse_err("roles:\n  - name: a\n    takeover: sometimes\n");
        assert_eq!(bad.0, Some(3), "{bad:?}");
    }

    fn yaml_problems(text: &str) -> Vec<ConfigProblem> {
        match Config::from_yaml_str(text) {
            Err(ConfigError::Invalid(problems)) => problems,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    fn parse_err(text: &str) -> (Option<usize>, Option<usize>, String) {
        match Config::from_yaml_str(text) {
            Err(ConfigError::Parse {
                line,
                column,
                message,
            }) => (line, column, message),
            other => panic!("expected Parse, got {other:?}"),
        }
    }

    fn with_timing(f: impl FnOnce(&mut TimingConfig)) -> Config {
        let mut config = Config::default();
        f(&mut config.timing);
        config
    }

    fn with_role(f: impl FnOnce(&mut RoleConfig)) -> Config {
        let mut r = role("scheduler");
        f(&mut r);
        Config {
            roles: vec![role("first"), r],
            ..Config::default()
        }
    }

    const FULL: &str = r#"
nats:
  servers: ["nats://n1:4222", "tls://n2:4222", "n3:4222"]
  name: my-conn
  creds_file: /etc/nats/roles.creds
  tls:
    required: true
    ca_file: /etc/nats/ca.pem
    cert_file: /etc/nats/cert.pem
    key_file: /etc/nats/key.pem
  ping_interval: 5s
  connect_timeout: 3s
  request_timeout: 1500ms
bucket:
  name: control-plane_roles
  replicas: 3
  auto_create: true
instance:
  id: node-a
  priority: 7
  meta:
    host: node-a.example.com
    http: "10.0.0.5:8080"
timing:
  ttl: 6s
  heartbeat: 1s
  deadline_margin: 0.2
  operation_timeout: 800ms
  disconnect_grace: 4s
  campaign_jitter: 50ms
retry:
  initial_backoff: 100ms
  max_backoff: 10s
  multiplier: 1.5
  jitter: 0.5
  max_attempts: 12
health:
  command: ["/usr/local/bin/healthy", "--quick"]
  interval: 2s
  timeout: 1s
  failure_threshold: 5
  cooldown: 30s
fencing:
  validation_interval: 250ms
shutdown:
  timeout: 20s
  drain_timeout: 15s
roles:
  - name: scheduler
    description: Runs the job scheduler
  - name: billing-sweeper
    priority: 10
    ttl: 10s
    heartbeat: 2s
    deadline_margin: 0.25
    operation_timeout: 2s
    disconnect_grace: 5s
    campaign_jitter: 100ms
  - name: dashboard
    campaign: false
"#;

    #[test]
    fn defaults_validate() {
        assert_eq!(
            Config::default().validate().map_err(|e| e.to_string()),
            Ok(())
        );
    }

    #[test]
    fn defaults_match_documentation() {
        let c = Config::default();
        assert_eq!(c.nats.servers, ["nats://127.0.0.1:4222"]);
        assert_eq!(c.nats.ping_interval, Duration::from_secs(1));
        assert_eq!(c.nats.connect_timeout, Duration::from_secs(2));
        assert_eq!(c.nats.request_timeout, Duration::from_secs(2));
        assert!(!c.nats.tls.required);
        assert_eq!(
            c.bucket,
            BucketConfig {
                name: "roles".into(),
                replicas: 1,
                auto_create: false
            }
        );
        assert_eq!(c.instance.id, None);
        assert_eq!(c.instance.priority, 0);
        assert_eq!(c.timing.ttl, Duration::from_secs(3));
        assert_eq!(c.timing.heartbeat, Duration::from_millis(750));
        assert_eq!(c.timing.deadline_margin, 0.1);
        assert_eq!(c.timing.operation_timeout, Duration::from_secs(1));
        assert_eq!(c.timing.disconnect_grace, Duration::from_secs(2));
        assert_eq!(c.timing.campaign_jitter, Duration::ZERO);
        assert_eq!(c.retry.initial_backoff, Duration::from_millis(50));
        assert_eq!(c.retry.max_backoff, Duration::from_secs(2));
        assert_eq!(
            (c.retry.multiplier, c.retry.jitter, c.retry.max_attempts),
            (2.0, 0.2, 0)
        );
        assert_eq!(c.health.command, None);
        assert_eq!(c.health.interval, Duration::from_secs(1));
        assert_eq!(c.health.timeout, Duration::from_millis(500));
        assert_eq!(c.health.failure_threshold, 3);
        assert_eq!(c.health.cooldown, Duration::from_secs(10));
        assert_eq!(c.fencing.validation_interval, None);
        assert_eq!(c.shutdown.timeout, Duration::from_secs(10));
        assert_eq!(c.shutdown.drain_timeout, Duration::from_secs(5));
        assert!(c.roles.is_empty());
    }

    #[test]
    fn empty_document_gives_defaults() {
        assert_eq!(Config::from_yaml_str("").unwrap(), Config::default());
        assert_eq!(
            Config::from_yaml_str("# nothing\n").unwrap(),
            Config::default()
        );
        assert_eq!(Config::from_yaml_str("{}").unwrap(), Config::default());
    }

    #[test]
    fn full_sample_parses() {
        let c = Config::from_yaml_str(FULL).unwrap();
        assert_eq!(c.nats.servers.len(), 3);
        assert_eq!(c.nats.name.as_deref(), Some("my-conn"));
        assert_eq!(
            c.nats.creds_file,
            Some(PathBuf::from("/etc/nats/roles.creds"))
        );
        assert!(c.nats.tls.required);
        assert_eq!(
            c.nats.tls.key_file,
            Some(PathBuf::from("/etc/nats/key.pem"))
        );
        assert_eq!(c.nats.request_timeout, Duration::from_millis(1500));
        assert_eq!(c.bucket.name, "control-plane_roles");
        assert_eq!(c.bucket.replicas, 3);
        assert!(c.bucket.auto_create);
        assert_eq!(c.instance.id, Some(InstanceId::new("node-a").unwrap()));
        assert_eq!(c.instance.meta["http"], "10.0.0.5:8080");
        assert_eq!(c.timing.ttl, Duration::from_secs(6));
        assert_eq!(c.timing.deadline_margin, 0.2);
        assert_eq!(c.retry.max_attempts, 12);
        assert_eq!(
            c.health.command,
            Some(vec![
                "/usr/local/bin/healthy".to_owned(),
                "--quick".to_owned()
            ])
        );
        assert_eq!(
            c.fencing.validation_interval,
            Some(Duration::from_millis(250))
        );
        assert_eq!(c.shutdown.drain_timeout, Duration::from_secs(15));
        assert_eq!(c.roles.len(), 3);
        assert_eq!(c.roles[0].name.as_str(), "scheduler");
        assert!(c.roles[0].campaign);
        assert_eq!(c.roles[0].effective_priority(&c.instance), 7);
        assert_eq!(c.roles[1].effective_priority(&c.instance), 10);
        assert_eq!(c.roles[1].ttl, Some(Duration::from_secs(10)));
        assert_eq!(c.roles[1].campaign_jitter, Some(Duration::from_millis(100)));
        assert!(!c.roles[2].campaign);
    }

    #[test]
    fn serialization_round_trips() {
        let c = Config::from_yaml_str(FULL).unwrap();
        let text = serde_saphyr::to_string(&c).unwrap();
        assert_eq!(Config::from_yaml_str(&text).unwrap(), c);
        let text = serde_saphyr::to_string(&Config::default()).unwrap();
        assert_eq!(Config::from_yaml_str(&text).unwrap(), Config::default());
    }

    #[test]
    fn example_config_validates() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/roles.example.yaml");
        let c = Config::load(Path::new(path)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.bucket.name, "roles");
        assert_eq!(c.timing.ttl, Duration::from_secs(3));
        assert_eq!(c.timing.heartbeat, Duration::from_millis(750));
        assert_eq!(c.instance.id, None);
        assert!(c.instance.meta.contains_key("host"));
        assert!((8..=12).contains(&c.roles.len()), "{} roles", c.roles.len());
        assert!(c.roles.iter().any(|r| !r.campaign));
        assert!(c.roles.iter().any(|r| r.priority.is_some()));
        assert!(c.roles.iter().any(|r| r.ttl.is_some()));
    }

    // ----- timing helpers -----

    #[test]
    fn timing_helpers() {
        let t = TimingConfig::default();
        assert_eq!(t.local_lease(), Duration::from_millis(2700));
        assert_eq!(t.ttl_whole_seconds(), 3);
        let fractional = TimingConfig {
            ttl: Duration::from_millis(1500),
            ..t.clone()
        };
        assert_eq!(fractional.ttl_whole_seconds(), 2);
        let odd = TimingConfig {
            deadline_margin: f64::NAN,
            ..t.clone()
        };
        assert_eq!(odd.local_lease(), Duration::ZERO);
        let odd = TimingConfig {
            deadline_margin: -3.0,
            ..t.clone()
        };
        assert_eq!(odd.local_lease(), t.ttl);
        let odd = TimingConfig {
            deadline_margin: 7.0,
            ttl: Duration::MAX,
            ..t.clone()
        };
        assert_eq!(odd.local_lease(), Duration::ZERO);

        let mut r = role("a");
        assert_eq!(t.for_role(&r), t);
        r.ttl = Some(Duration::from_secs(9));
        r.heartbeat = Some(Duration::from_secs(2));
        r.deadline_margin = Some(0.3);
        r.operation_timeout = Some(Duration::from_secs(4));
        r.disconnect_grace = Some(Duration::from_secs(5));
        r.campaign_jitter = Some(Duration::from_millis(6));
        assert_eq!(
            t.for_role(&r),
            TimingConfig {
                ttl: Duration::from_secs(9),
                heartbeat: Duration::from_secs(2),
                deadline_margin: 0.3,
                operation_timeout: Duration::from_secs(4),
                disconnect_grace: Duration::from_secs(5),
                campaign_jitter: Duration::from_millis(6),
            }
        );
    }

    #[test]
    fn role_defaults_and_priority() {
        let r = role("a");
        assert!(r.campaign);
        assert_eq!(r.priority, None);
        let instance = InstanceConfig {
            priority: 4,
            ..InstanceConfig::default()
        };
        assert_eq!(r.effective_priority(&instance), 4);
        let r = RoleConfig {
            priority: Some(-2),
            ..r
        };
        assert_eq!(r.effective_priority(&instance), -2);
        let parsed = Config::from_yaml_str("roles: [{name: a}]").unwrap();
        assert_eq!(parsed.roles, [role("a")]);
    }

    // ----- timing rules (top level) -----

    #[test]
    fn ttl_must_be_at_least_one_second() {
        let c = with_timing(|t| {
            t.ttl = Duration::from_millis(900);
            t.heartbeat = Duration::from_millis(100);
            t.operation_timeout = Duration::from_millis(100);
            t.disconnect_grace = Duration::from_millis(100);
        });
        let p = only_problem(&c, "timing.ttl");
        assert!(p.message.contains("shorter than 1s"), "{p}");
    }

    #[test]
    fn ttl_must_be_whole_seconds() {
        let c = with_timing(|t| t.ttl = Duration::from_millis(4500));
        let p = only_problem(&c, "timing.ttl");
        assert_eq!(
            p.message,
            "4s 500ms is not a whole number of seconds (NATS per-key TTLs are whole seconds)"
        );
    }

    #[test]
    fn heartbeat_must_be_positive() {
        let c = with_timing(|t| {
            t.heartbeat = Duration::ZERO;
            t.campaign_jitter = Duration::ZERO;
        });
        only_problem(&c, "timing.heartbeat");
    }

    #[test]
    fn three_heartbeats_must_fit_in_ttl() {
        let c = with_timing(|t| t.heartbeat = Duration::from_millis(1001));
        let p = only_problem(&c, "timing.heartbeat");
        assert!(p.message.contains("at least 3 heartbeats"), "{p}");
        let ok = with_timing(|t| t.heartbeat = Duration::from_secs(1));
        assert_eq!(fields(&ok), Vec::<String>::new());
    }

    #[test]
    fn deadline_margin_range() {
        for bad in [0.0, 0.5, -0.1, 1.0, f64::NAN, f64::INFINITY] {
            let c = with_timing(|t| t.deadline_margin = bad);
            only_problem(&c, "timing.deadline_margin");
        }
        for good in [0.01, 0.25, 0.49] {
            let c = with_timing(|t| t.deadline_margin = good);
            assert_eq!(fields(&c), Vec::<String>::new(), "margin {good}");
        }
    }

    #[test]
    fn operation_timeout_rules() {
        let c = with_timing(|t| t.operation_timeout = Duration::ZERO);
        only_problem(&c, "timing.operation_timeout");
        // local lease: 3s × 0.9 = 2.7s
        let c = with_timing(|t| t.operation_timeout = Duration::from_millis(2700));
        let p = only_problem(&c, "timing.operation_timeout");
        assert!(p.message.contains("2s 700ms"), "{p}");
        let c = with_timing(|t| t.operation_timeout = Duration::from_millis(2699));
        assert_eq!(fields(&c), Vec::<String>::new());
    }

    #[test]
    fn disconnect_grace_at_most_ttl() {
        let c = with_timing(|t| t.disconnect_grace = Duration::from_millis(3001));
        only_problem(&c, "timing.disconnect_grace");
        let c = with_timing(|t| t.disconnect_grace = Duration::from_secs(3));
        assert_eq!(fields(&c), Vec::<String>::new());
    }

    #[test]
    fn campaign_jitter_below_heartbeat() {
        let c = with_timing(|t| t.campaign_jitter = Duration::from_millis(750));
        only_problem(&c, "timing.campaign_jitter");
    }

    // ----- timing rules (per role) -----

    #[test]
    fn role_ttl_override_is_named() {
        let c = with_role(|r| r.ttl = Some(Duration::from_millis(1500)));
        let found = problems(&c);
        let p = found
            .iter()
            .find(|p| p.message.contains("whole number"))
            .unwrap();
        assert_eq!(p.field, "roles[1].ttl");
        assert!(
            p.message
                .starts_with("1s 500ms is not a whole number of seconds"),
            "{p}"
        );
        assert!(p.message.contains("role \"scheduler\""), "{p}");
        // 1.5s ttl also breaks heartbeat (inherited 750ms) and disconnect_grace
        // (inherited 2s); the inherited operation_timeout 1s < 1.35s is fine.
        assert_eq!(
            fields(&c),
            ["roles[1].ttl", "roles[1].ttl", "roles[1].ttl"],
            "{found:#?}"
        );
    }

    #[test]
    fn role_override_blamed_for_inherited_value() {
        // ttl override 2s makes the inherited heartbeat (750ms) too long.
        let c = with_role(|r| r.ttl = Some(Duration::from_secs(2)));
        let found = problems(&c);
        let heartbeat = found
            .iter()
            .find(|p| p.message.contains("heartbeats"))
            .unwrap();
        assert_eq!(heartbeat.field, "roles[1].ttl");
        assert!(
            heartbeat
                .message
                .starts_with("heartbeat 750ms is too long for ttl 2s"),
            "{heartbeat}"
        );
        assert!(
            heartbeat
                .message
                .contains("heartbeat 750ms inherited from timing.heartbeat"),
            "{heartbeat}"
        );
        assert_eq!(fields(&c), ["roles[1].ttl"]);
    }

    #[test]
    fn role_timing_rules_each_name_the_override() {
        type Case = (fn(&mut RoleConfig), &'static str);
        let cases: Vec<Case> = vec![
            (|r| r.heartbeat = Some(Duration::ZERO), "roles[1].heartbeat"),
            (
                |r| r.heartbeat = Some(Duration::from_secs(2)),
                "roles[1].heartbeat",
            ),
            (
                |r| r.deadline_margin = Some(0.5),
                "roles[1].deadline_margin",
            ),
            (
                |r| r.operation_timeout = Some(Duration::ZERO),
                "roles[1].operation_timeout",
            ),
            (
                |r| r.operation_timeout = Some(Duration::from_secs(3)),
                "roles[1].operation_timeout",
            ),
            (
                |r| r.disconnect_grace = Some(Duration::from_secs(4)),
                "roles[1].disconnect_grace",
            ),
            (
                |r| r.campaign_jitter = Some(Duration::from_secs(1)),
                "roles[1].campaign_jitter",
            ),
            // the margin makes the inherited operation_timeout (1s) too long: 3s × 0.6 = 1.8s is fine,
            // but with ttl 1s: 1s × 0.9 = 900ms < 1s.
            (
                |r| {
                    r.ttl = Some(Duration::from_secs(1));
                    r.heartbeat = Some(Duration::from_millis(300));
                    r.disconnect_grace = Some(Duration::from_secs(1));
                },
                "roles[1].ttl",
            ),
        ];
        for (f, field) in cases {
            let c = with_role(f);
            let p = only_problem(&c, field);
            assert!(p.message.contains("(role \"scheduler\""), "{p}");
        }
    }

    #[test]
    fn inherited_problems_are_reported_once() {
        let mut c = with_role(|_| {});
        c.timing.heartbeat = Duration::from_secs(2);
        c.timing.campaign_jitter = Duration::from_millis(1);
        // Both roles inherit the bad heartbeat: reported only for `timing`.
        assert_eq!(fields(&c), ["timing.heartbeat"]);
        // A role fixing it by override is fine; one breaking it differently is named.
        c.roles[0].ttl = Some(Duration::from_secs(6));
        c.roles[1].ttl = Some(Duration::from_secs(5));
        assert_eq!(fields(&c), ["timing.heartbeat", "roles[1].ttl"]);
    }

    // ----- other sections -----

    #[test]
    fn bucket_rules() {
        for bad in ["", "a.b", "a b", "rolés", "a*"] {
            let mut c = Config::default();
            c.bucket.name = bad.to_owned();
            only_problem(&c, "bucket.name");
        }
        for replicas in [0, 6] {
            let mut c = Config::default();
            c.bucket.replicas = replicas;
            only_problem(&c, "bucket.replicas");
        }
        let mut c = Config::default();
        c.bucket.name = "KV_roles-2".into();
        c.bucket.replicas = 5;
        assert_eq!(fields(&c), Vec::<String>::new());
    }

    #[test]
    fn server_urls() {
        for good in [
            "nats://a:4222",
            "NATS://a",
            "tls://a.example.com:4443",
            "ws://a/path",
            "wss://user:pw@a:443",
            "10.0.0.1:4222",
            "[::1]:4222",
            "nats://[::1]:4222",
            "nats://token@a",
        ] {
            assert_eq!(check_server(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "http://a:80",
            "nats://",
            "nats://:4222",
            "localhost",
            "a:99999",
            "a:0",
            "a:port",
            "nats://a b",
            "[::1",
            "nats://[::1]x",
        ] {
            assert!(check_server(bad).is_err(), "{bad}");
        }
        let mut c = Config::default();
        c.nats.servers = vec!["nats://ok:4222".into(), "http://bad".into()];
        let p = only_problem(&c, "nats.servers[1]");
        assert!(p.message.contains("http"), "{p}");
        c.nats.servers.clear();
        only_problem(&c, "nats.servers");
    }

    #[test]
    fn user_and_password_go_together() {
        let mut c = Config::default();
        c.nats.user = Some("u".into());
        only_problem(&c, "nats.user");
        let mut c = Config::default();
        c.nats.password = Some("p".into());
        only_problem(&c, "nats.password");
        c.nats.user = Some("u".into());
        assert_eq!(fields(&c), Vec::<String>::new());
    }

    #[test]
    fn at_most_one_auth_method() {
        let mut c = Config::default();
        c.nats.creds_file = Some("a.creds".into());
        c.nats.token = Some("t".into());
        let p = only_problem(&c, "nats");
        assert!(p.message.contains("creds_file, token"), "{p}");
        assert!(!p.message.contains("\"t\""));
        c.nats.token = None;
        c.nats.nkey_seed_file = Some("seed".into());
        only_problem(&c, "nats");
        c.nats.nkey_seed_file = None;
        c.nats.user = Some("u".into());
        c.nats.password = Some("p".into());
        only_problem(&c, "nats");
    }

    #[test]
    fn tls_cert_and_key_go_together() {
        let mut c = Config::default();
        c.nats.tls.cert_file = Some("c.pem".into());
        only_problem(&c, "nats.tls.cert_file");
        let mut c = Config::default();
        c.nats.tls.key_file = Some("k.pem".into());
        only_problem(&c, "nats.tls.key_file");
    }

    #[test]
    fn duplicate_role_names_name_both_indices() {
        let c = Config {
            roles: vec![role("a"), role("b"), role("a"), role("a")],
            ..Config::default()
        };
        let found = problems(&c);
        assert_eq!(
            found.iter().map(|p| p.field.as_str()).collect::<Vec<_>>(),
            ["roles[2].name", "roles[3].name"]
        );
        assert!(
            found[0].message.contains("roles[0] and roles[2]"),
            "{}",
            found[0]
        );
        assert!(
            found[1].message.contains("roles[0] and roles[3]"),
            "{}",
            found[1]
        );
    }

    #[test]
    fn retry_rules() {
        let mut c = Config::default();
        c.retry.initial_backoff = Duration::ZERO;
        only_problem(&c, "retry.initial_backoff");
        let mut c = Config::default();
        c.retry.max_backoff = Duration::from_millis(49);
        only_problem(&c, "retry.max_backoff");
        let mut c = Config::default();
        c.retry.persistent_interval = Duration::from_millis(99);
        only_problem(&c, "retry.persistent_interval");
        for bad in [0.99, f64::NAN, f64::INFINITY] {
            let mut c = Config::default();
            c.retry.multiplier = bad;
            only_problem(&c, "retry.multiplier");
        }
        for bad in [-0.01, 1.01, f64::NAN] {
            let mut c = Config::default();
            c.retry.jitter = bad;
            only_problem(&c, "retry.jitter");
        }
        let mut c = Config::default();
        c.retry.multiplier = 1.0;
        c.retry.jitter = 0.0;
        c.retry.max_backoff = c.retry.initial_backoff;
        assert_eq!(fields(&c), Vec::<String>::new());
        c.retry.jitter = 1.0;
        assert_eq!(fields(&c), Vec::<String>::new());
    }

    #[test]
    fn health_rules() {
        let mut c = Config::default();
        c.health.command = Some(Vec::new());
        only_problem(&c, "health.command");
        c.health.command = Some(vec![String::new(), "x".into()]);
        only_problem(&c, "health.command[0]");
        c.health.command = Some(vec!["true".into()]);
        assert_eq!(fields(&c), Vec::<String>::new());

        let mut c = Config::default();
        c.health.timeout = Duration::from_millis(1001);
        only_problem(&c, "health.timeout");
        let mut c = Config::default();
        c.health.timeout = Duration::ZERO;
        only_problem(&c, "health.timeout");
        let mut c = Config::default();
        c.health.interval = Duration::ZERO;
        c.health.timeout = Duration::ZERO;
        assert_eq!(fields(&c), ["health.interval", "health.timeout"]);
        let mut c = Config::default();
        c.health.failure_threshold = 0;
        only_problem(&c, "health.failure_threshold");
    }

    #[test]
    fn shutdown_and_fencing_rules() {
        let mut c = Config::default();
        c.shutdown.drain_timeout = Duration::from_secs(11);
        only_problem(&c, "shutdown.drain_timeout");
        let mut c = Config::default();
        c.fencing.validation_interval = Some(Duration::ZERO);
        only_problem(&c, "fencing.validation_interval");
        c.fencing.validation_interval = Some(Duration::from_millis(1));
        assert_eq!(fields(&c), Vec::<String>::new());
    }

    #[test]
    fn instance_meta_limits() {
        let mut c = Config::default();
        c.instance.meta = (0..33).map(|i| (format!("k{i}"), "v".to_owned())).collect();
        only_problem(&c, "instance.meta");
        let mut c = Config::default();
        c.instance.meta.insert("k".repeat(257), "v".into());
        let p = only_problem(&c, "instance.meta");
        assert!(p.message.contains("257 bytes"), "{p}");
        let mut c = Config::default();
        c.instance.meta.insert("host".into(), "v".repeat(257));
        only_problem(&c, "instance.meta.host");
        let mut c = Config::default();
        c.instance.meta = (0..32)
            .map(|i| (format!("k{i}"), "v".repeat(256)))
            .collect();
        c.instance.meta.insert("k".repeat(256), "v".into());
        c.instance.meta.remove("k0");
        assert_eq!(fields(&c), Vec::<String>::new());
    }

    #[test]
    fn instance_id_is_optional_until_required() {
        let mut c = Config::default();
        assert!(c.validate().is_ok());
        let err = c.require_instance_id().unwrap_err();
        assert_eq!(err.problems()[0].field, "instance.id");
        assert!(err.to_string().contains(ENV_INSTANCE_ID));
        c.instance.id = Some(InstanceId::new("node-a").unwrap());
        assert_eq!(c.require_instance_id().unwrap().as_str(), "node-a");
    }

    // ----- reporting -----

    #[test]
    fn all_problems_are_reported_together_with_locations() {
        let text = "\
bucket:
  name: bad.name
  replicas: 9
timing:
  heartbeat: 2s
roles:
  - name: a
  - name: b
    ttl: 2500ms
  - name: a
shutdown:
  drain_timeout: 1m
";
        let found = yaml_problems(text);
        let got: Vec<(&str, Option<usize>, Option<usize>)> = found
            .iter()
            .map(|p| (p.field.as_str(), p.line, p.column))
            .collect();
        assert_eq!(
            got,
            [
                ("bucket.name", Some(2), Some(9)),
                ("bucket.replicas", Some(3), Some(13)),
                // ttl is not written in the file: points at the heartbeat, which is
                ("timing.heartbeat", Some(5), Some(14)),
                ("roles[1].ttl", Some(9), Some(10)),
                ("roles[1].ttl", Some(9), Some(10)),
                ("roles[2].name", Some(10), Some(11)),
                ("shutdown.drain_timeout", Some(12), Some(18)),
            ],
            "{found:#?}"
        );
        let err = Config::from_yaml_str(text).unwrap_err();
        let display = err.to_string();
        let lines: Vec<&str> = display.lines().collect();
        assert_eq!(lines.len(), 1 + found.len(), "{display}");
        assert_eq!(lines[0], "invalid configuration (7 problems):");
        assert!(lines[1].starts_with("  bucket.name: bucket name \"bad.name\" contains '.'"));
        assert!(lines[1].ends_with("(line 2, column 9)"), "{}", lines[1]);
    }

    #[test]
    fn problems_without_a_written_value_point_at_the_section_or_nothing() {
        // disconnect_grace (default 2s) is not written: the location of the
        // related ttl is used.
        let found =
            yaml_problems("timing:\n  ttl: 1s\n  heartbeat: 300ms\n  operation_timeout: 500ms\n");
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(
            (found[0].field.as_str(), found[0].line),
            ("timing.disconnect_grace", Some(2))
        );
        // Nothing related written: the enclosing section.
        let found = yaml_problems("nats:\n  servers: []\n  name: x\n");
        assert_eq!(
            (found[0].field.as_str(), found[0].line, found[0].column),
            ("nats.servers", Some(2), Some(12))
        );
        let found = yaml_problems("nats:\n  user: u\n  token: t\n");
        assert_eq!(
            found
                .iter()
                .map(|p| (p.field.as_str(), p.line))
                .collect::<Vec<_>>(),
            [("nats.user", Some(2)), ("nats", Some(2))]
        );
        // validate() alone has no source, hence no locations.
        let mut c = Config::default();
        c.bucket.replicas = 0;
        assert_eq!(problems(&c)[0].line, None);
    }

    #[test]
    fn locations_follow_anchors_and_flow_style() {
        let text = "\
x-common: &slow {ttl: 2s}
roles:
  - {name: a, ttl: 2s}
";
        // unknown top-level keys are still rejected, anchors or not
        assert!(matches!(
            Config::from_yaml_str(text),
            Err(ConfigError::Parse { .. })
        ));
        let text = "roles:\n  - {name: a, ttl: 2s}\n  - &r {name: b}\n";
        let found = yaml_problems(text);
        assert_eq!(
            (found[0].field.as_str(), found[0].line, found[0].column),
            ("roles[0].ttl", Some(2), Some(20))
        );
    }

    #[test]
    fn unknown_keys_are_rejected_with_location() {
        let (line, column, message) = parse_err("nats:\n  servers: []\n  servrs: [x]\n");
        assert_eq!((line, column), (Some(3), Some(3)));
        assert!(message.contains("unknown field `servrs`"), "{message}");
        let (line, _, message) = parse_err("roles:\n  - name: a\n    tll: 3s\n");
        assert_eq!(line, Some(3));
        assert!(message.contains("`tll`"), "{message}");
        let (line, _, message) = parse_err("timing: {}\nbogus: 1\n");
        assert_eq!(line, Some(2));
        assert!(message.contains("`bogus`"), "{message}");
        let err = Config::from_yaml_str("bogus: 1\n").unwrap_err().to_string();
        assert!(
            err.starts_with("invalid configuration at line 1, column 1: unknown field `bogus`"),
            "{err}"
        );
    }

    #[test]
    fn malformed_yaml_gives_parse_error_with_location() {
        let cases = [
            ("nats:\n  servers: [\"a\", \"b\"\n  name: x\n", 3),
            ("timing:\n  ttl: 3s\n  - heartbeat\n", 3),
            ("bucket:\n  name: \"unterminated\n", 3),
            ("roles:\n- name: a\n  - name: b\n", 3),
            ("nats: {servers: [a}\n", 1),
            ("\t- x\n", 1),
        ];
        for (text, expected_line) in cases {
            let (line, column, message) = parse_err(text);
            assert_eq!(line, Some(expected_line), "{text:?}: {message}");
            assert!(column.is_some(), "{text:?}");
            assert!(!message.is_empty());
        }
    }

    #[test]
    fn type_errors_give_parse_errors() {
        let (line, _, message) = parse_err("timing:\n  ttl: 3 seconds please\n");
        assert_eq!(line, Some(2));
        assert!(message.contains("duration"), "{message}");
        let (line, _, message) = parse_err("roles:\n  - name: \"a b\"\n");
        assert_eq!(line, Some(2));
        assert!(message.contains("invalid role name \"a b\""), "{message}");
        let (_, _, message) = parse_err("instance:\n  id: node/1\n");
        assert!(
            message.contains("invalid instance id \"node/1\""),
            "{message}"
        );
        let (line, _, message) = parse_err("roles:\n  - description: no name\n");
        assert_eq!(line, Some(2));
        assert!(message.contains("name"), "{message}");
        // YAML 1.1 booleans are not accepted.
        let (line, _, _) = parse_err("roles:\n  - name: a\n    campaign: no\n");
        assert_eq!(line, Some(3));
        // Duplicate keys are rejected.
        let (line, _, message) = parse_err("bucket:\n  name: a\n  name: b\n");
        assert_eq!(line, Some(3), "{message}");
        // Null is not an empty list.
        parse_err("roles:\n");
        // Only one document.
        parse_err("bucket: {name: a}\n---\nbucket: {name: b}\n");
    }

    #[test]
    fn hostile_input_is_rejected_without_panicking() {
        // Deep flow nesting: stopped by the parser's nesting limit.
        let deep = format!("roles: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        let (line, _, message) = parse_err(&deep);
        assert_eq!(line, Some(1), "{message}");
        // Deep block nesting (rejected as soon as the shape is wrong).
        let mut block = String::from("roles:\n");
        for depth in 0..10_000 {
            block.push_str(&"  ".repeat(depth % 500 + 1));
            block.push_str("- \n");
        }
        parse_err(&block);
        // Larger than MAX_CONFIG_BYTES: rejected before parsing.
        let huge = format!("nats:\n  name: \"{}\"\n", "x".repeat(MAX_CONFIG_BYTES));
        let (line, column, message) = parse_err(&huge);
        assert_eq!((line, column), (None, None));
        assert!(message.contains("at most 1048576"), "{message}");
        // Too many nodes: the budget.
        let wide = format!("health:\n  command: [{}]\n", "a,".repeat(200_000));
        let (_, _, message) = parse_err(&wide);
        assert!(message.contains("limits breached: Nodes"), "{message}");
        // Alias amplification: replayed scalars count against the scalar budget.
        let mut bomb = format!("health:\n  command: [&s {}", "1".repeat(500_000));
        bomb.push_str(&",*s".repeat(50));
        bomb.push_str("]\n");
        let (_, _, message) = parse_err(&bomb);
        assert!(
            message.contains("limits breached: ScalarBytes"),
            "{}",
            &message[..100]
        );
        // Nested alias amplification ("billion laughs") of a valid shape.
        let mut laughs = String::from("health:\n  command: [&a lol");
        laughs.push_str(&",*a".repeat(2_000));
        laughs.push_str("]\n");
        let (_, _, message) = parse_err(&laughs);
        assert!(message.contains("limits breached: Aliases"), "{message}");
    }

    #[test]
    fn debug_redacts_secrets() {
        let nats = NatsConfig {
            user: Some("alice".into()),
            password: Some("hunter2-secret".into()),
            token: Some("tok-secret".into()),
            ..NatsConfig::default()
        };
        let debug = format!("{nats:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(!debug.contains("tok-secret"), "{debug}");
        assert!(debug.contains("<redacted>"), "{debug}");
        assert!(debug.contains("alice"), "{debug}");
        let whole = format!(
            "{:?}",
            Config {
                nats,
                ..Config::default()
            }
        );
        assert!(
            !whole.contains("hunter2") && !whole.contains("tok-secret"),
            "{whole}"
        );
        assert!(format!("{:?}", NatsConfig::default()).contains("password: None"));
    }

    // ----- environment -----

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    #[test]
    fn env_overrides() {
        let mut c = Config::default();
        c.apply_env(env_of(&[
            ("NATS_URL", "nats://a:4222, tls://b:4443,,"),
            ("NATS_CREDS", "/run/secrets/nats.creds"),
            ("NATS_ROLES_INSTANCE_ID", "node-7"),
            ("NATS_ROLES_BUCKET", "roles_v2"),
            ("UNRELATED", "x"),
        ]))
        .unwrap();
        assert_eq!(c.nats.servers, ["nats://a:4222", "tls://b:4443"]);
        assert_eq!(
            c.nats.creds_file,
            Some(PathBuf::from("/run/secrets/nats.creds"))
        );
        assert_eq!(c.instance.id, Some(InstanceId::new("node-7").unwrap()));
        assert_eq!(c.bucket.name, "roles_v2");
        assert!(c.validate().is_ok());

        let mut unchanged = Config::default();
        unchanged
            .apply_env(env_of(&[("NATS_URL", " "), ("NATS_ROLES_BUCKET", "")]))
            .unwrap();
        assert_eq!(unchanged, Config::default());
    }

    #[test]
    fn invalid_env_values_name_the_variable_and_change_nothing() {
        let mut c = Config::default();
        let err = c
            .apply_env(env_of(&[
                ("NATS_URL", "nats://ok:4222,http://bad"),
                ("NATS_CREDS", "/ok.creds"),
                ("NATS_ROLES_INSTANCE_ID", "node 7"),
                ("NATS_ROLES_BUCKET", "a.b"),
            ]))
            .unwrap_err();
        let named: Vec<&str> = err.problems().iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            named,
            ["NATS_URL", "NATS_ROLES_INSTANCE_ID", "NATS_ROLES_BUCKET"]
        );
        assert!(err.problems()[1].message.contains("\"node 7\""), "{err}");
        assert_eq!(c, Config::default());
        let err = c.apply_env(env_of(&[("NATS_URL", ",,")])).unwrap_err();
        assert_eq!(err.problems()[0].field, "NATS_URL");
    }

    // ----- files -----

    #[test]
    fn load_reads_validates_and_names_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("roles.yaml");
        std::fs::write(&path, "roles:\n  - name: scheduler\n").unwrap();
        assert_eq!(Config::load(&path).unwrap().roles, [role("scheduler")]);

        std::fs::write(&path, "bucket:\n  replicas: 0\n").unwrap();
        let err = Config::load(&path).unwrap_err();
        assert_eq!(err.problems()[0].line, Some(2));

        let missing = dir.path().join("nope.yaml");
        match Config::load(&missing) {
            Err(ConfigError::Io { path, source }) => {
                assert_eq!(path, missing);
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
        let shown = Config::load(&missing).unwrap_err().to_string();
        assert!(shown.contains("nope.yaml"), "{shown}");

        std::fs::write(&path, vec![b'#'; MAX_CONFIG_BYTES + 10]).unwrap();
        assert!(matches!(
            Config::load(&path),
            Err(ConfigError::Parse { .. })
        ));
    }

    #[test]
    fn load_names_the_size_of_a_large_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("roles.yaml");
        // 50 MB, sparse: never read.
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(50_000_000).unwrap();
        let err = Config::load(&path).unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.contains("is 50000000 bytes (47.7 MiB); at most 1048576 bytes (1 MiB)"),
            "{shown}"
        );
        file.set_len(MAX_CONFIG_BYTES as u64 + 1).unwrap();
        let shown = Config::load(&path).unwrap_err().to_string();
        assert!(shown.contains("is 1048577 bytes (1.0 MiB)"), "{shown}");
        // Exactly the limit is read (and parsed: zero bytes are not YAML).
        file.set_len(MAX_CONFIG_BYTES as u64).unwrap();
        let shown = Config::load(&path).unwrap_err().to_string();
        assert!(!shown.contains("at most"), "{shown}");
    }

    #[test]
    fn load_points_at_the_first_invalid_utf8_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("roles.yaml");
        std::fs::write(&path, [0xff, 0xfe, b'\n']).unwrap();
        match Config::load(&path) {
            Err(ConfigError::Parse {
                line: Some(1),
                column: Some(1),
                message,
            }) => assert!(
                message.contains("not valid UTF-8: invalid byte 0xff at byte offset 0"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
        // Multi-byte characters before it count as one column each.
        let mut bytes = "timing:\n  ttl: 3s # é€\u{1F600} ".as_bytes().to_vec();
        bytes.extend_from_slice(&[0xe2, 0x82, b'\n']);
        std::fs::write(&path, &bytes).unwrap();
        match Config::load(&path) {
            Err(err @ ConfigError::Parse { .. }) => {
                let shown = err.to_string();
                assert!(
                    shown.starts_with("invalid configuration at line 2, column 17: ")
                        && shown.contains("invalid byte 0xe2 0x82 at byte offset 30"),
                    "{shown}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// `Config::load(path)` on another thread: a load that blocks fails the test instead of
    /// hanging it.
    fn load_within_5s(path: &Path) -> Result<Config, ConfigError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let owned = path.to_owned();
        std::thread::spawn(move || {
            let _ = tx.send(Config::load(&owned));
        });
        rx.recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("Config::load({}) blocked", path.display()))
    }

    #[cfg(unix)]
    #[test]
    fn load_refuses_files_that_are_not_regular_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.yaml");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let socket_path = dir.path().join("socket.yaml");
        let _socket = std::os::unix::net::UnixListener::bind(&socket_path).unwrap();
        // A symlink to a FIFO is a FIFO.
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        for (path, kind) in [
            (fifo.as_path(), "a FIFO (named pipe)"),
            (link.as_path(), "a FIFO (named pipe)"),
            (socket_path.as_path(), "a socket"),
            (Path::new("/dev/null"), "a character device"),
            (dir.path(), "a directory"),
        ] {
            match load_within_5s(path) {
                Err(err @ ConfigError::NotAFile { .. }) => {
                    let shown = err.to_string();
                    assert!(
                        shown.contains(&format!("it is {kind}, not a regular file"))
                            && shown.contains(&path.display().to_string()),
                        "{shown}"
                    );
                }
                other => panic!("{}: {other:?}", path.display()),
            }
        }
        // A symlink to a regular file is read.
        let file = dir.path().join("roles.yaml");
        std::fs::write(&file, "roles:\n  - name: a\n").unwrap();
        let link = dir.path().join("file-link.yaml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(load_within_5s(&link).unwrap().roles, [role("a")]);
    }

    #[test]
    fn durations_have_upper_bounds_reported_with_their_location() {
        // What the server cannot honour (nats-server overflows at ~240 years) is refused with
        // the place it was written, never a panic or an overflow.
        let problems = yaml_problems("timing:\n  ttl: 1000000000y\n");
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert_eq!(problems[0].field, "timing.ttl");
        assert_eq!((problems[0].line, problems[0].column), (Some(2), Some(8)));
        assert!(
            problems[0]
                .message
                .contains("is longer than the maximum 1h"),
            "{}",
            problems[0]
        );
        let problems =
            yaml_problems("roles:\n  - name: a\n    ttl: 3601s\n    heartbeat: 1000000000y\n");
        let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            fields_of(&problems),
            ["roles[0].ttl", "roles[0].heartbeat"],
            "{shown:#?}"
        );
        assert_eq!(problems[0].line, Some(3), "{shown:#?}");
        assert_eq!(problems[1].line, Some(4), "{shown:#?}");
        // The maximum itself is accepted.
        let c = with_timing(|t| t.ttl = Timing::MAX_TTL);
        assert_eq!(fields(&c), Vec::<String>::new());

        // Every other duration: at most MAX_DURATION, each named with its line.
        let keys = [
            ("nats", "ping_interval"),
            ("nats", "connect_timeout"),
            ("nats", "request_timeout"),
            ("retry", "initial_backoff"),
            ("retry", "max_backoff"),
            ("retry", "persistent_interval"),
            ("health", "interval"),
            ("health", "cooldown"),
            ("fencing", "validation_interval"),
            ("shutdown", "timeout"),
            ("placement", "stability_window"),
            ("placement", "leave_delay"),
            ("placement", "claim_grace"),
            ("placement", "cooldown"),
            ("placement", "move_interval"),
            ("placement", "member_ttl"),
        ];
        for (value, accepted) in [("1h", true), ("3601s", false), ("1000000000y", false)] {
            for (section, key) in keys {
                let mut yaml = format!("{section}:\n  {key}: {value}\n");
                if key == "initial_backoff" {
                    // max_backoff must not be shorter.
                    yaml.push_str(&format!("  max_backoff: {value}\n"));
                }
                let result = Config::from_yaml_str(&yaml);
                if accepted {
                    assert!(result.is_ok(), "{yaml}: {result:?}");
                    continue;
                }
                let problems = yaml_problems(&yaml);
                let field = format!("{section}.{key}");
                let p = problems
                    .iter()
                    .find(|p| p.field == field)
                    .unwrap_or_else(|| panic!("{yaml}: {problems:#?}"));
                assert_eq!(p.line, Some(2), "{p}");
                assert!(
                    p.message.contains("at most 1h") || p.message.contains("maximum 1h"),
                    "{p}"
                );
            }
        }
        // Bounded through other rules: health.timeout ≤ interval, drain ≤ shutdown timeout.
        let problems = yaml_problems("health:\n  timeout: 2h\nshutdown:\n  drain_timeout: 2h\n");
        assert_eq!(
            fields_of(&problems),
            ["health.timeout", "shutdown.drain_timeout"]
        );
        let problems = yaml_problems(
            "telemetry:\n  otlp:\n    endpoint: http://127.0.0.1:4318\n    export_interval: 2h\n    timeout: 1000000000y\n",
        );
        assert_eq!(
            fields_of(&problems),
            ["telemetry.otlp.export_interval", "telemetry.otlp.timeout"]
        );
        assert_eq!(problems[1].line, Some(5));
    }

    fn fields_of(problems: &[ConfigProblem]) -> Vec<&str> {
        problems.iter().map(|p| p.field.as_str()).collect()
    }

    #[test]
    fn non_finite_numbers_are_reported_with_their_location() {
        for (yaml, field, line, column) in [
            (
                "timing:\n  deadline_margin: .nan\n",
                "timing.deadline_margin",
                2,
                20,
            ),
            (
                "timing:\n  deadline_margin: .inf\n",
                "timing.deadline_margin",
                2,
                20,
            ),
            (
                "timing:\n  deadline_margin: -.inf\n",
                "timing.deadline_margin",
                2,
                20,
            ),
            ("retry:\n  multiplier: .inf\n", "retry.multiplier", 2, 15),
            ("retry:\n  jitter: .NaN\n", "retry.jitter", 2, 11),
            (
                "roles:\n  - name: a\n    deadline_margin: .nan\n",
                "roles[0].deadline_margin",
                3,
                22,
            ),
        ] {
            let problems = yaml_problems(yaml);
            assert_eq!(problems.len(), 1, "{yaml}: {problems:#?}");
            let p = &problems[0];
            assert_eq!(p.field, field, "{p}");
            assert_eq!(
                (p.line, p.column),
                (Some(line), Some(column)),
                "{yaml}: {p}"
            );
        }
    }

    proptest! {
        #[test]
        fn arbitrary_strings_never_panic(text in ".{0,300}") {
            let _ = Config::from_yaml_str(&text);
        }

        #[test]
        fn yaml_like_strings_never_panic(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("\n"), Just("  "), Just("- "), Just(": "), Just("["), Just("]"),
                    Just("{"), Just("}"), Just(","), Just("&a "), Just("*a"), Just("<<: "),
                    Just("roles"), Just("name"), Just("ttl"), Just("timing"), Just("nats"),
                    Just("servers"), Just("3s"), Just("1.5s"), Just("0"), Just("\""), Just("'"),
                    Just("#"), Just("---"), Just("!!str "), Just("~"), Just("heartbeat"),
                    Just("x"), Just("true"), Just("-1"), Just(".nan"), Just("|"),
                ],
                0..60,
            )
        ) {
            let text: String = parts.concat();
            let _ = Config::from_yaml_str(&text);
        }
    }
}

#[cfg(test)]
mod http_tests {
    use super::*;

    #[test]
    fn http_defaults_are_on_loopback_without_admin() {
        let c = Config::from_yaml_str("").unwrap();
        assert!(c.http.enabled);
        assert_eq!(c.http.listen, None);
        assert_eq!(c.http.admin_token, None);
        assert_eq!(c.http.listen_addr(), None);
    }

    #[test]
    fn http_section_parses_and_redacts_the_token() {
        let c = Config::from_yaml_str(
            "http:\n  listen: \"0.0.0.0:9090\"\n  admin_token: 0123456789abcdef01\n",
        )
        .unwrap();
        assert_eq!(c.http.listen_addr(), Some("0.0.0.0:9090".parse().unwrap()));
        let shown = format!("{c:?}");
        assert!(!shown.contains("0123456789abcdef01"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn bad_http_values_are_reported_with_locations() {
        let err = Config::from_yaml_str(
            "http:\n  listen: localhost\n  admin_token: short\n  enabled: true\n",
        )
        .unwrap_err();
        let problems = err.problems();
        assert_eq!(problems.len(), 2, "{err}");
        assert_eq!(problems[0].field, "http.listen");
        assert_eq!(problems[0].line, Some(2));
        assert_eq!(problems[1].field, "http.admin_token");
        assert_eq!(problems[1].line, Some(3));
        assert!(!err.to_string().contains("short\""), "token echoed: {err}");
        let err =
            Config::from_yaml_str("http:\n  admin_token: \"has a space in it!!\"\n").unwrap_err();
        assert!(err.to_string().contains("whitespace"), "{err}");
        let err = Config::from_yaml_str("http:\n  lisen: 1\n").unwrap_err();
        assert!(err.to_string().contains("lisen"), "{err}");
    }

    #[test]
    fn admin_token_comes_from_the_environment() {
        let mut c = Config::default();
        c.apply_env(|name| (name == ENV_ADMIN_TOKEN).then(|| " 0123456789abcdefXYZ\n".into()))
            .unwrap();
        assert_eq!(c.http.admin_token.as_deref(), Some("0123456789abcdefXYZ"));
        let mut c = Config::default();
        let err = c
            .apply_env(|name| (name == ENV_ADMIN_TOKEN).then(|| "tiny".into()))
            .unwrap_err();
        assert_eq!(err.problems()[0].field, ENV_ADMIN_TOKEN);
        assert_eq!(c.http.admin_token, None);
    }
}
