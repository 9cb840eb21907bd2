//! Connection flags of the operator commands (NATS conventions), or a YAML configuration.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::Config;
use crate::inspect::Inspector;

use super::outcome::Failure;

/// How to reach the bucket. Flags (and their environment variables) override the file given
/// with `--config`, which overrides the defaults (`nats://127.0.0.1:4222`, bucket `roles`).
#[derive(clap::Args, Debug)]
pub(crate) struct ConnArgs {
    /// Take the connection settings and the bucket from this YAML configuration (the file
    /// `nats-roles run` uses); the flags below override it.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// NATS server URL; repeat (or separate with commas) for several.
    #[arg(
        long = "server",
        short = 's',
        env = "NATS_URL",
        value_delimiter = ',',
        value_name = "URL"
    )]
    servers: Vec<String>,
    /// NATS credentials (.creds) file.
    #[arg(long, env = "NATS_CREDS", value_name = "FILE")]
    creds: Option<PathBuf>,
    /// File holding an NKey seed.
    #[arg(long, env = "NATS_NKEY", value_name = "FILE")]
    nkey: Option<PathBuf>,
    /// User name (with --password).
    #[arg(long, env = "NATS_USER")]
    user: Option<String>,
    /// Password (with --user); prefer the environment variable.
    #[arg(long, env = "NATS_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// Authentication token; prefer the environment variable.
    #[arg(long, env = "NATS_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Require TLS.
    #[arg(long)]
    tls: bool,
    /// PEM file of CA certificates to trust.
    #[arg(long, env = "NATS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// PEM client certificate (with --tls-key).
    #[arg(long, env = "NATS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "NATS_KEY", value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// The KV bucket [default: roles].
    #[arg(long, env = "NATS_ROLES_BUCKET")]
    bucket: Option<String>,
    /// The JetStream domain of the bucket (a hub reached through a leaf node).
    #[arg(long, value_name = "DOMAIN", conflicts_with = "js_api_prefix")]
    js_domain: Option<String>,
    /// A JetStream API prefix instead of $JS.API (a bucket imported from another account).
    #[arg(long, value_name = "PREFIX")]
    js_api_prefix: Option<String>,
    /// Timeout of connecting and of each request.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

impl ConnArgs {
    /// The effective configuration (validated).
    pub(crate) fn config(&self) -> Result<Config, Failure> {
        let mut config = match &self.config {
            Some(path) => Config::load(path)
                .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?,
            None => Config::default(),
        };
        let nats = &mut config.nats;
        if !self.servers.is_empty() {
            nats.servers = self
                .servers
                .iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect();
        }
        // Any authentication given here replaces the file's.
        let (user, password) = (self.user.clone(), self.password.clone());
        if self.creds.is_some() || self.nkey.is_some() || user.is_some() || self.token.is_some() {
            nats.creds_file.clone_from(&self.creds);
            nats.nkey_seed_file.clone_from(&self.nkey);
            nats.user = user;
            nats.password = password;
            nats.token.clone_from(&self.token);
        } else if password.is_some() {
            nats.password = password;
        }
        nats.tls.required |= self.tls;
        if self.tls_ca.is_some() {
            nats.tls.ca_file.clone_from(&self.tls_ca);
        }
        if self.tls_cert.is_some() || self.tls_key.is_some() {
            nats.tls.cert_file.clone_from(&self.tls_cert);
            nats.tls.key_file.clone_from(&self.tls_key);
        }
        nats.connect_timeout = self.timeout;
        nats.request_timeout = self.timeout;
        if let Some(bucket) = &self.bucket {
            config.bucket.name = bucket.trim().to_owned();
        }
        if let Some(domain) = &self.js_domain {
            config.bucket.domain = Some(domain.trim().to_owned());
            config.nats.jetstream_api_prefix = None;
        }
        if let Some(prefix) = &self.js_api_prefix {
            config.nats.jetstream_api_prefix = Some(prefix.trim().to_owned());
            config.bucket.domain = None;
        }
        config.validate().map_err(|e| {
            let from = self
                .config
                .as_ref()
                .map_or_else(|| "flags".to_owned(), |p| p.display().to_string());
            Failure::Usage(format!("{from}: {e}"))
        })?;
        Ok(config)
    }

    /// Connects and opens the bucket. A permission the NATS user lacks fails the command at
    /// once, naming the subject ([`bucket_failure`]).
    pub(crate) async fn open(&self) -> Result<Inspector, Failure> {
        let config = self.config()?;
        let bucket = &config.bucket.name;
        Inspector::connect(
            &config.nats,
            "nats-roles-cli",
            &config.bucket_settings(),
            self.timeout,
        )
        .await
        .map_err(|e| match e {
            crate::Error::BucketNotFound { .. } => Failure::Runtime(format!(
                "KV bucket {bucket:?} does not exist on {} (wrong --bucket?)",
                config.nats.servers.join(",")
            )),
            e @ crate::Error::Connect(_) => Failure::Runtime(e.to_string()),
            e => bucket_failure(bucket, e),
        })
    }
}

/// The failure of a command for an error reading or watching `bucket`.
pub(crate) fn bucket_failure(bucket: &str, e: crate::Error) -> Failure {
    match e {
        crate::Error::PermissionDenied { detail } => Failure::Runtime(denied(bucket, &detail)),
        e => Failure::Runtime(format!("bucket {bucket}: {e}")),
    }
}

/// "permission denied on SUBJECT (publish)", and where the permission sets are.
pub(crate) fn denied(bucket: &str, detail: &str) -> String {
    format!(
        "permission denied on {detail}: the NATS user lacks a permission this command needs on \
         bucket {bucket} (docs/operations.md, \"A least-privilege NATS user\", lists them)"
    )
}
