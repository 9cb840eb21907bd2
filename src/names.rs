//! Validated names: role names and instance ids.
//!
//! Both become part of NATS subjects (`$KV.<bucket>.role.<name>`), so they are
//! restricted to characters that are valid in a single KV key token.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest accepted role name or instance id, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// Why a name was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty.
    #[error("must not be empty")]
    Empty,
    /// The name is longer than [`MAX_NAME_LEN`] bytes.
    #[error("is {0} bytes long; at most {MAX_NAME_LEN} are allowed")]
    TooLong(usize),
    /// The name contains a character outside `[A-Za-z0-9_-]`.
    #[error("contains {0:?}; only ASCII letters, digits, '-' and '_' are allowed")]
    InvalidChar(char),
}

fn check(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong(name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(NameError::InvalidChar(c));
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Validates `name` and wraps it.
            ///
            /// # Errors
            /// [`NameError`] when the name is empty, too long or has a character
            /// that is not an ASCII letter, digit, `-` or `_`.
            pub fn new(name: impl Into<String>) -> Result<Self, NameError> {
                let name = name.into();
                check(&name)?;
                Ok(Self(name))
            }

            /// The name as a string slice.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = NameError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = NameError;
            fn try_from(s: &str) -> Result<Self, Self::Error> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = NameError;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                Self::new(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

name_type!(
    /// The name of a role, e.g. `scheduler` or `shard-7`: one KV key token.
    RoleName
);
name_type!(
    /// The identity of one manager instance, stable across restarts of the same
    /// deployment unit (e.g. a pod or host name), e.g. `node-a`.
    InstanceId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_kv_token_characters() {
        assert_eq!(
            RoleName::new("shard-7_a").map(|r| r.to_string()),
            Ok("shard-7_a".into())
        );
    }

    #[test]
    fn rejects_bad_names() {
        assert_eq!(RoleName::new(""), Err(NameError::Empty));
        assert_eq!(RoleName::new("a.b"), Err(NameError::InvalidChar('.')));
        assert_eq!(InstanceId::new("a b"), Err(NameError::InvalidChar(' ')));
        assert_eq!(
            InstanceId::new("x".repeat(129)),
            Err(NameError::TooLong(129))
        );
    }

    #[test]
    fn deserialize_validates() {
        let ok: Result<RoleName, _> = serde_json::from_str("\"sched\"");
        assert!(ok.is_ok());
        let bad: Result<RoleName, _> = serde_json::from_str("\"a>b\"");
        assert!(bad.is_err());
    }
}
