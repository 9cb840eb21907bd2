//! Deterministic simulation and property tests of the election core.
//!
//! One role, 2–6 [`RoleMachine`]s and an in-memory model of the role's JetStream KV key
//! (`history: 1`, per-message TTL with expiry markers, CAS on the last subject sequence). The
//! simulation owns time: watcher deliveries, write applications and acknowledgements, reads,
//! expiries, timers and faults run in server-time order from one RNG seeded by the
//! [`Scenario`], so a failing case reproduces from the scenario proptest prints.
//!
//! Faults: lost and very late watcher events, writes that commit after their timeout reported
//! `Unknown`, lost acknowledgements, spurious 10164 rejections (`Retry`), stale reads (a lagging
//! replica), failed reads and writes, crashes, restarts and reboots (same instance id, new
//! incarnation: restart adoption), pauses longer than the TTL (GC), connection flaps with
//! watcher resync and replay, releases, stops, slow drains, buckets without per-message TTLs
//! (fail-over by the observed-expiry backstop only), and clock drift: holders up to
//! 0.9 × margin slow (P4), followers up to 0.9 × heartbeat / TTL fast (the backstop needs
//! follower clocks faster than server time by less than heartbeat / TTL; P4 does not say so).
//!
//! [`check`] turns a [`Trace`] into a list of [`Violation`]s:
//!
//! * **S2** promote terms strictly increase across all machines, in promote order.
//! * **S3** a promote's revision is a put this machine's acquire stored, carrying the term's
//!   nonce (term = revision); a renewal's revision is this term's put.
//! * **S4** acting intervals of different machines never overlap. A machine acts for a term
//!   from its `Promote` until the earliest of its `Demote`, its crash and the term's deadline
//!   (as extended by `Renewed`), converted to server time with the machine's clock.
//! * **S4b** while a machine acts, the key holds that term's put and nothing else is stored.
//! * **S5** per machine: `(Promote Renewed* Demote)*` with matching terms; no promote after
//!   `Stopped`.
//! * **S6** a leading machine's timer is due no later than its deadline, the timer firing at or
//!   after the deadline demotes the term, and no renewal is reported after it.
//! * **S7** after a timer fired, `poll_timeout()` is in the future (still due is a busy loop in
//!   a real driver), and a campaigning machine that is not stopped and has no operation in
//!   flight has a timer (otherwise it waits for events that may never come).
//! * **L** (fault-free runs) no stretch without an acting holder lasts longer than the
//!   fail-over bound (TTL + slack; without TTLs, TTL + heartbeat on the slowest clock + slack)
//!   after its start or the last fault in it, and a stop finishes promptly.
//!
//! Negative controls run deliberately broken variants (a KV without CAS, a KV that drops the
//! TTL of renewals, a harness without local deadlines) and require the checker to notice. A
//! coverage test makes sure the fault runs reach the interesting paths (backstop takeovers,
//! adoption, own-write reclaim, late commits, each demote reason). Single-machine regression
//! tests pin the machine bugs the simulation found.
//!
//! To debug a failure, paste the printed `Scenario` into [`replay`] (or set `SIM_WINDOW_MS`
//! to widen the trace printed with the failure). `PROPTEST_CASES` sets the number of cases.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;
use uuid::Uuid;

use super::backoff::{RetryPolicy, SplitMix64};
use super::machine::{Identity, RoleMachine};
use super::types::{
    Action, DemoteReason, FailureKind, KeyState, ReleaseReason, Term, Timing, WriteKind,
    WriteOutcome, WriteRequest,
};
use crate::names::InstanceId;
use crate::value::{HolderValue, LeaseValue};

// ----- time and randomness -----------------------------------------------------------------

/// Simulated server time in nanoseconds since the start of a run.
type Nanos = u64;

const MS: Nanos = 1_000_000;
const SEC: Nanos = 1_000 * MS;
const PPM: u64 = 1_000_000;
/// Bucket epoch of every machine (the simulation never resets the bucket).
const EPOCH: u64 = 1;
/// Upper bound of events per run; more means a livelock.
const EVENT_LIMIT: u64 = 1_000_000;

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `a × b / c`, rounded down or up.
fn scale(a: u64, b: u64, c: u64, up: bool) -> u64 {
    let p = u128::from(a) * u128::from(b);
    let c = u128::from(c);
    u64::try_from(if up { p.div_ceil(c) } else { p / c }).unwrap_or(u64::MAX)
}

/// `12.345678s`: server time for traces.
fn secs(g: Nanos) -> String {
    format!("{}.{:06}s", g / SEC, (g % SEC) / 1_000)
}

/// First eight hex digits of a nonce.
fn short(u: Uuid) -> String {
    u.simple().to_string()[..8].to_owned()
}

/// A node's monotonic clock: it runs at `rate_ppm / 10⁶` of server time (clock drift).
#[derive(Debug, Clone, Copy)]
struct Clock {
    base: Instant,
    rate_ppm: u64,
}

impl Clock {
    /// The node's reading at server time `g`.
    fn local(self, g: Nanos) -> Instant {
        self.base + Duration::from_nanos(scale(g, self.rate_ppm, PPM, false))
    }

    /// The first server time at which the node's clock reads at least `t`.
    fn global(self, t: Instant) -> Nanos {
        scale(
            nanos(t.saturating_duration_since(self.base)),
            PPM,
            self.rate_ppm,
            true,
        )
    }

    /// Server time that passes while the node's clock advances by `d` (rounded up).
    fn span(self, d: Duration) -> Nanos {
        scale(nanos(d), PPM, self.rate_ppm, true)
    }
}

/// The simulation's random source, seeded from the scenario.
struct Rng(SplitMix64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn chance(&mut self, pct: u32) -> bool {
        pct > 0 && self.next() % 100 < u64::from(pct)
    }

    /// Uniform in `[lo, hi)` (`lo` when the range is empty).
    fn between(&mut self, lo: Nanos, hi: Nanos) -> Nanos {
        if hi <= lo {
            lo
        } else {
            lo + self.next() % (hi - lo)
        }
    }

    /// A normal network hop: 50 µs – 3 ms.
    fn hop(&mut self) -> Nanos {
        self.between(50_000, 3 * MS)
    }

    fn uuid(&mut self) -> Uuid {
        Uuid::from_u64_pair(self.next(), self.next())
    }
}

// ----- the KV model ------------------------------------------------------------------------

/// What one stream message of the role key is.
#[derive(Debug, Clone)]
enum EntryKind {
    Put(Box<LeaseValue>),
    Delete,
    Expiry,
}

/// One message of the role key (the key's history; the bucket keeps only the last).
#[derive(Debug, Clone)]
struct Entry {
    rev: u64,
    at: Nanos,
    kind: EntryKind,
    /// Node and kind of the write that stored it (`None` for expiry markers).
    writer: Option<(usize, WriteKind)>,
}

impl Entry {
    fn state(&self) -> KeyState {
        match &self.kind {
            EntryKind::Put(v) => KeyState::Held {
                revision: self.rev,
                value: HolderValue::Lease(v.clone()),
            },
            EntryKind::Delete => KeyState::Vacant {
                revision: self.rev,
                expired: false,
            },
            EntryKind::Expiry => KeyState::Vacant {
                revision: self.rev,
                expired: true,
            },
        }
    }

    fn nonce(&self) -> Option<Uuid> {
        match &self.kind {
            EntryKind::Put(v) => Some(v.nonce),
            EntryKind::Delete | EntryKind::Expiry => None,
        }
    }
}

/// Deliberate model bugs for the negative controls.
#[derive(Debug, Clone, Copy, Default)]
struct KvFlaws {
    /// Store every write whatever its expected revision (a plain put).
    ignore_cas: bool,
    /// Store renewals without a TTL: once renewed, the key never expires.
    no_ttl_on_renew: bool,
}

/// One key of a JetStream KV bucket with `history: 1` and, unless `no_ttl`, per-message TTLs
/// and limit markers.
#[derive(Debug, Default)]
struct Kv {
    log: Vec<Entry>,
    /// The bucket ignores TTLs (server < 2.11 or no limit markers, P3): keys never expire.
    no_ttl: bool,
    /// Stream sequence: messages of other keys make gaps between this key's revisions.
    seq: u64,
    flaws: KvFlaws,
}

impl Kv {
    /// Revision of the key's last entry (0 = never written).
    fn last_rev(&self) -> u64 {
        self.log.last().map_or(0, |e| e.rev)
    }

    fn entry(&self, rev: u64) -> Option<&Entry> {
        let i = self.log.binary_search_by_key(&rev, |e| e.rev).ok()?;
        self.log.get(i)
    }

    fn state(&self) -> KeyState {
        self.log.last().map_or(KeyState::Absent, Entry::state)
    }

    /// The key as a replica that lags behind at server time `at` shows it.
    fn state_at(&self, at: Nanos) -> KeyState {
        let n = self.log.partition_point(|e| e.at <= at);
        n.checked_sub(1)
            .map_or(KeyState::Absent, |i| self.log[i].state())
    }

    fn push(&mut self, at: Nanos, gap: u64, kind: EntryKind, writer: Option<(usize, WriteKind)>) {
        self.seq += 1 + gap;
        self.log.push(Entry {
            rev: self.seq,
            at,
            kind,
            writer,
        });
    }

    /// Applies a conditional write of `node` at `at` (NATS `Expected-Last-Subject-Sequence`:
    /// stored iff the key's last revision is the expected one). Returns the outcome and, for
    /// a put with a TTL, when the server expires it.
    fn apply(
        &mut self,
        node: usize,
        req: &WriteRequest,
        at: Nanos,
        gap: u64,
    ) -> (WriteOutcome, Option<Nanos>) {
        if !self.flaws.ignore_cas && req.expected != self.last_rev() {
            return (WriteOutcome::Conflict, None);
        }
        let (kind, expires) = match &req.value {
            Some(v) => {
                let keep =
                    self.no_ttl || (self.flaws.no_ttl_on_renew && req.kind == WriteKind::Renew);
                let expires = (!keep).then(|| at + v.ttl_ms * MS);
                (EntryKind::Put(Box::new(v.clone())), expires)
            }
            None => (EntryKind::Delete, None),
        };
        self.push(at, gap, kind, Some((node, req.kind)));
        (WriteOutcome::Ok { revision: self.seq }, expires)
    }

    /// The TTL of the put at `rev` ran out: if it is still the key's last entry, the server
    /// removes it and leaves an expiry marker. Returns the marker's revision.
    fn expire(&mut self, rev: u64, at: Nanos, gap: u64) -> Option<u64> {
        let last = self.log.last()?;
        if last.rev != rev || !matches!(last.kind, EntryKind::Put(_)) {
            return None;
        }
        self.push(at, gap, EntryKind::Expiry, None);
        Some(self.seq)
    }
}

// ----- scenarios ---------------------------------------------------------------------------

/// Timing of the role (all machines share it), in the units the config validates.
#[derive(Debug, Clone, Copy)]
struct TimingSpec {
    /// TTL in whole seconds.
    ttl_s: u64,
    /// Heartbeat = TTL / `hb_div` (config: at least 3).
    hb_div: u32,
    /// Deadline margin in percent (config: 0 < m < 50).
    margin_pct: u32,
    /// Operation timeout in percent of the local lease (config: below it).
    op_pct: u32,
    /// Disconnect grace in percent of the TTL (config: at most the TTL).
    grace_pct: u32,
    /// Campaign jitter in ms (config: below the heartbeat).
    jitter_ms: u64,
}

