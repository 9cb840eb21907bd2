//! Connection flags of the operator commands (NATS conventions), or a YAML configuration.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::Config;
use crate::inspect::Inspector;

use super::outcome::Failure;

/// How to reach the bucket. Flags (and their environment variables) override the NATS
/// context, which overrides the file given with `--config`, which overrides the defaults
/// (`nats://127.0.0.1:4222`, bucket `roles`).
#[derive(clap::Args, Debug)]
pub(crate) struct ConnArgs {
    /// Take the connection settings and the bucket from this YAML configuration (the file
    /// `nats-roles run` uses); a NATS context and the flags below override it.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Use this NATS context of the nats tool ($XDG_CONFIG_HOME/nats/context/NAME.json):
    /// servers, credentials, TLS files, JetStream domain. Without it (and without --config)
    /// the context selected with `nats context select` is used.
    #[arg(long, env = super::context::ENV_CONTEXT, value_name = "NAME")]
    context: Option<String>,
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
    /// The effective configuration (validated), the process environment locating the NATS
    /// context.
    pub(crate) fn config(&self) -> Result<Config, Failure> {
        self.config_with(&|name| std::env::var(name).ok())
    }

    /// The effective configuration (validated): defaults, `--config`, the NATS context (the
    /// one named, else the selected one when there is no `--config`; `env` locates it), then
    /// the flags and their environment variables.
    pub(crate) fn config_with(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, Failure> {
        let mut config = match &self.config {
            Some(path) => Config::load(path)
                .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?,
            None => Config::default(),
        };
        let context = super::context::resolve(self.context.as_deref(), self.config.is_none(), env)?;
        if let Some(context) = &context {
            context.apply(&mut config)?;
        }
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
            let mut from: Vec<String> = self
                .config
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            if let Some(context) = &context {
                from.push(format!("NATS context {:?}", context.name()));
            }
            if from.is_empty() {
                from.push("flags".to_owned());
            }
            Failure::Usage(format!("{}: {e}", from.join(", ")))
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        conn: ConnArgs,
    }

    /// The variables clap reads for these flags: a test run with one of them set would test
    /// something else, so it stops and says so.
    fn require_clean_environment() {
        for var in [
            "NATS_URL",
            "NATS_CREDS",
            "NATS_NKEY",
            "NATS_USER",
            "NATS_PASSWORD",
            "NATS_TOKEN",
            "NATS_CA",
            "NATS_CERT",
            "NATS_KEY",
            "NATS_ROLES_BUCKET",
            "NATS_CONTEXT",
        ] {
            assert!(
                std::env::var_os(var).is_none(),
                "unset {var} to run this test (clap reads it for a flag)"
            );
        }
    }

    /// Precedence, lowest first: the file, the NATS context, the flags (and the variables
    /// clap reads for them); the selected context only without `--config`.
    #[test]
    fn file_then_context_then_flags() {
        require_clean_environment();
        let dir = tempfile::tempdir().expect("temp dir");
        let contexts = dir.path().join("nats/context");
        std::fs::create_dir_all(&contexts).expect("mkdir");
        std::fs::write(
            contexts.join("ctx.json"),
            r#"{"url": "nats://ctx:4222", "user": "ctx-user", "password": "ctx-pw",
                "jetstream_domain": "hub"}"#,
        )
        .expect("context");
        std::fs::write(
            contexts.join("sel.json"),
            r#"{"url": "nats://selected:4222"}"#,
        )
        .expect("context");
        std::fs::write(dir.path().join("nats/context.txt"), "sel").expect("select");
        let yaml = dir.path().join("roles.yaml");
        std::fs::write(
            &yaml,
            "nats:\n  servers: [\"nats://file:4222\"]\n  creds_file: /file.creds\nbucket:\n  name: b\n",
        )
        .expect("yaml");
        let env: HashMap<&str, String> =
            HashMap::from([("XDG_CONFIG_HOME", dir.path().display().to_string())]);
        let config = |args: &[&str]| {
            let yaml = yaml.display().to_string();
            let args = std::iter::once("nats-roles").chain(
                args.iter()
                    .map(|a| if *a == "YAML" { yaml.as_str() } else { a }),
            );
            Args::try_parse_from(args)
                .expect("parses")
                .conn
                .config_with(&|name| env.get(name).cloned())
                .map_err(|f| format!("{f:?}"))
        };
        let servers = |c: &Config| c.nats.servers.join(",");

        // The file alone (a selected context does not override a --config file).
        let c = config(&["--config", "YAML"]).expect("valid");
        assert_eq!(servers(&c), "nats://file:4222");
        assert_eq!(c.nats.creds_file, Some(PathBuf::from("/file.creds")));
        // The named context over the file: servers, authentication (all of it), domain.
        let c = config(&["--config", "YAML", "--context", "ctx"]).expect("valid");
        assert_eq!(servers(&c), "nats://ctx:4222");
        assert_eq!(c.nats.user.as_deref(), Some("ctx-user"));
        assert_eq!(c.nats.creds_file, None);
        assert_eq!(c.bucket.domain.as_deref(), Some("hub"));
        assert_eq!(c.bucket.name, "b", "what the context does not set stays");
        // Flags over the context.
        let c = config(&[
            "--config",
            "YAML",
            "--context",
            "ctx",
            "-s",
            "nats://flag:4222",
        ])
        .expect("valid");
        assert_eq!(servers(&c), "nats://flag:4222");
        assert_eq!(c.nats.user.as_deref(), Some("ctx-user"));
        let c = config(&[
            "--context",
            "ctx",
            "--creds",
            "/flag.creds",
            "--js-api-prefix",
            "P",
        ])
        .expect("valid");
        assert_eq!(c.nats.creds_file, Some(PathBuf::from("/flag.creds")));
        assert_eq!(
            c.nats.user, None,
            "authentication from a flag replaces the context's"
        );
        assert_eq!(
            (
                c.bucket.domain.as_deref(),
                c.nats.jetstream_api_prefix.as_deref()
            ),
            (None, Some("P"))
        );
        // Without --config and --context: the selected context.
        let c = config(&[]).expect("valid");
        assert_eq!(servers(&c), "nats://selected:4222");
        // An unknown context is a usage error naming it.
        let err = config(&["--context", "nope"]).expect_err("unknown");
        assert!(
            err.contains("Usage") && err.contains("nope.json does not exist"),
            "{err}"
        );
    }
}
