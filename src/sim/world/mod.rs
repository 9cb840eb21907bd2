//! The simulated world: processes (instances) with one session machine, a watcher with a
//! session book that follows only what protocol Q8 says, a member record and one role machine
//! per role each, their drivers, the network and the server, run in server-time order from one
//! event queue.

mod backstop;
mod bucket;
mod driver;
mod faults;
mod follow;
mod instance;
mod members;
mod presence_state;
mod server;

pub(super) use instance::HERD_CAP;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;
use tokio::time::Instant;

use uuid::Uuid;

use crate::core::backoff::{RetryPolicy, SplitMix64};
use crate::core::machine::{Identity, RoleMachine, SessionUpdate};
use crate::core::session::{SessionKeyState, SessionMachine};
use crate::core::session_book::SessionBook;
use crate::core::slot_permits::SlotPermits;
use crate::core::types::{FailureKind, KeyState, Timing, WriteOutcome};
use crate::history::Invariant;
use crate::names::{InstanceId, RoleName};

use super::check::{CheckOpts, check};
use super::clock::{Clock, MS, Nanos, PPM};
use super::kv::{Kv, KvFlaws, KvWrite};
use super::rng::Rng;
use super::scenario::Scenario;
use super::trace::{MoveApplied, NodeTrace, Seen, Trace};
use super::violation::Violation;

/// Upper bound of events per run; more means a livelock.
pub(super) const EVENT_LIMIT: u64 = 1_000_000;

/// An input of one role machine, as the driver would feed it.
#[derive(Debug, Clone)]
pub(super) enum Input {
    Start,
    Timer(u64),
    /// The watcher delivered this entry of the role key.
    Observed(KeyState),
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
    /// A targeted move was accepted for the term this node holds: release it (Q13).
    MoveRelease,
    CampaignDelay(Duration),
    Stop,
    Connection(bool),
    /// The instance's session changed (the session task's `watch` channel).
    Session(SessionUpdate),
    /// The session book found the session of the holder at this revision gone.
    HolderGone(u64),
    /// The process opened the bucket: it is this old (`handle_bucket_age`).
    BucketAge(Duration),
    /// The driver found a new bucket epoch: `handle_bucket_reset` with the new bucket's age
    /// and the longest session TTL the process knew in the old one.
    BucketReset {
        epoch: u64,
        age: Duration,
        old_ttl: Duration,
    },
}

impl Input {
    pub(super) fn seen(&self) -> Seen {
        match self {
            Self::Start => Seen::Start,
            Self::Timer(_) => Seen::Timer,
            Self::Observed(state) => Seen::Observed(state.revision()),
            Self::Write { op, outcome, .. } => Seen::Write(*op, *outcome),
            Self::Read { op, result } => {
                Seen::Read(*op, result.as_ref().ok().map(KeyState::revision))
            }
            Self::Validated(state) => Seen::Validated(state.revision()),
            Self::Validate => Seen::Validate,
            Self::Drained => Seen::Drained,
            Self::Release(_) | Self::MoveRelease => Seen::Release,
            Self::CampaignDelay(_) => Seen::CampaignDelay,
            Self::Stop => Seen::Stop,
            Self::Connection(up) => Seen::Connection(*up),
            Self::Session(SessionUpdate::Live { .. }) => Seen::Session(true),
            Self::Session(SessionUpdate::Lost { .. }) => Seen::Session(false),
            Self::HolderGone(rev) => Seen::HolderGone(*rev),
            Self::BucketAge(_) => Seen::BucketAge,
            Self::BucketReset { epoch, .. } => Seen::BucketReset(*epoch),
        }
    }
}

