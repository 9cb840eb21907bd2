//! Traces for humans: a failing case's violations and the trace around them.

use std::fmt::Write as _;

use crate::core::types::Action;

use super::clock::{Clock, MS, Nanos, secs};
use super::kv::{kind_name, short};
use super::scenario::Scenario;
use super::trace::{Rec, Trace};
use super::violation::Violation;

pub(super) fn show_action(a: &Action, clock: Clock) -> String {
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
pub(super) fn render(trace: &Trace, from: Nanos, to: Nanos) -> String {
    let mut lines: Vec<(Nanos, usize, String)> = Vec::new();
    let within = |g: Nanos| g >= from && g <= to;
    for (key, log) in trace.logs.iter().enumerate() {
        let sessions = trace.roles + trace.session_keys.len();
        let name = if key < trace.roles {
            format!("r{key}")
        } else if key < sessions {
            format!("s{}", key - trace.roles)
        } else {
            format!("m{}", key - sessions)
        };
        for e in log.iter().filter(|e| within(e.at)) {
            lines.push((
                e.at,
                0,
                format!(
                    "KV  {name} rev {}/{} {} by {:?}",
                    e.epoch,
                    e.rev,
                    kind_name(&e.kind),
                    e.writer
                ),
            ));
        }
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
                Rec::Extended { g, deadline } => (
                    *g,
                    format!("   deadline moved to {}", secs(n.clock.global(*deadline))),
                ),
                Rec::Synced { g, arrived } => (
                    *g,
                    format!(
                        "<- session renewal from the clock (arrived {})",
                        secs(*arrived)
                    ),
                ),
                Rec::Hold { g, until } => (
                    *g,
                    format!("   young bucket: no acquire before {}", secs(*until)),
                ),
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
pub(super) fn report(sc: &Scenario, trace: &Trace, violations: &[Violation]) -> String {
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
