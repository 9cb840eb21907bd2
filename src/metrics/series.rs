//! [`RoleSeries`]: which roles get metric series of their own (a `role` label), and
//! [`PerRole`], the choice a manager makes from it once, when it starts.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::names::RoleName;

/// Which roles get metric series of their own, labelled `role` (YAML `telemetry.role_metrics`,
/// [`RoleManagerBuilder::role_metrics`](crate::RoleManagerBuilder::role_metrics)).
///
/// A role without series of its own is still measured: its counters and histograms are
/// recorded on the instance's series (the same metric names, without the `role` label), so a
/// `sum` over an instance is the same whatever is chosen here, and nothing is counted twice.
/// Its gauges are summed up per instance (see `docs/observability.md`). The number of series
/// an instance exports then does not grow with its roles.
///
/// In YAML: `auto`, `all`, `none`, or a list of role names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RoleSeries {
    /// Series for every role while the manager has at most [`RoleSeries::AUTO_LIMIT`] roles
    /// when it starts, else for none; decided once at start (roles added later follow that
    /// decision). The default.
    #[default]
    Auto,
    /// Series for every role (about 14 series and 31 histogram buckets per role).
    All,
    /// No series of any role's own: every measurement is recorded per instance.
    None,
    /// Series only for these roles; the others are recorded per instance.
    Only(Vec<RoleName>),
}

impl RoleSeries {
    /// The most roles a manager may have at start for [`RoleSeries::Auto`] to give each its
    /// own series.
    pub const AUTO_LIMIT: usize = 100;

    /// The words of the three modes, as written in YAML.
    pub(crate) const WORDS: [&'static str; 3] = ["auto", "all", "none"];

    /// The choice in effect for a manager that has `roles_at_start` roles when it starts.
    pub(crate) fn resolve(&self, roles_at_start: usize) -> PerRole {
        match self {
            Self::Auto if roles_at_start <= Self::AUTO_LIMIT => PerRole::All,
            Self::Auto | Self::None => PerRole::None,
            Self::All => PerRole::All,
            Self::Only(roles) => PerRole::Only(roles.iter().cloned().collect()),
        }
    }
}

impl fmt::Display for RoleSeries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::All => f.write_str("all"),
            Self::None => f.write_str("none"),
            Self::Only(roles) => {
                let names: Vec<&str> = roles.iter().map(RoleName::as_str).collect();
                write!(f, "[{}]", names.join(", "))
            }
        }
    }
}

impl Serialize for RoleSeries {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::All => s.serialize_str("all"),
            Self::None => s.serialize_str("none"),
            Self::Only(roles) => roles.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for RoleSeries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Words;
        impl<'de> Visitor<'de> for Words {
            type Value = RoleSeries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`auto`, `all`, `none` or a list of role names")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RoleSeries, E> {
                match v {
                    "auto" => Ok(RoleSeries::Auto),
                    "all" => Ok(RoleSeries::All),
                    "none" => Ok(RoleSeries::None),
                    other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RoleSeries, A::Error> {
                let mut roles = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                while let Some(role) = seq.next_element::<RoleName>()? {
                    roles.push(role);
                }
                Ok(RoleSeries::Only(roles))
            }
        }
        d.deserialize_any(Words)
    }
}

/// The choice a manager made from [`RoleSeries`] when it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PerRole {
    /// Every role has series of its own.
    All,
    /// No role has.
    None,
    /// These roles have.
    Only(HashSet<RoleName>),
}

impl PerRole {
    /// Whether `role` has series of its own.
    pub(crate) fn has_series(&self, role: &RoleName) -> bool {
        match self {
            Self::All => true,
            Self::None => false,
            Self::Only(roles) => roles.contains(role),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str) -> RoleName {
        RoleName::new(name).expect("valid")
    }

    #[test]
    fn auto_gives_series_up_to_the_limit_at_start() {
        assert_eq!(RoleSeries::Auto.resolve(0), PerRole::All);
        assert_eq!(
            RoleSeries::Auto.resolve(RoleSeries::AUTO_LIMIT),
            PerRole::All
        );
        assert_eq!(
            RoleSeries::Auto.resolve(RoleSeries::AUTO_LIMIT + 1),
            PerRole::None
        );
        assert_eq!(RoleSeries::All.resolve(10_000), PerRole::All);
        assert_eq!(RoleSeries::None.resolve(1), PerRole::None);
        let only = RoleSeries::Only(vec![role("a")]).resolve(10_000);
        assert!(only.has_series(&role("a")));
        assert!(!only.has_series(&role("b")));
    }

    #[test]
    fn words_and_lists_round_trip() {
        for (json, want) in [
            ("\"auto\"", RoleSeries::Auto),
            ("\"all\"", RoleSeries::All),
            ("\"none\"", RoleSeries::None),
            (
                "[\"a\",\"b\"]",
                RoleSeries::Only(vec![role("a"), role("b")]),
            ),
        ] {
            let got: RoleSeries = serde_json::from_str(json).expect(json);
            assert_eq!(got, want);
            assert_eq!(serde_json::to_string(&got).expect("serialize"), json);
        }
        for bad in ["\"nonee\"", "true", "3", "[\"a.b\"]", "{}"] {
            assert!(serde_json::from_str::<RoleSeries>(bad).is_err(), "{bad}");
        }
    }
}