impl TimingSpec {
    fn timing(self) -> Timing {
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
struct Net {
    /// A watcher event is lost.
    drop_pct: u32,
    /// A watcher event arrives up to 2 × TTL late (order per watcher is kept).
    slow_pct: u32,
    /// A write commits after its timeout (reported `Unknown`); a read times out.
    late_pct: u32,
    /// A write is slow but in time: applied and acknowledged anywhere within its timeout.
    slow_write_pct: u32,
    /// The acknowledgement of a stored write is lost (`Unknown`).
    lost_ack_pct: u32,
    /// A write is rejected with 10164 without being stored (`Retry`).
    retry_pct: u32,
    /// A read is served by a replica that lags up to 2 heartbeats behind.
    stale_pct: u32,
    /// A read or write fails at once (`Unavailable`, not stored).
    fail_pct: u32,
    /// The application's demote callback takes up to 2 × TTL instead of 10 ms.
    long_drain_pct: u32,
}

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FaultKind {
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
}

/// Whom a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The acting holder (or the writer of the key's live put, or for a restart the last
    /// crashed node).
    Leader,
    /// Node `i % nodes`.
    Node(usize),
}

/// One fault at `at_permille` ‰ of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fault {
    at_permille: u64,
    kind: FaultKind,
    target: Target,
}

/// Everything a run depends on.
#[derive(Debug, Clone)]
struct Scenario {
    /// Seeds every random choice of the run.
    seed: u64,
    /// Number of machines at the start.
    nodes: usize,
    /// Node 0 only observes (`campaign: false`).
    observer: bool,
    /// The last node is never hit by a fault (a live candidate for the liveness check).
    immune: bool,
    timing: TimingSpec,
    net: Net,
    /// Node clocks drift within the protocol's assumption.
    drift: bool,
    /// The bucket has no per-message TTLs: fail-over relies on the follower backstop (P5).
    no_ttl: bool,
    /// Holders validate their lease with a read every heartbeat (P6 background validation).
    validate: bool,
    faults: Vec<Fault>,
}

impl Scenario {
    /// Simulated length of the run: 8 TTLs + 2 s.
    fn duration(&self) -> Nanos {
        (8 * self.timing.ttl_s + 2) * SEC
    }

    /// No network faults, pauses or disconnects: only crashes, restarts, releases and stops.
    fn fault_free(&self) -> bool {
        self.net == Net::default()
            && self.faults.iter().all(|f| {
                !matches!(
                    f.kind,
                    FaultKind::Pause { .. } | FaultKind::Disconnect { .. }
                )
            })
    }

    /// The checks that apply: liveness only for fault-free runs with a live candidate.
    fn check_opts(&self) -> CheckOpts {
        let live = self.fault_free() && self.immune;
        CheckOpts {
            ignore_deadline: false,
            liveness: live.then(|| self.failover_bound() + self.max_campaign_delay()),
            stop_bound: live.then_some(STOP_BOUND + self.max_campaign_delay()),
        }
    }

