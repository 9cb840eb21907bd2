//! What a run depends on: timing, network misbehaviour, faults, and the bounds they imply.

use std::time::Duration;

use crate::core::types::Timing;

use super::check::CheckOpts;
use super::clock::{MS, Nanos, PPM, SEC, nanos, scale};

/// Timing of the role (all machines share it), in the units the config validates.
#[derive(Debug, Clone, Copy)]
pub(super) struct TimingSpec {
    /// TTL in whole seconds.
    pub(super) ttl_s: u64,
    /// Heartbeat = TTL / `hb_div` (config: at least 3).
    pub(super) hb_div: u32,
    /// Deadline margin in percent (config: 0 < m < 50).
    pub(super) margin_pct: u32,
    /// Operation timeout in percent of the local lease (config: below it).
    pub(super) op_pct: u32,
    /// Disconnect grace in percent of the TTL (config: at most the TTL).
    pub(super) grace_pct: u32,
    /// Campaign jitter in ms (config: below the heartbeat).
    pub(super) jitter_ms: u64,
}

impl TimingSpec {
    pub(super) fn timing(self) -> Timing {
        let ttl = Duration::from_secs(self.ttl_s);
        let deadline_margin = f64::from(self.margin_pct) / 100.0;
        let local = ttl.mul_f64(1.0 - deadline_margin);
        let heartbeat = ttl / self.hb_div;
        Timing {
            ttl,
            heartbeat,
            deadline_margin,
            operation_timeout: local.mul_f64(f64::from(self.op_pct) / 100.0),
            disconnect_grace: ttl.mul_f64(f64::from(self.grace_pct) / 100.0),
            campaign_jitter: Duration::from_millis(self.jitter_ms).min(heartbeat / 2),
        }
    }
}

