//! The checker: judges a merged history against the invariants of `docs/reliability.md`
//! (S1–S6 safety, L1–L3 liveness) and measures fail-overs and contention. Pure: records in,
//! [`Report`] out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use serde::Serialize;

use super::event::{Event, OpKind, OpResult, Phase, Record, Source, TrialInfo};
use super::load::Loaded;

const MS: f64 = 1_000_000.0;
/// Default L1 slack beyond the TTL for the vacancy after the last fault.
const DEFAULT_L1_EXTRA_MS: u64 = 1500;
/// Default L1 wait after a crashed holder's lease ran out.
const DEFAULT_EXPIRY_SLACK_MS: u64 = 750;
/// Events shown around a violation, before and after.
const CONTEXT: usize = 6;
/// Violations that get their surrounding events (later ones only their description).
const MAX_CONTEXTS: usize = 100;

/// A rule of `docs/reliability.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[non_exhaustive]
pub enum Invariant {
    /// Accepted fenced writes never go back in token order.
    S1,
    /// Promote tokens strictly increase per role; no token promoted twice.
    S2,
    /// One holder per revision.
    S3,
    /// Acting intervals of different nodes do not overlap.
    S4,
    /// Every act happens inside an open term, before its deadline.
    S5,
    /// Per node and role: (promote … demote)*, matching tokens, closed at a clean stop.
    S6,
    /// A role with a live candidate gets a holder within the bound.
    L1,
    /// No demotion in the steady-state window.
    L3,
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

/// One broken rule, with what is needed to find it in the history.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    /// Which rule.
    pub invariant: Invariant,
    /// The role (none for node-wide problems).
    pub role: Option<String>,
    /// Nodes involved.
    pub nodes: Vec<String>,
    /// Terms involved.
    pub terms: Vec<u64>,
    /// When, in ms since the trial start.
    pub at_ms: f64,
    /// End of the offending stretch, in ms since the trial start, when it has one.
    pub until_ms: Option<f64>,
    /// What is wrong.
    pub message: String,
    /// The surrounding events, rendered one per line.
    pub context: Vec<String>,
}

/// The time from a fault hitting a role's holder to the next promote of that role.
#[derive(Debug, Clone, Serialize)]
pub struct Failover {
    /// The role.
    pub role: String,
    /// The fault (`what` of the harness event).
    pub fault: String,
    /// The fault's target.
    pub target: String,
    /// Who held the role when the fault began.
    pub holder: String,
    /// Fault start, ms since the trial start.
    pub start_ms: f64,
    /// Fault start to the next promote (none: no promote before the history ends).
    pub duration_ms: Option<f64>,
    /// Who was promoted next.
    pub next_holder: Option<String>,
    /// For a crashed holder: the next promote after its lease ran out (send time of its last
    /// acquire/renew + TTL in whole seconds).
    pub after_expiry_ms: Option<f64>,
}

/// A stretch without a holder that ended with a promote.
#[derive(Debug, Clone, Serialize)]
pub struct Vacancy {
    /// The role.
    pub role: String,
    /// From the end of the previous term (or the history's start) to the promote, in ms.
    pub duration_ms: f64,
    /// Acquire CAS attempts of all nodes in it (herd contention).
    pub acquire_attempts: u64,
}

/// Counts and measurements of one history.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Node ids seen.
    pub nodes: Vec<String>,
    /// Roles seen.
    pub roles: Vec<String>,
    /// Promotions.
    pub promotes: u64,
    /// Demotions.
    pub demotes: u64,
    /// Leader acts.
    pub acts: u64,
    /// Fenced writes stored.
    pub fenced_accepted: u64,
    /// Fenced writes refused.
    pub fenced_refused: u64,
    /// Fenced writes of unknown outcome.
    pub fenced_unknown: u64,
    /// Fault events (start or instantaneous).
    pub faults: u64,
    /// Fail-overs after faults on holders (L2).
    pub failovers: Vec<Failover>,
    /// Faults on a holder that it rode out (its term went on past the fault by over a TTL).
    pub ridden_out: u64,
    /// Vacancies and their contention.
    pub vacancies: Vec<Vacancy>,
    /// Length of the history, ms.
    pub duration_ms: f64,
}

impl Stats {
    /// Mean acquire attempts per vacancy (the herd figure).
    #[must_use]
    pub fn cas_per_vacancy(&self) -> Option<f64> {
        if self.vacancies.is_empty() {
            return None;
        }
        let sum: u64 = self.vacancies.iter().map(|v| v.acquire_attempts).sum();
        Some(sum as f64 / self.vacancies.len() as f64)
    }
}

/// One term's acting interval, for timelines.
#[derive(Debug, Clone, Serialize)]
pub struct TermSpan {
    /// The role.
    pub role: String,
    /// The holder.
    pub node: String,
    /// The term number.
    pub term: u64,
    /// Promote, ms since the trial start.
    pub start_ms: f64,
    /// End of acting (demote, crash or lapsed deadline), ms since the trial start.
    pub end_ms: f64,
}

/// One fault, for timelines.
#[derive(Debug, Clone, Serialize)]
pub struct FaultSpan {
    /// What (`sigkill`, `proxy_stall`, ...).
    pub what: String,
    /// Its target.
    pub target: String,
    /// Start, ms since the trial start.
    pub start_ms: f64,
    /// End (none for instantaneous faults or faults never ended).
    pub end_ms: Option<f64>,
}

