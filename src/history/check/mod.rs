//! The checker: judges a merged history against the invariants of `docs/reliability.md`
//! (S1–S7 safety, L1–L3 liveness) and measures fail-overs and contention. Pure: records in,
//! [`Report`] out.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::event::{Event, Phase, Record, TrialInfo};
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

mod discipline;
mod exclusivity;
mod fencing;
mod liveness;
mod merge;
mod report;
mod slots;

pub use report::{Failover, FaultSpan, Invariant, Report, Stats, TermSpan, Vacancy, Violation};

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
    /// The roles it campaigns for (its `start` record); empty: not listed.
    roles: Vec<String>,
    /// Without a list: when it first recorded something of each role (it takes part from then).
    joined: BTreeMap<String, u64>,
}

/// One term as the checker reconstructs it.
#[derive(Debug, Clone)]
struct TermRec {
    node: String,
    /// The incarnation of the process that held it (`None`: a history without incarnations,
    /// where a node name stands for one process at a time).
    inc: Option<String>,
    role: String,
    token: (u64, u64),
    promote_t: u64,
    /// End of acting: earliest of demote, crash and the lapsed deadline (normalised).
    act_end: u64,
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
    c.slots_pass();
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

    /// A violation by one node in one term of `role`, at `at`.
    fn violate_by(
        &mut self,
        invariant: Invariant,
        role: &str,
        node: &str,
        term: u64,
        at: u64,
        message: String,
    ) {
        self.violate(
            invariant,
            Some(role),
            vec![node.to_string()],
            vec![term],
            at,
            None,
            message,
        );
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
}

impl<'a> Checker<'a> {
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
}

#[cfg(test)]
mod slots_tests;
#[cfg(test)]
mod tests;