/// Network and server misbehaviour, in percent per message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Net {
    /// A watcher event is lost.
    pub(super) drop_pct: u32,
    /// A watcher event arrives up to 2 × TTL late (order per watcher is kept).
    pub(super) slow_pct: u32,
    /// A write commits after its timeout (reported `Unknown`); a read times out.
    pub(super) late_pct: u32,
    /// A write is slow but in time: applied and acknowledged anywhere within its timeout.
    pub(super) slow_write_pct: u32,
    /// The acknowledgement of a stored write is lost (`Unknown`).
    pub(super) lost_ack_pct: u32,
    /// A write is rejected with 10164 without being stored (`Retry`).
    pub(super) retry_pct: u32,
    /// A read is served by a replica that lags up to 2 heartbeats behind.
    pub(super) stale_pct: u32,
    /// A read or write fails at once (`Unavailable`, not stored).
    pub(super) fail_pct: u32,
    /// The application's demote callback takes up to 2 × TTL instead of 10 ms.
    pub(super) long_drain_pct: u32,
}

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FaultKind {
    /// The process dies: no more inputs, ever.
    Crash,
    /// A crashed node's instance starts again with a new incarnation.
    Restart,
    /// A crash, and the instance starts again (new incarnation) after `downtime_ms`.
    Reboot { downtime_ms: u64 },
    /// The process gets no inputs for `ttl_pct` % of the TTL, then everything queued.
    Pause { ttl_pct: u64 },
    /// The NATS connection is down for `ttl_pct` % of the TTL.
    Disconnect { ttl_pct: u64 },
    /// `handle_release` with this cooldown.
    Release { cooldown_ms: u64 },
    /// `handle_stop`.
    Stop,
    /// Placement hold-back: `handle_campaign_delay` with this delay.
    CampaignDelay { delay_ms: u64 },
    /// A targeted move of role 0 (protocol Q13) from its holder to the `to`-th other live
    /// instance: accepted at once; the holder releases it gracefully (reason `move`); at the
    /// vacancy that ends the holder's term the target claims at once and everybody else holds
    /// back `grace_ms` while the target's session lives.
    Move { to: u64, grace_ms: u64 },
    /// An operator deletes the instance's session key (an eviction: forceful by design, so
    /// only the negative controls use it; the victim's watcher hears of it first).
    EvictSession,
    /// Another client (a restored backup, a buggy tool) writes a session value of the
    /// instance's id and another incarnation into its session key, no TTL, never renewed, as
    /// soon as the key holds no live session (a marker or no entry: by CAS on it; over a live
    /// session it would be a second process with that id, flagged by design, Q6) — issue 24
    /// item 7. Armed for 3 TTLs.
    ForeignSession,
    /// Another client writes a role value naming the instance's live session (its value is in
    /// its key), by CAS on the next vacancy of any role (a marker or no entry: it never
    /// supersedes a holder), with the instance's own incarnation or another one (item 8).
    /// Armed for 3 TTLs.
    ForeignRole { own_incarnation: bool },
    /// The instance's writes of role keys are refused (`permission_denied`) for `ms`; its
    /// session writes still work (item 9).
    DenyRoleWrites { ms: u64 },
    /// [`FaultKind::DenyRoleWrites`], then a release of every role with this cooldown: the
    /// release is refused and handed over through the session (Q5 rule 5).
    RefusedRelease { deny_ms: u64, cooldown_ms: u64 },
    /// The instance's reads are served by a deposed stream leader that stopped applying at
    /// the fault, and its watcher delivers nothing, for `ttl_pct` % of the TTL; its writes reach
    /// the new leader (a stream-leader change while a backstop read is in flight, item 14).
    DeposedLeader { ttl_pct: u64 },
    /// The process dies together with the processes of its successors (protocol Q8 rule 2:
    /// the members ranked first to follow it, by the records in the bucket now): nobody
    /// follows its sessions any more; the second tier or the presence TTL must end its
    /// record.
    CrashWithSuccessors,
    /// Another client deletes the instance's member record (`delete`), or writes one of its id
    /// with another incarnation listing a session that never existed, no TTL (Q8: a record is
    /// never a vacancy rule; the owner writes it again after a renewal, rule 6).
    ForeignMember { delete: bool },
    /// An operator deletes the bucket and creates it again (all keys gone, revisions from 1,
    /// a new epoch); `fresh`: a new process (a spare instance slot) starts right after (item
    /// 3). The target is ignored.
    ResetBucket { fresh: bool },
}

impl FaultKind {
    /// A fault that keeps the liveness check: it hits processes or keys, not the network (a
    /// holder killed with its successors has a bound of its own: the second tier's).
    pub(super) fn keeps_liveness(self) -> bool {
        !matches!(
            self,
            Self::Pause { .. }
                | Self::Disconnect { .. }
                | Self::DeposedLeader { .. }
                | Self::CrashWithSuccessors
        )
    }
}

/// Whom a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// The acting holder (or the writer of the key's live put, or for a restart the last
    /// crashed node).
    Leader,
    /// Node `i % nodes`.
    Node(usize),
    /// The `i % n`-th of the `n` live instances that do not act for role 0.
    Follower(usize),
}

/// One fault at `at_permille` ‰ of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fault {
    pub(super) at_permille: u64,
    pub(super) kind: FaultKind,
    pub(super) target: Target,
}

