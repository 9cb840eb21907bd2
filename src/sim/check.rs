//! The simulation's invariant checker ([`Invariant`] IDs, as in `docs/reliability.md`).

use tokio::time::Instant;
use uuid::Uuid;

use crate::core::types::{Action, Term, WriteKind};
use crate::history::Invariant;

use super::clock::{Clock, Nanos, secs};
use super::kv::{Entry, EntryKind, kind_name};
use super::trace::{Rec, Seen, Trace};
use super::violation::Violation;

/// What to check.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CheckOpts {
    /// Negative control: count a machine as acting past its deadline (until it demotes).
    pub(super) ignore_deadline: bool,
    /// Longest stretch without an acting holder (fault-free runs).
    pub(super) liveness: Option<Nanos>,
    /// With `liveness`: a role is held again at most this long after its bucket was created
    /// (the young-bucket hold, Q6).
    pub(super) young: Nanos,
    /// Longest time from a stop request to `Stopped` (fault-free runs).
    pub(super) stop_bound: Option<Nanos>,
}

/// One term of one machine: acting in `[start, end)` (empty when `end <= start`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Tenure {
    pub(super) node: usize,
    /// The term's token: bucket epoch and revision.
    pub(super) epoch: u64,
    pub(super) term: u64,
    pub(super) nonce: Uuid,
    pub(super) start: Nanos,
    pub(super) end: Nanos,
}

/// Checks every invariant of a trace, role by role; returns the violations in time order.
pub(super) fn check(trace: &Trace, opts: CheckOpts) -> Vec<Violation> {
    let mut out = trace.errors.clone();
    let mut slot_tenures = Vec::new();
    for role in 0..trace.roles {
        let mut tenures = Vec::new();
        for n in (0..trace.nodes.len()).filter(|&n| trace.nodes[n].role == role) {
            tenures.extend(Walk::new(trace, n, opts, &mut out).run());
        }
        if trace.slot_bases[role].is_some() {
            slot_tenures.extend(tenures.iter().copied());
        }
        let log = &trace.logs[role];
        check_term_order(&tenures, &mut out);
        check_exclusive(&tenures, &mut out);
        check_key_held(log, &tenures, &mut out);
        if let Some(bound) = opts.liveness {
            check_liveness(trace, &tenures, (bound, opts.young), &mut out);
        }
    }
    check_slots(trace, &slot_tenures, &mut out);
    out.sort_by_key(|v| v.at);
    out
}

/// S7 (protocol Q15): a process never acts on two slots of one role at once — per process
/// (instance incarnation) and base role, the acting intervals of machines of two different
/// slots do not overlap.
pub(super) fn check_slots(trace: &Trace, tenures: &[Tenure], out: &mut Vec<Violation>) {
    let role_of = |t: &Tenure| trace.nodes[t.node].role;
    let mut acting: Vec<&Tenure> = tenures.iter().filter(|t| t.end > t.start).collect();
    acting.sort_by_key(|t| t.start);
    for (k, a) in acting.iter().enumerate() {
        let (inst, base) = (trace.nodes[a.node].inst, &trace.slot_bases[role_of(a)]);
        for b in &acting[k + 1..] {
            if b.start >= a.end {
                continue;
            }
            if trace.nodes[b.node].inst != inst
                || role_of(b) == role_of(a)
                || trace.slot_bases[role_of(b)] != *base
            {
                continue;
            }
            let detail = format!(
                "process {inst} acts on {} (term {}, node {}) from {} and on {} (term {}, node {}) \
                 from {} until {}: two slots of one role at once",
                trace.nodes[a.node].name,
                a.term,
                a.node,
                secs(a.start),
                trace.nodes[b.node].name,
                b.term,
                b.node,
                secs(b.start),
                secs(a.end.min(b.end))
            );
            out.push(Violation {
                rule: Invariant::S7,
                at: b.start,
                node: Some(b.node),
                detail,
            });
        }
    }
}

/// The term a machine leads, per its actions.
#[derive(Debug)]
pub(super) struct Lead {
    pub(super) term: Term,
    pub(super) start: Nanos,
    /// Deadline in server time (as extended by renewals while still acting).
    pub(super) until: Nanos,
}

