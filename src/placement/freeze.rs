//! Freezing voluntary moves: the operator's freeze record in the bucket ([`FreezeRecord`]),
//! the storm breaker that freezes them by itself when many members vanish at once
//! ([`StormBreaker`]), and why moves are frozen now ([`Frozen`]). Vacant roles are still
//! taken while frozen: only hand-overs the plan asks for wait. The record's bytes are read and
//! written by `codec::control`.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::names::InstanceId;

/// Key of the deployment-wide freeze record (`nats-roles freeze`, `POST /api/placement/freeze`).
pub const FREEZE_KEY: &str = "control.freeze";

/// Version of the freeze record written by this crate.
pub const FREEZE_VERSION: u32 = 1;

/// The operator's freeze: while the key holds a valid record, no instance makes a voluntary
/// move. Deleting the key unfreezes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreezeRecord {
    /// Format version.
    pub v: u32,
    /// Why (free text, at most [`FreezeRecord::MAX_REASON_LEN`] bytes).
    #[serde(default)]
    pub reason: String,
    /// Who froze it (an instance id, `cli`, a user name), informational.
    #[serde(default)]
    pub by: String,
    /// When (RFC 3339), informational.
    #[serde(default)]
    pub at: String,
}

impl FreezeRecord {
    /// Longest reason kept, in bytes.
    pub const MAX_REASON_LEN: usize = 256;

    /// A record frozen now by `by` for `reason` (cut to [`FreezeRecord::MAX_REASON_LEN`] bytes).
    #[must_use]
    pub fn new(reason: &str, by: &str) -> Self {
        Self {
            v: FREEZE_VERSION,
            reason: cut(reason, Self::MAX_REASON_LEN),
            by: cut(by, 128),
            at: crate::value::now_rfc3339(),
        }
    }
}

pub(super) fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// Why voluntary moves are frozen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Frozen {
    /// An operator froze the deployment (the freeze record).
    Operator {
        /// The record's reason.
        reason: String,
        /// Who froze it.
        by: String,
        /// When.
        at: String,
    },
    /// A member's configuration or admin API froze it (`placement.frozen`).
    Member {
        /// The members whose record says `frozen`.
        members: Vec<InstanceId>,
    },
    /// The storm breaker: many members vanished within one TTL.
    Storm {
        /// How many vanished within the window.
        vanished: usize,
        /// Of how many live members before.
        of: usize,
        /// Milliseconds until membership counts as stable again (if it stays unchanged).
        stable_in_ms: u64,
    },
}

impl Frozen {
    /// Whether `a` and `b` are the same freeze for a person reading the logs: the same
    /// operator record, the same frozen members, or both the storm breaker (whose countdown
    /// changes every re-plan).
    #[must_use]
    pub fn same(a: Option<&Frozen>, b: Option<&Frozen>) -> bool {
        match (a, b) {
            (Some(Frozen::Storm { .. }), Some(Frozen::Storm { .. })) => true,
            (a, b) => a == b,
        }
    }

    /// One line saying why moves are frozen (for logs and the CLI).
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Frozen::Operator { reason, by, at } => format!(
                "frozen by {} since {}{}",
                if by.is_empty() { "unknown" } else { by },
                if at.is_empty() { "unknown" } else { at },
                if reason.is_empty() {
                    String::new()
                } else {
                    format!(" (reason {reason:?})")
                }
            ),
            Frozen::Member { members } => {
                let names: Vec<&str> = members.iter().map(InstanceId::as_str).collect();
                format!(
                    "frozen by the configuration or admin API of {} (placement.frozen)",
                    names.join(", ")
                )
            }
            Frozen::Storm { vanished, of, .. } => format!(
                "frozen by the storm breaker: {vanished} of {of} members vanished within one TTL"
            ),
        }
    }
}

/// Trips when at least [`StormBreaker::SHARE`] of the live members (and at least two) vanish
/// within one window (the member TTL); resets once the live set stayed unchanged for the
/// stability window.
#[derive(Debug, Clone)]
pub struct StormBreaker {
    window: Duration,
    stability: Duration,
    live: BTreeSet<InstanceId>,
    /// Vanishings within the window, with the live count just before each.
    vanished: VecDeque<(Instant, usize)>,
    /// Last change of the live set.
    changed_at: Option<Instant>,
    /// Tripped: (vanished, of).
    tripped: Option<(usize, usize)>,
}

impl StormBreaker {
    /// The share of members that must vanish within one window: 30 %.
    pub const SHARE: (usize, usize) = (3, 10);

