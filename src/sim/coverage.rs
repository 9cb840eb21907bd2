//! Coverage: the fault runs must reach the paths the invariants are about.

use crate::core::types::{Action, WriteKind, WriteOutcome};
use crate::value::LeaseValue;

use super::check::{CheckOpts, Walk};
use super::clock::{MS, Nanos};
use super::kv::{Entry, EntryKind};
use super::strategy::{
    aged_marker_scenario, faulty_scenario, foreign_value_scenario, reset_scenario,
    successors_scenario,
};
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
    /// Takeovers of a role value whose session listed it as released (Q5 rule 5: a refused
    /// release, a value naming a live session that nobody acts on).
    pub(super) released_takeover: usize,
    /// Session starts over a session value of the same instance id and another incarnation
    /// that this process had yielded to (written after its own, unchanged for the backstop
    /// period, Q4).
    pub(super) yield_over_stale: usize,
    /// Promotes whose acquire went out when a young-bucket hold ended (Q6).
    pub(super) young_hold: usize,
    /// Member records the server expired (Q8 rule 5's last resort).
    pub(super) record_expiries: usize,
    /// Paths of the drivers the runs reached (reaps accepted, refused then learned, on
    /// revision 0; markers aged out; epochs learned; foreign writes...).
    pub(super) paths: std::collections::BTreeMap<&'static str, usize>,
}

impl Coverage {
    pub(super) fn add(&mut self, trace: &Trace) {
        self.runs += 1;
        for (what, n) in &trace.counts {
            *self.paths.entry(what).or_default() += n;
        }
        self.yields(trace);
        for node in &trace.nodes {
            self.held(node);
        }
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
        self.session_expiries += trace
            .session_logs()
            .iter()
            .flatten()
            .filter(|e| matches!(e.kind, EntryKind::Expiry))
            .count();
        self.record_expiries += trace
            .member_logs()
            .iter()
            .flatten()
            .filter(|e| matches!(e.kind, EntryKind::Expiry))
            .count();
        self.closest_handover(trace);
    }

    /// Classifies a promote by the entry its acquire replaced (in the same bucket).
    pub(super) fn promoted(&mut self, trace: &Trace, node: usize, revision: u64) {
        let role = trace.nodes[node].role;
        let log = &trace.logs[role];
        let ours = |e: &Entry| {
            e.rev == revision && e.writer == Some((node, crate::core::types::WriteKind::Acquire))
        };
        let Some(i) = log.iter().position(ours) else {
            return;
        };
        let Some(prev) = i
            .checked_sub(1)
            .map(|p| &log[p])
            .filter(|p| p.epoch == log[i].epoch && !matches!(p.kind, EntryKind::Vanished))
        else {
            self.first += 1;
            return;
        };
        if let EntryKind::Put(v) = &prev.kind
            && released(trace, role, prev, v, log[i].at)
        {
            self.released_takeover += 1;
        }
        let slot = |n: usize| {
            trace.nodes[n]
                .name
                .split('/')
                .next()
                .unwrap_or_default()
                .to_owned()
        };
        match (&prev.kind, prev.writer) {
            (EntryKind::Delete | EntryKind::Expiry | EntryKind::Purge, _) => {
                self.after_delete += 1;
            }
            (EntryKind::Put(_), Some((w, _))) if w == node => self.own_reclaim += 1,
            (EntryKind::Put(_), Some((w, _))) if slot(w) == slot(node) => self.adoption += 1,
            (EntryKind::Put(_) | EntryKind::Session(_) | EntryKind::Member(_), _) => {
                self.takeover += 1;
            }
            (EntryKind::Vanished, _) => {}
        }
    }

    /// Session starts over a value of another incarnation of the same id that this
    /// incarnation had yielded to (it wrote the key before that value).
    pub(super) fn yields(&mut self, trace: &Trace) {
        for log in trace.session_logs() {
            for (k, w) in log.windows(2).enumerate() {
                let (EntryKind::Session(old), EntryKind::Session(new)) = (&w[0].kind, &w[1].kind)
                else {
                    continue;
                };
                let wrote_before = log[..k].iter().any(|e| {
                    e.epoch == w[1].epoch
                        && matches!(&e.kind, EntryKind::Session(v) if v.incarnation == new.incarnation)
                });
                if w[1].writer.is_some()
                    && w[0].epoch == w[1].epoch
                    && old.instance == new.instance
                    && old.incarnation != new.incarnation
                    && wrote_before
                {
                    self.yield_over_stale += 1;
                }
            }
        }
    }

