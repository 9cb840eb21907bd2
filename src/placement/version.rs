//! [`Version`]: an instance's software version (`instance.version`), ordered for rollout
//! awareness: nothing moves onto a member older than the newest live version.

use std::cmp::Ordering;
use std::fmt;

/// A version such as `1.4.2`, `v2.0` or `3.1.0-rc.1+abc`: up to four dot-separated numbers,
/// an optional leading `v`, then optionally `-` or `+` and a label. Ordered by the numbers
/// (missing ones count as 0); the label does not take part in the order.
#[derive(Debug, Clone, Eq)]
pub struct Version {
    numbers: [u64; 4],
    text: String,
}

/// Why a version string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VersionError {
    /// Empty, too long, or not of the form `[v]N[.N[.N[.N]]][(-|+)label]`.
    #[error(
        "{0:?} is not a version: expected up to four dot-separated numbers, an optional leading `v` and an optional `-label` (e.g. 1.4.2 or v2.0.0-rc.1)"
    )]
    Malformed(String),
}

impl Version {
    /// Longest accepted text.
    pub const MAX_LEN: usize = 64;

    /// Parses `text`.
    ///
    /// # Errors
    /// [`VersionError::Malformed`] for anything not of the documented form.
    pub fn parse(text: &str) -> Result<Self, VersionError> {
        let bad = || VersionError::Malformed(text.chars().take(Self::MAX_LEN).collect());
        if text.is_empty() || text.len() > Self::MAX_LEN {
            return Err(bad());
        }
        let body = text.strip_prefix('v').unwrap_or(text);
        let (core, label) = match body.find(['-', '+']) {
            Some(i) => (&body[..i], Some(&body[i + 1..])),
            None => (body, None),
        };
        if label.is_some_and(|l| {
            l.is_empty()
                || !l
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_'))
        }) {
            return Err(bad());
        }
        let mut numbers = [0u64; 4];
        let parts: Vec<&str> = core.split('.').collect();
        if parts.len() > numbers.len() {
            return Err(bad());
        }
        for (slot, part) in numbers.iter_mut().zip(&parts) {
            if part.is_empty() || part.len() > 18 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            *slot = part.parse().map_err(|_| bad())?;
        }
        Ok(Self {
            numbers,
            text: text.to_owned(),
        })
    }

    /// The text it was parsed from.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.numbers == other.numbers
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        self.numbers.cmp(&other.numbers)
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_numbers() {
        let v = |s: &str| Version::parse(s).expect(s);
        assert!(v("1.10.0") > v("1.9.9"));
        assert!(v("v2") > v("1.99.99"));
        assert_eq!(v("1.4"), v("1.4.0"));
        assert_eq!(v("1.4.0-rc.1"), v("1.4.0+build.7"));
        assert_eq!(v("v1.2.3").as_str(), "v1.2.3");
    }

    #[test]
    fn refuses_malformed_versions() {
        for bad in [
            "",
            "v",
            "1..2",
            "1.2.3.4.5",
            "x1",
            "1.a",
            "1.2-",
            "1.2 ",
            "-1",
            &"9".repeat(70),
        ] {
            assert!(Version::parse(bad).is_err(), "{bad:?}");
        }
    }
}
