//! Overrides from environment variables.

use std::path::PathBuf;

use super::message::{name_message, shorten};
use super::validate::{check_admin_token, check_server};
use super::{
    Config, ConfigError, ConfigProblem, ENV_ADMIN_TOKEN, ENV_BUCKET, ENV_INSTANCE_ID,
    ENV_LOCAL_TOKEN, ENV_NATS_CREDS, ENV_NATS_URL, ENV_VERSION, ENV_ZONE,
};
use crate::core::bucket_settings::check_bucket_name;
use crate::names::InstanceId;

impl Config {
    /// Applies overrides from environment variables, read through `env` (so
    /// callers and tests need not touch the process environment; pass
    /// `|name| std::env::var(name).ok()` for the real one).
    ///
    /// - `NATS_URL`: comma-separated server URLs, replacing `nats.servers`;
    /// - `NATS_CREDS`: credentials file, replacing `nats.creds_file`;
    /// - `NATS_ROLES_INSTANCE_ID`: replacing `instance.id`;
    /// - `NATS_ROLES_BUCKET`: replacing `bucket.name`;
    /// - `NATS_ROLES_ADMIN_TOKEN`: replacing `http.admin_token`;
    /// - `NATS_ROLES_VERSION`: replacing `instance.version`;
    /// - `NATS_ROLES_LOCAL_TOKEN`: replacing `http.local_token`;
    /// - `NATS_ROLES_ZONE`: replacing `instance.zone`;
    /// - the standard OpenTelemetry variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, …,
    ///   `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`), which only **fill in** what the
    ///   `telemetry` section leaves unset, as OpenTelemetry SDKs apply them
    ///   ([`TelemetryConfig::apply_otel_env`](super::TelemetryConfig::apply_otel_env)).
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

        let local_token = get(ENV_LOCAL_TOKEN).map(|t| t.trim().to_owned());
        if let Some(Err(why)) = local_token.as_deref().map(check_admin_token) {
            problems.push(ConfigProblem::new(ENV_LOCAL_TOKEN, why));
        }
        let version = get(ENV_VERSION).map(|v| v.trim().to_owned());
        if let Some(Err(e)) = version.as_deref().map(crate::placement::Version::parse) {
            problems.push(ConfigProblem::new(ENV_VERSION, e.to_string()));
        }

        let zone = get(ENV_ZONE).map(|v| v.trim().to_owned());
        if let Some(zone) = zone.as_deref()
            && !crate::placement::valid_zone(zone)
        {
            problems.push(ConfigProblem::new(
                ENV_ZONE,
                format!(
                    "{} is not a zone name: 1 to 64 letters, digits, '-', '_' or '.'",
                    shorten(zone)
                ),
            ));
        }

        let (telemetry, otel_problems) = self.telemetry.with_otel_env(&env);
        problems.extend(otel_problems);

        if !problems.is_empty() {
            return Err(ConfigError::Invalid(problems));
        }
        self.telemetry = telemetry;
        if let Some(token) = local_token {
            self.http.local_token = Some(token);
        }
        if let Some(version) = version {
            self.instance.version = Some(version);
        }
        if let Some(zone) = zone {
            self.instance.zone = Some(zone);
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
