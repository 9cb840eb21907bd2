//! [`BucketSettings`]: which KV bucket holds the leases, and how it is created.

use serde::{Deserialize, Serialize};

use super::SettingError;

/// Most replicas allowed for the KV bucket ([`BucketSettings::replicas`]).
pub const MAX_BUCKET_REPLICAS: usize = 5;

/// The JetStream KV bucket holding one key per role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BucketSettings {
    /// Bucket name: non-empty, ASCII letters, digits, `-` and `_`.
    /// Default: `"roles"`.
    pub name: String,
    /// Number of replicas when the bucket is created, `1..=5`. Default: `1`.
    pub replicas: usize,
    /// Create the bucket if it does not exist. Production deployments should
    /// pre-create it. Default: `false`.
    pub auto_create: bool,
    /// The JetStream domain of the bucket, when it lives in another domain than the servers
    /// this instance connects to (a hub reached through leaf nodes): every JetStream call
    /// goes through `$JS.<domain>.API`. `[A-Za-z0-9_-]+`. Default: none (the local domain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// A JetStream API prefix instead of `$JS.API` (a bucket in another account, imported
    /// under this prefix); not with `domain`. In YAML: `nats.jetstream_api_prefix`.
    /// Default: none.
    #[serde(skip)]
    pub api_prefix: Option<String>,
}

impl Default for BucketSettings {
    fn default() -> Self {
        Self {
            name: "roles".to_owned(),
            replicas: 1,
            auto_create: false,
            domain: None,
            api_prefix: None,
        }
    }
}

impl BucketSettings {
    /// Every rule this value breaks (empty when valid); fields are named as in YAML.
    #[must_use]
    pub fn problems(&self) -> Vec<SettingError> {
        let mut found = Vec::new();
        if let Err(why) = check_bucket_name(&self.name) {
            found.push(SettingError::new("bucket.name", why));
        }
        if !(1..=MAX_BUCKET_REPLICAS).contains(&self.replicas) {
            found.push(SettingError::new(
                "bucket.replicas",
                format!(
                    "{} is out of range: it must be between 1 and {MAX_BUCKET_REPLICAS}",
                    self.replicas
                ),
            ));
        }
        if let Some(domain) = &self.domain
            && let Err(why) = check_domain(domain)
        {
            found.push(SettingError::new("bucket.domain", why));
        }
        if let Some(prefix) = &self.api_prefix
            && let Err(why) = check_api_prefix(prefix)
        {
            found.push(SettingError::new("nats.jetstream_api_prefix", why));
        }
        if self.domain.is_some() && self.api_prefix.is_some() {
            found.push(SettingError::new(
                "bucket.domain",
                "bucket.domain and nats.jetstream_api_prefix are two ways to name where the \
                 JetStream API is; set one",
            ));
        }
        found
    }

    /// The JetStream API prefix every call for this bucket goes through: `$JS.<domain>.API`
    /// with a domain, the configured prefix, or `$JS.API`.
    #[must_use]
    pub fn jetstream_api_prefix(&self) -> String {
        match (&self.domain, &self.api_prefix) {
            (Some(domain), _) => format!("$JS.{domain}.API"),
            (None, Some(prefix)) => prefix.trim_end_matches('.').to_owned(),
            (None, None) => "$JS.API".to_owned(),
        }
    }

    /// Checks every rule.
    ///
    /// # Errors
    /// The first rule broken.
    pub fn validate(&self) -> Result<(), SettingError> {
        self.problems().into_iter().next().map_or(Ok(()), Err)
    }
}

/// Checks a bucket name: non-empty, `[A-Za-z0-9_-]+`.
pub(crate) fn check_bucket_name(name: &str) -> Result<(), String> {
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

/// Checks a JetStream domain: non-empty, `[A-Za-z0-9_-]+` (it becomes one subject token).
fn check_domain(domain: &str) -> Result<(), String> {
    if domain.is_empty() {
        return Err("must not be empty; leave it out for the local domain".to_owned());
    }
    if let Some(c) = domain
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "domain {domain:?} contains {c:?}; only ASCII letters, digits, '-' and '_' are allowed"
        ));
    }
    Ok(())
}

/// Checks an API prefix: dot-separated non-empty tokens of printable ASCII without
/// wildcards.
fn check_api_prefix(prefix: &str) -> Result<(), String> {
    let trimmed = prefix.strip_suffix('.').unwrap_or(prefix);
    if trimmed.is_empty() {
        return Err("must not be empty; leave it out for $JS.API".to_owned());
    }
    if let Some(c) = trimmed
        .chars()
        .find(|c| !c.is_ascii_graphic() || *c == '*' || *c == '>')
    {
        return Err(format!(
            "prefix {prefix:?} contains {c:?}; subject tokens of printable ASCII without \
             wildcards are allowed"
        ));
    }
    if trimmed.split('.').any(str::is_empty) {
        return Err(format!("prefix {prefix:?} has an empty token"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_name_or_replica_count_is_refused_with_its_field() {
        assert_eq!(BucketSettings::default().validate(), Ok(()));
        let bad_name = BucketSettings {
            name: "a.b".into(),
            ..Default::default()
        };
        assert_eq!(bad_name.validate().map_err(|e| e.field), Err("bucket.name"));
        let bad_replicas = BucketSettings {
            replicas: 6,
            ..Default::default()
        };
        assert_eq!(
            bad_replicas.validate().map_err(|e| e.field),
            Err("bucket.replicas")
        );
    }

    #[test]
    fn a_domain_or_an_api_prefix_chooses_the_jetstream_api() {
        let local = BucketSettings::default();
        assert_eq!(local.jetstream_api_prefix(), "$JS.API");
        let hub = BucketSettings {
            domain: Some("hub".into()),
            ..Default::default()
        };
        assert_eq!(hub.validate(), Ok(()));
        assert_eq!(hub.jetstream_api_prefix(), "$JS.hub.API");
        let imported = BucketSettings {
            api_prefix: Some("JS.acc-a.API.".into()),
            ..Default::default()
        };
        assert_eq!(imported.validate(), Ok(()));
        assert_eq!(imported.jetstream_api_prefix(), "JS.acc-a.API");
        for (domain, prefix, field) in [
            (Some("a.b"), None, "bucket.domain"),
            (Some(""), None, "bucket.domain"),
            (None, Some("JS.*.API"), "nats.jetstream_api_prefix"),
            (None, Some("JS..API"), "nats.jetstream_api_prefix"),
            (None, Some(" "), "nats.jetstream_api_prefix"),
            (Some("hub"), Some("JS.x"), "bucket.domain"),
        ] {
            let s = BucketSettings {
                domain: domain.map(str::to_owned),
                api_prefix: prefix.map(str::to_owned),
                ..Default::default()
            };
            assert_eq!(
                s.validate().map_err(|e| e.field),
                Err(field),
                "{domain:?} {prefix:?}"
            );
        }
    }
}