/// The checker's verdict on one history.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The trial line, if the harness wrote one.
    pub trial: Option<TrialInfo>,
    /// Every term's acting interval.
    pub terms: Vec<TermSpan>,
    /// Every fault.
    pub faults: Vec<FaultSpan>,
    /// Every violation found (empty: the history is clean).
    pub violations: Vec<Violation>,
    /// Counts and measurements.
    pub stats: Stats,
    /// Nodes whose history is incomplete (dropped events): S5/S6 not judged for them.
    pub incomplete_nodes: Vec<String>,
    /// Remarks (truncated files, rules skipped and why).
    pub notes: Vec<String>,
}

impl Report {
    /// Whether no rule was broken.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// Whether a rule was broken.
    #[must_use]
    pub fn has(&self, invariant: Invariant) -> bool {
        self.violations.iter().any(|v| v.invariant == invariant)
    }

    /// The report as pretty JSON.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".to_string())
    }

    /// A readable report: verdict, trial, figures, then each violation with its context.
    #[must_use]
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let verdict = if self.is_clean() {
            "CLEAN".to_string()
        } else {
            format!("{} VIOLATION(S)", self.violations.len())
        };
        let _ = writeln!(s, "history check: {verdict}");
        if let Some(t) = &self.trial {
            let _ = writeln!(
                s,
                "trial: kind={} seed={} ttl_ms={} margin={} clock={}",
                t.kind, t.seed, t.ttl_ms, t.margin, t.clock
            );
        }
        let st = &self.stats;
        let _ = writeln!(
            s,
            "{} nodes, {} roles, {:.0} ms: {} promotes, {} demotes, {} acts, fenced writes {} stored / {} refused / {} unknown, {} faults",
            st.nodes.len(),
            st.roles.len(),
            st.duration_ms,
            st.promotes,
            st.demotes,
            st.acts,
            st.fenced_accepted,
            st.fenced_refused,
            st.fenced_unknown,
            st.faults
        );
        for f in &st.failovers {
            let d = f
                .duration_ms
                .map_or_else(|| "no new holder".to_string(), |d| format!("{d:.1} ms"));
            let _ = writeln!(
                s,
                "failover {} after {} of {} (holder {}) at {:.1} ms: {d}{}",
                f.role,
                f.fault,
                f.target,
                f.holder,
                f.start_ms,
                f.after_expiry_ms
                    .map(|e| format!(" ({e:.1} ms after the lease ran out)"))
                    .unwrap_or_default()
            );
        }
        if st.ridden_out > 0 {
            let _ = writeln!(
                s,
                "faults ridden out by the holder (no fail-over): {}",
                st.ridden_out
            );
        }
        if let Some(c) = st.cas_per_vacancy() {
            let max = st
                .vacancies
                .iter()
                .map(|v| v.acquire_attempts)
                .max()
                .unwrap_or(0);
            let _ = writeln!(
                s,
                "vacancies: {}, acquire CAS attempts per vacancy: mean {c:.2}, max {max}",
                st.vacancies.len()
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        for n in &self.incomplete_nodes {
            let _ = writeln!(s, "incomplete: node {n} dropped events");
        }
        for v in &self.violations {
            let until = v.until_ms.map(|u| format!("..{u:.3}")).unwrap_or_default();
            let _ = writeln!(
                s,
                "\n{} role={} nodes={} terms={:?} at {:.3}{until} ms: {}",
                v.invariant,
                v.role.as_deref().unwrap_or("-"),
                v.nodes.join(","),
                v.terms,
                v.at_ms,
                v.message
            );
            for c in &v.context {
                let _ = writeln!(s, "    {c}");
            }
        }
        s
    }
}

/// Checks records read by [`super::load::load_paths`] (notes truncated files).
#[must_use]
pub fn check_loaded(loaded: &Loaded) -> Report {
    let mut report = check(&loaded.records);
    for f in &loaded.truncated {
        report.notes.push(format!(
            "{}: a line cut off by a killed process; skipped",
            f.display()
        ));
    }
    report
}

/// One record with its time on the common (harness) clock.
#[derive(Debug, Clone, Copy)]
struct Ev<'a> {
    /// Normalised time (ns).
    t: u64,
    rec: &'a Record,
}

/// A node process's lifetime.
#[derive(Debug, Clone)]
struct Life {
    start: u64,
    end: u64,
    roles: Vec<String>,
}

/// One term as the checker reconstructs it.
#[derive(Debug, Clone)]
struct TermRec {
    node: String,
    role: String,
    token: (u64, u64),
    promote_t: u64,
    /// End of acting: earliest of demote, crash and the lapsed deadline (normalised).
    act_end: u64,
}

/// Linear map of a node's clock onto the harness clock (identity unless under `faketime`).
#[derive(Debug, Clone, Copy)]
struct Anchor {
    rate: f64,
    fake: u64,
    real: u64,
}

impl Anchor {
    const IDENTITY: Self = Self {
        rate: 1.0,
        fake: 0,
        real: 0,
    };

    fn map(&self, raw: u64) -> u64 {
        if (self.rate - 1.0).abs() < f64::EPSILON {
            return raw;
        }
        let d = (raw as f64 - self.fake as f64) / self.rate;
        (self.real as f64 + d).max(0.0) as u64
    }
}