    /// A promote whose acquire went out at most 100 ms after the end of a young-bucket hold the
    /// machine was given (it was waiting for it).
    pub(super) fn held(&mut self, node: &super::trace::NodeTrace) {
        let mut hold: Option<Nanos> = None;
        let mut acquire: Option<Nanos> = None;
        for r in &node.recs {
            match r {
                Rec::Hold { until, .. } => hold = Some(*until),
                Rec::Act { g, action, .. } => match &**action {
                    Action::Write(w) if w.kind == WriteKind::Acquire => acquire = Some(*g),
                    Action::Promote { .. } => {
                        if let (Some(h), Some(a)) = (hold.take(), acquire)
                            && a >= h
                            && a <= h + 100 * MS
                        {
                            self.young_hold += 1;
                        }
                    }
                    _ => {}
                },
                _ => {}
            }
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

/// Whether the session the role value `v` (entry `put` of `role`) names listed it as released
/// at server time `at` (its value then, in the same bucket).
fn released(trace: &Trace, role: usize, put: &Entry, v: &LeaseValue, at: Nanos) -> bool {
    let Some(k) = trace.session_keys.iter().position(|k| *k == v.session_key) else {
        return false;
    };
    let log = &trace.session_logs()[k];
    let n = log.partition_point(|e| e.at <= at);
    let name = crate::names::RoleName::new(format!("r{role}")).expect("valid role name");
    n.checked_sub(1).is_some_and(|i| {
        let e = &log[i];
        e.epoch == put.epoch
            && matches!(&e.kind, EntryKind::Session(s) if s.session == v.session && s.releases(&name, put.rev))
    })
}

/// Runs `n` scenarios of `strategy` (deterministic) into `cov`.
fn run_into<S: proptest::strategy::Strategy<Value = super::scenario::Scenario>>(
    cov: &mut Coverage,
    strategy: S,
    n: usize,
) {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    for _ in 0..n {
        let sc = strategy
            .new_tree(&mut runner)
            .expect("a scenario")
            .current();
        cov.add(&Sim::new(&sc, Flaws::default()).run());
    }
}

/// The fault runs must reach every path the invariants are about; prints the counts.
#[test]
fn fault_runs_cover_the_interesting_paths() {
    let mut cov = Coverage::default();
    run_into(&mut cov, faulty_scenario(), 300);
    run_into(&mut cov, foreign_value_scenario(), 60);
    run_into(&mut cov, aged_marker_scenario(), 60);
    run_into(&mut cov, reset_scenario(), 60);
    run_into(&mut cov, successors_scenario(), 60);
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
        cov.released_takeover,
        cov.yield_over_stale,
        cov.young_hold,
    ];
    assert!(counts.iter().all(|&c| c > 0), "{cov:#?}");
    // Issue 24: reaps accepted, refused then learned from a leader read, and on revision 0
    // after a leader read found no entry (a marker that aged out); bucket resets learned.
    for path in [
        "reap_ok",
        "reap_refused_learned",
        "reap_on_zero_ok",
        "marker_aged_out",
        "epoch_learned",
        "foreign_role_observer",
        "foreign_role_own_incarnation",
        "foreign_role_other_incarnation",
        "foreign_session_written",
        // Q8: session entries of instances not followed (not delivered), records deleted by a
        // successor that saw the session end and by the second tier, orphans followed, records deleted or replaced by another client and written
        // again by their owner after a renewal (rule 6).
        "session_entry_not_followed",
        "record_deleted_by_successor",
        "record_deleted_by_second_tier",
        "orphan_followed",
        "foreign_member_delete",
        "foreign_member_write",
        "own_record_removed_by_another",
        "record_rewritten_after_delete",
    ] {
        assert!(
            cov.paths.get(path).is_some_and(|&c| c > 0),
            "{path} never reached: {cov:#?}"
        );
    }
    // Superseded, evicted and expired demotes need a writer the protocol does not allow.
    for reason in ["deadline_expired", "disconnected", "released", "shutdown"] {
        assert!(
            cov.demotes.get(reason).is_some_and(|&c| c > 0),
            "no {reason} demote: {cov:#?}"
        );
    }
}