    /// The longest placement hold-back any node is given: it may delay a fail-over or a
    /// hand-over by that much (availability comes back once it passed).
    fn max_campaign_delay(&self) -> Nanos {
        self.faults
            .iter()
            .filter_map(|f| match f.kind {
                FaultKind::CampaignDelay { delay_ms } => Some(delay_ms * MS),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Fault-free fail-over after a crash: the TTL (the server expires the key), or without
    /// TTLs the backstop's TTL + heartbeat on the slowest follower clock.
    fn failover_bound(&self) -> Nanos {
        let ttl = self.timing.ttl_s * SEC;
        if !self.no_ttl {
            return ttl + LIVENESS_SLACK;
        }
        let grace = u64::try_from(super::machine::BACKSTOP_GRACE.as_nanos()).unwrap_or(0);
        let wait = ttl + ttl / u64::from(self.timing.hb_div) + grace;
        let slowest = if self.drift {
            PPM - u64::from(self.timing.margin_pct) * 9_000
        } else {
            PPM
        };
        scale(wait, PPM, slowest, true) + LIVENESS_SLACK
    }
}

/// Fault-free fail-over beyond the TTL: delivery + jitter + write + acknowledgement + drain.
const LIVENESS_SLACK: Nanos = 150 * MS;
/// A fault-free stop (drain ≤ 10 ms, then a delete) finishes within this.
const STOP_BOUND: Nanos = 200 * MS;

// ----- the simulation ----------------------------------------------------------------------

/// An input of one machine, as the driver would feed it.
#[derive(Debug, Clone)]
enum Input {
    Start,
    Timer(u64),
    Observed {
        rev: u64,
        replay: bool,
    },
    Write {
        op: u64,
        outcome: WriteOutcome,
        unknown_at: Nanos,
    },
    Read {
        op: u64,
        result: Result<KeyState, FailureKind>,
    },
    /// A background validation read answered (the driver ignores failed ones).
    Validated(KeyState),
    /// The driver's validation timer: read the key if still leading.
    Validate,
    Drained,
    Release(Duration),
    CampaignDelay(Duration),
    Stop,
    Connection(bool),
}

/// A compact record of an input, for checks and traces.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Seen {
    Start,
    Timer,
    Observed(u64),
    Write(u64, WriteOutcome),
    Read(u64, Option<u64>),
    Validated(u64),
    Validate,
    Drained,
    Release,
    CampaignDelay,
    Stop,
    Connection(bool),
}

impl Input {
    fn seen(&self) -> Seen {
        match self {
            Self::Start => Seen::Start,
            Self::Timer(_) => Seen::Timer,
            Self::Observed { rev, .. } => Seen::Observed(*rev),
            Self::Write { op, outcome, .. } => Seen::Write(*op, *outcome),
            Self::Read { op, result } => {
                Seen::Read(*op, result.as_ref().ok().map(KeyState::revision))
            }
            Self::Validated(state) => Seen::Validated(state.revision()),
            Self::Validate => Seen::Validate,
            Self::Drained => Seen::Drained,
            Self::Release(_) => Seen::Release,
            Self::CampaignDelay(_) => Seen::CampaignDelay,
            Self::Stop => Seen::Stop,
            Self::Connection(up) => Seen::Connection(*up),
        }
    }
}

/// One step of a machine's history (server time `g`, the machine's clock `now`).
#[derive(Debug, Clone)]
enum Rec {
    Input {
        g: Nanos,
        what: Seen,
    },
    Act {
        g: Nanos,
        now: Instant,
        action: Action,
    },
    /// After the actions of an input: the machine's timer and whether an operation is in flight.
    Idle {
        g: Nanos,
        now: Instant,
        timeout: Option<Instant>,
        pending: bool,
        stopped: bool,
    },
    Crash {
        g: Nanos,
    },
}

/// The recorded history of one machine.
#[derive(Debug, Clone)]
struct NodeTrace {
    name: String,
    campaign: bool,
    clock: Clock,
    recs: Vec<Rec>,
}

/// Everything a run produced.
#[derive(Debug, Clone)]
struct Trace {
    nodes: Vec<NodeTrace>,
    log: Vec<Entry>,
    end: Nanos,
    /// Faults as applied: time and description.
    faults: Vec<(Nanos, String)>,
    /// Problems of the run itself (livelock).
    errors: Vec<Violation>,
}

/// A simulation event.
#[derive(Debug)]
enum Ev {
    Node(usize, Input),
    Apply(usize),
    Serve(usize),
    Expire(u64),
    Fault(usize),
    /// A crashed node's instance starts again.
    Respawn(usize),
}

/// A queued event, ordered by time, then by scheduling order.
#[derive(Debug)]
struct Queued {
    at: Nanos,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> Ordering {
        // `BinaryHeap` is a max-heap: the earliest event is the greatest.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A write on its way: the server applies it at its `Apply` event.
#[derive(Debug)]
struct Flight {
    node: usize,
    op: u64,
    req: WriteRequest,
    /// Delay of the acknowledgement after the apply; `None` when it never arrives in time.
    ack: Option<Nanos>,
    unknown_at: Nanos,
}

/// A read on its way: the server answers at its `Serve` event.
#[derive(Debug, Clone, Copy)]
struct ReadFlight {
    node: usize,
    op: u64,
    reply: Nanos,
    /// A background validation read rather than one the machine asked for.
    validation: bool,
}

/// One machine and the driver state around it.
struct Node {
    machine: RoleMachine,
    slot: usize,
    clock: Clock,
    /// The machine was started; its watcher runs from then on.
    started: bool,
    crashed: bool,
    restarted: bool,
    paused_until: Nanos,
    /// While the connection is down: when it comes back.
    disconnected_until: Option<Nanos>,
    /// Last revision the watcher delivered, and when the last delivery is scheduled.
    watch_rev: u64,
    watch_tail: Nanos,
    /// Armed timer: server time and generation.
    timer: Option<(Nanos, u64)>,
    timer_gen: u64,
    /// Deadline of the term the machine leads, per its actions.
    leading: Option<Instant>,
    /// The driver's validation timer is armed.
    validating: bool,
    trace: NodeTrace,
}

/// The simulated world.
struct Sim {
    sc: Scenario,
    timing: Timing,
    rng: Rng,
    base: Instant,
    kv: Kv,
    nodes: Vec<Node>,
    queue: BinaryHeap<Queued>,
    seq: u64,
    now: Nanos,
    end: Nanos,
    writes: Vec<Flight>,
    reads: Vec<ReadFlight>,
    faults: Vec<(Nanos, String)>,
    errors: Vec<Violation>,
}

impl Sim {
    fn new(sc: &Scenario, flaws: KvFlaws) -> Self {
        let mut sim = Self {
            sc: sc.clone(),
            timing: sc.timing.timing(),
            rng: Rng(SplitMix64::new(sc.seed)),
            base: Instant::now(),
            kv: Kv {
                flaws,
                no_ttl: sc.no_ttl,
                ..Kv::default()
            },
            nodes: Vec::new(),
            queue: BinaryHeap::new(),
            seq: 0,
            now: 0,
            end: sc.duration(),
            writes: Vec::new(),
            reads: Vec::new(),
            faults: Vec::new(),
            errors: Vec::new(),
        };
        for slot in 0..sc.nodes {
            let at = sim.rng.between(0, 5 * MS);
            sim.spawn(slot, !(sc.observer && slot == 0), at);
        }
        for (i, f) in sc.faults.iter().enumerate() {
            sim.push(f.at_permille * sim.end / 1000, Ev::Fault(i));
        }
        sim
    }

    /// Runs the scenario to its end.
    fn run(mut self) -> Trace {
        let mut events = 0u64;
        while let Some(q) = self.queue.pop() {
            if q.at > self.end {
                break;
            }
            events += 1;
            if events > EVENT_LIMIT {
                let detail = format!("more than {EVENT_LIMIT} events: livelock");
                self.errors.push(Violation {
                    rule: "SIM",
                    at: q.at,
                    node: None,
                    detail,
                });
                break;
            }
            self.now = q.at;
            match q.ev {
                Ev::Node(n, input) => self.node_event(n, q.seq, input),
                Ev::Apply(w) => self.apply(w),
                Ev::Serve(r) => self.serve(r),
                Ev::Expire(rev) => self.expire(rev),
                Ev::Fault(i) => self.fault(i),
                Ev::Respawn(n) => self.respawn(n),
            }
        }
        Trace {
            nodes: self.nodes.into_iter().map(|n| n.trace).collect(),
            log: self.kv.log,
            end: self.end,
            faults: self.faults,
            errors: self.errors,
        }
    }

    fn push(&mut self, at: Nanos, ev: Ev) {
        self.seq += 1;
        self.queue.push(Queued {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// Starts a machine for instance `slot` (a new incarnation) at `at`.
    fn spawn(&mut self, slot: usize, campaign: bool, at: Nanos) {
        let rate_ppm = if self.sc.drift {
            // Holders may run slow by up to 0.9 × margin (P4); followers fast by less than
            // heartbeat / TTL, which the observed-expiry backstop (P5) relies on.
            let slow = u64::from(self.sc.timing.margin_pct) * 9_000;
            let fast = 900_000 / u64::from(self.sc.timing.hb_div);
            self.rng.between(PPM - slow, PPM + fast)
        } else {
            PPM
        };
        let clock = Clock {
            base: self.base,
            rate_ppm,
        };
        let name = format!("node-{slot}");
        let id = Identity {
            instance: InstanceId::new(name.clone()).expect("valid instance id"),
            incarnation: self.rng.uuid(),
            priority: 0,
            meta: std::collections::BTreeMap::new(),
        };
        let seed = self.rng.next();
        let machine = RoleMachine::new(
            id,
            self.timing,
            RetryPolicy::default(),
            campaign,
            EPOCH,
            seed,
        );
        let name = format!("{name}/{}", self.nodes.len());
        self.nodes.push(Node {
            machine,
            slot,
            clock,
            started: false,
            crashed: false,
            restarted: false,
            paused_until: 0,
            disconnected_until: None,
            watch_rev: 0,
            watch_tail: 0,
            timer: None,
            timer_gen: 0,
            leading: None,
            validating: false,
            trace: NodeTrace {
                name,
                campaign,
                clock,
                recs: Vec::new(),
            },
        });
        let n = self.nodes.len() - 1;
        self.push(at, Ev::Node(n, Input::Start));
    }

    /// Gap the stream sequence makes for messages of other keys.
    fn gap(&mut self) -> u64 {
        if self.rng.chance(30) {
            self.rng.between(1, 5)
        } else {
            0
        }
    }

    // ----- machine inputs ----------------------------------------------------------------

    /// Delivers an input unless the node crashed; defers it past a pause; applies the
    /// connection state.
    fn node_event(&mut self, n: usize, seq: u64, input: Input) {
        let node = &self.nodes[n];
        if node.crashed {
            return;
        }
        if self.now < node.paused_until {
            // Keep the original order among everything that queued up during the pause.
            let at = node.paused_until;
            self.queue.push(Queued {
                at,
                seq,
                ev: Ev::Node(n, input),
            });
            return;
        }
        let Some(input) = self.through_connection(n, input) else {
            return;
        };
        if let Input::Validate = input {
            return self.validate(n);
        }
        let node = &mut self.nodes[n];
        match input {
            Input::Timer(generation) => {
                if node.timer.map(|t| t.1) != Some(generation) {
                    return;
                }
                node.timer = None;
            }
            Input::Observed { rev, replay } => {
                if rev < node.watch_rev || (rev == node.watch_rev && !replay) {
                    return;
                }
                node.watch_rev = rev;
            }
            _ => {}
        }
        self.feed(n, input);
    }

    /// What a disconnected node gets instead: no watcher events, no replies.
    fn through_connection(&mut self, n: usize, input: Input) -> Option<Input> {
        if self.nodes[n].disconnected_until.is_none() {
            return Some(input);
        }
        match input {
            Input::Observed { .. } => None,
            // The acknowledgement is lost: the driver reports `Unknown` at the timeout.
            Input::Write {
                op,
                outcome: WriteOutcome::Ok { .. } | WriteOutcome::Conflict | WriteOutcome::Retry,
                unknown_at,
            } => {
                let outcome = WriteOutcome::Unknown;
                let at = unknown_at.max(self.now);
                self.push(
                    at,
                    Ev::Node(
                        n,
                        Input::Write {
                            op,
                            outcome,
                            unknown_at,
                        },
                    ),
                );
                None
            }
            Input::Read { op, result: Ok(_) } => Some(Input::Read {
                op,
                result: Err(FailureKind::Unavailable),
            }),
            Input::Validated(_) => None,
            other => Some(other),
        }
    }

    /// Feeds one input to machine `n`, then executes its actions and re-arms its timer.
    fn feed(&mut self, n: usize, input: Input) {
        let g = self.now;
        let node = &mut self.nodes[n];
        let now = node.clock.local(g);
        let input_seen = input.seen();
        node.trace.recs.push(Rec::Input {
            g,
            what: input_seen,
        });
        let m = &mut node.machine;
        match input {
            Input::Start => {
                // The watcher starts with the machine and first delivers the last entry.
                m.start(now);
                node.started = true;
                self.resync(n);
            }
            Input::Timer(_) => m.handle_timeout(now),
            Input::Observed { rev, .. } => {
                let state = self.kv.entry(rev).map_or(KeyState::Absent, Entry::state);
                m.handle_observed(state, now);
            }
            Input::Write { op, outcome, .. } => m.handle_write(op, outcome, now),
            Input::Read { op, result } => m.handle_read(op, result, now),
            Input::Validated(state) => m.handle_validation(state, now),
            Input::Validate => {}
            Input::Drained => m.handle_drained(now),
            Input::Release(cooldown) => m.handle_release(ReleaseReason::Requested, cooldown, now),
            Input::CampaignDelay(d) => m.handle_campaign_delay(d, now),
            Input::Stop => m.handle_stop(now),
            Input::Connection(up) => {
                m.handle_connection(up, now);
                if up {
                    node.disconnected_until = None;
                    self.resync(n);
                }
            }
        }
        self.drain(n, now);
        self.rearm(n, now, matches!(input_seen, Seen::Timer));
        self.arm_validation(n);
    }

    /// While the machine holds a term, the driver validates it every heartbeat.
    fn arm_validation(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        if self.sc.validate && !node.validating && node.machine.term().is_some() {
            node.validating = true;
            let at = self.now + node.clock.span(self.timing.heartbeat);
            self.push(at, Ev::Node(n, Input::Validate));
        }
    }

    /// The validation timer fired: read the key if the machine still holds a term.
    fn validate(&mut self, n: usize) {
        self.nodes[n].validating = false;
        if self.nodes[n].machine.term().is_some() {
            let timeout = self.timing.operation_timeout;
            self.send_read(n, 0, timeout, true);
        }
        self.arm_validation(n);
    }

    /// When a watcher starts, and after a reconnect recreated it, it (re)delivers the last
    /// entry.
    fn resync(&mut self, n: usize) {
        let rev = self.kv.last_rev();
        if rev > 0 {
            let at = (self.now + self.rng.hop()).max(self.nodes[n].watch_tail);
            self.nodes[n].watch_tail = at;
            self.push(at, Ev::Node(n, Input::Observed { rev, replay: true }));
        }
    }

    /// Executes the actions machine `n` produced.
    fn drain(&mut self, n: usize, now: Instant) {
        while let Some(action) = self.nodes[n].machine.poll_action() {
            let g = self.now;
            self.nodes[n].trace.recs.push(Rec::Act {
                g,
                now,
                action: action.clone(),
            });
            match action {
                Action::Write(req) => self.send_write(n, req),
                Action::Read { op, timeout } => self.send_read(n, op, timeout, false),
                Action::Promote { term, .. } => self.nodes[n].leading = Some(term.deadline),
                Action::Renewed { term, .. } => {
                    let node = &mut self.nodes[n];
                    if node.leading.is_some() {
                        node.leading = Some(term.deadline);
                    }
                }
                Action::Demote { drain, .. } => {
                    self.nodes[n].leading = None;
                    if drain {
                        let delay = self.drain_delay();
                        self.push(g + delay, Ev::Node(n, Input::Drained));
                    }
                }
                Action::Stopped => self.nodes[n].leading = None,
                Action::Failed(_) | Action::Recovered | Action::Notice(_) => {}
            }
        }
    }

    /// How long the application's demote callback takes.
    fn drain_delay(&mut self) -> Nanos {
        if self.rng.chance(self.sc.net.long_drain_pct) {
            let ttl = self.timing.ttl;
            self.rng.between(0, 2 * nanos(ttl))
        } else {
            self.rng.between(0, 10 * MS)
        }
    }

    /// Records the machine's timer and schedules it (`fired`: the input was that timer).
    fn rearm(&mut self, n: usize, now: Instant, fired: bool) {
        let g = self.now;
        let node = &mut self.nodes[n];
        let timeout = node.machine.poll_timeout();
        let (pending, stopped) = (node.machine.has_pending(), node.machine.is_stopped());
        node.trace.recs.push(Rec::Idle {
            g,
            now,
            timeout,
            pending,
            stopped,
        });
        let Some(t) = timeout else {
            node.timer = None;
            return;
        };
        // A timer already due fires at once: after an ignored input (a stale acknowledgement)
        // a timer can be overdue. One that stays due after it fired would spin a real driver
        // (S7 reports it); fire it 1 ms later so that the run goes on.
        let at = match (t <= now, fired) {
            (false, _) => node.clock.global(t),
            (true, false) => g,
            (true, true) => g + MS,
        };
        if node.timer.is_some_and(|(a, _)| a == at) {
            return;
        }
        node.timer_gen += 1;
        node.timer = Some((at, node.timer_gen));
        let generation = node.timer_gen;
        self.push(at, Ev::Node(n, Input::Timer(generation)));
    }

    // ----- the network and the server ----------------------------------------------------

    /// Answers `op` with `outcome` after `delay`, or with `Unknown` at the timeout.
    fn reply_write(
        &mut self,
        n: usize,
        op: u64,
        outcome: WriteOutcome,
        delay: Nanos,
        unknown_at: Nanos,
    ) {
        let (at, outcome) = if self.now + delay <= unknown_at {
            (self.now + delay, outcome)
        } else {
            (unknown_at, WriteOutcome::Unknown)
        };
        self.push(
            at,
            Ev::Node(
                n,
                Input::Write {
                    op,
                    outcome,
                    unknown_at,
                },
            ),
        );
    }

    /// Reports `Unknown` for `op` when its timeout passes.
    fn unknown_at(&mut self, n: usize, op: u64, unknown_at: Nanos) {
        let outcome = WriteOutcome::Unknown;
        let input = Input::Write {
            op,
            outcome,
            unknown_at,
        };
        self.push(unknown_at, Ev::Node(n, input));
    }

    /// Queues a write for the server to apply at `at` (`ack`: delay of the acknowledgement).
    fn in_flight(
        &mut self,
        n: usize,
        req: WriteRequest,
        at: Nanos,
        ack: Option<Nanos>,
        unknown_at: Nanos,
    ) {
        let op = req.op;
        self.writes.push(Flight {
            node: n,
            op,
            req,
            ack,
            unknown_at,
        });
        self.push(at, Ev::Apply(self.writes.len() - 1));
    }

    /// Decides what happens to a write: rejected, applied now, applied late, acknowledged
    /// or not.
    fn send_write(&mut self, n: usize, req: WriteRequest) {
        let net = self.sc.net;
        let timeout = self.nodes[n].clock.span(req.timeout);
        let unknown_at = self.now + timeout;
        let op = req.op;
        let hop = self.rng.hop();
        if let Some(up) = self.nodes[n].disconnected_until {
            return self.send_disconnected(n, req, up, unknown_at);
        }
        if self.rng.chance(net.retry_pct) {
            return self.reply_write(n, op, WriteOutcome::Retry, hop, unknown_at);
        }
        if self.rng.chance(net.fail_pct) {
            let failed = WriteOutcome::Failed(FailureKind::Unavailable);
            return self.reply_write(n, op, failed, hop, unknown_at);
        }
        let (apply, ack) = if self.rng.chance(net.late_pct) {
            let ttl = nanos(self.timing.ttl);
            (self.rng.between(timeout, timeout + ttl), self.rng.hop())
        } else if self.rng.chance(net.slow_write_pct) {
            let apply = self.rng.between(0, timeout);
            (apply, self.rng.between(0, timeout - apply))
        } else {
            (hop, self.rng.hop())
        };
        let ack = Some(ack)
            .filter(|_| !self.rng.chance(net.lost_ack_pct))
            .filter(|a| apply + a <= timeout);
        if ack.is_none() {
            self.unknown_at(n, op, unknown_at);
        }
        self.in_flight(n, req, self.now + apply, ack, unknown_at);
    }

    /// A write while the connection is down: the client fails fast, or buffers the publish
    /// and maybe flushes it after the reconnect at `up` (a late commit).
    fn send_disconnected(&mut self, n: usize, req: WriteRequest, up: Nanos, unknown_at: Nanos) {
        let hop = self.rng.hop();
        if self.rng.chance(50) {
            let failed = WriteOutcome::Failed(FailureKind::Unavailable);
            return self.reply_write(n, req.op, failed, hop, unknown_at);
        }
        self.unknown_at(n, req.op, unknown_at);
        if self.rng.chance(50) {
            self.in_flight(n, req, up.max(self.now) + hop, None, unknown_at);
        }
    }

    /// The server applies a write.
    fn apply(&mut self, w: usize) {
        let gap = self.gap();
        let f = &self.writes[w];
        let (node, op, ack, unknown_at) = (f.node, f.op, f.ack, f.unknown_at);
        let (outcome, expires) = self.kv.apply(node, &f.req, self.now, gap);
        if let WriteOutcome::Ok { revision } = outcome {
            self.stored(revision);
            if let Some(at) = expires {
                self.push(at, Ev::Expire(revision));
            }
        }
        if let Some(delay) = ack {
            self.push(
                self.now + delay,
                Ev::Node(
                    node,
                    Input::Write {
                        op,
                        outcome,
                        unknown_at,
                    },
                ),
            );
        }
    }

    /// A put's TTL ran out.
    fn expire(&mut self, rev: u64) {
        let gap = self.gap();
        if let Some(marker) = self.kv.expire(rev, self.now, gap) {
            self.stored(marker);
        }
    }

    /// Sends a new entry to every watcher: late, lost, but in revision order per watcher.
    fn stored(&mut self, rev: u64) {
        let net = self.sc.net;
        let ttl = nanos(self.timing.ttl);
        for n in 0..self.nodes.len() {
            if !self.nodes[n].started || self.nodes[n].crashed || self.rng.chance(net.drop_pct) {
                continue;
            }
            let delay = if self.rng.chance(net.slow_pct) {
                self.rng.between(0, 2 * ttl)
            } else {
                self.rng.hop()
            };
            let at = (self.now + delay).max(self.nodes[n].watch_tail);
            self.nodes[n].watch_tail = at;
            self.push(at, Ev::Node(n, Input::Observed { rev, replay: false }));
        }
    }

    /// Decides what happens to a read: fails, times out, or is served (maybe stale).
    fn send_read(&mut self, n: usize, op: u64, timeout: Duration, validation: bool) {
        let net = self.sc.net;
        let timeout = self.nodes[n].clock.span(timeout);
        let hop = self.rng.hop();
        if self.nodes[n].disconnected_until.is_some() || self.rng.chance(net.fail_pct) {
            return self.read_failed(n, op, hop.min(timeout), validation);
        }
        let reply = self.rng.hop();
        if self.rng.chance(net.late_pct) || hop + reply > timeout {
            return self.read_failed(n, op, timeout, validation);
        }
        let flight = ReadFlight {
            node: n,
            op,
            reply,
            validation,
        };
        self.reads.push(flight);
        self.push(self.now + hop, Ev::Serve(self.reads.len() - 1));
    }

    /// A read fails after `delay` (the driver ignores a failed validation read).
    fn read_failed(&mut self, n: usize, op: u64, delay: Nanos, validation: bool) {
        if !validation {
            let result = Err(FailureKind::Unavailable);
            self.push(self.now + delay, Ev::Node(n, Input::Read { op, result }));
        }
    }

    /// The server (or a lagging replica) answers a read.
    fn serve(&mut self, r: usize) {
        let ReadFlight {
            node,
            op,
            reply,
            validation,
        } = self.reads[r];
        let state = if self.rng.chance(self.sc.net.stale_pct) {
            let lag = self.rng.between(0, 2 * nanos(self.timing.heartbeat));
            self.kv.state_at(self.now.saturating_sub(lag))
        } else {
            self.kv.state()
        };
        let input = if validation {
            Input::Validated(state)
        } else {
            Input::Read {
                op,
                result: Ok(state),
            }
        };
        self.push(self.now + reply, Ev::Node(node, input));
    }

    // ----- faults ------------------------------------------------------------------------

    fn fault(&mut self, i: usize) {
        let f = self.sc.faults[i];
        let Some(n) = self.target(f) else {
            return;
        };
        let ttl = self.sc.timing.ttl_s * SEC;
        let name = self.nodes[n].trace.name.clone();
        self.faults.push((self.now, format!("{:?} {name}", f.kind)));
        let node = &mut self.nodes[n];
        match f.kind {
            FaultKind::Crash => self.crash(n),
            FaultKind::Reboot { downtime_ms } => {
                self.crash(n);
                self.push(self.now + downtime_ms * MS, Ev::Respawn(n));
            }
            FaultKind::Restart => self.respawn(n),
            FaultKind::Pause { ttl_pct } => {
                node.paused_until = node.paused_until.max(self.now + ttl * ttl_pct / 100);
            }
            FaultKind::Disconnect { ttl_pct } => {
                if node.disconnected_until.is_none() {
                    let up = self.now + ttl * ttl_pct / 100;
                    node.disconnected_until = Some(up);
                    self.push(self.now, Ev::Node(n, Input::Connection(false)));
                    self.push(up, Ev::Node(n, Input::Connection(true)));
                }
            }
            FaultKind::Release { cooldown_ms } => {
                let cooldown = Duration::from_millis(cooldown_ms);
                self.push(self.now, Ev::Node(n, Input::Release(cooldown)));
            }
            FaultKind::Stop => self.push(self.now, Ev::Node(n, Input::Stop)),
            FaultKind::CampaignDelay { delay_ms } => {
                let delay = Duration::from_millis(delay_ms);
                self.push(self.now, Ev::Node(n, Input::CampaignDelay(delay)));
            }
        }
    }

    fn crash(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        node.crashed = true;
        node.timer = None;
        node.leading = None;
        node.trace.recs.push(Rec::Crash { g: self.now });
    }

    /// Starts a crashed node's instance again, once.
    fn respawn(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        if node.crashed && !node.restarted {
            node.restarted = true;
            let (slot, campaign) = (node.slot, node.trace.campaign);
            let at = self.now + self.rng.hop();
            self.spawn(slot, campaign, at);
        }
    }

    /// Resolves a fault's target to a node that can take it.
    fn target(&self, f: Fault) -> Option<usize> {
        let len = self.nodes.len();
        let dead = |i: usize| self.nodes[i].crashed && !self.nodes[i].restarted;
        let n = match (f.kind, f.target) {
            (FaultKind::Restart, Target::Leader) => return (0..len).rev().find(|&i| dead(i)),
            (FaultKind::Restart, Target::Node(i)) => return Some(i % len).filter(|&i| dead(i)),
            (_, Target::Leader) => self.leader()?,
            (_, Target::Node(i)) => i % len,
        };
        let node = &self.nodes[n];
        let immune = self.sc.immune && node.slot == self.sc.nodes - 1;
        (node.started && !node.crashed && !immune).then_some(n)
    }

    /// The acting holder; else the live writer of the key's current put.
    fn leader(&self) -> Option<usize> {
        let acting = self
            .nodes
            .iter()
            .position(|n| !n.crashed && n.leading.is_some_and(|d| n.clock.global(d) > self.now));
        acting.or_else(|| {
            let last = self.kv.log.last()?;
            let (n, _) = last
                .writer
                .filter(|_| matches!(last.kind, EntryKind::Put(_)))?;
            (!self.nodes[n].crashed).then_some(n)
        })
    }
}

/// Runs a scenario and checks its trace.
fn run_checked(sc: &Scenario, flaws: KvFlaws, opts: CheckOpts) -> (Trace, Vec<Violation>) {
    let trace = Sim::new(sc, flaws).run();
    let violations = check(&trace, opts);
    (trace, violations)
}

// ----- the checker -------------------------------------------------------------------------

/// A broken invariant.
#[derive(Debug, Clone)]
struct Violation {
    rule: &'static str,
    at: Nanos,
    node: Option<usize>,
    detail: String,
}

/// What to check.
#[derive(Debug, Clone, Copy, Default)]
struct CheckOpts {
    /// Negative control: count a machine as acting past its deadline (until it demotes).
    ignore_deadline: bool,
    /// Longest stretch without an acting holder (fault-free runs).
    liveness: Option<Nanos>,
    /// Longest time from a stop request to `Stopped` (fault-free runs).
    stop_bound: Option<Nanos>,
}

/// One term of one machine: acting in `[start, end)` (empty when `end <= start`).
#[derive(Debug, Clone, Copy)]
struct Tenure {
    node: usize,
    term: u64,
    nonce: Uuid,
    start: Nanos,
    end: Nanos,
}

/// Checks every invariant of a trace; returns the violations in time order.
fn check(trace: &Trace, opts: CheckOpts) -> Vec<Violation> {
    let mut out = trace.errors.clone();
    let mut tenures = Vec::new();
    for n in 0..trace.nodes.len() {
        tenures.extend(Walk::new(trace, n, opts, &mut out).run());
    }
    check_term_order(&tenures, &mut out);
    check_exclusive(&tenures, &mut out);
    check_key_held(trace, &tenures, &mut out);
    if let Some(bound) = opts.liveness {
        check_liveness(trace, &tenures, bound, &mut out);
    }
    out.sort_by_key(|v| v.at);
    out
}

/// The term a machine leads, per its actions.
#[derive(Debug)]
struct Lead {
    term: Term,
    start: Nanos,
    /// Deadline in server time (as extended by renewals while still acting).
    until: Nanos,
}

/// Walks one machine's records: S3, S5, S6, S7 and its tenures.
struct Walk<'a> {
    trace: &'a Trace,
    node: usize,
    clock: Clock,
    opts: CheckOpts,
    out: &'a mut Vec<Violation>,
    lead: Option<Lead>,
    /// Nonce of a term demoted with a drain: it keeps renewing until released.
    draining: Option<Uuid>,
    stopped: bool,
    stop_asked: Option<Nanos>,
    /// The input the current records follow.
    last_input: Option<Seen>,
    tenures: Vec<Tenure>,
}

impl<'a> Walk<'a> {
    fn new(trace: &'a Trace, node: usize, opts: CheckOpts, out: &'a mut Vec<Violation>) -> Self {
        let clock = trace.nodes[node].clock;
        Self {
            trace,
            node,
            clock,
            opts,
            out,
            lead: None,
            draining: None,
            stopped: false,
            stop_asked: None,
            last_input: None,
            tenures: Vec::new(),
        }
    }

    fn flag(&mut self, rule: &'static str, at: Nanos, detail: String) {
        self.out.push(Violation {
            rule,
            at,
            node: Some(self.node),
            detail,
        });
    }

    fn run(mut self) -> Vec<Tenure> {
        let trace = self.trace;
        for rec in &trace.nodes[self.node].recs {
            match rec {
                Rec::Input { g, what } => self.input(*g, *what),
                Rec::Act { g, now, action } => self.action(*g, *now, action),
                Rec::Idle {
                    g,
                    now,
                    timeout,
                    pending,
                    stopped,
                } => {
                    self.idle(*g, *now, *timeout, *pending, *stopped);
                }
                Rec::Crash { g } => {
                    self.close(*g);
                    self.stop_asked = None;
                }
            }
        }
        self.close(trace.end);
        self.check_stop_finished(trace.end);
        self.tenures
    }

    fn input(&mut self, g: Nanos, what: Seen) {
        self.last_input = Some(what);
        if what == Seen::Stop && self.stop_asked.is_none() && !self.stopped {
            self.stop_asked = Some(g);
        }
    }

    /// Ends the current tenure at `at` (a demote, a crash or the end of the run).
    fn close(&mut self, at: Nanos) {
        if let Some(l) = self.lead.take() {
            let end = if self.opts.ignore_deadline {
                at
            } else {
                at.min(l.until)
            };
            let (term, nonce) = (l.term.token.term(), l.term.nonce);
            self.tenures.push(Tenure {
                node: self.node,
                term,
                nonce,
                start: l.start,
                end,
            });
        }
    }

    fn action(&mut self, g: Nanos, now: Instant, action: &Action) {
        match action {
            Action::Promote { term, revision } => self.promote(g, term, *revision),
            Action::Renewed { term, revision } => self.renewed(g, now, term, *revision),
            Action::Demote { term, drain, .. } => {
                self.demote(g, term);
                self.draining = drain.then_some(term.nonce);
            }
            Action::Stopped => {
                if self.lead.is_some() {
                    self.flag("S5", g, "Stopped while leading (no Demote)".into());
                    self.close(g);
                }
                self.check_stop_finished(g);
                self.stopped = true;
            }
            Action::Write(_)
            | Action::Read { .. }
            | Action::Failed(_)
            | Action::Recovered
            | Action::Notice(_) => {}
        }
    }

    fn promote(&mut self, g: Nanos, term: &Term, revision: u64) {
        if self.stopped {
            self.flag("S5", g, format!("Promote of term {revision} after Stopped"));
        }
        if let Some(l) = &self.lead {
            let old = l.term.token.term();
            self.flag(
                "S5",
                g,
                format!("Promote of term {revision} while leading term {old}"),
            );
            self.close(g);
        }
        if let Err(e) = self.acquired(term, revision) {
            self.flag("S3", g, format!("Promote of term {revision}: {e}"));
        }
        let until = self.clock.global(term.deadline);
        self.draining = None;
        self.lead = Some(Lead {
            term: term.clone(),
            start: g,
            until,
        });
    }

    /// S3: the promote comes from this machine's winning acquire.
    fn acquired(&self, term: &Term, revision: u64) -> Result<(), String> {
        if term.token.term() != revision || term.token.epoch() != EPOCH {
            return Err(format!(
                "token term {} / epoch {}",
                term.token.term(),
                term.token.epoch()
            ));
        }
        if term.token.nonce() != term.nonce {
            return Err("token nonce differs from the term's".into());
        }
        let e = self
            .trace
            .log
            .iter()
            .find(|e| e.rev == revision)
            .ok_or("revision never stored")?;
        if e.writer != Some((self.node, WriteKind::Acquire)) {
            return Err(format!("revision stored by {:?}", e.writer));
        }
        match &e.kind {
            EntryKind::Put(v) if v.nonce == term.nonce && v.term.is_none() => Ok(()),
            other => Err(format!("stored entry is {other:?}")),
        }
    }

    fn renewed(&mut self, g: Nanos, now: Instant, term: &Term, revision: u64) {
        let Some(l) = &mut self.lead else {
            // A term demoted with a drain keeps its lease renewed until the release (P8);
            // such renewals do not extend acting.
            if self.draining != Some(term.nonce) {
                self.flag(
                    "S5",
                    g,
                    format!("Renewed (rev {revision}) while not leading"),
                );
            }
            return self.check_renew_rev(g, term, revision);
        };
        if l.term.nonce != term.nonce || l.term.token != term.token {
            return self.flag(
                "S5",
                g,
                format!("Renewed (rev {revision}) for another term"),
            );
        }
        let old = l.term.deadline;
        l.term.deadline = term.deadline;
        let acting = g < l.until;
        if acting || self.opts.ignore_deadline {
            l.until = l.until.max(self.clock.global(term.deadline));
        }
        if term.deadline < old {
            self.flag(
                "S6",
                g,
                format!("Renewed moved the deadline back (rev {revision})"),
            );
        }
        if now >= old {
            self.flag(
                "S6",
                g,
                format!("Renewed (rev {revision}) after the deadline passed"),
            );
        }
        self.check_renew_rev(g, term, revision);
    }

    /// S3: a renewal reports a revision this machine stored for the term.
    fn check_renew_rev(&mut self, g: Nanos, term: &Term, revision: u64) {
        let ours = self.trace.log.iter().find(|e| e.rev == revision);
        if ours.is_none_or(|e| {
            e.nonce() != Some(term.nonce) || e.writer.is_none_or(|w| w.0 != self.node)
        }) {
            self.flag(
                "S3",
                g,
                format!("Renewed at rev {revision}, not a put of this term"),
            );
        }
    }

    fn demote(&mut self, g: Nanos, term: &Term) {
        match &self.lead {
            None => self.flag(
                "S5",
                g,
                format!("Demote of term {} while not leading", term.token.term()),
            ),
            Some(l) if l.term.nonce != term.nonce => {
                let (a, b) = (term.token.term(), l.term.token.term());
                self.flag(
                    "S5",
                    g,
                    format!("Demote of term {a} while leading term {b}"),
                );
            }
            Some(_) => {}
        }
        self.close(g);
    }

    fn idle(
        &mut self,
        g: Nanos,
        now: Instant,
        timeout: Option<Instant>,
        pending: bool,
        stopped: bool,
    ) {
        if let Some(l) = &self.lead {
            // An ignored input (a stale acknowledgement) may leave the deadline overdue: the
            // timer then fires at once and must demote.
            let (term, deadline) = (l.term.token.term(), l.term.deadline);
            if now >= deadline && self.last_input == Some(Seen::Timer) {
                self.flag(
                    "S6",
                    g,
                    format!("term {term}: deadline passed, timer fired, no Demote"),
                );
            } else if timeout.is_none_or(|t| t > deadline) {
                self.flag("S6", g, format!("term {term}: no timer at the deadline"));
            }
        }
        if self.last_input == Some(Seen::Timer) && timeout.is_some_and(|t| t <= now) {
            self.flag(
                "S7",
                g,
                "poll_timeout() still due after the timer fired (busy loop)".into(),
            );
        }
        let campaign = self.trace.nodes[self.node].campaign;
        if timeout.is_none() && campaign && !stopped && !pending {
            self.flag(
                "S7",
                g,
                "idle without a timer and without an operation in flight".into(),
            );
        }
    }

    /// A fault-free stop must finish within the stop bound.
    fn check_stop_finished(&mut self, at: Nanos) {
        if let (Some(bound), Some(asked)) = (self.opts.stop_bound, self.stop_asked.take())
            && at > asked + bound
        {
            let detail = format!(
                "stop asked at {} took more than {}",
                secs(asked),
                secs(bound)
            );
            self.flag("L", at, detail);
        }
    }
}

/// S2: terms strictly increase in promote order across all machines.
fn check_term_order(tenures: &[Tenure], out: &mut Vec<Violation>) {
    let mut order: Vec<&Tenure> = tenures.iter().collect();
    order.sort_by_key(|t| (t.start, t.term));
    for w in order.windows(2) {
        if w[1].term <= w[0].term {
            let detail = format!(
                "term {} (node {}) promoted after term {} (node {})",
                w[1].term, w[1].node, w[0].term, w[0].node
            );
            out.push(Violation {
                rule: "S2",
                at: w[1].start,
                node: Some(w[1].node),
                detail,
            });
        }
    }
}

/// S4: acting intervals of different machines never overlap.
fn check_exclusive(tenures: &[Tenure], out: &mut Vec<Violation>) {
    let mut acting: Vec<&Tenure> = tenures.iter().filter(|t| t.end > t.start).collect();
    acting.sort_by_key(|t| t.start);
    let mut latest: Option<&Tenure> = None;
    for t in acting {
        if let Some(p) = latest
            && t.start < p.end
            && t.node != p.node
        {
            let detail = format!(
                "node {} acts for term {} from {} while node {} acts for term {} until {}",
                t.node,
                t.term,
                secs(t.start),
                p.node,
                p.term,
                secs(p.end)
            );
            out.push(Violation {
                rule: "S4",
                at: t.start,
                node: Some(t.node),
                detail,
            });
        }
        if latest.is_none_or(|p| t.end > p.end) {
            latest = Some(t);
        }
    }
}

/// S4b: while a machine acts, the key holds its term's put and nothing else is stored.
fn check_key_held(trace: &Trace, tenures: &[Tenure], out: &mut Vec<Violation>) {
    for t in tenures.iter().filter(|t| t.end > t.start) {
        let ours =
            |e: &Entry| e.nonce() == Some(t.nonce) && e.writer.is_some_and(|w| w.0 == t.node);
        // The entry in effect when the tenure starts, then every entry stored during it.
        let first = trace.log.partition_point(|e| e.at <= t.start);
        let last = trace.log.partition_point(|e| e.at < t.end);
        let problem = match first.checked_sub(1) {
            None => Some((t.start, "the key is absent".to_owned())),
            Some(i) => trace.log[i..last].iter().find(|e| !ours(e)).map(|e| {
                let what = format!(
                    "rev {} at {} is {} by {:?}",
                    e.rev,
                    secs(e.at),
                    kind_name(&e.kind),
                    e.writer
                );
                (e.at.max(t.start), what)
            }),
        };
        if let Some((at, what)) = problem {
            let detail = format!(
                "node {} acts for term {} in [{}, {}) but {what}",
                t.node,
                t.term,
                secs(t.start),
                secs(t.end)
            );
            out.push(Violation {
                rule: "S4b",
                at,
                node: Some(t.node),
                detail,
            });
        }
    }
}

fn kind_name(k: &EntryKind) -> String {
    match k {
        EntryKind::Put(v) => format!("put(nonce {})", short(v.nonce)),
        EntryKind::Delete => "delete".into(),
        EntryKind::Expiry => "expiry".into(),
    }
}

/// L: no stretch without an acting holder lasts longer than `bound` after its start or after
/// the last fault within it (a crash can hit the winner of the next election before it
/// learns that it won: its put then has to expire too).
fn check_liveness(trace: &Trace, tenures: &[Tenure], bound: Nanos, out: &mut Vec<Violation>) {
    let mut acting: Vec<&Tenure> = tenures.iter().filter(|t| t.end > t.start).collect();
    acting.sort_by_key(|t| t.start);
    let gap = |from: Nanos, to: Nanos, out: &mut Vec<Violation>| {
        let last_fault = trace
            .faults
            .iter()
            .map(|f| f.0)
            .filter(|&f| f > from && f < to)
            .max();
        let since = last_fault.unwrap_or(from);
        if to > since + bound {
            let detail = format!(
                "no holder from {} to {} ({} after the last fault or holder; bound {})",
                secs(from),
                secs(to),
                secs(to - since),
                secs(bound)
            );
            out.push(Violation {
                rule: "L",
                at: from,
                node: None,
                detail,
            });
        }
    };
    let mut covered = 0;
    for t in acting {
        gap(covered, t.start, out);
        covered = covered.max(t.end);
    }
    gap(covered, trace.end, out);
}

// ----- traces for humans -------------------------------------------------------------------

fn show_action(a: &Action, clock: Clock) -> String {
    match a {
        Action::Write(w) => {
            let nonce = w
                .value
                .as_ref()
                .map_or_else(|| "-".into(), |v| short(v.nonce));
            format!(
                "write#{} {:?} expected={} nonce={nonce}",
                w.op, w.kind, w.expected
            )
        }
        Action::Read { op, .. } => format!("read#{op}"),
        Action::Promote { term, revision } => format!(
            "PROMOTE term={revision} nonce={} deadline={}",
            short(term.nonce),
            secs(clock.global(term.deadline))
        ),
        Action::Renewed { term, revision } => {
            format!(
                "renewed rev={revision} deadline={}",
                secs(clock.global(term.deadline))
            )
        }
        Action::Demote {
            term,
            reason,
            drain,
        } => {
            format!("DEMOTE term={} {reason} drain={drain}", term.token.term())
        }
        other => format!("{other:?}"),
    }
}

/// The trace between `from` and `to`, all machines and the KV merged in time order.
fn render(trace: &Trace, from: Nanos, to: Nanos) -> String {
    let mut lines: Vec<(Nanos, usize, String)> = Vec::new();
    let within = |g: Nanos| g >= from && g <= to;
    for e in trace.log.iter().filter(|e| within(e.at)) {
        lines.push((
            e.at,
            0,
            format!("KV  rev {} {} by {:?}", e.rev, kind_name(&e.kind), e.writer),
        ));
    }
    for (g, f) in trace.faults.iter().filter(|f| within(f.0)) {
        lines.push((*g, 0, format!("FAULT {f}")));
    }
    for (i, n) in trace.nodes.iter().enumerate() {
        for r in &n.recs {
            let (g, text) = match r {
                Rec::Input { g, what } => (*g, format!("<- {what:?}")),
                Rec::Act { g, action, .. } => (*g, format!("-> {}", show_action(action, n.clock))),
                Rec::Idle { g, timeout, .. } => (
                    *g,
                    format!(
                        "   timer {}",
                        timeout.map_or_else(|| "none".into(), |t| secs(n.clock.global(t)))
                    ),
                ),
                Rec::Crash { g } => (*g, "CRASH".into()),
            };
            if within(g) {
                lines.push((g, i + 1, format!("{:<10} {text}", n.name)));
            }
        }
    }
    lines.sort_by_key(|l| l.0);
    let mut s = String::new();
    for (g, _, text) in lines.iter().take(400) {
        let _ = writeln!(s, "{} {text}", secs(*g));
    }
    s
}

/// A failure report: the violations and the trace around the first one.
fn report(sc: &Scenario, trace: &Trace, violations: &[Violation]) -> String {
    let mut s = format!("{} violation(s) in {sc:?}\n", violations.len());
    for v in violations.iter().take(10) {
        let _ = writeln!(
            s,
            "  {} at {} node {:?}: {}",
            v.rule,
            secs(v.at),
            v.node,
            v.detail
        );
    }
    let window = std::env::var("SIM_WINDOW_MS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(300)
        * MS;
    if let Some(v) = violations.first() {
        let _ = writeln!(s, "trace around {}:", secs(v.at));
        s.push_str(&render(
            trace,
            v.at.saturating_sub(window),
            v.at + window / 4,
        ));
    }
    s
}

// ----- strategies --------------------------------------------------------------------------

fn timing_spec() -> impl Strategy<Value = TimingSpec> {
    (
        1u64..=5,
        3u32..=8,
        5u32..=45,
        5u32..=90,
        20u32..=100,
        0u64..=20,
    )
        .prop_map(
            |(ttl_s, hb_div, margin_pct, op_pct, grace_pct, jitter_ms)| TimingSpec {
                ttl_s,
                hb_div,
                margin_pct,
                op_pct,
                grace_pct,
                jitter_ms,
            },
        )
}

fn net_faults() -> impl Strategy<Value = Net> {
    let pct = || 0u32..=20;
    let writes = (pct(), pct(), pct(), pct(), pct());
    let others = (pct(), pct(), pct(), pct());
    (writes, others).prop_map(
        |(
            (late_pct, slow_write_pct, lost_ack_pct, retry_pct, fail_pct),
            (drop_pct, slow_pct, stale_pct, long_drain_pct),
        )| Net {
            drop_pct,
            slow_pct,
            late_pct,
            slow_write_pct,
            lost_ack_pct,
            retry_pct,
            stale_pct,
            fail_pct,
            long_drain_pct,
        },
    )
}

/// Fault kinds; `all` adds pauses and disconnects (which void the liveness check).
fn fault_kind(all: bool) -> BoxedStrategy<FaultKind> {
    let common = prop_oneof![
        2 => Just(FaultKind::Crash),
        1 => Just(FaultKind::Restart),
        1 => (0u64..=2000).prop_map(|downtime_ms| FaultKind::Reboot { downtime_ms }),
        2 => (0u64..=3000).prop_map(|cooldown_ms| FaultKind::Release { cooldown_ms }),
        1 => Just(FaultKind::Stop),
        2 => (0u64..=500).prop_map(|delay_ms| FaultKind::CampaignDelay { delay_ms }),
    ];
    if all {
        prop_oneof![
            4 => common,
            2 => (50u64..=300).prop_map(|ttl_pct| FaultKind::Pause { ttl_pct }),
            1 => (10u64..=200).prop_map(|ttl_pct| FaultKind::Disconnect { ttl_pct }),
        ]
        .boxed()
    } else {
        common.boxed()
    }
}

fn faults(all: bool) -> impl Strategy<Value = Vec<Fault>> {
    let target = prop_oneof![3 => Just(Target::Leader), 1 => (0usize..6).prop_map(Target::Node)];
    let fault =
        (0u64..1000, fault_kind(all), target).prop_map(|(at_permille, kind, target)| Fault {
            at_permille,
            kind,
            target,
        });
    prop::collection::vec(fault, 0..=8)
}

/// Everything can go wrong.
fn faulty_scenario() -> impl Strategy<Value = Scenario> {
    let flags = (
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.3),
        any::<bool>(),
    );
    (
        any::<u64>(),
        2usize..=6,
        flags,
        timing_spec(),
        net_faults(),
        faults(true),
    )
        .prop_map(
            |(seed, nodes, (observer, drift, no_ttl, validate), timing, net, faults)| Scenario {
                seed,
                nodes,
                observer: observer && nodes > 2,
                immune: false,
                timing,
                net,
                drift,
                no_ttl,
                validate,
                faults,
            },
        )
}

/// A perfect network; crashes, restarts, releases and stops; one node is never hit.
fn fault_free_scenario() -> impl Strategy<Value = Scenario> {
    let flags = (
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.3),
        any::<bool>(),
    );
    (
        any::<u64>(),
        2usize..=6,
        flags,
        timing_spec(),
        faults(false),
    )
        .prop_map(
            |(seed, nodes, (observer, drift, no_ttl, validate), timing, faults)| Scenario {
                seed,
                nodes,
                observer: observer && nodes > 2,
                immune: true,
                timing,
                net: Net::default(),
                drift,
                no_ttl,
                validate,
                faults,
            },
        )
}

/// A perfect network, fast jitter, and the leader stops at a quarter of the run.
fn graceful_scenario() -> impl Strategy<Value = Scenario> {
    (
        any::<u64>(),
        2usize..=6,
        timing_spec(),
        0u64..=5,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(seed, nodes, timing, jitter_ms, drift, no_ttl)| Scenario {
            seed,
            nodes,
            observer: false,
            immune: false,
            timing: TimingSpec {
                jitter_ms,
                ..timing
            },
            net: Net::default(),
            drift,
            no_ttl,
            validate: true,
            faults: vec![Fault {
                at_permille: 250,
                kind: FaultKind::Stop,
                target: Target::Leader,
            }],
        })
}

/// Cases per property: 1024 (under a second each in a debug build) unless `PROPTEST_CASES`
/// says otherwise.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1024)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ----- properties --------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    /// S2–S7 under every fault the simulation knows.
    #[test]
    fn safe_under_faults(sc in faulty_scenario()) {
        let (trace, violations) = run_checked(&sc, KvFlaws::default(), sc.check_opts());
        prop_assert!(violations.is_empty(), "{}", report(&sc, &trace, &violations));
    }

    /// S2–S7 plus liveness and prompt stops when only processes fail.
    #[test]
    fn live_without_network_faults(sc in fault_free_scenario()) {
        let opts = sc.check_opts();
        prop_assert!(opts.liveness.is_some());
        let (trace, violations) = run_checked(&sc, KvFlaws::default(), opts);
        prop_assert!(violations.is_empty(), "{}", report(&sc, &trace, &violations));
    }

    /// A stopped leader deletes its key and another machine takes over within milliseconds.
    #[test]
    fn graceful_stop_hands_over(sc in graceful_scenario()) {
        let (trace, violations) = run_checked(&sc, KvFlaws::default(), sc.check_opts());
        prop_assert!(violations.is_empty(), "{}", report(&sc, &trace, &violations));
        let jitter = sc.timing.jitter_ms * MS;
        if let Err(e) = check_graceful(&trace, jitter) {
            let window = render(&trace, sc.duration() / 4, sc.duration() / 4 + 100 * MS);
            prop_assert!(false, "{e} in {sc:?}\n{window}");
        }
    }
}

/// The graceful hand-over after the stop in [`graceful_scenario`].
fn check_graceful(trace: &Trace, jitter: Nanos) -> Result<(), String> {
    let (n, asked) = trace
        .nodes
        .iter()
        .enumerate()
        .find_map(|(i, node)| {
            node.recs.iter().find_map(|r| match r {
                Rec::Input {
                    g,
                    what: Seen::Stop,
                } => Some((i, *g)),
                _ => None,
            })
        })
        .ok_or("no stop was delivered")?;
    let acts = || {
        trace.nodes[n].recs.iter().filter_map(|r| match r {
            Rec::Act { g, action, .. } => Some((*g, action)),
            _ => None,
        })
    };
    let released = DemoteReason::Released(ReleaseReason::Shutdown);
    if !acts().any(|(g, a)| {
        g == asked && matches!(a, Action::Demote { reason, drain: true, .. } if *reason == released)
    }) {
        return Err(format!("node {n} did not demote with a drain when stopped"));
    }
    let del = trace
        .log
        .iter()
        .find(|e| e.at >= asked && !matches!(e.kind, EntryKind::Put(_)))
        .ok_or("the key was never vacated")?;
    if !matches!(del.kind, EntryKind::Delete) || del.writer != Some((n, WriteKind::Release)) {
        return Err(format!(
            "the key was vacated by {:?} {:?}, not a delete",
            del.kind, del.writer
        ));
    }
    let next = trace
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != n)
        .flat_map(|(_, node)| node.recs.iter())
        .filter_map(|r| match r {
            Rec::Act {
                g,
                action: Action::Promote { .. },
                ..
            } if *g >= del.at => Some(*g),
            _ => None,
        })
        .min()
        .ok_or("nobody promoted after the delete")?;
    let bound = jitter + 15 * MS;
    if next - del.at > bound {
        return Err(format!(
            "promote {} after the delete at {}",
            secs(next - del.at),
            secs(del.at)
        ));
    }
    if !acts().any(|(g, a)| g >= del.at && matches!(a, Action::Stopped)) {
        return Err(format!("node {n} never reported Stopped"));
    }
    Ok(())
}

// ----- negative controls -------------------------------------------------------------------

/// A fault-free scenario for the negative controls, derived from `seed`: `nodes.0` to
/// `nodes.1` machines, every fault aimed at the holder.
fn control_scenario(seed: u64, nodes: (u64, u64), hb_div: u32, faults: &[Fault]) -> Scenario {
    let mut r = Rng(SplitMix64::new(seed ^ 0x00c0_ffee));
    Scenario {
        seed,
        nodes: usize::try_from(r.between(nodes.0, nodes.1 + 1)).unwrap_or(3),
        observer: false,
        immune: false,
        timing: TimingSpec {
            ttl_s: 2 + r.next() % 2,
            hb_div,
            margin_pct: 10,
            op_pct: 40,
            grace_pct: 70,
            jitter_ms: r.next() % 5,
        },
        net: Net::default(),
        drift: r.chance(50),
        no_ttl: false,
        validate: false,
        faults: faults.to_vec(),
    }
}

fn at(permille: u64, kind: FaultKind) -> Fault {
    Fault {
        at_permille: permille,
        kind,
        target: Target::Leader,
    }
}

/// Runs 100 seeds with and without a flaw; returns how many flawed runs broke one of
/// `rules`. The runs without the flaw (and with `opts.ignore_deadline` off) must all pass.
fn catch_rate(
    scenario: impl Fn(u64) -> Scenario,
    flaws: KvFlaws,
    opts: impl Fn(&Scenario) -> CheckOpts,
    rules: &[&str],
) -> usize {
    (0..100u64)
        .filter(|&seed| {
            let sc = scenario(seed);
            let opts = opts(&sc);
            let baseline = CheckOpts {
                ignore_deadline: false,
                ..opts
            };
            let (trace, clean) = run_checked(&sc, KvFlaws::default(), baseline);
            assert!(
                clean.is_empty(),
                "control baseline fails: {}",
                report(&sc, &trace, &clean)
            );
            let (_, found) = run_checked(&sc, flaws, opts);
            let caught = found.iter().any(|v| rules.contains(&v.rule));
            if !caught && std::env::var_os("SIM_SHOW_MISSED").is_some() {
                println!("missed seed {seed}: {found:?}");
            }
            caught
        })
        .count()
}

/// (a) A KV that ignores the expected revision lets several candidates win one vacancy.
#[test]
fn control_plain_put_breaks_exclusivity() {
    let release = FaultKind::Release { cooldown_ms: 0 };
    let faults = [
        at(200, FaultKind::Crash),
        at(400, release),
        at(600, release),
        at(800, release),
    ];
    let flaws = KvFlaws {
        ignore_cas: true,
        ..KvFlaws::default()
    };
    let scenario = |seed| control_scenario(seed, (3, 5), 4, &faults);
    let caught = catch_rate(scenario, flaws, |_| CheckOpts::default(), &["S4", "S4b"]);
    println!("plain put: {caught}/100 runs caught");
    assert!(caught >= 95, "only {caught}/100 runs caught");
}

/// (b) A KV that drops the TTL of renewals never expires a crashed holder's key: fail-over
/// falls back to the follower backstop (TTL + heartbeat after the last sighting of the key),
/// which the fault-free liveness bound (TTL + slack) rejects.
#[test]
fn control_renew_without_ttl_breaks_liveness() {
    let faults = [
        at(250, FaultKind::Crash),
        at(500, FaultKind::Crash),
        at(750, FaultKind::Crash),
    ];
    let flaws = KvFlaws {
        no_ttl_on_renew: true,
        ..KvFlaws::default()
    };
    // Without drift: a follower clock running fast shortens the backstop's wait in server time.
    let scenario = |seed| Scenario {
        drift: false,
        ..control_scenario(seed, (5, 6), 3, &faults)
    };
    let opts = |sc: &Scenario| CheckOpts {
        liveness: Some(sc.timing.ttl_s * SEC + LIVENESS_SLACK),
        ..CheckOpts::default()
    };
    let caught = catch_rate(scenario, flaws, opts, &["L"]);
    println!("renew without TTL: {caught}/100 runs caught");
    assert!(caught >= 95, "only {caught}/100 runs caught");
}

/// (c) Counting a paused holder as acting until it processes its demote (no local deadline)
/// overlaps with the machine that took over after the key expired.
#[test]
fn control_no_local_deadline_breaks_exclusivity() {
    let pause = FaultKind::Pause { ttl_pct: 200 };
    let faults = [at(300, pause), at(650, pause)];
    let scenario = |seed| control_scenario(seed, (3, 5), 4, &faults);
    let opts = |_: &Scenario| CheckOpts {
        ignore_deadline: true,
        ..CheckOpts::default()
    };
    let caught = catch_rate(scenario, KvFlaws::default(), opts, &["S4"]);
    println!("no local deadline: {caught}/100 runs caught");
    assert!(caught >= 95, "only {caught}/100 runs caught");
}

// ----- regression tests of single machines -------------------------------------------------

/// A lone candidate with no campaign jitter, started at the returned instant.
fn lone() -> (RoleMachine, Instant) {
    let id = Identity {
        instance: InstanceId::new("solo").expect("valid instance id"),
        incarnation: Uuid::from_u64_pair(1, 1),
        priority: 0,
        meta: std::collections::BTreeMap::new(),
    };
    let timing = Timing {
        campaign_jitter: Duration::ZERO,
        ..Timing::default()
    };
    let m = RoleMachine::new(id, timing, RetryPolicy::default(), true, EPOCH, 7);
    (m, Instant::now())
}

/// Drains the actions; returns the op id of the last read or write.
fn last_op(m: &mut RoleMachine) -> Option<u64> {
    let mut op = None;
    while let Some(a) = m.poll_action() {
        match a {
            Action::Write(w) => op = Some(w.op),
            Action::Read { op: o, .. } => op = Some(o),
            _ => {}
        }
    }
    op
}

/// Another holder's put at `revision`.
fn held_by_other(revision: u64) -> KeyState {
    let value = LeaseValue {
        v: crate::value::VALUE_VERSION,
        holder: InstanceId::new("other").expect("valid instance id"),
        incarnation: Uuid::from_u64_pair(2, 2),
        nonce: Uuid::from_u64_pair(3, 3),
        term: None,
        priority: 0,
        ttl_ms: 3_000,
        meta: std::collections::BTreeMap::new(),
        acquired_at: None,
        renewed_at: None,
    };
    KeyState::Held {
        revision,
        value: HolderValue::Lease(Box::new(value)),
    }
}

/// S7: a read fails, the watcher then shows a holder, later backstop reads fail too: after
/// every input the timer must be in the future (a passed backoff once kept it in the past
/// until the backstop, and a failed backstop read kept it at the passed backstop instant).
#[test]
fn candidate_timer_is_never_in_the_past_after_failed_reads() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(
        read,
        Err(FailureKind::Unavailable),
        t0 + Duration::from_millis(1),
    );
    let mut now = t0 + Duration::from_millis(2);
    m.handle_observed(held_by_other(5), now);
    let mut reads = 0;
    for _ in 0..6 {
        let t = m.poll_timeout().expect("a timer");
        assert!(t > now, "timer {:?} before now: busy loop", now - t);
        now = t;
        m.handle_timeout(now);
        if let Some(op) = last_op(&mut m) {
            reads += 1;
            now += Duration::from_millis(1);
            m.handle_read(op, Err(FailureKind::Unavailable), now);
        }
    }
    assert!(reads >= 2, "the backstop read is retried");
}

/// S7: a release with a short cooldown while an acquire is in flight must not ask for a timer
/// that cannot do anything before the acquire's outcome arrives.
#[test]
fn cooldown_timer_waits_for_the_operation_in_flight() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(KeyState::Absent), t0);
    let acquire = last_op(&mut m).expect("an acquire");
    m.handle_release(ReleaseReason::Requested, Duration::ZERO, t0);
    let t = m.poll_timeout();
    assert!(
        t.is_none_or(|t| t > t0),
        "timer at {t:?} while the acquire is in flight: busy loop"
    );
    m.handle_write(
        acquire,
        WriteOutcome::Conflict,
        t0 + Duration::from_millis(5),
    );
    assert!(
        m.poll_timeout().is_some() || m.has_pending(),
        "idle for ever after the cooldown"
    );
}