/// Walks one machine's records: S3, S5, S6, L1's timer rules and its tenures.
pub(super) struct Walk<'a> {
    pub(super) trace: &'a Trace,
    pub(super) node: usize,
    pub(super) clock: Clock,
    pub(super) opts: CheckOpts,
    pub(super) out: &'a mut Vec<Violation>,
    pub(super) lead: Option<Lead>,
    /// Nonce of a term demoted with a drain: it keeps renewing until released.
    pub(super) draining: Option<Uuid>,
    pub(super) stopped: bool,
    pub(super) stop_asked: Option<Nanos>,
    /// Arrival (server time) of the renewal the driver handed over last (`Rec::Synced`).
    pub(super) arrived: Option<Nanos>,
    /// The input the current records follow.
    pub(super) last_input: Option<Seen>,
    pub(super) tenures: Vec<Tenure>,
}

impl<'a> Walk<'a> {
    pub(super) fn new(
        trace: &'a Trace,
        node: usize,
        opts: CheckOpts,
        out: &'a mut Vec<Violation>,
    ) -> Self {
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
            arrived: None,
            last_input: None,
            tenures: Vec::new(),
        }
    }

    pub(super) fn flag(&mut self, rule: Invariant, at: Nanos, detail: String) {
        self.out.push(Violation {
            rule,
            at,
            node: Some(self.node),
            detail,
        });
    }

    pub(super) fn run(mut self) -> Vec<Tenure> {
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
                    waiting,
                    covered,
                } => {
                    self.idle(*g, *now, *timeout, *pending, *stopped || *waiting, *covered);
                }
                Rec::Synced { arrived, .. } => self.arrived = Some(*arrived),
                Rec::Extended { g, deadline } => {
                    let until = self.clock.global(*deadline);
                    if let Some(l) = &mut self.lead
                        && *g < l.until
                    {
                        l.until = l.until.max(until);
                    }
                }
                Rec::Crash { g } => {
                    self.close(*g);
                    self.stop_asked = None;
                }
                Rec::Hold { .. } => {}
            }
        }
        self.close(trace.end);
        self.check_stop_finished(trace.end);
        self.tenures
    }

    pub(super) fn input(&mut self, g: Nanos, what: Seen) {
        self.last_input = Some(what);
        self.arrived = None;
        if what == Seen::Stop && self.stop_asked.is_none() && !self.stopped {
            self.stop_asked = Some(g);
        }
    }

    /// Ends the current tenure at `at` (a demote, a crash or the end of the run).
    pub(super) fn close(&mut self, at: Nanos) {
        if let Some(l) = self.lead.take() {
            let end = if self.opts.ignore_deadline {
                at
            } else {
                at.min(l.until)
            };
            let (term, nonce) = (l.term.token.term(), l.term.nonce);
            self.tenures.push(Tenure {
                node: self.node,
                epoch: l.term.token.epoch(),
                term,
                nonce,
                start: l.start,
                end,
            });
        }
    }

    pub(super) fn action(&mut self, g: Nanos, now: Instant, action: &Action) {
        match action {
            Action::Promote { term, revision } => self.promote(g, term, *revision),
            Action::Renewed { term, revision } => {
                // Renewals handed over from the session's clock: the machine only catches up.
                let caught_up = self.arrived.take().is_some();
                self.renewed(g, now, term, *revision, caught_up);
            }
            Action::Demote { term, drain, .. } => {
                self.demote(g, term);
                self.draining = drain.then_some(term.nonce);
            }
            Action::Stopped => {
                if self.lead.is_some() {
                    self.flag(Invariant::S6, g, "Stopped while leading (no Demote)".into());
                    self.close(g);
                }
                self.check_stop_finished(g);
                self.stopped = true;
            }
            Action::Write(_)
            | Action::Read { .. }
            | Action::Failed(_)
            | Action::Recovered
            | Action::Notice(_)
            | Action::ReleaseTerm { .. }
            | Action::LostDuringRelease { .. } => {}
        }
    }

    pub(super) fn promote(&mut self, g: Nanos, term: &Term, revision: u64) {
        if self.stopped {
            self.flag(
                Invariant::S6,
                g,
                format!("Promote of term {revision} after Stopped"),
            );
        }
        if let Some(l) = &self.lead {
            let old = l.term.token.term();
            self.flag(
                Invariant::S6,
                g,
                format!("Promote of term {revision} while leading term {old}"),
            );
            self.close(g);
        }
        if let Err(e) = self.acquired(term, revision) {
            self.flag(Invariant::S3, g, format!("Promote of term {revision}: {e}"));
        }
        let until = self.clock.global(term.deadline);
        self.draining = None;
        self.lead = Some(Lead {
            term: term.clone(),
            start: g,
            until,
        });
    }

    /// S3: the promote comes from this machine's winning acquire, stored in the bucket whose
    /// epoch the token carries.
    pub(super) fn acquired(&self, term: &Term, revision: u64) -> Result<(), String> {
        if term.token.term() != revision {
            return Err(format!("token term {}", term.token.term()));
        }
        if term.token.nonce() != term.nonce {
            return Err("token nonce differs from the term's".into());
        }
        let role = self.trace.nodes[self.node].role;
        let epoch = term.token.epoch();
        let e = self.trace.logs[role]
            .iter()
            .find(|e| e.rev == revision && e.epoch == epoch)
            .ok_or_else(|| format!("revision never stored in the bucket of epoch {epoch}"))?;
        if e.writer != Some((self.node, WriteKind::Acquire)) {
            return Err(format!("revision stored by {:?}", e.writer));
        }
        match &e.kind {
            EntryKind::Put(v) if v.nonce == term.nonce && v.term.is_none() => Ok(()),
            other => Err(format!("stored entry is {other:?}")),
        }
    }

    /// A `Renewed` of the machine at `g` (its clock `now`). `caught_up`: the machine caught up
    /// with renewals of its session from the session's clock (Q4) — the application's
    /// deadline moved when each arrived (`Rec::Extended`, judged there), so the deadline it
    /// reports must be one the application was handed, no later; otherwise the renewal is
    /// judged as it arrives.
    pub(super) fn renewed(
        &mut self,
        g: Nanos,
        now: Instant,
        term: &Term,
        revision: u64,
        caught_up: bool,
    ) {
        let Some(l) = &mut self.lead else {
            // A term demoted with a drain keeps its lease renewed until the release (P8);
            // such renewals do not extend acting.
            if self.draining != Some(term.nonce) {
                self.flag(
                    Invariant::S6,
                    g,
                    format!("Renewed (rev {revision}) while not leading"),
                );
            }
            return self.check_renew_rev(g, term, revision);
        };
        if l.term.nonce != term.nonce || l.term.token != term.token {
            return self.flag(
                Invariant::S6,
                g,
                format!("Renewed (rev {revision}) for another term"),
            );
        }
        let old = l.term.deadline;
        l.term.deadline = term.deadline;
        let until = self.clock.global(term.deadline);
        let late = if caught_up {
            (until > l.until && !self.opts.ignore_deadline).then(|| {
                format!("Renewed (rev {revision}) past the deadline the session's renewals set")
            })
        } else {
            if g < l.until || self.opts.ignore_deadline {
                l.until = l.until.max(until);
            }
            (now >= old).then(|| format!("Renewed (rev {revision}) after the deadline passed"))
        };
        if term.deadline < old {
            self.flag(
                Invariant::S5,
                g,
                format!("Renewed moved the deadline back (rev {revision})"),
            );
        }
        if let Some(detail) = late {
            self.flag(Invariant::S5, g, detail);
        }
        self.check_renew_rev(g, term, revision);
    }

    /// S3: a renewal reports a revision this machine stored for the term.
    pub(super) fn check_renew_rev(&mut self, g: Nanos, term: &Term, revision: u64) {
        let role = self.trace.nodes[self.node].role;
        let ours = self.trace.logs[role].iter().any(|e| {
            e.rev == revision
                && e.epoch == term.token.epoch()
                && e.nonce() == Some(term.nonce)
                && e.writer.is_some_and(|w| w.0 == self.node)
        });
        if !ours {
            self.flag(
                Invariant::S3,
                g,
                format!("Renewed at rev {revision}, not a put of this term"),
            );
        }
    }

    pub(super) fn demote(&mut self, g: Nanos, term: &Term) {
        match &self.lead {
            None => self.flag(
                Invariant::S6,
                g,
                format!("Demote of term {} while not leading", term.token.term()),
            ),
            Some(l) if l.term.nonce != term.nonce => {
                let (a, b) = (term.token.term(), l.term.token.term());
                self.flag(
                    Invariant::S6,
                    g,
                    format!("Demote of term {a} while leading term {b}"),
                );
            }
            Some(_) => {}
        }
        self.close(g);
    }

    /// `stopped`: finished, or waiting for a live session (nothing to time).
    pub(super) fn idle(
        &mut self,
        g: Nanos,
        now: Instant,
        timeout: Option<Instant>,
        pending: bool,
        stopped: bool,
        covered: bool,
    ) {
        if let Some(l) = &self.lead {
            // An ignored input (a stale acknowledgement) may leave the deadline overdue: the
            // timer then fires at once and must demote.
            let (term, deadline) = (l.term.token.term(), l.term.deadline);
            if now >= deadline && self.last_input == Some(Seen::Timer) {
                self.flag(
                    Invariant::S5,
                    g,
                    format!("term {term}: deadline passed, timer fired, no Demote"),
                );
            } else if !covered && timeout.is_none_or(|t| t > deadline) {
                self.flag(
                    Invariant::S5,
                    g,
                    format!("term {term}: no timer at the deadline"),
                );
            }
        }
        if self.last_input == Some(Seen::Timer) && timeout.is_some_and(|t| t <= now) {
            self.flag(
                Invariant::L1,
                g,
                "poll_timeout() still due after the timer fired (busy loop)".into(),
            );
        }
        let campaign = self.trace.nodes[self.node].campaign;
        if timeout.is_none() && campaign && !stopped && !pending {
            self.flag(
                Invariant::L1,
                g,
                "idle without a timer and without an operation in flight".into(),
            );
        }
    }

    /// A fault-free stop must finish within the stop bound.
    pub(super) fn check_stop_finished(&mut self, at: Nanos) {
        if let (Some(bound), Some(asked)) = (self.opts.stop_bound, self.stop_asked.take())
            && at > asked + bound
        {
            let detail = format!(
                "stop asked at {} took more than {}",
                secs(asked),
                secs(bound)
            );
            self.flag(Invariant::L1, at, detail);
        }
    }
}

