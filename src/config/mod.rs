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

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::{RetryPolicy, Timing};
use crate::health::HealthPolicy;
use crate::names::{InstanceId, NameError, RoleName};

mod env;
mod error;
mod load;
mod locate;
mod telemetry;
#[cfg(test)]
mod tests;
mod validate;

pub use error::{ConfigError, ConfigProblem};
pub use telemetry::{DEFAULT_SERVICE_NAME, LogFormat, OtlpConfig, OtlpProtocol, TelemetryConfig};
use validate::Problems;

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
    /// The library's defaults ([`Timing::default`]).
    fn default() -> Self {
        let Timing {
            ttl,
            heartbeat,
            deadline_margin,
            operation_timeout,
            disconnect_grace,
            campaign_jitter,
        } = Timing::default();
        Self {
            ttl,
            heartbeat,
            deadline_margin,
            operation_timeout,
            disconnect_grace,
            campaign_jitter,
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
    /// The library's defaults ([`RetryPolicy::default`]).
    fn default() -> Self {
        let RetryPolicy {
            initial,
            max,
            multiplier,
            jitter,
            max_attempts,
            persistent_interval,
        } = RetryPolicy::default();
        Self {
            initial_backoff: initial,
            max_backoff: max,
            multiplier,
            jitter,
            max_attempts,
            persistent_interval,
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
    /// No command; the library's defaults ([`HealthPolicy::default`]) for the rest.
    fn default() -> Self {
        let HealthPolicy {
            interval,
            timeout,
            failure_threshold,
            cooldown,
        } = HealthPolicy::default();
        Self {
            command: None,
            interval,
            timeout,
            failure_threshold,
            cooldown,
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
        self.timing().local_lease()
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

impl Config {
    /// TTL of this instance's membership record: `placement.member_ttl` or `timing.ttl`.
    #[must_use]
    pub fn member_ttl(&self) -> Duration {
        self.placement.member_ttl.unwrap_or(self.timing.ttl)
    }
}
