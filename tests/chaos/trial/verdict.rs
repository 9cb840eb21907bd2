//! What a correct build's trial must show besides a clean report: every round's fault hit a
//! holder (the history has a term of the target open when it began), the rounds that must
//! fail over did (the checker measured a fail-over from that fault to a new promote), and the
//! holders acted and wrote fenced data. A trial that cannot show these did not test what it
//! claims: it fails with a message saying what is missing, never passes silently.

use nats_roles::tooling::history::Report;

use super::Kind;

/// The fault of one round that had to hit a holder.
#[derive(Debug, Clone)]
pub struct RoundNote {
    /// The round.
    pub round: usize,
    /// What the round did (the fault kind picked for it).
    pub fault: Kind,
    /// Index of its primary fault in the trial's fault spans (`Report::faults`); `None` when
    /// the round found no holder to aim at (a harness problem already).
    pub primary: Option<usize>,
    /// The primary fault's `what` and `target` (a node id, or a server-wide target).
    pub what: String,
    /// See `what`.
    pub target: String,
}

/// Whether a round of `fault` must end its target's term (a fail-over from the fault to the
/// next promote). Connection resets, delays, short server restarts and a full stream (a
/// session renewal replaces a message of the same size, which may still fit) may be ridden
/// out by a correct holder, and a stream-leader change during the followers' backstop reads
/// must not cost the live holder anything: those rounds only have to hit a holder.
pub fn must_fail_over(fault: Kind) -> bool {
    !matches!(
        fault,
        Kind::ProxyReset
            | Kind::ProxyDelay
            | Kind::ServerRestart
            | Kind::DiskFull
            | Kind::BackstopLeader
    )
}

/// The problems of a correct build's trial that its report alone does not show.
pub fn problems(report: &Report, rounds: &[RoundNote], nodes: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for note in rounds {
        let Some(index) = note.primary else {
            continue;
        };
        let Some(span) = report.faults.get(index) else {
            out.push(format!(
                "round {} ({}): its fault {} on {} is not in the history (fault #{index} of {})",
                note.round,
                note.fault.name(),
                note.what,
                note.target,
                report.faults.len()
            ));
            continue;
        };
        if span.what != note.what || span.target != note.target {
            out.push(format!(
                "round {} ({}): fault #{index} is {} on {}, expected {} on {} (harness bug)",
                note.round,
                note.fault.name(),
                span.what,
                span.target,
                note.what,
                note.target
            ));
            continue;
        }
        let on_node = nodes.contains(&note.target);
        let hit = report.terms.iter().any(|t| {
            (!on_node || t.node == note.target)
                && t.start_ms <= span.start_ms
                && span.start_ms <= t.end_ms
        });
        if !hit {
            out.push(format!(
                "round {} ({}): the fault {} on {} at {:.0} ms hit no holder (no term {}was open \
                 then): the round tested nothing",
                note.round,
                note.fault.name(),
                note.what,
                note.target,
                span.start_ms,
                if on_node {
                    format!("of {} ", note.target)
                } else {
                    String::new()
                }
            ));
            continue;
        }
        if must_fail_over(note.fault) {
            let measured = report
                .stats
                .failovers
                .iter()
                .any(|f| f.start_ms == span.start_ms && f.duration_ms.is_some());
            if !measured {
                out.push(format!(
                    "round {} ({}): no fail-over measured after the fault {} on {} at {:.0} ms \
                     (no promote after it of a role its target held)",
                    note.round,
                    note.fault.name(),
                    note.what,
                    note.target,
                    span.start_ms
                ));
            }
        }
    }
    let st = &report.stats;
    if st.acts == 0 || st.fenced_accepted == 0 {
        out.push(format!(
            "the holders did not work: {} acts, {} fenced writes stored",
            st.acts, st.fenced_accepted
        ));
    }
    out
}