/// Everything a run depends on.
#[derive(Debug, Clone)]
pub(super) struct Scenario {
    /// Seeds every random choice of the run.
    pub(super) seed: u64,
    /// Number of instances (processes) at the start.
    pub(super) nodes: usize,
    /// Number of roles every instance runs (all on its one session).
    pub(super) roles: usize,
    /// Instance 0 only observes (`campaign: false`).
    pub(super) observer: bool,
    /// The last node is never hit by a fault (a live candidate for the liveness check).
    pub(super) immune: bool,
    pub(super) timing: TimingSpec,
    pub(super) net: Net,
    /// Node clocks drift within the protocol's assumption.
    pub(super) drift: bool,
    /// The bucket has no per-message TTLs: fail-over relies on the session book's backstop
    /// (Q5 rule 4).
    pub(super) no_ttl: bool,
    /// Holders validate their lease with a read every heartbeat (P6 background validation).
    pub(super) validate: bool,
    /// Expiry markers age out this long after the server wrote them
    /// (`subject_delete_marker_ttl`; the key then has no entry at all).
    pub(super) marker_ttl_ms: Option<u64>,
    /// The bucket is created when the run starts (a brand-new deployment: no acquire before it
    /// is TTL + heartbeat old, Q6) rather than long before.
    pub(super) fresh_bucket: bool,
    /// Role 0 has this many slots (protocol Q15; 0: none): the run's roles are then
    /// `r0.0`, …, `r0.<slots - 1>`, followed by the other roles, and every process drives
    /// their slot permit as the manager's role driver does (invariant S7).
    pub(super) slots: usize,
    pub(super) faults: Vec<Fault>,
}

impl Scenario {
    /// Simulated length of the run: 8 TTLs + 2 s.
    pub(super) fn duration(&self) -> Nanos {
        (8 * self.timing.ttl_s + 2) * SEC
    }

    /// No network faults, pauses, disconnects or deposed leaders: only faults of processes
    /// and keys (crashes, restarts, releases, stops, foreign values, refused writes, bucket
    /// resets).
    pub(super) fn fault_free(&self) -> bool {
        self.net == Net::default() && self.faults.iter().all(|f| f.kind.keeps_liveness())
    }

    /// The checks that apply: liveness only for fault-free runs with a live candidate.
    pub(super) fn check_opts(&self) -> CheckOpts {
        let live = self.fault_free() && self.immune;
        CheckOpts {
            ignore_deadline: false,
            liveness: live.then(|| self.failover_bound() + self.max_campaign_delay()),
            young: self.young_bound() + self.max_campaign_delay(),
            stop_bound: live.then_some(STOP_BOUND + self.max_campaign_delay()),
        }
    }

    /// Number of spare instance slots: one per bucket reset that starts a fresh process.
    pub(super) fn spares(&self) -> usize {
        self.faults
            .iter()
            .filter(|f| matches!(f.kind, FaultKind::ResetBucket { fresh: true }))
            .count()
    }

    /// The presence TTL of member records (Q8 rule 1: `max(5 min or instance.presence_ttl, 10 × TTL)`), shortened to
    /// [`PRESENCE_TTLS`] × TTL so that it ends records within a run.
    pub(super) fn presence_ttl(&self) -> Nanos {
        PRESENCE_TTLS * self.timing.ttl_s * SEC
    }

    /// The slowest node clock's rate (ppm of server time).
    pub(super) fn slowest_ppm(&self) -> u64 {
        if self.drift {
            PPM - u64::from(self.timing.margin_pct) * 9_000
        } else {
            PPM
        }
    }

    /// A role is held again at most this long after its bucket was created: no acquire before
    /// the bucket is TTL + heartbeat old on the slowest clock (Q6), then a fault-free election.
    pub(super) fn young_bound(&self) -> Nanos {
        let ttl = self.timing.ttl_s * SEC;
        // A TTL + heartbeat after the first read of a key with no entry (Q5 rule 1), which a
        // process of the old bucket makes once it learned of the new one: at its next session
        // renewal (a heartbeat at most), then an epoch check and the read (one more heartbeat
        // covers both).
        let hold = ttl + 3 * (ttl / u64::from(self.timing.hb_div));
        scale(hold, PPM, self.slowest_ppm(), true) + LIVENESS_SLACK + YOUNG_SLACK
    }

