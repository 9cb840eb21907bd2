//! What the checker hands back: the violations, the figures, the terms and faults for
//! timelines, and a readable rendering.

use std::fmt::Write as _;

use serde::Serialize;

use crate::history::event::TrialInfo;

pub use crate::history::invariant::Invariant;
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
    /// Runs of `exec` role commands (child processes).
    pub child_runs: u64,
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
            "{} nodes, {} roles, {:.0} ms: {} promotes, {} demotes, {} acts, {} command runs, fenced writes {} stored / {} refused / {} unknown, {} faults",
            st.nodes.len(),
            st.roles.len(),
            st.duration_ms,
            st.promotes,
            st.demotes,
            st.acts,
            st.child_runs,
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
