//! Time in the simulation: server time in nanoseconds, and each node's drifting clock.

use std::time::Duration;
use tokio::time::Instant;

/// Simulated server time in nanoseconds since the start of a run.
pub(super) type Nanos = u64;

pub(super) const MS: Nanos = 1_000_000;
pub(super) const SEC: Nanos = 1_000 * MS;
pub(super) const PPM: u64 = 1_000_000;

pub(super) fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `a × b / c`, rounded down or up.
pub(super) fn scale(a: u64, b: u64, c: u64, up: bool) -> u64 {
    let p = u128::from(a) * u128::from(b);
    let c = u128::from(c);
    u64::try_from(if up { p.div_ceil(c) } else { p / c }).unwrap_or(u64::MAX)
}

/// `12.345678s`: server time for traces.
pub(super) fn secs(g: Nanos) -> String {
    format!("{}.{:06}s", g / SEC, (g % SEC) / 1_000)
}

/// A node's monotonic clock: it runs at `rate_ppm / 10⁶` of server time (clock drift).
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    pub(super) base: Instant,
    pub(super) rate_ppm: u64,
}

impl Clock {
    /// The node's reading at server time `g`.
    pub(super) fn local(self, g: Nanos) -> Instant {
        self.base + Duration::from_nanos(scale(g, self.rate_ppm, PPM, false))
    }

    /// The first server time at which the node's clock reads at least `t`.
    pub(super) fn global(self, t: Instant) -> Nanos {
        scale(
            nanos(t.saturating_duration_since(self.base)),
            PPM,
            self.rate_ppm,
            true,
        )
    }

    /// Server time that passes while the node's clock advances by `d` (rounded up).
    pub(super) fn span(self, d: Duration) -> Nanos {
        scale(nanos(d), PPM, self.rate_ppm, true)
    }
}
