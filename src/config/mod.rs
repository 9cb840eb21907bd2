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
//! (nesting depth, node and alias counts), and duplicate keys are errors. A file
//! that is YAML is then held against the schema as a whole (`schema`, `check`):
//! every value of the wrong type, unknown key (with the nearest known name) and
//! missing role name is reported at once, together with every broken rule of
//! [`Config::validate`], each naming the offending field (`roles[2].ttl`,
//! `timing.heartbeat`, ...), what was expected in words, and the line and
//! column it was written at.

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use serde::de::MapAccess;
use serde::{Deserialize, Deserializer, Serialize};

pub use crate::core::{RetryPolicy, Timing, TimingOverrides};
pub use crate::health::HealthPolicy;
pub use crate::metrics::RoleSeries;
use crate::names::{InstanceId, RoleName};
pub use crate::placement::{PlacementSettings, Takeover, Version, VersionError};
use inline::{Extra, MainPart};
use nats::Redacted;

mod check;
mod env;
mod error;
mod exec;
mod groups;
mod inline;
mod instance;
mod lists;
mod load;
mod locate;
mod message;
mod nats;
mod otel_env;
mod roles;
mod schema;
mod suggest;
mod telemetry;
#[cfg(test)]
mod tests;
mod tree;
mod validate;
mod wan;
mod yaml;

pub use error::{ConfigError, ConfigProblem};
#[cfg(feature = "cli")]
pub(crate) use exec::check_program;
pub(crate) use exec::program_problem;
pub use exec::{ExecConfig, HookConfig, OnExit, StopSignal};
pub use groups::GroupConfig;
pub use instance::InstanceConfig;
pub use nats::{NatsConfig, TlsConfig};
pub use otel_env::{
    ENV_OTLP_ENDPOINT, ENV_OTLP_HEADERS, ENV_OTLP_METRICS_ENDPOINT, ENV_OTLP_PROTOCOL,
    ENV_OTLP_TRACES_ENDPOINT, ENV_RESOURCE_ATTRIBUTES, ENV_SERVICE_NAME,
};
pub use roles::{MAX_SLOTS, RoleConfig};
pub use telemetry::{DEFAULT_SERVICE_NAME, LogFormat, OtlpConfig, OtlpProtocol, TelemetryConfig};
pub(crate) use wan::round_trip_issues;

/// Largest configuration document accepted by [`Config::from_yaml_str`] and
/// [`Config::load`], in bytes (1 MiB).
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;

pub use crate::core::{BucketSettings, MAX_BUCKET_REPLICAS, MAX_DURATION};

/// Most entries allowed in [`InstanceConfig::meta`].
pub const MAX_META_ENTRIES: usize = 32;

/// Longest key or value allowed in [`InstanceConfig::meta`], in bytes.
pub const MAX_META_LEN: usize = 256;

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
/// replacing [`BucketSettings::name`].
pub const ENV_BUCKET: &str = "NATS_ROLES_BUCKET";

/// Environment variable read by [`Config::apply_env`]: the admin bearer token
/// of the HTTP API, replacing [`HttpConfig::admin_token`].
pub const ENV_ADMIN_TOKEN: &str = "NATS_ROLES_ADMIN_TOKEN";

/// Environment variable replacing `http.local_token`.
pub const ENV_LOCAL_TOKEN: &str = "NATS_ROLES_LOCAL_TOKEN";

/// Environment variable replacing `instance.version`.
pub const ENV_VERSION: &str = "NATS_ROLES_VERSION";

/// Environment variable replacing `instance.zone` (e.g. a Kubernetes pod's
/// `topology.kubernetes.io/zone` label through the downward API).
pub const ENV_ZONE: &str = "NATS_ROLES_ZONE";

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
    /// [`BucketSettings::default()`] (bucket `roles`).
    pub bucket: BucketSettings,
    /// Identity and defaults of this manager instance. Default:
    /// [`InstanceConfig::default()`] (no id, priority 0).
    pub instance: InstanceConfig,
    /// Lease timing for every role; each role may override individual values.
    /// Default: [`Timing::default()`] (ttl 3s, heartbeat 750ms).
    pub timing: Timing,
    /// Backoff for retrying failed NATS operations. Default:
    /// [`RetryPolicy::default()`].
    pub retry: RetryPolicy,
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
    /// (docs/placement.md). Default: [`PlacementSettings::default()`] (off).
    pub placement: PlacementSettings,
    /// The roles this instance takes part in. Default: empty (roles may also
    /// be added at runtime).
    pub roles: Vec<RoleConfig>,
    /// Role groups (protocol Q14): each entry is the roles `<name>-0` … `<name>-<count − 1>`
    /// with the entry's role settings. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupConfig>,
}

/// An optional health command: while it fails, this instance gives up and
/// does not contend for roles. In YAML the [`HealthPolicy`] fields are written
/// next to `command`.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct HealthConfig {
    /// Argument vector of the health command (exit status 0 = healthy); must
    /// not be empty when given. Default: `None` (no health checking).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Interval, timeout, failure threshold and cooldown of the checks.
    /// Default: [`HealthPolicy::default()`].
    #[serde(flatten)]
    pub policy: HealthPolicy,
}

/// `health.command` as written: a list or the program alone (`lists`).
struct OptionalCommand(Option<Vec<String>>);

impl<'de> Deserialize<'de> for OptionalCommand {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lists::optional_command(d).map(OptionalCommand)
    }
}

/// The `command` entry of the `health` section.
struct HealthCommand(Option<Vec<String>>);

impl<'de> Extra<'de> for HealthCommand {
    fn take<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        if key != "command" {
            return Ok(false);
        }
        self.0 = map.next_value::<OptionalCommand>()?.0;
        Ok(true)
    }
}

impl<'de> MainPart<'de> for HealthPolicy {
    fn from<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        HealthPolicy::deserialize(d)
    }
}

impl<'de> Deserialize<'de> for HealthConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        static FIELDS: OnceLock<Vec<&'static str>> = OnceLock::new();
        let all = inline::joined(&FIELDS, || {
            vec![&["command"], inline::fields(HealthPolicy::deserialize)]
        });
        let mut command = HealthCommand(None);
        let policy = inline::split(d, "HealthConfig", &mut command, all)?;
        Ok(HealthConfig {
            command: command.0,
            policy,
        })
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
    /// Bearer token with which a caller on loopback gets whole fencing tokens from
    /// `GET /api/self` (the local application fencing its writes); same rules as
    /// `admin_token`. Redacted in `Debug` output; prefer `NATS_ROLES_LOCAL_TOKEN`.
    /// Default: `None` (tokens always redacted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_token: Option<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: None,
            admin_token: None,
            local_token: None,
        }
    }
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("enabled", &self.enabled)
            .field("listen", &self.listen)
            .field("admin_token", &Redacted(&self.admin_token))
            .field("local_token", &Redacted(&self.local_token))
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

impl Config {
    /// TTL of this instance's membership record: `placement.member_ttl` or `timing.ttl`.
    #[must_use]
    pub fn member_ttl(&self) -> Duration {
        self.placement.member_ttl.unwrap_or(self.timing.ttl)
    }

    /// The bucket as the library takes it: `bucket` with `nats.jetstream_api_prefix`.
    #[must_use]
    pub fn bucket_settings(&self) -> BucketSettings {
        BucketSettings {
            api_prefix: self.nats.jetstream_api_prefix.clone(),
            ..self.bucket.clone()
        }
    }
}