struct Checker<'a> {
    t0: u64,
    trial: Option<TrialInfo>,
    /// All records, normalised, sorted by time.
    all: Vec<Ev<'a>>,
    violations: Vec<Violation>,
    stats: Stats,
    notes: Vec<String>,
    incomplete: BTreeSet<String>,
    lives: BTreeMap<String, Vec<Life>>,
    terms: Vec<TermRec>,
    faults: Vec<Ev<'a>>,
}

/// Judges a history (records of every node and the harness, in any order).
#[must_use]
pub fn check(records: &[Record]) -> Report {
    let mut c = Checker::new(records);
    c.nodes_pass();
    c.per_role_pass();
    c.liveness_pass();
    c.violations.sort_by(|a, b| {
        a.at_ms
            .partial_cmp(&b.at_ms)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut terms: Vec<TermSpan> = c
        .terms
        .iter()
        .map(|t| TermSpan {
            role: t.role.clone(),
            node: t.node.clone(),
            term: t.token.1,
            start_ms: ms(t.promote_t, c.t0),
            end_ms: ms(t.act_end.max(t.promote_t), c.t0),
        })
        .collect();
    terms.sort_by(|a, b| {
        a.start_ms
            .partial_cmp(&b.start_ms)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let faults = c.fault_spans();
    Report {
        trial: c.trial,
        terms,
        faults,
        violations: c.violations,
        stats: c.stats,
        incomplete_nodes: c.incomplete.into_iter().collect(),
        notes: c.notes,
    }
}

fn ms(ns: u64, t0: u64) -> f64 {
    (ns as f64 - t0 as f64) / MS
}

/// `ev key=value ...` of an event, without the common fields.
fn describe(event: &Event) -> String {
    let value = serde_json::to_value(event).unwrap_or_default();
    let mut s = String::new();
    if let serde_json::Value::Object(map) = value {
        if let Some(ev) = map.get("ev").and_then(|v| v.as_str()) {
            s.push_str(ev);
        }
        for (k, v) in &map {
            if k == "ev" {
                continue;
            }
            let _ = write!(s, " {k}={v}");
        }
    }
    s
}

impl<'a> Checker<'a> {
    fn new(records: &'a [Record]) -> Self {
        // Normalise node clocks: per node, in the node's own order, re-anchored at each start.
        let mut by_node: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
        let mut all = Vec::with_capacity(records.len());
        let mut trial = None;
        for r in records {
            match r.src {
                Source::Node => by_node.entry(r.node.as_str()).or_default().push(r),
                Source::Harness => {
                    if let (Event::Trial(t), None) = (&r.event, &trial) {
                        trial = Some((r.mono_ns, t.clone()));
                    }
                    all.push(Ev {
                        t: r.mono_ns,
                        rec: r,
                    });
                }
            }
        }
        let mut anchors_needed = false;
        for recs in by_node.values_mut() {
            recs.sort_by_key(|r| r.mono_ns);
            let mut anchor = Anchor::IDENTITY;
            for r in recs.iter() {
                if let Event::Start {
                    clock_rate,
                    real_mono_ns,
                    ..
                } = &r.event
                {
                    anchor = Anchor {
                        rate: if *clock_rate > 0.0 { *clock_rate } else { 1.0 },
                        fake: r.mono_ns,
                        real: real_mono_ns.unwrap_or(r.mono_ns),
                    };
                    anchors_needed |= (anchor.rate - 1.0).abs() > f64::EPSILON;
                }
                all.push(Ev {
                    t: anchor.map(r.mono_ns),
                    rec: r,
                });
            }
        }
        all.sort_by_key(|e| e.t);
        let t0 = trial
            .as_ref()
            .map_or_else(|| all.first().map_or(0, |e| e.t), |(t, _)| *t);
        let mut notes = Vec::new();
        if anchors_needed {
            notes.push(
                "some nodes ran with a scaled clock (faketime): their stamps were mapped to real time"
                    .to_string(),
            );
        }
        let faults = all
            .iter()
            .copied()
            .filter(|e| matches!(e.rec.event, Event::Fault { .. }))
            .collect();
        let mut stats = Stats {
            duration_ms: all.last().map_or(0.0, |e| ms(e.t, t0)),
            ..Stats::default()
        };
        stats.nodes = by_node.keys().map(ToString::to_string).collect();
        let roles: BTreeSet<&str> = all.iter().filter_map(|e| e.rec.role.as_deref()).collect();
        stats.roles = roles.into_iter().map(str::to_string).collect();
        Self {
            t0,
            trial: trial.map(|(_, t)| t),
            all,
            violations: Vec::new(),
            stats,
            notes,
            incomplete: BTreeSet::new(),
            lives: BTreeMap::new(),
            terms: Vec::new(),
            faults,
        }
    }

    /// Faults with their ends paired (`start` then `end` of the same `what` and target).
    fn fault_spans(&self) -> Vec<FaultSpan> {
        let mut spans: Vec<FaultSpan> = Vec::new();
        for e in &self.faults {
            let Event::Fault {
                what,
                target,
                phase,
            } = &e.rec.event
            else {
                continue;
            };
            match phase {
                Phase::Start => spans.push(FaultSpan {
                    what: what.clone(),
                    target: target.clone(),
                    start_ms: self.ms(e.t),
                    end_ms: None,
                }),
                Phase::End => {
                    // An end closes the latest open fault on its target (`sigcont` ends a
                    // `sigstop`), or the latest open fault of all for a `heal`.
                    let open = spans
                        .iter_mut()
                        .rev()
                        .find(|s| s.end_ms.is_none() && (s.target == *target || what == "heal"));
                    match open {
                        Some(s) => s.end_ms = Some(self.ms(e.t)),
                        None => spans.push(FaultSpan {
                            what: what.clone(),
                            target: target.clone(),
                            start_ms: self.ms(e.t),
                            end_ms: None,
                        }),
                    }
                }
            }
        }
        spans
    }

    fn ms(&self, ns: u64) -> f64 {
        ms(ns, self.t0)
    }

    fn ttl_ns(&self) -> Option<u64> {
        self.trial
            .as_ref()
            .filter(|t| t.ttl_ms > 0)
            .map(|t| t.ttl_ms.saturating_mul(1_000_000))
    }

    /// Events around `t` that concern `role` (and faults), rendered.
    fn context(&self, role: Option<&str>, t: u64) -> Vec<String> {
        let relevant: Vec<&Ev<'_>> = self
            .all
            .iter()
            .filter(|e| {
                matches!(e.rec.event, Event::Fault { .. })
                    || (role.is_some() && e.rec.role.as_deref() == role)
                    || (role.is_none() && e.rec.role.is_none())
            })
            .collect();
        let i = relevant.partition_point(|e| e.t < t);
        let from = i.saturating_sub(CONTEXT);
        let to = (i + CONTEXT).min(relevant.len());
        relevant[from..to]
            .iter()
            .map(|e| {
                format!(
                    "{:>12.3} ms  {:<10} {:<8} {}",
                    self.ms(e.t),
                    e.rec.node,
                    e.rec.role.as_deref().unwrap_or("-"),
                    describe(&e.rec.event)
                )
            })
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn violate(
        &mut self,
        invariant: Invariant,
        role: Option<&str>,
        nodes: Vec<String>,
        terms: Vec<u64>,
        at: u64,
        until: Option<u64>,
        message: String,
    ) {
        // Context for the first violations only: each costs a pass over the history.
        let context = if self.violations.len() < MAX_CONTEXTS {
            self.context(role, at)
        } else {
            Vec::new()
        };
        self.violations.push(Violation {
            invariant,
            role: role.map(str::to_string),
            nodes,
            terms,
            at_ms: self.ms(at),
            until_ms: until.map(|u| self.ms(u)),
            message,
            context,
        });
    }

    /// The time a node was SIGKILLed in `[from, before)`, if it was.
    fn kill_time(&self, node: &str, from: u64, before: u64) -> Option<u64> {
        self.faults.iter().find_map(|e| match &e.rec.event {
            Event::Fault { what, target, .. }
                if what == "sigkill" && target == node && e.t >= from && e.t < before =>
            {
                Some(e.t)
            }
            _ => None,
        })
    }

    /// Per node: lifetimes, S5 and S6, and the terms with their acting intervals.
    fn nodes_pass(&mut self) {
        let mut per_node: BTreeMap<String, Vec<Ev<'a>>> = BTreeMap::new();
        for e in &self.all {
            if e.rec.src == Source::Node {
                per_node.entry(e.rec.node.clone()).or_default().push(*e);
            }
        }
        for (node, evs) in per_node {
            if evs
                .iter()
                .any(|e| matches!(e.rec.event, Event::Dropped { .. }))
            {
                self.incomplete.insert(node.clone());
            }
            // Split into lifetimes at each start.
            let mut lives: Vec<(usize, usize)> = Vec::new();
            let mut begin = 0;
            for (i, e) in evs.iter().enumerate() {
                if matches!(e.rec.event, Event::Start { .. }) && i > begin {
                    lives.push((begin, i));
                    begin = i;
                }
            }
            lives.push((begin, evs.len()));
            let mut out = Vec::new();
            for (li, &(a, b)) in lives.iter().enumerate() {
                let seg = &evs[a..b];
                let next_start = lives.get(li + 1).map_or(u64::MAX, |&(na, _)| evs[na].t);
                out.push(self.life(&node, seg, next_start));
            }
            self.lives.insert(node, out);
        }
    }

    /// Walks one lifetime of a node.
    fn life(&mut self, node: &str, seg: &[Ev<'a>], next_start: u64) -> Life {
        let first = seg.first().map_or(0, |e| e.t);
        let last = seg.last().map_or(0, |e| e.t);
        let clean = seg.iter().any(|e| matches!(e.rec.event, Event::Stop));
        let killed = if clean {
            None
        } else {
            self.kill_time(node, last, next_start)
        };
        let end = killed.unwrap_or(last).max(last);
        // Until when a term still open here may have been acted on: the stop, the kill, or —
        // when the process's fate is unknown (its last events may be lost) — the term's
        // deadline, bounded by the next start of the node.
        let act_limit = match (clean, killed) {
            (true, _) => last,
            (false, Some(k)) => k.max(last),
            (false, None) => next_start,
        };
        let roles = match seg.first().map(|e| &e.rec.event) {
            Some(Event::Start { roles, .. }) => roles.clone(),
            _ => Vec::new(),
        };
        let judge = !self.incomplete.contains(node);
        // Anchor of this lifetime, to map deadlines (node clock) like the stamps.
        let anchor = match seg.first().map(|e| (e.rec.mono_ns, &e.rec.event)) {
            Some((
                fake,
                Event::Start {
                    clock_rate,
                    real_mono_ns,
                    ..
                },
            )) => Anchor {
                rate: if *clock_rate > 0.0 { *clock_rate } else { 1.0 },
                fake,
                real: real_mono_ns.unwrap_or(fake),
            },
            _ => Anchor::IDENTITY,
        };
        struct Open {
            token: (u64, u64),
            promote_t: u64,
            /// Deadline in the node's own clock.
            deadline_raw: u64,
            /// Set once the deadline passed without a renewal.
            lapsed_at: Option<u64>,
        }
        let mut open: HashMap<String, Open> = HashMap::new();
        let mut closed: HashMap<String, (u64, u64)> = HashMap::new();
        let mut promoted: BTreeSet<(String, (u64, u64))> = BTreeSet::new();
        for e in seg {
            let Some(role) = e.rec.role.clone() else {
                continue;
            };
            let raw = e.rec.mono_ns;
            // A deadline that passed before this event ends acting there.
            if let Some(o) = open.get_mut(&role)
                && o.lapsed_at.is_none()
                && raw >= o.deadline_raw
            {
                o.lapsed_at = Some(anchor.map(o.deadline_raw));
            }
            match &e.rec.event {
                Event::Promote {
                    epoch,
                    term,
                    deadline_ns,
                } => {
                    self.stats.promotes += 1;
                    let token = (*epoch, *term);
                    if let Some(prev) = open.remove(&role) {
                        let end = prev.lapsed_at.unwrap_or(e.t).min(e.t);
                        self.terms.push(TermRec {
                            node: node.to_string(),
                            role: role.clone(),
                            token: prev.token,
                            promote_t: prev.promote_t,
                            act_end: end,
                        });
                        if judge {
                            self.violate(
                                Invariant::S6,
                                Some(&role),
                                vec![node.to_string()],
                                vec![prev.token.1, *term],
                                e.t,
                                None,
                                format!(
                                    "{node} promoted term {term} while term {} was never demoted",
                                    prev.token.1
                                ),
                            );
                        }
                    }
                    promoted.insert((role.clone(), token));
                    open.insert(
                        role,
                        Open {
                            token,
                            promote_t: e.t,
                            deadline_raw: *deadline_ns,
                            lapsed_at: None,
                        },
                    );
                }
                Event::Renew {
                    epoch,
                    term,
                    deadline_ns,
                } => {
                    let token = (*epoch, *term);
                    match open.get_mut(&role) {
                        Some(o) if o.token == token && o.lapsed_at.is_none() => {
                            o.deadline_raw = o.deadline_raw.max(*deadline_ns);
                        }
                        Some(o) if o.token == token => {}
                        // Renewals continue while a released term drains.
                        _ if closed.get(&role) == Some(&token) => {}
                        _ if judge => self.violate(
                            Invariant::S6,
                            Some(&role),
                            vec![node.to_string()],
                            vec![*term],
                            e.t,
                            None,
                            format!("{node} renewed term {term}, which it does not hold"),
                        ),
                        _ => {}
                    }
                }
                Event::Demote {
                    epoch,
                    term,
                    reason,
                    ..
                } => {
                    self.stats.demotes += 1;
                    let token = (*epoch, *term);
                    match open.remove(&role) {
                        Some(o) if o.token == token => {
                            self.terms.push(TermRec {
                                node: node.to_string(),
                                role: role.clone(),
                                token,
                                promote_t: o.promote_t,
                                act_end: o.lapsed_at.unwrap_or(e.t).min(e.t),
                            });
                            closed.insert(role, token);
                        }
                        other => {
                            if let Some(o) = other {
                                open.insert(role.clone(), o);
                            }
                            if judge {
                                self.violate(
                                    Invariant::S6,
                                    Some(&role),
                                    vec![node.to_string()],
                                    vec![*term],
                                    e.t,
                                    None,
                                    format!(
                                        "{node} demoted term {term} ({reason}), which it does not hold"
                                    ),
                                );
                            }
                        }
                    }
                }
                Event::Act {
                    epoch,
                    term,
                    write_id,
                } => {
                    self.stats.acts += 1;
                    if !judge {
                        continue;
                    }
                    let token = (*epoch, *term);
                    let problem = match open.get(&role) {
                        Some(o) if o.token == token && raw < o.deadline_raw => None,
                        Some(o) if o.token == token => Some(format!(
                            "{node} acted (write {write_id}) in term {term} {:.3} ms after its deadline",
                            (raw - o.deadline_raw) as f64 / MS
                        )),
                        _ => Some(format!(
                            "{node} acted (write {write_id}) in term {term}, which it does not hold"
                        )),
                    };
                    if let Some(msg) = problem {
                        self.violate(
                            Invariant::S5,
                            Some(&role),
                            vec![node.to_string()],
                            vec![*term],
                            e.t,
                            None,
                            msg,
                        );
                    }
                }
                Event::FencedWrite {
                    epoch,
                    term,
                    accepted,
                    unknown,
                    ..
                } => {
                    if *accepted {
                        self.stats.fenced_accepted += 1;
                    } else if *unknown {
                        self.stats.fenced_unknown += 1;
                    } else {
                        self.stats.fenced_refused += 1;
                    }
                    if judge && !promoted.contains(&(role.clone(), (*epoch, *term))) {
                        self.violate(
                            Invariant::S6,
                            Some(&role),
                            vec![node.to_string()],
                            vec![*term],
                            e.t,
                            None,
                            format!("{node} wrote fenced data in term {term}, never promoted"),
                        );
                    }
                }
                _ => {}
            }
        }
        // Terms still open at the end of the lifetime.
        let mut rest: Vec<(String, Open)> = open.into_iter().collect();
        rest.sort_by(|a, b| a.0.cmp(&b.0));
        for (role, o) in rest {
            let lapse = o.lapsed_at.unwrap_or_else(|| anchor.map(o.deadline_raw));
            self.terms.push(TermRec {
                node: node.to_string(),
                role: role.clone(),
                token: o.token,
                promote_t: o.promote_t,
                act_end: lapse.min(act_limit),
            });
            if clean && judge {
                self.violate(
                    Invariant::S6,
                    Some(&role),
                    vec![node.to_string()],
                    vec![o.token.1],
                    end,
                    None,
                    format!("{node} stopped cleanly with term {} still open", o.token.1),
                );
            }
        }
        Life {
            start: first,
            end,
            roles,
        }
    }

    /// S1–S4 per role.
    fn per_role_pass(&mut self) {
        let roles = self.stats.roles.clone();
        let epsilon = self
            .trial
            .as_ref()
            .and_then(|t| t.epsilon_ms)
            .unwrap_or(0)
            .saturating_mul(1_000_000);
        for role in roles {
            self.s1(&role);
            self.s2(&role);
            self.s3(&role);
            self.s4(&role, epsilon);
        }
    }

    fn role_events(&self, role: &str) -> Vec<Ev<'a>> {
        self.all
            .iter()
            .copied()
            .filter(|e| e.rec.src == Source::Node && e.rec.role.as_deref() == Some(role))
            .collect()
    }

    fn s1(&mut self, role: &str) {
        /// (epoch, revision, token, node, time) of an accepted fenced write.
        type Write<'n> = (u64, u64, (u64, u64), &'n str, u64);
        let mut writes: Vec<Write<'_>> = self
            .role_events(role)
            .iter()
            .filter_map(|e| match &e.rec.event {
                Event::FencedWrite {
                    epoch,
                    term,
                    accepted: true,
                    revision: Some(rev),
                    ..
                } => Some((*epoch, *rev, (*epoch, *term), e.rec.node.as_str(), e.t)),
                _ => None,
            })
            .collect();
        writes.sort_by_key(|w| (w.0, w.1));
        let mut best: Option<((u64, u64), &str, u64)> = None;
        let mut found = Vec::new();
        for (_, rev, token, node, t) in writes {
            if let Some((bt, bn, brev)) = best
                && token < bt
            {
                found.push((
                        vec![bn.to_string(), node.to_string()],
                        vec![bt.1, token.1],
                        t,
                        format!(
                            "fenced write of term {} by {node} stored at revision {rev}, after term {} by {bn} was stored at revision {brev}",
                            token.1, bt.1
                        ),
                    ));
                continue;
            }
            best = Some((token, node, rev));
        }
        for (nodes, terms, t, msg) in found {
            self.violate(Invariant::S1, Some(role), nodes, terms, t, None, msg);
        }
    }

    fn s2(&mut self, role: &str) {
        let promotes: Vec<((u64, u64), String, u64)> = self
            .role_events(role)
            .iter()
            .filter_map(|e| match &e.rec.event {
                Event::Promote { epoch, term, .. } => {
                    Some(((*epoch, *term), e.rec.node.clone(), e.t))
                }
                _ => None,
            })
            .collect();
        let mut found = Vec::new();
        let mut seen: HashMap<(u64, u64), String> = HashMap::new();
        let mut last: Option<((u64, u64), String)> = None;
        for (token, node, t) in promotes {
            if let Some(other) = seen.get(&token) {
                found.push((
                    vec![other.clone(), node.clone()],
                    vec![token.1],
                    t,
                    format!("term {} promoted by {other} and again by {node}", token.1),
                ));
            } else if let Some((lt, ln)) = &last
                && token <= *lt
            {
                found.push((
                    vec![ln.clone(), node.clone()],
                    vec![lt.1, token.1],
                    t,
                    format!(
                        "{node} promoted term {} after {ln} had promoted term {} (epoch {} vs {})",
                        token.1, lt.1, token.0, lt.0
                    ),
                ));
            }
            seen.entry(token).or_insert_with(|| node.clone());
            if last.as_ref().is_none_or(|(lt, _)| token > *lt) {
                last = Some((token, node));
            }
        }
        for (nodes, terms, t, msg) in found {
            self.violate(Invariant::S2, Some(role), nodes, terms, t, None, msg);
        }
    }

    fn s3(&mut self, role: &str) {
        let mut owner: HashMap<u64, String> = HashMap::new();
        let mut found = Vec::new();
        for e in self.role_events(role) {
            if let Event::Complete {
                kind: OpKind::Acquire | OpKind::Renew,
                result: OpResult::Ok,
                revision: Some(rev),
                ..
            } = &e.rec.event
            {
                match owner.get(rev) {
                    Some(o) if *o != e.rec.node => {
                        found.push((vec![o.clone(), e.rec.node.clone()], *rev, e.t))
                    }
                    Some(_) => {}
                    None => {
                        owner.insert(*rev, e.rec.node.clone());
                    }
                }
            }
        }
        for (nodes, rev, t) in found {
            let msg = format!(
                "revision {rev} reported stored by both {} and {}",
                nodes[0], nodes[1]
            );
            self.violate(Invariant::S3, Some(role), nodes, vec![rev], t, None, msg);
        }
    }

    fn role_terms(&self, role: &str) -> Vec<TermRec> {
        let mut v: Vec<TermRec> = self
            .terms
            .iter()
            .filter(|t| t.role == role)
            .cloned()
            .collect();
        v.sort_by_key(|t| t.promote_t);
        v
    }

    fn s4(&mut self, role: &str, epsilon: u64) {
        let terms = self.role_terms(role);
        let mut found = Vec::new();
        for (i, a) in terms.iter().enumerate() {
            for b in &terms[i + 1..] {
                if b.promote_t >= a.act_end {
                    continue;
                }
                if a.node == b.node {
                    continue;
                }
                let end = a.act_end.min(b.act_end);
                if end > b.promote_t && end - b.promote_t > epsilon {
                    found.push((a.clone(), b.clone(), end));
                }
            }
        }
        for (a, b, end) in found {
            let msg = format!(
                "{} (term {}) and {} (term {}) both acted for {:.3} ms",
                a.node,
                a.token.1,
                b.node,
                b.token.1,
                (end - b.promote_t) as f64 / MS
            );
            self.violate(
                Invariant::S4,
                Some(role),
                vec![a.node, b.node],
                vec![a.token.1, b.token.1],
                b.promote_t,
                Some(end),
                msg,
            );
        }
    }

    /// Whether `node` could campaign for `role` at `t` (alive, not paused).
    fn eligible(&self, node: &str, role: &str, t: u64) -> bool {
        let alive = self.lives.get(node).is_some_and(|ls| {
            ls.iter().any(|l| {
                l.start <= t
                    && t < l.end
                    && (l.roles.is_empty() || l.roles.iter().any(|r| r == role))
            })
        });
        alive && !self.paused(node, t)
    }

    fn paused(&self, node: &str, t: u64) -> bool {
        let mut paused = false;
        for e in &self.faults {
            if e.t > t {
                break;
            }
            if let Event::Fault { what, target, .. } = &e.rec.event
                && target == node
            {
                match what.as_str() {
                    "sigstop" => paused = true,
                    "sigcont" => paused = false,
                    _ => {}
                }
            }
        }
        paused
    }

    /// L1, L2, L3 and the vacancy figures.
    fn liveness_pass(&mut self) {
        let ttl = self.ttl_ns();
        let end_of_history = self.all.last().map_or(self.t0, |e| e.t);
        self.stats.faults = self
            .faults
            .iter()
            .filter(|e| {
                matches!(
                    &e.rec.event,
                    Event::Fault {
                        phase: Phase::Start,
                        ..
                    }
                )
            })
            .count() as u64;
        let heal = self.faults.last().map(|e| e.t);
        let bound = self.trial.as_ref().map(|t| {
            t.l1_bound_ms
                .unwrap_or(t.ttl_ms.saturating_add(DEFAULT_L1_EXTRA_MS))
                .saturating_mul(1_000_000)
        });
        let expiry_slack = self
            .trial
            .as_ref()
            .and_then(|t| t.expiry_slack_ms)
            .unwrap_or(DEFAULT_EXPIRY_SLACK_MS)
            .saturating_mul(1_000_000);
        let nodes: Vec<String> = self.lives.keys().cloned().collect();
        for role in self.stats.roles.clone() {
            let terms = self.role_terms(&role);
            let events = self.role_events(&role);
            // Send times of every acquire of the role (sorted: `events` is in time order).
            let acquires: Vec<u64> = events
                .iter()
                .filter(|e| {
                    matches!(
                        e.rec.event,
                        Event::Invoke {
                            kind: OpKind::Acquire,
                            ..
                        }
                    )
                })
                .map(|e| e.t)
                .collect();
            // Vacancies between terms (and before the first one).
            let mut prev_end = self.t0;
            let mut covered = self.t0;
            for term in &terms {
                if term.promote_t > covered {
                    let attempts = (acquires.partition_point(|&t| t <= term.promote_t)
                        - acquires.partition_point(|&t| t < prev_end))
                        as u64;
                    self.stats.vacancies.push(Vacancy {
                        role: role.clone(),
                        duration_ms: (term.promote_t - covered) as f64 / MS,
                        acquire_attempts: attempts,
                    });
                    if let Some(bound) = bound {
                        self.l1_gap(&role, &nodes, covered, term.promote_t, heal, bound);
                    }
                }
                prev_end = term.act_end;
                covered = covered.max(term.act_end);
            }
            if let Some(bound) = bound {
                self.l1_gap(&role, &nodes, covered, end_of_history, heal, bound);
            }
            // L2: fail-overs after faults that hit the holder.
            for f in self.faults.clone() {
                let Event::Fault {
                    what,
                    target,
                    phase: Phase::Start,
                } = &f.rec.event
                else {
                    continue;
                };
                if what == "sigcont" || what == "heal" {
                    continue;
                }
                let Some(holder) = terms
                    .iter()
                    .find(|t| t.promote_t <= f.t && f.t <= t.act_end)
                else {
                    continue;
                };
                let server_wide = !self.lives.contains_key(target.as_str());
                if !server_wide && holder.node != *target {
                    continue;
                }
                // A holder whose term outlived the fault by more than a TTL rode it out: no
                // fail-over to measure.
                let grace = ttl.unwrap_or(2_000_000_000);
                if holder.act_end > self.fault_end(f.t, target).saturating_add(grace) {
                    self.stats.ridden_out += 1;
                    continue;
                }
                let next = terms.iter().find(|t| t.promote_t > f.t);
                let after_expiry = match (what.as_str(), next, ttl) {
                    ("sigkill", Some(n), Some(ttl)) => self
                        .lease_end(&holder.node, &role, f.t, ttl)
                        .map(|lease_end| (n.promote_t as f64 - lease_end as f64) / MS),
                    _ => None,
                };
                self.stats.failovers.push(Failover {
                    role: role.clone(),
                    fault: what.clone(),
                    target: target.clone(),
                    holder: holder.node.clone(),
                    start_ms: self.ms(f.t),
                    duration_ms: next.map(|n| (n.promote_t - f.t) as f64 / MS),
                    next_holder: next.map(|n| n.node.clone()),
                    after_expiry_ms: after_expiry,
                });
                if let (Some(late), Some(n)) = (after_expiry, next)
                    && late > expiry_slack as f64 / MS
                {
                    self.violate(
                        Invariant::L1,
                        Some(&role),
                        vec![holder.node.clone(), n.node.clone()],
                        vec![holder.token.1, n.token.1],
                        f.t,
                        Some(n.promote_t),
                        format!(
                            "after {} was killed, {} took over {late:.1} ms after the lease ran out (bound {} ms): the key did not expire",
                            holder.node,
                            n.node,
                            expiry_slack / 1_000_000
                        ),
                    );
                }
            }
            // L3: no demotion in the steady window.
            if let Some((from, to)) = self
                .trial
                .as_ref()
                .and_then(|t| t.steady_from_ns.zip(t.steady_to_ns))
            {
                let demotes: Vec<(String, u64, u64)> = events
                    .iter()
                    .filter(|e| e.t >= from && e.t <= to)
                    .filter_map(|e| match &e.rec.event {
                        Event::Demote { term, .. } => Some((e.rec.node.clone(), *term, e.t)),
                        _ => None,
                    })
                    .collect();
                for (node, term, t) in demotes {
                    self.violate(
                        Invariant::L3,
                        Some(&role),
                        vec![node.clone()],
                        vec![term],
                        t,
                        None,
                        format!("{node} demoted term {term} inside the steady-state window"),
                    );
                }
            }
        }
        if bound.is_none() {
            self.notes
                .push("no trial line: L1 not checked (no bound)".to_string());
        }
    }

    /// When the fault on `target` that started at `start` ended: its `end` event (or a
    /// `heal`), else its start (an instantaneous fault such as SIGKILL).
    fn fault_end(&self, start: u64, target: &str) -> u64 {
        self.faults
            .iter()
            .find_map(|e| match &e.rec.event {
                Event::Fault {
                    what,
                    target: t,
                    phase: Phase::End,
                } if e.t >= start && (t == target || what == "heal") => Some(e.t),
                _ => None,
            })
            .unwrap_or(start)
    }

    /// Send time of `node`'s last acquire/renew of `role` before `t`, plus the TTL as the
    /// server applies it (whole seconds, rounded up).
    fn lease_end(&self, node: &str, role: &str, t: u64, ttl: u64) -> Option<u64> {
        let sec = 1_000_000_000;
        let ttl = ttl.div_ceil(sec) * sec;
        self.all
            .iter()
            .filter(|e| {
                e.t <= t
                    && e.rec.node == node
                    && e.rec.role.as_deref() == Some(role)
                    && matches!(
                        e.rec.event,
                        Event::Invoke {
                            kind: OpKind::Acquire | OpKind::Renew,
                            ..
                        }
                    )
            })
            .map(|e| e.t + ttl)
            .next_back()
    }

    /// L1 for one stretch `[from, to)` without a holder: the time in it after the last fault
    /// during which an eligible candidate was alive must stay within `bound`.
    fn l1_gap(
        &mut self,
        role: &str,
        nodes: &[String],
        from: u64,
        to: u64,
        heal: Option<u64>,
        bound: u64,
    ) {
        let start = heal.map_or(from, |h| from.max(h));
        if to <= start {
            return;
        }
        // Sample eligibility at change points (lifetimes, pauses) inside the gap.
        let mut points: BTreeSet<u64> = BTreeSet::new();
        points.insert(start);
        points.insert(to);
        for ls in self.lives.values() {
            for l in ls {
                for p in [l.start, l.end] {
                    if p > start && p < to {
                        points.insert(p);
                    }
                }
            }
        }
        for f in &self.faults {
            if f.t > start && f.t < to {
                points.insert(f.t);
            }
        }
        let points: Vec<u64> = points.into_iter().collect();
        let mut vacant_with_candidate = 0u64;
        let mut first = None;
        for w in points.windows(2) {
            let (a, b) = (w[0], w[1]);
            if nodes.iter().any(|n| self.eligible(n, role, a)) {
                vacant_with_candidate += b - a;
                first.get_or_insert(a);
            }
        }
        if vacant_with_candidate > bound {
            let at = first.unwrap_or(start);
            self.violate(
                Invariant::L1,
                Some(role),
                Vec::new(),
                Vec::new(),
                at,
                Some(to),
                format!(
                    "no holder for {:.1} ms while a candidate was alive (bound {} ms)",
                    vacant_with_candidate as f64 / MS,
                    bound / 1_000_000
                ),
            );
        }
    }
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
