//! Negative controls: deliberately broken modes that the history checker must flag (cargo
//! feature `negative-controls`; test-only, never for production).

use std::str::FromStr;

/// One deliberately broken mode of the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NegativeControl {
    /// Lease writes without the expected-revision header (plain puts instead of CAS).
    PlainPut,
    /// Renewals without `Nats-TTL`: a dead holder's key never expires.
    DropTtl,
    /// The holder keeps acting after its local deadline (the driver does not demote at it).
    NoLocalDeadline,
    /// Demotions are neither recorded nor delivered: the term stays open.
    SkipDemote,
}

impl NegativeControl {
    /// Every mode.
    pub const ALL: [Self; 4] = [
        Self::PlainPut,
        Self::DropTtl,
        Self::NoLocalDeadline,
        Self::SkipDemote,
    ];

    /// The command-line name (`plain-put`, `drop-ttl`, `no-local-deadline`, `skip-demote`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PlainPut => "plain-put",
            Self::DropTtl => "drop-ttl",
            Self::NoLocalDeadline => "no-local-deadline",
            Self::SkipDemote => "skip-demote",
        }
    }
}

impl FromStr for NegativeControl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|m| m.as_str()).collect();
                format!(
                    "unknown negative control {s:?} (one of {})",
                    names.join(", ")
                )
            })
    }
}

impl std::fmt::Display for NegativeControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