    /// Liveness after a follower's pause in which the holder crashed and its expiry marker
    /// aged out (counted from the end of the last fault, the resume): the follower reaps the
    /// session it still believes in on the revision it knows (refused: no entry), reads the
    /// key from the leader (no entry) and reaps on 0 at the next tick — a backstop period
    /// after its last sighting at most, plus three ticks for the round trips.
    pub(super) fn aged_marker_bound(&self) -> Nanos {
        let ttl = self.timing.ttl_s * SEC;
        let grace = nanos(crate::core::machine::BACKSTOP_GRACE);
        let tick = nanos(BACKSTOP_TICK);
        let period = ttl + ttl / u64::from(self.timing.hb_div) + grace;
        scale(period + 3 * tick, PPM, self.slowest_ppm(), true) + LIVENESS_SLACK
    }

    /// Liveness after a holder died together with its successors (Q8 rule 5, counted from
    /// the crash): nobody follows it; the second tier reads its session key from the leader
    /// once per backstop period — the first read after its expiry marker (a TTL after the
    /// crash) finds the end at most a period later — and deletes its record; then every
    /// candidate follows it as an orphan and its consumer delivers the marker. Two ticks for
    /// the reads' and the delete's round trips.
    pub(super) fn second_tier_bound(&self) -> Nanos {
        let ttl = self.timing.ttl_s * SEC;
        let grace = nanos(crate::core::machine::BACKSTOP_GRACE);
        let tick = nanos(BACKSTOP_TICK);
        let period = ttl + ttl / u64::from(self.timing.hb_div) + grace;
        scale(ttl + period + 2 * tick, PPM, self.slowest_ppm(), true)
            + LIVENESS_SLACK
            + FOLLOW_SLACK
    }

    /// The longest placement hold-back any node is given: it may delay a fail-over or a
    /// hand-over by that much (availability comes back once it passed).
    pub(super) fn max_campaign_delay(&self) -> Nanos {
        self.faults
            .iter()
            .filter_map(|f| match f.kind {
                FaultKind::CampaignDelay { delay_ms } => Some(delay_ms * MS),
                // A move's grace delays the others when its target fails to claim.
                FaultKind::Move { grace_ms, .. } => Some(grace_ms * MS),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Fault-free fail-over after a crash: the TTL (the server expires the session key), or
    /// without TTLs the backstop's TTL + heartbeat + grace (+ one backstop tick) on the
    /// slowest follower clock.
    pub(super) fn failover_bound(&self) -> Nanos {
        let ttl = self.timing.ttl_s * SEC;
        if !self.no_ttl {
            return ttl + LIVENESS_SLACK;
        }
        let grace = nanos(crate::core::machine::BACKSTOP_GRACE);
        let tick = nanos(BACKSTOP_TICK);
        let wait = ttl + ttl / u64::from(self.timing.hb_div) + grace + tick;
        scale(wait, PPM, self.slowest_ppm(), true) + LIVENESS_SLACK
    }
}

/// How often the watcher looks for sessions due for a reap (every run's; the world's watchers
/// tick with it, the fail-over bounds above count it).
pub(super) const BACKSTOP_TICK: Duration = Duration::from_millis(250);

/// The simulation's presence TTL in TTLs (the real one is at least 10, and 5 min by default: longer than
/// a run).
pub(super) const PRESENCE_TTLS: u64 = 4;

/// Beyond the hold of a young bucket: the herd's grace for a returning holder and a read.
pub(super) const YOUNG_SLACK: Nanos = 150 * MS;

/// Fault-free fail-over beyond the TTL: delivery + herd delay + jitter + write +
/// acknowledgement + drain.
pub(super) const LIVENESS_SLACK: Nanos = 150 * MS;
/// Beyond the fail-over slack, when candidates learn a holder's end through its record's
/// delete (Q8 rule 4): the delete's delivery, the consumer's creation and its first delivery.
pub(super) const FOLLOW_SLACK: Nanos = 20 * MS;
/// A fault-free stop (drain ≤ 10 ms, then a delete) finishes within this.
pub(super) const STOP_BOUND: Nanos = 200 * MS;