/// An input of an instance's session machine or its watcher.
#[derive(Debug, Clone)]
pub(super) enum SInput {
    Start,
    Timer(u64),
    Write {
        op: u64,
        outcome: WriteOutcome,
        unknown_at: Nanos,
    },
    Read {
        op: u64,
        result: Result<SessionKeyState, FailureKind>,
    },
    /// The watcher delivered the entry `rev` of key `key` of bucket `epoch` (`replay`: after
    /// a (re)start).
    Watch {
        key: usize,
        epoch: u64,
        rev: u64,
        replay: bool,
    },
    /// The watcher's backstop tick (Q5 rule 4).
    Tick,
    /// A reap the watcher sent (Q5 rule 4) finished.
    Reaped {
        op: u64,
        outcome: WriteOutcome,
    },
    /// A backstop read of session key `key` answered (`op` 0: the leader read after a
    /// refused reap; otherwise the flawed backstop's probe `op`).
    Backstop {
        key: usize,
        op: u64,
        result: Result<SessionKeyState, FailureKind>,
    },
    Connection(bool),
    /// The driver's epoch check (a stream-info request) answered.
    EpochChecked,
    /// The session task stops waiting for the epoch check (2 s passed).
    Unblock,
    /// A deposed-leader fault ended: the watcher is recreated.
    Undeposed,
    /// The consumer of session key `key` (a newly followed instance, Q8) was created at the
    /// server, in bucket `epoch`.
    Consumer {
        key: usize,
        epoch: u64,
    },
    /// The book's `recheck_at` came: whom to follow is evaluated again.
    Recheck,
    /// A member-key write (the own record, or another's delete, Q8) finished.
    MemberDone {
        op: u64,
        outcome: WriteOutcome,
    },
    /// A failed delete of member `slot`'s record at `revision` is asked for again (Q8).
    EndNotDone {
        slot: usize,
        revision: u64,
    },
    /// A second-tier read of session key `key` (Q8 rule 5) answered.
    Polled {
        key: usize,
        op: u64,
        result: Result<SessionKeyState, FailureKind>,
    },
    /// The watcher's consumer missed its idle heartbeats (its stream was deleted): the
    /// watcher fails and is recreated after an epoch check.
    WatcherFailed,
}

/// What the session task's inbox holds while it waits for an epoch check (its loop is
/// blocked: `manager::session_task::await_epoch_check`).
#[derive(Debug, Clone)]
pub(super) enum SessionMsg {
    /// An input of the session machine's own operations and timer.
    Input(SInput),
    Observed(SessionKeyState),
    ReleaseTerm(Uuid, RoleName, u64),
    RoleMoved(RoleName, u64),
    Stop,
}

/// A simulation event.
#[derive(Debug)]
pub(super) enum Ev {
    /// An input of role node `n`.
    Node(usize, Input),
    /// An input of instance `i` (its session machine and watcher).
    Inst(usize, SInput),
    Apply(usize),
    Serve(usize),
    /// The TTL of entry `rev` of key `key` in bucket `epoch` ran out.
    Expire(usize, u64, u64),
    /// The expiry marker `rev` of key `key` in bucket `epoch` ages out.
    Vanish(usize, u64, u64),
    Fault(usize),
    /// A crashed instance starts again.
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

/// Who sent a write or a read, and gets its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Who {
    /// Role node `n`.
    Role(usize),
    /// The session machine of instance `i`.
    Session(usize),
    /// The watcher of instance `i` (a reap of a session key, or the leader read after one).
    Backstop(usize),
    /// Instance `i`'s member-key writes and second-tier reads (Q8).
    Member(usize),
    /// Another client (no acknowledgement awaited).
    Foreign,
}

/// A write on its way: the server applies it at its `Apply` event.
#[derive(Debug)]
pub(super) struct Flight {
    pub(super) who: Who,
    pub(super) op: u64,
    pub(super) w: KvWrite,
    /// Delay of the acknowledgement after the apply; `None` when it never arrives in time.
    pub(super) ack: Option<Nanos>,
    pub(super) unknown_at: Nanos,
}

/// A read on its way: the server answers at its `Serve` event.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadFlight {
    pub(super) who: Who,
    pub(super) key: usize,
    pub(super) op: u64,
    pub(super) reply: Nanos,
    /// A background validation read rather than one the machine asked for.
    pub(super) validation: bool,
}