/// S7: stopping while an acquire's outcome is unknown reads the key; when that read fails the
/// retry needs a timer, or the stop never finishes on a quiet key.
#[test]
fn stopping_retries_its_read_on_a_timer() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(KeyState::Absent), t0);
    let acquire = last_op(&mut m).expect("an acquire");
    m.handle_stop(t0);
    m.handle_write(acquire, WriteOutcome::Unknown, t0 + Duration::from_secs(1));
    let check = last_op(&mut m).expect("a read of the unknown acquire");
    m.handle_read(
        check,
        Err(FailureKind::Unavailable),
        t0 + Duration::from_secs(1),
    );
    let retry = m
        .poll_timeout()
        .expect("a stopping machine must retry its read on a timer");
    m.handle_timeout(retry);
    let again = last_op(&mut m).expect("the read again");
    m.handle_read(again, Ok(KeyState::Absent), retry);
    assert!(m.is_stopped());
}

/// S2: an acquire acknowledged only after its deadline (the process was paused) must not
/// promote a term that is already over; the machine re-acquires over its own put instead.
#[test]
fn late_acknowledged_acquire_is_not_promoted() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(KeyState::Absent), t0);
    let acquire = last_op(&mut m).expect("an acquire");
    let late = t0 + Timing::default().local_lease() + Duration::from_millis(1);
    m.handle_write(acquire, WriteOutcome::Ok { revision: 1 }, late);
    let actions: Vec<Action> = std::iter::from_fn(|| m.poll_action()).collect();
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Promote { .. })),
        "{actions:?}"
    );
    let again = actions.iter().find_map(|a| match a {
        Action::Write(w) if w.kind == WriteKind::Acquire && w.expected == 1 => Some(w.op),
        _ => None,
    });
    let again = again.expect("a re-acquire over the own put");
    m.handle_write(again, WriteOutcome::Ok { revision: 2 }, late);
    assert!(
        std::iter::from_fn(|| m.poll_action()).any(
            |a| matches!(a, Action::Promote { revision: 2, ref term } if term.deadline > late)
        )
    );
}

