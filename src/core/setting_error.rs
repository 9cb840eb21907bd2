//! [`SettingError`]: a library setting outside its rules.

/// A setting of [`PlacementSettings`](crate::manager::PlacementSettings) or
/// [`BucketSettings`](crate::manager::BucketSettings) breaks one of its rules (returned by
/// their `validate()` and by [`RoleManagerBuilder::start`](crate::RoleManagerBuilder::start)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
#[non_exhaustive]
pub struct SettingError {
    /// The setting, as its YAML path (`placement.weight`, `bucket.name`).
    pub field: &'static str,
    /// What is wrong, and the rule.
    pub message: String,
}

impl SettingError {
    /// A problem with `field`.
    pub(crate) fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }

    /// `field` when `value` is longer than `max`.
    pub(crate) fn at_most(
        field: &'static str,
        value: std::time::Duration,
        max: std::time::Duration,
    ) -> Option<Self> {
        (value > max).then(|| {
            Self::new(
                field,
                format!(
                    "{} is longer than the maximum {}",
                    super::timing_error::fmt_duration(value),
                    super::timing_error::fmt_duration(max)
                ),
            )
        })
    }
}
