//! The simulation's one random source.

use uuid::Uuid;

use crate::core::backoff::SplitMix64;

use super::clock::{MS, Nanos};

/// The simulation's random source, seeded from the scenario.
pub(super) struct Rng(pub(super) SplitMix64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    pub(super) fn chance(&mut self, pct: u32) -> bool {
        pct > 0 && self.next() % 100 < u64::from(pct)
    }

    /// Uniform in `[lo, hi)` (`lo` when the range is empty).
    pub(super) fn between(&mut self, lo: Nanos, hi: Nanos) -> Nanos {
        if hi <= lo {
            lo
        } else {
            lo + self.next() % (hi - lo)
        }
    }

    /// A normal network hop: 50 µs – 3 ms.
    pub(super) fn hop(&mut self) -> Nanos {
        self.between(50_000, 3 * MS)
    }

    pub(super) fn uuid(&mut self) -> Uuid {
        Uuid::from_u64_pair(self.next(), self.next())
    }
}