/// P5: a candidate that sees the winner's put before its own acquire's conflict arrives keeps
/// that put: the observed-expiry backstop counts from the first sighting (the conflict once
/// reset it, and a re-read reset it again, delaying a no-TTL fail-over by a heartbeat).
#[test]
fn backstop_counts_from_the_first_sighting_after_a_lost_race() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(KeyState::Absent), t0);
    let acquire = last_op(&mut m).expect("an acquire");
    let seen = t0 + Duration::from_millis(1);
    m.handle_observed(held_by_other(1), seen);
    m.handle_write(
        acquire,
        WriteOutcome::Conflict,
        seen + Duration::from_millis(1),
    );
    let timing = Timing::default();
    assert_eq!(
        m.poll_timeout(),
        Some(seen + timing.ttl + timing.heartbeat + super::machine::BACKSTOP_GRACE)
    );
}

// ----- coverage ----------------------------------------------------------------------------

/// How often the fault runs reach the paths the invariants are about.
#[derive(Debug, Default)]
struct Coverage {
    runs: usize,
    events: usize,
    /// Promotes by what the winning acquire replaced.
    first: usize,
    after_expiry: usize,
    after_delete: usize,
    backstop_takeover: usize,
    own_reclaim: usize,
    adoption: usize,
    /// Won acquires that never became a promote (late acknowledgement, stop, release).
    unpromoted_wins: usize,
    unknown_outcomes: usize,
    validations: usize,
    demotes: std::collections::BTreeMap<&'static str, usize>,
    /// Closest hand-over between different machines (next start − previous end).
    closest: Option<Nanos>,
}