/// S2: tokens `(epoch, term)` strictly increase in promote order across all machines.
pub(super) fn check_term_order(tenures: &[Tenure], out: &mut Vec<Violation>) {
    let mut order: Vec<&Tenure> = tenures.iter().collect();
    order.sort_by_key(|t| (t.start, t.epoch, t.term));
    for w in order.windows(2) {
        if (w[1].epoch, w[1].term) <= (w[0].epoch, w[0].term) {
            let detail = format!(
                "token ({}, {}) (node {}) promoted after token ({}, {}) (node {})",
                w[1].epoch, w[1].term, w[1].node, w[0].epoch, w[0].term, w[0].node
            );
            out.push(Violation {
                rule: Invariant::S2,
                at: w[1].start,
                node: Some(w[1].node),
                detail,
            });
        }
    }
}

/// S4: acting intervals of different machines never overlap.
pub(super) fn check_exclusive(tenures: &[Tenure], out: &mut Vec<Violation>) {
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
                rule: Invariant::S4,
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

/// S4, seen on the key: while a machine acts, the key holds its term's put and nothing else
/// is stored in that bucket (a recreated bucket loses the key; the acting intervals of the
/// machines still may not overlap, [`check_exclusive`]).
pub(super) fn check_key_held(log: &[Entry], tenures: &[Tenure], out: &mut Vec<Violation>) {
    for t in tenures.iter().filter(|t| t.end > t.start) {
        let from = log.partition_point(|e| e.epoch < t.epoch);
        let to = log.partition_point(|e| e.epoch <= t.epoch);
        let log = &log[from..to];
        let ours =
            |e: &Entry| e.nonce() == Some(t.nonce) && e.writer.is_some_and(|w| w.0 == t.node);
        // The entry in effect when the tenure starts, then every entry stored during it.
        let first = log.partition_point(|e| e.at <= t.start);
        let last = log.partition_point(|e| e.at < t.end);
        let problem = match first.checked_sub(1) {
            None => Some((t.start, "the key is absent".to_owned())),
            Some(i) => log[i..last].iter().find(|e| !ours(e)).map(|e| {
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
                rule: Invariant::S4,
                at,
                node: Some(t.node),
                detail,
            });
        }
    }
}

/// L1: no stretch without an acting holder lasts longer than `bound` after its start or after
/// the last fault within it (a crash can hit the winner of the next election before it
/// learns that it won: its put then has to expire too), or `young` after the creation of its
/// bucket (no acquire in a young bucket, Q6).
pub(super) fn check_liveness(
    trace: &Trace,
    tenures: &[Tenure],
    (bound, young): (Nanos, Nanos),
    out: &mut Vec<Violation>,
) {
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
        let created = trace.created.iter().copied().filter(|&c| c <= to).max();
        let allowed = (since + bound).max(created.map_or(0, |c| c + young));
        if to > allowed {
            let detail = format!(
                "no holder from {} to {} ({} after the last fault or holder; bound {})",
                secs(from),
                secs(to),
                secs(to - since),
                secs(bound)
            );
            out.push(Violation {
                rule: Invariant::L1,
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