    /// A breaker counting vanishings within `window`, reset after `stability` unchanged.
    #[must_use]
    pub fn new(window: Duration, stability: Duration) -> Self {
        Self {
            window,
            stability,
            live: BTreeSet::new(),
            vanished: VecDeque::new(),
            changed_at: None,
            tripped: None,
        }
    }

    /// Takes in the live members at `now`; whether the breaker is tripped afterwards.
    pub fn observe(&mut self, live: &BTreeSet<InstanceId>, now: Instant) -> Option<Frozen> {
        if live != &self.live {
            let before = self.live.len();
            let gone = self.live.difference(live).count();
            for _ in 0..gone {
                self.vanished.push_back((now, before));
            }
            self.live = live.clone();
            self.changed_at = Some(now);
        }
        while self
            .vanished
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > self.window)
        {
            self.vanished.pop_front();
        }
        let count = self.vanished.len();
        let of = self.vanished.iter().map(|(_, n)| *n).max().unwrap_or(0);
        let (num, den) = Self::SHARE;
        if count >= 2 && count * den >= of * num {
            self.tripped = Some((count, of));
        }
        let stable_at = self.changed_at.map_or(now, |t| t + self.stability);
        if self.tripped.is_some() && now >= stable_at {
            self.tripped = None;
        }
        self.tripped.map(|(vanished, of)| Frozen::Storm {
            vanished,
            of,
            stable_in_ms: u64::try_from(stable_at.saturating_duration_since(now).as_millis())
                .unwrap_or(u64::MAX),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: std::ops::Range<usize>) -> BTreeSet<InstanceId> {
        n.map(|i| InstanceId::new(format!("n{i}")).expect("valid"))
            .collect()
    }

    #[test]
    fn trips_when_thirty_percent_vanish_within_a_window_and_resets_when_stable() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut b = StormBreaker::new(3 * s, 5 * s);
        assert_eq!(b.observe(&ids(0..10), t0), None);
        // Two of ten: 20 %, not a storm.
        assert_eq!(b.observe(&ids(0..8), t0 + s), None);
        // A third within the window: 30 %.
        let f = b.observe(&ids(0..7), t0 + 2 * s).expect("tripped");
        assert!(matches!(
            f,
            Frozen::Storm {
                vanished: 3,
                of: 10,
                ..
            }
        ));
        // Still frozen while membership keeps changing, until stable for 5 s.
        assert!(b.observe(&ids(0..7), t0 + 6 * s).is_some());
        assert!(b.observe(&ids(0..8), t0 + 7 * s).is_some());
        assert!(b.observe(&ids(0..8), t0 + 11 * s).is_some());
        assert_eq!(b.observe(&ids(0..8), t0 + 12 * s), None);
    }

    #[test]
    fn slow_attrition_and_single_leaves_do_not_trip() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut b = StormBreaker::new(3 * s, 5 * s);
        b.observe(&ids(0..3), t0);
        // One of three leaves: a storm needs at least two.
        assert_eq!(b.observe(&ids(0..2), t0 + s), None);
        let mut b = StormBreaker::new(3 * s, 5 * s);
        b.observe(&ids(0..10), t0);
        // One member every 4 s: never three within 3 s.
        for k in 1..6u32 {
            assert_eq!(b.observe(&ids(0..(10 - k as usize)), t0 + 4 * k * s), None);
        }
    }

    #[test]
    fn a_storm_countdown_is_the_same_freeze_an_operator_change_is_not() {
        let storm = |ms| Frozen::Storm {
            vanished: 2,
            of: 3,
            stable_in_ms: ms,
        };
        let op = |by: &str| Frozen::Operator {
            reason: "r".into(),
            by: by.into(),
            at: "t".into(),
        };
        assert!(Frozen::same(Some(&storm(5)), Some(&storm(4))));
        assert!(Frozen::same(None, None));
        assert!(!Frozen::same(None, Some(&storm(4))));
        assert!(Frozen::same(Some(&op("a")), Some(&op("a"))));
        assert!(!Frozen::same(Some(&op("a")), Some(&op("b"))));
        assert_eq!(
            op("alice@h").describe(),
            "frozen by alice@h since t (reason \"r\")"
        );
    }

    #[test]
    fn a_long_reason_is_cut_at_a_character_boundary() {
        let r = FreezeRecord::new(&"x".repeat(1000), "cli");
        assert_eq!(r.reason.len(), FreezeRecord::MAX_REASON_LEN);
        assert_eq!(FreezeRecord::new("ünï", "é").reason, "ünï");
    }
}