impl Coverage {
    fn add(&mut self, trace: &Trace) {
        self.runs += 1;
        for (i, node) in trace.nodes.iter().enumerate() {
            self.events += node.recs.len();
            for r in &node.recs {
                match r {
                    Rec::Act {
                        action: Action::Promote { revision, .. },
                        ..
                    } => {
                        self.promoted(trace, i, *revision);
                    }
                    Rec::Act {
                        action: Action::Demote { reason, .. },
                        ..
                    } => {
                        *self.demotes.entry(reason.as_str()).or_default() += 1;
                    }
                    Rec::Input {
                        what: Seen::Validated(_),
                        ..
                    } => self.validations += 1,
                    Rec::Input {
                        what: Seen::Write(_, WriteOutcome::Unknown),
                        ..
                    } => {
                        self.unknown_outcomes += 1;
                    }
                    _ => {}
                }
            }
        }
        let promoted: Vec<u64> = trace
            .nodes
            .iter()
            .flat_map(|n| &n.recs)
            .filter_map(|r| match r {
                Rec::Act {
                    action: Action::Promote { revision, .. },
                    ..
                } => Some(*revision),
                _ => None,
            })
            .collect();
        self.unpromoted_wins += trace
            .log
            .iter()
            .filter(|e| {
                e.writer.is_some_and(|w| w.1 == WriteKind::Acquire) && !promoted.contains(&e.rev)
            })
            .count();
        self.closest_handover(trace);
    }

