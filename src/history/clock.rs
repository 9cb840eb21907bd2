//! The clock of histories: `CLOCK_MONOTONIC` in nanoseconds, shared by every process on one
//! Linux host, and the mapping of tokio [`Instant`]s onto it.

use tokio::time::Instant;

/// `CLOCK_MONOTONIC` now, in nanoseconds. Under `faketime` this is the scaled clock (libc's
/// `clock_gettime`, which libfaketime intercepts), like every timer of the process.
#[cfg(unix)]
#[must_use]
pub fn mono_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is always supported on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    if rc != 0 {
        return 0;
    }
    timespec_ns(&ts)
}

/// `CLOCK_MONOTONIC` read with the raw system call, bypassing libc (and so libfaketime's
/// interception of `clock_gettime`): the real clock of the host even in a faked process.
#[cfg(target_os = "linux")]
#[must_use]
pub fn real_mono_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the clock_gettime system call writes one timespec to the valid pointer given.
    let rc = unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &raw mut ts) };
    if rc != 0 {
        return mono_now_ns();
    }
    timespec_ns(&ts)
}

/// Elsewhere than Linux there is no raw system call to bypass `faketime` with (and no
/// `faketime` test): the same clock as [`mono_now_ns`].
#[cfg(not(target_os = "linux"))]
#[must_use]
pub fn real_mono_now_ns() -> u64 {
    mono_now_ns()
}

/// Without `clock_gettime` (not Unix): nanoseconds since the first reading in this process.
/// Histories of several processes then do not share a clock; the chaos suite runs on Linux.
#[cfg(not(unix))]
#[must_use]
pub fn mono_now_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(unix)]
fn timespec_ns(ts: &libc::timespec) -> u64 {
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// The clock rate `faketime` runs this process at, from the `FAKETIME` variable (`x0.5`,
/// `+0 x0.9`, ...); 1.0 when it is not set or names no rate.
#[must_use]
pub fn faketime_rate() -> f64 {
    std::env::var("FAKETIME")
        .ok()
        .and_then(|v| parse_faketime_rate(&v))
        .unwrap_or(1.0)
}

fn parse_faketime_rate(spec: &str) -> Option<f64> {
    spec.split_whitespace()
        .find_map(|w| w.strip_prefix('x'))
        .and_then(|r| r.parse::<f64>().ok())
        .filter(|r| r.is_finite() && *r > 0.0)
}

/// Maps tokio instants onto `CLOCK_MONOTONIC` nanoseconds through one pair taken at creation.
#[derive(Debug, Clone, Copy)]
pub struct MonoMap {
    instant: Instant,
    mono_ns: u64,
}

impl MonoMap {
    /// A mapping anchored now.
    ///
    /// The pair is read as `mono, instant, mono` a few times and the tightest bracket wins, its
    /// midpoint paired with the instant: a thread preempted between two plain reads would shift
    /// every mapped stamp by the preemption (seen: a `promote` stamped after the term's first
    /// `act`, which reads the clock directly).
    #[must_use]
    pub fn now() -> Self {
        let mut best: Option<(u64, Self)> = None;
        for _ in 0..16 {
            let before = mono_now_ns();
            let instant = Instant::now();
            let after = mono_now_ns();
            let gap = after.saturating_sub(before);
            let pair = Self {
                instant,
                mono_ns: before + gap / 2,
            };
            if best.as_ref().is_none_or(|(g, _)| gap < *g) {
                best = Some((gap, pair));
            }
            if gap < 1_000 {
                break;
            }
        }
        best.map_or_else(
            || Self {
                instant: Instant::now(),
                mono_ns: mono_now_ns(),
            },
            |(_, pair)| pair,
        )
    }

    /// `at` in monotonic nanoseconds.
    #[must_use]
    pub fn ns(&self, at: Instant) -> u64 {
        if at >= self.instant {
            let d = u64::try_from((at - self.instant).as_nanos()).unwrap_or(u64::MAX);
            self.mono_ns.saturating_add(d)
        } else {
            let d = u64::try_from((self.instant - at).as_nanos()).unwrap_or(u64::MAX);
            self.mono_ns.saturating_sub(d)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_monotonic_clock_advances_and_maps_instants() {
        let a = mono_now_ns();
        let map = MonoMap::now();
        let b = mono_now_ns();
        assert!(a > 0 && b >= a);
        let later = Instant::now() + Duration::from_millis(10);
        let ns = map.ns(later);
        assert!(ns >= b + 9_000_000, "{ns} vs {b}");
        let r = real_mono_now_ns();
        assert!(r >= a, "the raw syscall reads the same clock");
    }

    #[test]
    fn faketime_rates_are_parsed() {
        assert_eq!(parse_faketime_rate("x0.5"), Some(0.5));
        assert_eq!(parse_faketime_rate("+0 x0.9"), Some(0.9));
        assert_eq!(parse_faketime_rate("@2026-01-01 00:00:00 x2"), Some(2.0));
        assert_eq!(parse_faketime_rate("+10s"), None);
        assert_eq!(parse_faketime_rate("x0"), None);
    }
}
