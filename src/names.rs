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
    /// A slot number of [`MAX_SLOT_INDEX`] or more (`RoleName::for_slot`).
    #[error("names slot {0}; slots are numbered below {MAX_SLOT_INDEX}")]
    SlotTooLarge(u32),
}

/// Slot numbers are below this bound (`role.<role>.<k>`, protocol Q15); a configuration
/// allows far fewer slots (`roles[].slots`, at most 64).
pub const MAX_SLOT_INDEX: u32 = 1000;

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
    ($(#[$doc:meta])* $name:ident, $parse:path) => {
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
                $parse(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

name_type!(
    /// The name of a role, e.g. `scheduler` or `shard-7`: one KV key token.
    ///
    /// A slot of a role with `slots` (protocol Q15) is a role too: slot `k` of `indexer` is
    /// named `indexer.<k>` ([`RoleName::for_slot`]). [`RoleName::new`] refuses the dot, so a
    /// configured name is never a slot; deserializing accepts slot names
    /// ([`RoleName::from_key_name`]), since the crate's own records carry them.
    RoleName,
    RoleName::from_key_name
);
name_type!(
    /// The identity of one manager instance, stable across restarts of the same
    /// deployment unit (e.g. a pod or host name), e.g. `node-a`.
    InstanceId,
    InstanceId::new
);

impl RoleName {
    /// Slot `k` of the role `base` (protocol Q15): the role named `<base>.<k>`, whose key is
    /// `role.<base>.<k>`. A `base` that is itself a slot counts as its base role.
    ///
    /// # Errors
    /// [`NameError::SlotTooLarge`] when `k` is [`MAX_SLOT_INDEX`] or more.
    pub fn for_slot(base: &RoleName, k: u32) -> Result<Self, NameError> {
        if k >= MAX_SLOT_INDEX {
            return Err(NameError::SlotTooLarge(k));
        }
        Ok(Self(format!("{}.{k}", base.base_str())))
    }

    /// A role name as it appears after `role.` in a key: a plain role name, or a slot
    /// `<role>.<k>` with `k` a decimal number without leading zeros below
    /// [`MAX_SLOT_INDEX`]. Anything else is refused (a key whose name does not parse is not
    /// a role of this protocol, Q15).
    ///
    /// # Errors
    /// [`NameError`] when the name is neither.
    pub fn from_key_name(name: impl Into<String>) -> Result<Self, NameError> {
        let name = name.into();
        let Some((base, k)) = name.rsplit_once('.') else {
            check(&name)?;
            return Ok(Self(name));
        };
        check(base)?;
        parse_slot(k).ok_or(NameError::InvalidChar('.'))?;
        Ok(Self(name))
    }

    /// The role this name belongs to: the base role of a slot (`indexer` for
    /// `indexer.2`), the name itself otherwise.
    #[must_use]
    pub fn base_role(&self) -> RoleName {
        Self(self.base_str().to_owned())
    }

    /// The slot number of a slot (`Some(2)` for `indexer.2`), `None` for a plain role.
    #[must_use]
    pub fn slot(&self) -> Option<u32> {
        self.0.rsplit_once('.').and_then(|(_, k)| parse_slot(k))
    }

    fn base_str(&self) -> &str {
        match self.0.rsplit_once('.') {
            Some((base, _)) => base,
            None => &self.0,
        }
    }
}

/// A slot number: decimal digits, no leading zero (but `0`), below [`MAX_SLOT_INDEX`].
fn parse_slot(k: &str) -> Option<u32> {
    let canonical = !k.is_empty()
        && k.len() <= 3
        && k.bytes().all(|b| b.is_ascii_digit())
        && (k == "0" || !k.starts_with('0'));
    canonical
        .then(|| k.parse::<u32>().ok())
        .flatten()
        .filter(|k| *k < MAX_SLOT_INDEX)
}

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
    fn slots_are_role_names_with_a_number() {
        let base = RoleName::new("indexer").unwrap();
        let two = RoleName::for_slot(&base, 2).unwrap();
        assert_eq!(two.as_str(), "indexer.2");
        assert_eq!(two.slot(), Some(2));
        assert_eq!(two.base_role(), base);
        assert_eq!(base.slot(), None);
        assert_eq!(base.base_role(), base);
        assert_eq!(RoleName::for_slot(&two, 5).unwrap().as_str(), "indexer.5");
        assert_eq!(
            RoleName::for_slot(&base, 1000),
            Err(NameError::SlotTooLarge(1000))
        );
        assert_eq!(RoleName::new("indexer.2"), Err(NameError::InvalidChar('.')));
    }

    #[test]
    fn key_names_accept_exactly_a_role_and_a_canonical_slot_number() {
        for ok in [
            "indexer",
            "indexer.0",
            "indexer.2",
            "indexer.10",
            "indexer.999",
        ] {
            let name = RoleName::from_key_name(ok).unwrap();
            assert_eq!(name.as_str(), ok);
        }
        for bad in [
            "indexer.",
            ".2",
            "indexer.02",
            "indexer.00",
            "indexer.1000",
            "indexer.2.3",
            "indexer.x",
            "indexer.-1",
            "indexer.+1",
            "a b.1",
            "indexer. 1",
            "",
        ] {
            assert!(RoleName::from_key_name(bad).is_err(), "{bad:?} accepted");
        }
        let long = "x".repeat(MAX_NAME_LEN);
        assert!(RoleName::from_key_name(format!("{long}.7")).is_ok());
        assert!(RoleName::from_key_name(format!("{long}x.7")).is_err());
    }

    #[test]
    fn deserialize_accepts_slots_but_not_other_dots() {
        let slot: RoleName = serde_json::from_str("\"indexer.2\"").unwrap();
        assert_eq!(slot.slot(), Some(2));
        assert!(serde_json::from_str::<RoleName>("\"a.b\"").is_err());
        assert!(serde_json::from_str::<InstanceId>("\"a.1\"").is_err());
    }

    #[test]
    fn deserialize_validates() {
        let ok: Result<RoleName, _> = serde_json::from_str("\"sched\"");
        assert!(ok.is_ok());
        let bad: Result<RoleName, _> = serde_json::from_str("\"a>b\"");
        assert!(bad.is_err());
    }
}