    /// Classifies a promote by the entry its acquire replaced.
    fn promoted(&mut self, trace: &Trace, node: usize, revision: u64) {
        let Ok(i) = trace.log.binary_search_by_key(&revision, |e| e.rev) else {
            return;
        };
        let Some(prev) = i.checked_sub(1).map(|p| &trace.log[p]) else {
            self.first += 1;
            return;
        };
        let slot = |n: usize| {
            trace.nodes[n]
                .name
                .split('/')
                .next()
                .unwrap_or_default()
                .to_owned()
        };
        match (&prev.kind, prev.writer) {
            (EntryKind::Expiry, _) => self.after_expiry += 1,
            (EntryKind::Delete, _) => self.after_delete += 1,
            (EntryKind::Put(_), Some((w, _))) if w == node => self.own_reclaim += 1,
            (EntryKind::Put(_), Some((w, _))) if slot(w) == slot(node) => self.adoption += 1,
            (EntryKind::Put(_), _) => self.backstop_takeover += 1,
        }
    }

    fn closest_handover(&mut self, trace: &Trace) {
        let mut out = Vec::new();
        let mut tenures = Vec::new();
        for n in 0..trace.nodes.len() {
            tenures.extend(Walk::new(trace, n, CheckOpts::default(), &mut out).run());
        }
        tenures.retain(|t| t.end > t.start);
        tenures.sort_by_key(|t| t.start);
        for w in tenures.windows(2) {
            if w[0].node != w[1].node && w[1].start >= w[0].end {
                let d = w[1].start - w[0].end;
                self.closest = Some(self.closest.map_or(d, |c| c.min(d)));
            }
        }
    }
}