/// One role machine and the driver state around it.
pub(super) struct Node {
    pub(super) machine: RoleMachine,
    /// The instance (process) it runs in.
    pub(super) inst: usize,
    pub(super) role: usize,
    /// Armed timer: server time and generation.
    pub(super) timer: Option<(Nanos, u64)>,
    pub(super) timer_gen: u64,
    /// Deadline of the term the machine leads, per its actions.
    pub(super) leading: Option<Instant>,
    /// The driver's validation timer is armed.
    pub(super) validating: bool,
    /// The deadline of the live session, per the last session update fed (an acquire can go
    /// out before it).
    pub(super) session_until: Option<Instant>,
    /// What was handed over from the session's clock last (as the role runner's `synced`).
    pub(super) synced: (Option<Instant>, Option<Instant>),
    /// The last renewal applied in time to the held term (send time, arrival in server time),
    /// as the session's clock keeps it.
    pub(super) term_sent: Option<(Instant, Nanos)>,
    /// The deadline the application of the held term acts on (moved by the session's
    /// renewals as they arrive, like `Leadership::deadline`).
    pub(super) app_deadline: Option<Instant>,
    /// Writes in flight: op, the process's bucket high-water mark when it was sent (the role
    /// task seeds the machine with it before the outcome, P6) and `resets` then.
    pub(super) sent_seen: Vec<(u64, u64, u64)>,
    /// Bucket resets handed to the machine (`handle_bucket_reset`).
    pub(super) resets: u64,
    /// Revision of the last term of the role delivered (any holder): the term a vacancy ends,
    /// for a targeted move's hold-back (as the role runner's `last_held`).
    pub(super) last_held: Option<u64>,
    /// The application's demote callback of a drained term still runs (a slot claims its
    /// permit meanwhile, as the role runner's `demoting`).
    pub(super) demoting: bool,
    pub(super) trace: NodeTrace,
}

/// One process: its session machine, its watcher with the session book, and its role nodes.
pub(super) struct Inst {
    pub(super) slot: usize,
    pub(super) id: InstanceId,
    pub(super) incarnation: Uuid,
    /// The bucket epoch the process works in (learned at start and by epoch checks).
    pub(super) epoch: u64,
    /// The session's uuid while it is live (per its last `Up` / `Lost`).
    pub(super) live: Option<Uuid>,
    /// The session's clock (as `manager::session_link::SessionClock`): its latest
    /// acknowledged write as the roles hear it — uuid, send time, arrival (server time and the
    /// process's clock). Renewals reach the role machines only through it, when they wake for
    /// something else (Q4, one deadline per session).
    pub(super) renewal: Option<(Uuid, Instant, Nanos, Instant)>,
    /// The highest revision the process saw in its bucket (watcher entries, its session's
    /// acknowledged writes: `BucketView::high_water`); 0 again with a new epoch.
    pub(super) seen_high: u64,
    pub(super) clock: Clock,
    pub(super) campaign: bool,
    pub(super) session: SessionMachine,
    pub(super) book: SessionBook,
    /// Role node of each role.
    pub(super) nodes: Vec<usize>,
    /// The watcher runs (from the start on).
    pub(super) started: bool,
    pub(super) crashed: bool,
    pub(super) restarted: bool,
    pub(super) paused_until: Nanos,
    /// While the connection is down: when it comes back.
    pub(super) disconnected_until: Option<Nanos>,
    /// Last revision the watcher delivered per key, and when the last delivery is scheduled.
    pub(super) watch_rev: Vec<u64>,
    pub(super) watch_tail: Nanos,
    /// The session machine's armed timer: server time and generation.
    pub(super) timer: Option<(Nanos, u64)>,
    pub(super) timer_gen: u64,
    /// A stop was asked for: the session ends once every role node stopped.
    pub(super) stopping: bool,
    pub(super) session_ending: bool,
    /// Flaw `renew_after_loss`: the uuid of the lost session the roles still rest on.
    pub(super) lost: Option<Uuid>,
    /// Flaw `ignore_session`: per role, whether a holder was already treated as gone.
    pub(super) ignored: Vec<bool>,
    /// Reaps in flight (Q5 rule 4), by operation id.
    pub(super) reaps: Vec<(u64, crate::core::Reap)>,
    pub(super) next_reap: u64,
    /// Refused reaps whose leader read is pending: key and the revision the reap expected.
    pub(super) refused: Vec<(usize, u64)>,
    /// The session task waits for the epoch check until then (or until the epoch changes);
    /// its inbox meanwhile.
    pub(super) session_blocked: Option<Nanos>,
    pub(super) session_inbox: Vec<SessionMsg>,
    /// An epoch check is in flight.
    pub(super) checking_epoch: bool,
    /// A session started (its start write acknowledged) but not yet announced to the roles:
    /// its uuid and the send time of its last acknowledged write, until an epoch check sent
    /// after the acknowledgement answers (`manager::session_task`, Q6). `.2`: such a check
    /// is in flight (one sent earlier proves nothing about where the start landed).
    pub(super) held_up: Option<(Uuid, Instant, bool)>,
    /// Flaw `check_before_start`: a session start held until an epoch check answers (the task
    /// waits meanwhile).
    pub(super) held_start: Option<crate::core::session::SessionWrite>,
    /// Role-key writes are refused (`permission_denied`) until then.
    pub(super) deny_role_until: Nanos,
    /// Reads served by a deposed leader frozen at `.0`, the watcher silent, until `.1`.
    pub(super) deposed: Option<(Nanos, Nanos)>,
    /// The own member record (Q8 rules 1 and 6).
    pub(super) own: presence_state::OwnRecord,
    /// Whom the watcher follows and the second tier polls (Q8 rules 2–5).
    pub(super) follow: presence_state::Following,
    /// Member-key operations in flight, by operation id.
    pub(super) member_ops: Vec<(u64, presence_state::MemberOp)>,
    /// The slot permit of the process's roles with slots (Q15), by role node.
    pub(super) permits: SlotPermits<usize>,
}

