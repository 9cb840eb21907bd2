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
}

impl Default for BucketSettings {
    fn default() -> Self {
        Self {
            name: "roles".to_owned(),
            replicas: 1,
            auto_create: false,
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
        found
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
}
