//! Coverage: the fault runs must reach the paths the invariants are about.

use crate::core::types::{Action, WriteKind, WriteOutcome};

use super::check::{CheckOpts, Walk};
use super::clock::Nanos;
use super::kv::EntryKind;
use super::strategy::faulty_scenario;
use super::trace::{Rec, Seen, Trace};
use super::world::{Flaws, Sim};

/// How often the fault runs reach the paths the invariants are about.
#[derive(Debug, Default)]
pub(super) struct Coverage {
    pub(super) runs: usize,
    pub(super) events: usize,
    /// Promotes by what the winning acquire replaced.
    pub(super) first: usize,
    /// Session keys the server expired (role keys never expire in protocol v2).
    pub(super) session_expiries: usize,
    pub(super) after_delete: usize,
    /// Takeovers of a role value whose holder's session was gone (Q5).
    pub(super) takeover: usize,
    pub(super) own_reclaim: usize,
    pub(super) adoption: usize,
    /// Won acquires that never became a promote (late acknowledgement, stop, release).
    pub(super) unpromoted_wins: usize,
    pub(super) unknown_outcomes: usize,
    pub(super) validations: usize,
    pub(super) demotes: std::collections::BTreeMap<&'static str, usize>,
    /// Closest hand-over between different machines (next start − previous end).
    pub(super) closest: Option<Nanos>,
}

impl Coverage {
    pub(super) fn add(&mut self, trace: &Trace) {
        self.runs += 1;
        for (i, node) in trace.nodes.iter().enumerate() {
            self.events += node.recs.len();
            for r in &node.recs {
                match r {
                    Rec::Act { action, .. } => match &**action {
                        Action::Promote { revision, .. } => self.promoted(trace, i, *revision),
                        Action::Demote { reason, .. } => {
                            *self.demotes.entry(reason.as_str()).or_default() += 1;
                        }
                        _ => {}
                    },
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
                Rec::Act { action, .. } => match &**action {
                    Action::Promote { revision, .. } => Some(*revision),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        self.unpromoted_wins += trace.logs[..trace.roles]
            .iter()
            .flatten()
            .filter(|e| {
                e.writer.is_some_and(|w| w.1 == WriteKind::Acquire) && !promoted.contains(&e.rev)
            })
            .count();
        self.session_expiries += trace.logs[trace.roles..]
            .iter()
            .flatten()
            .filter(|e| matches!(e.kind, EntryKind::Expiry))
            .count();
        self.closest_handover(trace);
    }

    /// Classifies a promote by the entry its acquire replaced.
    pub(super) fn promoted(&mut self, trace: &Trace, node: usize, revision: u64) {
        let log = &trace.logs[trace.nodes[node].role];
        let Ok(i) = log.binary_search_by_key(&revision, |e| e.rev) else {
            return;
        };
        let Some(prev) = i.checked_sub(1).map(|p| &log[p]) else {
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
            (EntryKind::Delete | EntryKind::Expiry, _) => self.after_delete += 1,
            (EntryKind::Put(_), Some((w, _))) if w == node => self.own_reclaim += 1,
            (EntryKind::Put(_), Some((w, _))) if slot(w) == slot(node) => self.adoption += 1,
            (EntryKind::Put(_) | EntryKind::Session(_), _) => self.takeover += 1,
        }
    }

    pub(super) fn closest_handover(&mut self, trace: &Trace) {
        let mut out = Vec::new();
        for role in 0..trace.roles {
            let mut tenures = Vec::new();
            for n in (0..trace.nodes.len()).filter(|&n| trace.nodes[n].role == role) {
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
}

/// The fault runs must reach every path the invariants are about; prints the counts.
#[test]
fn fault_runs_cover_the_interesting_paths() {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut cov = Coverage::default();
    for _ in 0..300 {
        let sc = faulty_scenario()
            .new_tree(&mut runner)
            .expect("a scenario")
            .current();
        cov.add(&Sim::new(&sc, Flaws::default()).run());
    }
    println!("{cov:#?}");
    let counts = [
        cov.first,
        cov.session_expiries,
        cov.after_delete,
        cov.takeover,
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