/// Deliberate driver bugs for the negative controls.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Flaws {
    pub(super) kv: KvFlaws,
    /// A candidate treats any other holder as gone at once (Q5 ignored).
    pub(super) ignore_session: bool,
    /// Role nodes never hear of a session loss, and the next session's renewals extend their
    /// terms on the lost one.
    pub(super) renew_after_loss: bool,
    /// The backstop reads the session key instead of reaping it, and takes a read that shows
    /// it unchanged (at or below the revision known) as the session's end (the design reaps
    /// replaced: it rests on one read).
    pub(super) read_backstop: bool,
    /// A process never tells its role machines the bucket's age at start
    /// (`handle_bucket_age` not called: a fresh process acquires in a young bucket at once).
    pub(super) no_bucket_age: bool,
    /// A started session is announced to its roles without confirming the bucket's epoch
    /// after its start was acknowledged (the manager before issue 24's fix F1; its check
    /// before the start write narrowed the window, issue 27 closed it): a process whose
    /// session was not live when the bucket was recreated enters the new one with what it
    /// knew of the old.
    pub(super) no_start_check: bool,
    /// The epoch is confirmed before the session's start write, and the session announced at
    /// once (issue 24's fix F1): a bucket recreated between the check's answer and the write
    /// takes the start unnoticed.
    pub(super) check_before_start: bool,
    /// Targeted moves hold nobody back: the target is not ranked first, the others do not
    /// wait the grace (the move's own claim, the target is the next holder, breaks).
    pub(super) move_no_holdback: bool,
    /// Q8 rules 4 and 5 off: no successor deletes a member's record, no second tier, and
    /// records carry no presence TTL (a record of a dead member stays for good).
    pub(super) no_record_ends: bool,
    /// Not a bug: every process runs as a build before protocol Q8 (no member records; the
    /// watcher delivers every session key), as the replays of runs found before Q8 need to
    /// reproduce them exactly (the same random choices).
    pub(super) pre_q8: bool,
    /// The slot permit off (Q15): every slot of a role may acquire whatever its siblings do
    /// (the manager's `slot-no-permit` negative control).
    pub(super) slot_no_permit: bool,
}

/// A foreign role write waiting for a vacancy
/// ([`crate::sim::scenario::FaultKind::ForeignRole`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct ForeignRole {
    /// The instance whose live session the value names.
    pub(super) inst: usize,
    pub(super) own_incarnation: bool,
    /// Given up after this.
    pub(super) until: Nanos,
}

/// The simulated world.
pub(super) struct Sim {
    pub(super) sc: Scenario,
    pub(super) timing: Timing,
    pub(super) flaws: Flaws,
    pub(super) rng: Rng,
    pub(super) base: Instant,
    pub(super) kv: Kv,
    pub(super) roles: Vec<RoleName>,
    /// Session key names, by instance slot (key index = roles + slot).
    pub(super) session_keys: Vec<String>,
    pub(super) nodes: Vec<Node>,
    pub(super) insts: Vec<Inst>,
    pub(super) queue: BinaryHeap<Queued>,
    pub(super) seq: u64,
    pub(super) now: Nanos,
    pub(super) end: Nanos,
    pub(super) writes: Vec<Flight>,
    pub(super) reads: Vec<ReadFlight>,
    pub(super) faults: Vec<(Nanos, String)>,
    pub(super) errors: Vec<Violation>,
    /// Foreign role writes waiting for a vacancy.
    pub(super) foreign_roles: Vec<ForeignRole>,
    /// Foreign session writes waiting for their instance's key to hold no live session:
    /// instance and when they are given up.
    pub(super) foreign_sessions: Vec<(usize, Nanos)>,
    /// Spare instance slots used so far (fresh processes after bucket resets).
    pub(super) spares_used: usize,
    /// When buckets were created during the run.
    pub(super) created: Vec<Nanos>,
    /// How often the run reached some paths (for the coverage test).
    pub(super) counts: BTreeMap<&'static str, usize>,
    /// Targeted moves applied (their records, as every process sees them at once).
    pub(super) moves: Vec<MoveApplied>,
}

