//! [`SettingError`]: a library setting outside its rules.

use std::time::Duration;

use super::timing_error::fmt_duration;

/// A setting of [`PlacementSettings`](crate::manager::PlacementSettings),
/// [`BucketSettings`](crate::manager::BucketSettings), [`RetryPolicy`](crate::RetryPolicy)
/// or [`HealthPolicy`](crate::health::HealthPolicy) breaks one of its rules (returned by
/// their `validate()` and by [`RoleManagerBuilder::start`](crate::RoleManagerBuilder::start)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
#[non_exhaustive]
pub struct SettingError {
    /// The setting, as its YAML path (`placement.weight`, `bucket.name`).
    pub field: &'static str,
    /// What is wrong, and the rule.
    pub message: String,
    /// Other settings the rule involves (`retry.initial_backoff` for `retry.max_backoff`).
    pub related: Vec<&'static str>,
}

impl SettingError {
    /// A problem with `field`.
    pub(crate) fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
            related: Vec::new(),
        }
    }

    /// A problem with `field` that involves `related` too.
    pub(crate) fn related(
        field: &'static str,
        message: impl Into<String>,
        related: &'static str,
    ) -> Self {
        Self {
            related: vec![related],
            ..Self::new(field, message)
        }
    }

    /// `field` when `value` is longer than `max`.
    pub(crate) fn at_most(field: &'static str, value: Duration, max: Duration) -> Option<Self> {
        (value > max).then(|| {
            Self::new(
                field,
                format!(
                    "{} is longer than the maximum {}",
                    fmt_duration(value),
                    fmt_duration(max)
                ),
            )
        })
    }
}