/// The fault runs must reach every path the invariants are about; prints the counts.
#[test]
fn fault_runs_cover_the_interesting_paths() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut cov = Coverage::default();
    for _ in 0..300 {
        let sc = faulty_scenario()
            .new_tree(&mut runner)
            .expect("a scenario")
            .current();
        cov.add(&Sim::new(&sc, KvFlaws::default()).run());
    }
    println!("{cov:#?}");
    let counts = [
        cov.first,
        cov.after_expiry,
        cov.after_delete,
        cov.backstop_takeover,
        cov.own_reclaim,
        cov.adoption,
        cov.unpromoted_wins,
        cov.unknown_outcomes,
        cov.validations,
    ];
    assert!(counts.iter().all(|&c| c > 0), "{cov:#?}");
    // Superseded, evicted and expired demotes need a writer the protocol does not allow.
    for reason in ["deadline_expired", "disconnected", "released", "shutdown"] {
        assert!(
            cov.demotes.get(reason).is_some_and(|&c| c > 0),
            "no {reason} demote: {cov:#?}"
        );
    }
}

/// A fixed scenario (a leader paused for 1.5 × TTL) that must pass; also a debugging aid: paste
/// the `Scenario` a failing property printed and run
/// `cargo test --lib core::sim::replay -- --nocapture`.
#[test]
fn replay() {
    #[allow(unused_imports)]
    use {FaultKind::*, Target::*};
    let sc = Scenario {
        seed: 1,
        nodes: 3,
        observer: false,
        immune: false,
        timing: TimingSpec {
            ttl_s: 3,
            hb_div: 4,
            margin_pct: 10,
            op_pct: 33,
            grace_pct: 66,
            jitter_ms: 1,
        },
        net: Net {
            drop_pct: 5,
            late_pct: 5,
            ..Net::default()
        },
        drift: false,
        no_ttl: false,
        validate: false,
        faults: vec![Fault {
            at_permille: 300,
            kind: Pause { ttl_pct: 150 },
            target: Leader,
        }],
    };
    let (trace, violations) = run_checked(&sc, KvFlaws::default(), sc.check_opts());
    println!("{}", report(&sc, &trace, &violations));
    println!("{}", render(&trace, 0, trace.end));
    assert!(
        violations.is_empty(),
        "{}",
        report(&sc, &trace, &violations)
    );
}

/// A follower that reads the key back as absent (purged without a marker it saw: `max_age`
/// expiry without limit markers, an aged-out marker, a recreated bucket) treats it as a vacancy
/// and acquires on revision 0, instead of ignoring the read and re-reading for ever.
#[test]
fn absent_read_after_a_known_revision_is_a_vacancy() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(held_by_other(5)), t0);
    // Nothing happens until the backstop; then a read.
    let t = m.poll_timeout().expect("the backstop timer");
    m.handle_timeout(t);
    let read = last_op(&mut m).expect("a backstop read");
    m.handle_read(read, Ok(KeyState::Absent), t);
    let mut acquire = None;
    while let Some(a) = m.poll_action() {
        if let Action::Write(w) = a {
            acquire = Some(w);
        }
    }
    let acquire = acquire.expect("an acquire after an absent read");
    assert_eq!(acquire.kind, WriteKind::Acquire);
    assert_eq!(acquire.expected, 0);
}

/// A read older than what is known (a lagging replica) is not answered by an immediate new
/// read: the next one waits (no busy loop).
#[test]
fn stale_read_is_not_retried_at_once() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(held_by_other(9)), t0);
    let t = m.poll_timeout().expect("the backstop timer");
    m.handle_timeout(t);
    let read = last_op(&mut m).expect("a backstop read");
    m.handle_read(read, Ok(held_by_other(4)), t);
    assert!(last_op(&mut m).is_none(), "no new operation at once");
    let next = m.poll_timeout().expect("a retry timer");
    assert!(next > t, "retry timer in the past: busy loop");
}

/// An evicted holder (its lease deleted by someone else) does not win the role straight back:
/// it waits one TTL before campaigning again.
#[test]
fn evicted_holder_cools_down_for_one_ttl() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    m.handle_read(read, Ok(KeyState::Absent), t0);
    let acquire = last_op(&mut m).expect("an acquire");
    m.handle_write(acquire, WriteOutcome::Ok { revision: 3 }, t0);
    assert!(m.term().is_some(), "promoted");
    let now = t0 + Duration::from_millis(10);
    m.handle_observed(
        KeyState::Vacant {
            revision: 4,
            expired: false,
        },
        now,
    );
    assert!(m.term().is_none(), "demoted on eviction");
    assert!(
        last_op(&mut m).is_none(),
        "no acquire right after the eviction"
    );
    let t = m.poll_timeout().expect("a cooldown timer");
    assert!(
        t >= now + Timing::default().ttl,
        "cooldown shorter than one TTL"
    );
    m.handle_timeout(t);
    assert!(
        last_op(&mut m).is_some(),
        "campaigns again after the cooldown"
    );
}

/// A read sent before the winner's put was observed may come back "absent": it must not
/// replace the newer observation (the follower would contend again, lose, and restart its
/// backstop a heartbeat later — found by `live_without_network_faults`).
#[test]
fn absent_read_older_than_an_observation_is_ignored() {
    let (mut m, t0) = lone();
    m.start(t0);
    let read = last_op(&mut m).expect("a read");
    let seen = t0 + Duration::from_millis(3);
    m.handle_observed(held_by_other(1), seen);
    m.handle_read(read, Ok(KeyState::Absent), t0 + Duration::from_millis(4));
    assert!(last_op(&mut m).is_none(), "no acquire over a held key");
    let timing = Timing::default();
    assert_eq!(
        m.poll_timeout(),
        Some(seen + timing.ttl + timing.heartbeat + super::machine::BACKSTOP_GRACE),
        "the backstop counts from the observation"
    );
}