impl Sim {
    pub(super) fn new(sc: &Scenario, flaws: Flaws) -> Self {
        let timing = sc.timing.timing();
        let ttl_ms = u64::try_from(timing.ttl.as_millis()).unwrap_or(u64::MAX);
        let roles = role_names(sc);
        let slots = sc.nodes + sc.spares();
        let session_keys = (0..slots)
            .map(|s| crate::value::session_key(&instance_id(s), ttl_ms))
            .collect();
        let created = sc.fresh_bucket.then_some(0);
        // Role keys, then a session key and a member key per instance slot.
        let mut kv = Kv::new(roles.len() + 2 * slots, sc.no_ttl, created, flaws.kv);
        kv.marker_ttl = sc.marker_ttl_ms.map(|ms| ms * MS);
        let mut rng = Rng(SplitMix64::new(sc.seed));
        if !sc.fresh_bucket {
            // A bucket in use before the run has a stream sequence well above anything a
            // recreated one reaches within an operation timeout (P6's high-water rule rests
            // on it).
            kv.seq = rng.between(1000, 2000);
            // Its role keys were released before (a delete marker each): a key with no entry
            // at all is acquired only a TTL + heartbeat after it is first read absent (Q5
            // rule 1), which the fresh bucket's runs and the resets exercise.
            for key in 0..roles.len() {
                kv.evict(key, 0, 0);
            }
        }
        let mut sim = Self {
            sc: sc.clone(),
            timing,
            flaws,
            rng,
            base: Instant::now(),
            kv,
            roles,
            session_keys,
            nodes: Vec::new(),
            insts: Vec::new(),
            queue: BinaryHeap::new(),
            seq: 0,
            now: 0,
            end: sc.duration(),
            writes: Vec::new(),
            reads: Vec::new(),
            faults: Vec::new(),
            errors: Vec::new(),
            foreign_roles: Vec::new(),
            foreign_sessions: Vec::new(),
            spares_used: 0,
            created: created.into_iter().collect(),
            counts: BTreeMap::new(),
            moves: Vec::new(),
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
                Ev::Inst(i, input) => self.inst_event(i, q.seq, input),
                Ev::Apply(w) => self.apply(w),
                Ev::Serve(r) => self.serve(r),
                Ev::Expire(key, epoch, rev) => self.expire(key, epoch, rev),
                Ev::Vanish(key, epoch, rev) => self.vanish(key, epoch, rev),
                Ev::Fault(i) => self.fault(i),
                Ev::Respawn(i) => self.respawn(i),
            }
        }
        Trace {
            nodes: self.nodes.into_iter().map(|n| n.trace).collect(),
            roles: self.roles.len(),
            slot_bases: self
                .roles
                .iter()
                .map(|r| r.slot().map(|_| r.base_role().to_string()))
                .collect(),
            session_keys: self.session_keys,
            logs: self.kv.logs,
            end: self.end,
            faults: self.faults,
            errors: self.errors,
            created: self.created,
            counts: self.counts,
            moves: self.moves,
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

    /// Key index of instance slot `slot`'s session key.
    pub(super) fn session_key_of(&self, slot: usize) -> usize {
        self.roles.len() + slot
    }

    /// Key index of a session key named `name`.
    pub(super) fn session_key_named(&self, name: &str) -> Option<usize> {
        let slot = self.session_keys.iter().position(|k| k == name)?;
        Some(self.session_key_of(slot))
    }

    /// Starts a process for instance `slot` (a new incarnation) at `at`: one session machine
    /// and one role machine per role.
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
        let instance = instance_id(slot);
        let incarnation = self.rng.uuid();
        let i = self.insts.len();
        let epoch = self.kv.epoch;
        let mut nodes = Vec::new();
        let mut permits = SlotPermits::default();
        for role in 0..self.roles.len() {
            let id = Identity {
                instance: instance.clone(),
                incarnation,
                priority: 0,
                meta: std::collections::BTreeMap::new(),
            };
            let seed = self.rng.next();
            let mut machine = RoleMachine::new(
                id,
                self.timing,
                RetryPolicy::default(),
                campaign,
                epoch,
                seed,
            );
            // As the manager: every revision of the bucket when it was opened is below any
            // write of the new role (P6).
            machine.seed_high_water(self.kv.seq);
            // As the manager: a slot starts without the permit; its driver decides.
            let slot_k = self.roles[role].slot();
            machine.set_acquire_permit(slot_k.is_none() || self.flaws.slot_no_permit);
            if let Some(k) = slot_k {
                let score = crate::placement::hash::score(instance.as_str(), &k.to_string());
                permits.add(self.nodes.len(), &self.roles[role], score);
            }
            let name = format!("node-{slot}/{i}:{}", self.roles[role]);
            nodes.push(self.nodes.len());
            self.nodes.push(Node {
                machine,
                inst: i,
                role,
                timer: None,
                timer_gen: 0,
                leading: None,
                validating: false,
                session_until: None,
                synced: (None, None),
                term_sent: None,
                app_deadline: None,
                sent_seen: Vec::new(),
                resets: 0,
                last_held: None,
                demoting: false,
                trace: NodeTrace {
                    name,
                    inst: i,
                    role,
                    campaign,
                    clock,
                    recs: Vec::new(),
                },
            });
        }
        let seed = self.rng.next();
        let session = SessionMachine::new(
            instance.clone(),
            incarnation,
            self.timing,
            RetryPolicy::default(),
            seed,
        );
        let keys = self.kv.logs.len();
        let mut follow = presence_state::Following::default();
        follow.follows.insert(instance.clone());
        follow.consumers.insert(self.session_key_of(slot), 0);
        let mut book = SessionBook::new(self.timing.ttl, self.timing.heartbeat);
        if !self.flaws.pre_q8 {
            book = book.following(instance.clone());
        }
        self.insts.push(Inst {
            slot,
            id: instance,
            incarnation,
            epoch,
            live: None,
            renewal: None,
            seen_high: 0,
            clock,
            campaign,
            session,
            book,
            nodes,
            started: false,
            crashed: false,
            restarted: false,
            paused_until: 0,
            disconnected_until: None,
            watch_rev: vec![0; keys],
            watch_tail: 0,
            timer: None,
            timer_gen: 0,
            stopping: false,
            session_ending: false,
            lost: None,
            ignored: vec![false; self.roles.len()],
            reaps: Vec::new(),
            next_reap: 1,
            refused: Vec::new(),
            session_blocked: None,
            session_inbox: Vec::new(),
            checking_epoch: false,
            held_up: None,
            held_start: None,
            deny_role_until: 0,
            deposed: None,
            own: presence_state::OwnRecord::default(),
            follow,
            member_ops: Vec::new(),
            permits,
        });
        self.push(at, Ev::Inst(i, SInput::Start));
    }

    /// Counts one pass through a path (coverage).
    pub(super) fn count(&mut self, what: &'static str) {
        *self.counts.entry(what).or_default() += 1;
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

/// The roles of a run, by key index: role 0's slots first when it has some (Q15), then the
/// other roles.
fn role_names(sc: &Scenario) -> Vec<RoleName> {
    let mut roles = Vec::new();
    for r in 0..sc.roles.max(1) {
        let name = RoleName::new(format!("r{r}")).expect("valid role name");
        if r == 0 && sc.slots > 0 {
            for k in 0..sc.slots {
                let k = u32::try_from(k).expect("few slots");
                roles.push(RoleName::for_slot(&name, k).expect("valid slot name"));
            }
        } else {
            roles.push(name);
        }
    }
    roles
}

/// The instance id of slot `slot`.
pub(super) fn instance_id(slot: usize) -> InstanceId {
    InstanceId::new(format!("node-{slot}")).expect("valid instance id")
}

/// Runs a scenario and checks its trace.
pub(super) fn run_checked(sc: &Scenario, flaws: Flaws, opts: CheckOpts) -> (Trace, Vec<Violation>) {
    let trace = Sim::new(sc, flaws).run();
    let violations = check(&trace, opts);
    (trace, violations)
}
