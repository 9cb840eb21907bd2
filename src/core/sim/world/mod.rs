//! The simulated world: machines, their drivers, the network and the server, run in
//! server-time order from one event queue.

mod driver;
mod faults;
mod server;

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;
use tokio::time::Instant;

use crate::core::backoff::{RetryPolicy, SplitMix64};
use crate::core::machine::{Identity, RoleMachine};
use crate::core::types::{FailureKind, KeyState, Timing, WriteOutcome, WriteRequest};
use crate::history::Invariant;
use crate::names::InstanceId;

use super::check::{CheckOpts, Violation, check};
use super::clock::{Clock, MS, Nanos, PPM};
use super::kv::{EPOCH, Kv, KvFlaws};
use super::rng::Rng;
use super::scenario::Scenario;
use super::trace::{NodeTrace, Seen, Trace};

/// Upper bound of events per run; more means a livelock.
pub(super) const EVENT_LIMIT: u64 = 1_000_000;

/// An input of one machine, as the driver would feed it.
#[derive(Debug, Clone)]
pub(super) enum Input {
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

impl Input {
    pub(super) fn seen(&self) -> Seen {
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

/// A simulation event.
#[derive(Debug)]
pub(super) enum Ev {
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
pub(super) struct Queued {
    pub(super) at: Nanos,
    pub(super) seq: u64,
    pub(super) ev: Ev,
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
pub(super) struct Flight {
    pub(super) node: usize,
    pub(super) op: u64,
    pub(super) req: WriteRequest,
    /// Delay of the acknowledgement after the apply; `None` when it never arrives in time.
    pub(super) ack: Option<Nanos>,
    pub(super) unknown_at: Nanos,
}

/// A read on its way: the server answers at its `Serve` event.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadFlight {
    pub(super) node: usize,
    pub(super) op: u64,
    pub(super) reply: Nanos,
    /// A background validation read rather than one the machine asked for.
    pub(super) validation: bool,
}

/// One machine and the driver state around it.
pub(super) struct Node {
    pub(super) machine: RoleMachine,
    pub(super) slot: usize,
    pub(super) clock: Clock,
    /// The machine was started; its watcher runs from then on.
    pub(super) started: bool,
    pub(super) crashed: bool,
    pub(super) restarted: bool,
    pub(super) paused_until: Nanos,
    /// While the connection is down: when it comes back.
    pub(super) disconnected_until: Option<Nanos>,
    /// Last revision the watcher delivered, and when the last delivery is scheduled.
    pub(super) watch_rev: u64,
    pub(super) watch_tail: Nanos,
    /// Armed timer: server time and generation.
    pub(super) timer: Option<(Nanos, u64)>,
    pub(super) timer_gen: u64,
    /// Deadline of the term the machine leads, per its actions.
    pub(super) leading: Option<Instant>,
    /// The driver's validation timer is armed.
    pub(super) validating: bool,
    pub(super) trace: NodeTrace,
}

/// The simulated world.
pub(super) struct Sim {
    pub(super) sc: Scenario,
    pub(super) timing: Timing,
    pub(super) rng: Rng,
    pub(super) base: Instant,
    pub(super) kv: Kv,
    pub(super) nodes: Vec<Node>,
    pub(super) queue: BinaryHeap<Queued>,
    pub(super) seq: u64,
    pub(super) now: Nanos,
    pub(super) end: Nanos,
    pub(super) writes: Vec<Flight>,
    pub(super) reads: Vec<ReadFlight>,
    pub(super) faults: Vec<(Nanos, String)>,
    pub(super) errors: Vec<Violation>,
}

impl Sim {
    pub(super) fn new(sc: &Scenario, flaws: KvFlaws) -> Self {
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
    pub(super) fn run(mut self) -> Trace {
        let mut events = 0u64;
        while let Some(q) = self.queue.pop() {
            if q.at > self.end {
                break;
            }
            events += 1;
            if events > EVENT_LIMIT {
                let detail = format!("more than {EVENT_LIMIT} events: livelock (no progress)");
                self.errors.push(Violation {
                    rule: Invariant::L1,
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

    pub(super) fn push(&mut self, at: Nanos, ev: Ev) {
        self.seq += 1;
        self.queue.push(Queued {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// Starts a machine for instance `slot` (a new incarnation) at `at`.
    pub(super) fn spawn(&mut self, slot: usize, campaign: bool, at: Nanos) {
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
    pub(super) fn gap(&mut self) -> u64 {
        if self.rng.chance(30) {
            self.rng.between(1, 5)
        } else {
            0
        }
    }
}

/// Runs a scenario and checks its trace.
pub(super) fn run_checked(
    sc: &Scenario,
    flaws: KvFlaws,
    opts: CheckOpts,
) -> (Trace, Vec<Violation>) {
    let trace = Sim::new(sc, flaws).run();
    let violations = check(&trace, opts);
    (trace, violations)
}
