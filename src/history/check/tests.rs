//! The checker on synthetic histories: a passing and a failing case per invariant, truncated
//! files, crashed nodes, dropped events and scaled clocks.

use super::*;
use crate::history::event::{Event, OpKind, OpResult, Phase, Record, TrialInfo};

const E: u64 = 7; // bucket epoch
const MSN: u64 = 1_000_000;
const BASE: u64 = 1_000_000_000_000; // mono ns of t = 0

fn at(ms: u64) -> u64 {
    BASE + ms * MSN
}

/// A history under construction; times in ms since the trial start.
#[derive(Default)]
struct H(Vec<Record>);

impl H {
    fn trial(ttl_ms: u64) -> Self {
        let mut h = Self::default();
        h.0.push(Record::harness(
            at(0),
            None,
            Event::Trial(TrialInfo {
                seed: 1,
                kind: "test".into(),
                ttl_ms,
                margin: 0.1,
                clock: 1.0,
                ..TrialInfo::default()
            }),
        ));
        h
    }
    fn ev(mut self, ms: u64, node: &str, role: Option<&str>, event: Event) -> Self {
        self.0.push(Record::node(at(ms), node, role, event));
        self
    }
    fn start(self, ms: u64, node: &str) -> Self {
        self.ev(
            ms,
            node,
            None,
            Event::Start {
                roles: vec!["r".into()],
                clock_rate: 1.0,
                real_mono_ns: None,
            },
        )
    }
    fn stop(self, ms: u64, node: &str) -> Self {
        self.ev(ms, node, None, Event::Stop)
    }
    fn promote(self, ms: u64, node: &str, term: u64, deadline_ms: u64) -> Self {
        self.ev(
            ms,
            node,
            Some("r"),
            Event::Promote {
                epoch: E,
                term,
                deadline_ns: at(deadline_ms),
            },
        )
    }
    fn renew(self, ms: u64, node: &str, term: u64, deadline_ms: u64) -> Self {
        self.ev(
            ms,
            node,
            Some("r"),
            Event::Renew {
                epoch: E,
                term,
                deadline_ns: at(deadline_ms),
            },
        )
    }
    fn demote(self, ms: u64, node: &str, term: u64) -> Self {
        self.ev(
            ms,
            node,
            Some("r"),
            Event::Demote {
                epoch: E,
                term,
                reason: "shutdown".into(),
                held_ms: None,
            },
        )
    }
    fn act(self, ms: u64, node: &str, term: u64, write_id: u64) -> Self {
        self.ev(
            ms,
            node,
            Some("r"),
            Event::Act {
                epoch: E,
                term,
                write_id,
            },
        )
    }
    fn fenced(self, ms: u64, node: &str, term: u64, revision: u64) -> Self {
        self.ev(
            ms,
            node,
            Some("r"),
            Event::FencedWrite {
                epoch: E,
                term,
                write_id: revision,
                accepted: true,
                unknown: false,
                revision: Some(revision),
                error: None,
                key: None,
            },
        )
    }
    fn write(self, ms: u64, node: &str, op: u64, kind: OpKind, revision: u64) -> Self {
        self.ev(
            ms,
            node,
            Some("r"),
            Event::Invoke {
                op,
                kind,
                expected: revision.saturating_sub(1),
            },
        )
        .ev(
            ms + 1,
            node,
            Some("r"),
            Event::Complete {
                op,
                kind,
                result: OpResult::Ok,
                revision: Some(revision),
                error: None,
                elapsed_us: None,
            },
        )
    }
    fn fault(mut self, ms: u64, what: &str, target: &str, phase: Phase) -> Self {
        self.0.push(Record::harness(
            at(ms),
            None,
            Event::Fault {
                what: what.into(),
                target: target.into(),
                phase,
            },
        ));
        self
    }
    fn check(&self) -> Report {
        check(&self.0)
    }
    fn child_start(self, ms: u64, node: &str, term: u64, pid: u32) -> Self {
        self.ev(
            ms,
            node,
            Some("r"),
            Event::ChildStart {
                epoch: E,
                term,
                pid,
            },
        )
    }
    /// The watchdog's record of a child it killed (`killed`: why).
    fn child_killed(self, ms: u64, node: &str, term: u64, pid: u32, killed: &str) -> Self {
        self.child_signalled(ms, node, term, pid, killed, None)
    }
    /// The watchdog's record of a child it killed at its kill deadline, which was
    /// `kill_deadline_ms`.
    fn child_killed_at_deadline(
        self,
        ms: u64,
        node: &str,
        term: u64,
        pid: u32,
        kill_deadline_ms: u64,
    ) -> Self {
        self.child_signalled(ms, node, term, pid, "deadline", Some(at(kill_deadline_ms)))
    }
    fn child_signalled(
        self,
        ms: u64,
        node: &str,
        term: u64,
        pid: u32,
        killed: &str,
        kill_deadline_ns: Option<u64>,
    ) -> Self {
        self.ev(
            ms,
            node,
            Some("r"),
            Event::ChildStop {
                epoch: E,
                term,
                pid,
                status: "signal 9".into(),
                killed: Some(killed.into()),
                kill_deadline_ns,
            },
        )
    }
    fn child_stop(self, ms: u64, node: &str, term: u64, pid: u32) -> Self {
        self.ev(
            ms,
            node,
            Some("r"),
            Event::ChildStop {
                epoch: E,
                term,
                pid,
                status: "signal 15".into(),
                killed: None,
                kill_deadline_ns: None,
            },
        )
    }
}

/// n1 holds term 2 from 10 ms, releases at 500 ms; n2 holds term 9 from 502 ms until 900 ms.
fn clean() -> H {
    H::trial(1000)
        .start(0, "n1")
        .start(0, "n2")
        .write(9, "n1", 1, OpKind::Acquire, 2)
        .promote(10, "n1", 2, 910)
        .act(20, "n1", 2, 1)
        .fenced(22, "n1", 2, 3)
        .write(250, "n1", 2, OpKind::Renew, 4)
        .renew(251, "n1", 2, 1150)
        .act(300, "n1", 2, 2)
        .fenced(302, "n1", 2, 5)
        .demote(500, "n1", 2)
        .write(501, "n2", 1, OpKind::Acquire, 9)
        .promote(502, "n2", 9, 1400)
        .act(510, "n2", 9, 3)
        .fenced(512, "n2", 9, 10)
        .stop(600, "n1")
        .demote(900, "n2", 9)
        .stop(901, "n2")
}

fn only(report: &Report, inv: Invariant) {
    assert!(
        report.has(inv),
        "{inv} not flagged:\n{}",
        report.render_text()
    );
    assert!(
        report.violations.iter().all(|v| v.invariant == inv),
        "other rules flagged besides {inv}:\n{}",
        report.render_text()
    );
}

#[test]
fn a_clean_hand_over_passes() {
    let r = clean().check();
    assert!(r.is_clean(), "{}", r.render_text());
    assert_eq!(r.stats.promotes, 2);
    assert_eq!(r.stats.acts, 3);
    assert_eq!(r.stats.fenced_accepted, 3);
    assert_eq!(r.terms.len(), 2);
    assert!(r.render_text().contains("CLEAN"));
}

#[test]
fn s1_a_fenced_write_of_an_older_term_stored_later_is_flagged() {
    // n1's write of term 2 stored at revision 11, after n2's term-9 write at revision 10.
    let r = clean().fenced(520, "n1", 2, 11).check();
    only(&r, Invariant::S1);
    let v = &r.violations[0];
    assert_eq!(v.terms, vec![9, 2]);
    assert!(v.message.contains("revision 11"), "{}", v.message);
}

#[test]
fn s2_a_smaller_or_repeated_promote_token_is_flagged() {
    let h = H::trial(1000)
        .start(0, "n1")
        .start(0, "n2")
        .promote(10, "n1", 5, 900)
        .demote(100, "n1", 5)
        .promote(200, "n2", 3, 1100)
        .demote(300, "n2", 3);
    let r = h.check();
    only(&r, Invariant::S2);
    let h = H::trial(1000)
        .start(0, "n1")
        .start(0, "n2")
        .promote(10, "n1", 5, 900)
        .demote(100, "n1", 5)
        .promote(200, "n2", 5, 1100)
        .demote(300, "n2", 5);
    let r = h.check();
    only(&r, Invariant::S2);
    assert!(r.violations[0].message.contains("again"));
}

#[test]
fn s3_one_revision_claimed_by_two_nodes_is_flagged() {
    let r = clean().write(700, "n1", 9, OpKind::Renew, 9).check();
    // (n1 renews nothing it holds here: only the revision claim is at stake)
    assert!(r.has(Invariant::S3), "{}", r.render_text());
    let v = r
        .violations
        .iter()
        .find(|v| v.invariant == Invariant::S3)
        .expect("S3");
    assert_eq!(v.nodes, vec!["n2".to_string(), "n1".to_string()]);
}

#[test]
fn s4_overlapping_terms_are_flagged_and_a_lapsed_deadline_ends_acting() {
    // n2 promotes at 400 ms while n1's term (deadline `n1_deadline`) is open.
    let overlap = |n1_deadline| {
        H::trial(1000)
            .start(0, "n1")
            .start(0, "n2")
            .promote(10, "n1", 2, n1_deadline)
            .promote(400, "n2", 9, 1300)
            .demote(450, "n1", 2)
            .demote(800, "n2", 9)
            .stop(900, "n1")
            .stop(900, "n2")
            .check()
    };
    let r = overlap(910);
    only(&r, Invariant::S4);
    let v = &r.violations[0];
    assert_eq!(v.terms, vec![2, 9]);
    assert!((v.at_ms - 400.0).abs() < 0.01 && v.until_ms == Some(450.0));
    // The same, but n1's deadline (300 ms) passed before n2's promote: n1 stopped acting at
    // its deadline even though its demote is stamped late (a slow or paused process).
    let r = overlap(300);
    assert!(r.is_clean(), "{}", r.render_text());
}

#[test]
fn s5_acts_after_the_deadline_or_outside_a_term_are_flagged() {
    let r = clean().act(1200, "n1", 2, 99).check();
    assert!(r.has(Invariant::S5), "{}", r.render_text());
    let h = H::trial(1000)
        .start(0, "n1")
        .promote(10, "n1", 2, 300)
        .act(299, "n1", 2, 1)
        .act(301, "n1", 2, 2)
        .demote(350, "n1", 2)
        .stop(400, "n1");
    let r = h.check();
    only(&r, Invariant::S5);
    assert_eq!(r.violations.len(), 1, "{}", r.render_text());
    assert!(r.violations[0].message.contains("after its deadline"));
}

#[test]
fn s6_unclosed_or_mismatched_terms_are_flagged() {
    // Promote twice without a demote.
    let h = H::trial(1000)
        .start(0, "n1")
        .promote(10, "n1", 2, 300)
        .promote(400, "n1", 5, 1300)
        .demote(500, "n1", 5)
        .stop(600, "n1");
    only(&h.check(), Invariant::S6);
    // A clean stop with a term still open.
    let h = H::trial(1000)
        .start(0, "n1")
        .promote(10, "n1", 2, 900)
        .stop(600, "n1");
    only(&h.check(), Invariant::S6);
    // A demote of another token.
    let h = H::trial(1000)
        .start(0, "n1")
        .promote(10, "n1", 2, 900)
        .demote(100, "n1", 3)
        .demote(110, "n1", 2)
        .stop(600, "n1");
    only(&h.check(), Invariant::S6);
}

#[test]
fn a_crashed_node_closes_its_term_at_the_kill_and_is_not_an_s6_violation() {
    // n1 is killed at 300 ms (its last recorded event is at 250 ms); n2 takes over after the
    // lease (renew sent at 250 ms + 1 s) ran out.
    let h = H::trial(1000)
        .start(0, "n1")
        .start(0, "n2")
        .write(9, "n1", 1, OpKind::Acquire, 2)
        .promote(10, "n1", 2, 910)
        .write(250, "n1", 2, OpKind::Renew, 4)
        .renew(251, "n1", 2, 1150)
        .fault(300, "sigkill", "n1", Phase::Start)
        .write(1260, "n2", 1, OpKind::Acquire, 7)
        .promote(1262, "n2", 7, 2160)
        .demote(1500, "n2", 7)
        .stop(1501, "n2");
    let r = h.check();
    assert!(r.is_clean(), "{}", r.render_text());
    let f = &r.stats.failovers[0];
    assert_eq!((f.holder.as_str(), f.fault.as_str()), ("n1", "sigkill"));
    assert!((f.duration_ms.expect("promoted") - 962.0).abs() < 0.01);
    assert!((f.after_expiry_ms.expect("lease") - 12.0).abs() < 0.01);
    // n1's acting ended at the kill (300 ms), not at its deadline.
    assert!((r.terms[0].end_ms - 300.0).abs() < 0.01, "{:?}", r.terms);
}

#[test]
fn l1_a_takeover_long_after_the_lease_ran_out_is_flagged() {
    // As above, but n2 only takes over 1.5 s after the lease ran out (a key without TTL,
    // found by the followers' backstop).
    let h = H::trial(1000)
        .start(0, "n1")
        .start(0, "n2")
        .promote(10, "n1", 2, 910)
        .write(250, "n1", 2, OpKind::Renew, 4)
        .renew(251, "n1", 2, 1150)
        .fault(300, "sigkill", "n1", Phase::Start)
        .promote(2750, "n2", 7, 3650)
        .demote(3000, "n2", 7)
        .stop(3001, "n2");
    let r = h.check();
    only(&r, Invariant::L1);
    assert!(r.violations[0].message.contains("did not expire"));
}

#[test]
fn l1_a_long_vacancy_after_the_last_fault_is_flagged_unless_nobody_could_take_over() {
    let base = || {
        H::trial(1000)
            .start(0, "n1")
            .start(0, "n2")
            .promote(10, "n1", 2, 910)
            .demote(100, "n1", 2)
            .fault(150, "server_kill", "s1", Phase::Start)
            .fault(400, "server_restart", "s1", Phase::End)
    };
    // Bound: TTL + 1500 = 2500 ms after the heal at 400 ms.
    let r = base()
        .promote(3500, "n2", 9, 4400)
        .demote(3600, "n2", 9)
        .stop(3700, "n1")
        .stop(3700, "n2")
        .check();
    only(&r, Invariant::L1);
    let r = base()
        .promote(2000, "n2", 9, 2900)
        .demote(2100, "n2", 9)
        .stop(2200, "n1")
        .stop(2200, "n2")
        .check();
    assert!(r.is_clean(), "{}", r.render_text());
    // Both candidates paused for the whole vacancy: nobody could take over.
    let r = base()
        .fault(120, "sigstop", "n1", Phase::Start)
        .fault(120, "sigstop", "n2", Phase::Start)
        .fault(3400, "sigcont", "n1", Phase::End)
        .fault(3400, "sigcont", "n2", Phase::End)
        .promote(3500, "n2", 9, 4400)
        .demote(3600, "n2", 9)
        .stop(3700, "n1")
        .stop(3700, "n2")
        .check();
    assert!(r.is_clean(), "{}", r.render_text());
}

#[test]
fn l3_a_demotion_in_the_steady_window_is_flagged() {
    let mut h = clean();
    if let Event::Trial(t) = &mut h.0[0].event {
        t.steady_from_ns = Some(at(100));
        t.steady_to_ns = Some(at(450));
    }
    assert!(h.check().is_clean());
    if let Event::Trial(t) = &mut h.0[0].event {
        t.steady_to_ns = Some(at(550));
    }
    only(&h.check(), Invariant::L3);
}

#[test]
fn a_node_with_dropped_events_is_incomplete_and_not_judged_for_s6() {
    let h = H::trial(1000)
        .start(0, "n1")
        .promote(10, "n1", 2, 900)
        .ev(500, "n1", None, Event::Dropped { count: 3 })
        .stop(600, "n1");
    let r = h.check();
    assert!(r.is_clean(), "{}", r.render_text());
    assert_eq!(r.incomplete_nodes, vec!["n1".to_string()]);
}

#[test]
fn a_slowed_clock_is_mapped_to_real_time_and_shows_as_overlap() {
    // n1 runs at half speed: its stamps (and deadline) advance at half the real rate. In its
    // own clock it demotes at its deadline; in real time it acted until 2 × that.
    let mut h = H::trial(1000).ev(
        0,
        "n1",
        None,
        Event::Start {
            roles: vec!["r".into()],
            clock_rate: 0.5,
            real_mono_ns: Some(at(0)),
        },
    );
    h = h
        .start(0, "n2")
        .promote(10, "n1", 2, 460) // real: 20 .. 920
        .act(400, "n1", 2, 1) // real: 800
        .demote(455, "n1", 2) // real: 910
        .promote(700, "n2", 9, 1600)
        .demote(1000, "n2", 9)
        .stop(1100, "n2")
        .ev(600, "n1", None, Event::Stop); // real: 1200
    let r = h.check();
    only(&r, Invariant::S4);
    assert!((r.violations[0].at_ms - 700.0).abs() < 0.01);
    assert!(r.notes.iter().any(|n| n.contains("faketime")));
    // At rate 1 the same stamps are clean.
    if let Event::Start { clock_rate, .. } = &mut h.0[1].event {
        *clock_rate = 1.0;
    }
    assert!(h.check().is_clean(), "{}", h.check().render_text());
}

#[test]
fn vacancies_count_acquire_attempts_of_every_node() {
    let h = clean()
        .ev(
            495,
            "n3",
            Some("r"),
            Event::Invoke {
                op: 1,
                kind: OpKind::Acquire,
                expected: 0,
            },
        )
        .ev(
            501,
            "n3",
            Some("r"),
            Event::Invoke {
                op: 2,
                kind: OpKind::Acquire,
                expected: 0,
            },
        );
    let r = h.check();
    // Vacancy before n1's term: n1's acquire; between the terms: n2's and n3's second one.
    let counts: Vec<u64> = r
        .stats
        .vacancies
        .iter()
        .map(|v| v.acquire_attempts)
        .collect();
    assert_eq!(counts, vec![1, 2], "{:?}", r.stats.vacancies);
    assert_eq!(r.stats.cas_per_vacancy(), Some(1.5));
}

/// The HTML timeline of such a report is `timeline.rs`'s test (the timeline uses the checker's
/// report, not the other way).
#[test]
fn reports_render_as_json_and_text_with_the_violation() {
    let r = clean().act(1200, "n1", 2, 99).check();
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).expect("json");
    assert_eq!(json["violations"][0]["invariant"], "S5");
    assert_eq!(json["violations"][0]["role"], "r");
    let text = r.render_text();
    assert!(text.contains("S5 role=r nodes=n1 terms=[2]"), "{text}");
    assert!(text.contains("act"), "context lines: {text}");
}

// ----- property tests: generated correct histories, and each rule broken on purpose ---------

mod generated {
    use super::*;
    use proptest::prelude::*;

    /// How a generated term ends.
    #[derive(Debug, Clone, Copy)]
    enum End {
        /// Graceful release: the next holder follows within a few ms.
        Release,
        /// The holder is killed: the next one follows when the lease ran out.
        Kill,
    }

    #[derive(Debug, Clone)]
    struct Plan {
        nodes: usize,
        /// Per term: holder index, length in heartbeats (1..), how it ends.
        terms: Vec<(usize, u64, End)>,
    }

    fn plan() -> impl Strategy<Value = Plan> {
        (2usize..5).prop_flat_map(|nodes| {
            let term = (
                0..nodes,
                1u64..8,
                prop_oneof![Just(End::Release), Just(End::Kill)],
            );
            prop::collection::vec(term, 1..8).prop_map(move |terms| Plan { nodes, terms })
        })
    }

    const TTL: u64 = 1000;
    const HB: u64 = 250;
    const LL: u64 = 900; // local lease: TTL × 0.9

    /// A correct history following `plan` (times in ms); killed nodes restart 50 ms later.
    fn build(plan: &Plan) -> H {
        let mut h = H::trial(TTL);
        for n in 0..plan.nodes {
            h = h.start(0, &format!("n{n}"));
        }
        let (mut t, mut rev, mut write) = (10u64, 1u64, 0u64);
        let mut last = 0usize;
        for (i, &(holder, beats, end)) in plan.terms.iter().enumerate() {
            // A killed holder never holds again in this plan: pick another node if needed.
            let holder = if i > 0 && holder == last {
                (holder + 1) % plan.nodes
            } else {
                holder
            };
            let node = format!("n{holder}");
            let term = rev;
            h = h.write(t, &node, 1, OpKind::Acquire, term);
            let mut send = t;
            h = h.promote(t + 1, &node, term, send + LL);
            rev += 1;
            let mut now = t + 2;
            for _ in 0..beats {
                // Acts every 100 ms until the next renewal.
                for k in 0..2 {
                    write += 1;
                    h = h.act(now + k * 100, &node, term, write).fenced(
                        now + k * 100 + 1,
                        &node,
                        term,
                        rev,
                    );
                    rev += 1;
                }
                send += HB;
                h = h.write(send, &node, 2, OpKind::Renew, rev);
                h = h.renew(send + 2, &node, term, send + LL);
                rev += 1;
                now = send + 3;
            }
            match end {
                End::Release => {
                    h = h.demote(now + 5, &node, term);
                    t = now + 8;
                }
                End::Kill => {
                    h = h.fault(now + 5, "sigkill", &node, Phase::Start);
                    // The lease ran out at the last renewal's send + TTL; take over 50 ms later.
                    t = send + TTL + 50;
                    h = h.start(now + 60, &node);
                }
            }
            last = holder;
        }
        h.promote(t + 1, "n0", rev + 1, t + LL)
            .demote(t + 100, "n0", rev + 1)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn correct_histories_check_clean(plan in plan()) {
            let r = build(&plan).check();
            prop_assert!(r.is_clean(), "{}", r.render_text());
        }

        #[test]
        fn a_promote_inside_the_previous_term_is_flagged(plan in plan()) {
            let mut h = build(&plan);
            // Move the second-to-last promote (of the last planned term) 30 ms before the
            // previous term's end: n0's final promote is the last record's predecessor.
            let idx = h.0.iter().rposition(|r| matches!(r.event, Event::Promote { .. }))
                .expect("a promote");
            let prev_end = h.0[..idx].iter().rev().find_map(|r| match r.event {
                Event::Demote { .. } => Some(r.mono_ns),
                Event::Fault { .. } => Some(r.mono_ns),
                _ => None,
            }).expect("an end");
            h.0[idx].mono_ns = prev_end - 30 * MSN;
            let r = h.check();
            prop_assert!(r.has(Invariant::S4) || r.has(Invariant::S2) || r.has(Invariant::S6),
                "{}", r.render_text());
        }

        #[test]
        fn a_late_act_is_flagged(plan in plan()) {
            let mut h = build(&plan);
            let i = h.0.iter().position(|r| matches!(r.event, Event::Act { .. }));
            if let Some(i) = i {
                // The act happens 1 s after its term's promote deadline was extended last.
                h.0[i].mono_ns += 5_000 * MSN;
                let r = h.check();
                prop_assert!(r.has(Invariant::S5), "{}", r.render_text());
            }
        }

        #[test]
        fn swapped_fenced_revisions_across_terms_are_flagged(plan in plan()) {
            let h = build(&plan);
            let writes: Vec<usize> = h.0.iter().enumerate()
                .filter(|(_, r)| matches!(r.event, Event::FencedWrite { .. }))
                .map(|(i, _)| i).collect();
            let term_of = |i: usize| match h.0[i].event {
                Event::FencedWrite { term, .. } => term,
                _ => 0,
            };
            let first = writes.first().copied();
            let other = writes.iter().copied().find(|&i| Some(term_of(i)) != first.map(term_of));
            if let (Some(a), Some(b)) = (first, other) {
                let mut h = h;
                let rev = |r: &Record| match r.event {
                    Event::FencedWrite { revision, .. } => revision,
                    _ => None,
                };
                let (ra, rb) = (rev(&h.0[a]), rev(&h.0[b]));
                if let Event::FencedWrite { revision, .. } = &mut h.0[a].event { *revision = rb; }
                if let Event::FencedWrite { revision, .. } = &mut h.0[b].event { *revision = ra; }
                let r = h.check();
                prop_assert!(r.has(Invariant::S1), "{}", r.render_text());
            }
        }
    }
}

#[test]
fn a_fault_the_holder_rides_out_is_not_a_fail_over() {
    // A 200 ms proxy stall: n1 keeps renewing afterwards and holds until 3 s.
    let h = H::trial(1000)
        .start(0, "n1")
        .start(0, "n2")
        .promote(10, "n1", 2, 910)
        .fault(300, "proxy_stall", "n1", Phase::Start)
        .fault(500, "proxy_stall", "n1", Phase::End)
        .renew(700, "n1", 2, 1500)
        .renew(1400, "n1", 2, 2200)
        .renew(2100, "n1", 2, 2900)
        .demote(2800, "n1", 2)
        .promote(2810, "n2", 9, 3700)
        .demote(3000, "n2", 9)
        .stop(3001, "n1")
        .stop(3001, "n2");
    let r = h.check();
    assert!(r.is_clean(), "{}", r.render_text());
    assert!(r.stats.failovers.is_empty(), "{:?}", r.stats.failovers);
    assert_eq!(r.stats.ridden_out, 1);
}

/// n1 runs an `exec` child in term 2 (promote 10 ms, deadline 910 ms, released at 500 ms);
/// n2 promotes term 9 at 502 ms.
fn with_child(start_ms: u64, stop_ms: Option<u64>) -> H {
    let h = H::trial(1000)
        .start(0, "n1")
        .start(0, "n2")
        .promote(10, "n1", 2, 910)
        .child_start(start_ms, "n1", 2, 4242)
        .demote(480, "n1", 2);
    let h = match stop_ms {
        Some(ms) => h.child_stop(ms, "n1", 2, 4242),
        None => h,
    };
    h.promote(502, "n2", 9, 1400)
        .stop(600, "n1")
        .demote(900, "n2", 9)
        .stop(901, "n2")
}

#[test]
fn exec_children_are_judged_like_leader_work() {
    // Stopped after the demote but before the next holder's promote: clean.
    let r = with_child(20, Some(495)).check();
    assert!(r.violations.is_empty(), "{}", r.render_text());
    assert_eq!(r.stats.child_runs, 1);
    // Still running when n2 promoted: both held the role (S4).
    let r = with_child(20, Some(560)).check();
    only(&r, Invariant::S4);
    // Started outside its term's validity: S5.
    let h = H::trial(1000)
        .start(0, "n1")
        .promote(10, "n1", 2, 300)
        .child_start(310, "n1", 2, 7)
        .child_stop(320, "n1", 2, 7)
        .demote(350, "n1", 2)
        .stop(400, "n1");
    let r = h.check();
    only(&r, Invariant::S5);
    assert!(
        r.violations
            .iter()
            .any(|v| v.message.contains("after its deadline")),
        "{}",
        r.render_text()
    );
    // Stopped past the term's deadline (a renewal while draining moves it): S5.
    let h = H::trial(1000)
        .start(0, "n1")
        .promote(10, "n1", 2, 300)
        .child_start(20, "n1", 2, 7)
        .demote(100, "n1", 2)
        .renew(150, "n1", 2, 400)
        .child_stop(390, "n1", 2, 7)
        .stop(400, "n1");
    assert!(
        h.check().violations.is_empty(),
        "{}",
        h.check().render_text()
    );
    let h = H::trial(1000)
        .start(0, "n1")
        .promote(10, "n1", 2, 300)
        .child_start(20, "n1", 2, 7)
        .demote(100, "n1", 2)
        .child_stop(390, "n1", 2, 7)
        .stop(400, "n1");
    only(&h.check(), Invariant::S5);
    // No stop record although the node stopped: it may still run (S5), and it overlaps n2's
    // term (S4).
    let r = with_child(20, None).check();
    assert!(r.has(Invariant::S5), "{}", r.render_text());
    assert!(r.has(Invariant::S4), "{}", r.render_text());
}

/// A child killed past the term's last recorded deadline is S5 whatever its watchdog held;
/// the message says which deadline that was, so that a watchdog late to kill (it held the
/// term's deadline less its lead) is told apart from one handed a later deadline than the
/// history records.
#[test]
fn a_child_killed_past_the_deadline_is_reported_with_its_watchdog_s_deadline() {
    let killed = |stop_ms: u64, kill_deadline_ms: u64| {
        H::trial(1000)
            .start(0, "n1")
            .promote(10, "n1", 2, 300)
            .child_start(20, "n1", 2, 7)
            .child_killed_at_deadline(stop_ms, "n1", 2, 7, kill_deadline_ms)
            .demote(400, "n1", 2)
            .stop(401, "n1")
            .check()
    };
    // Killed by its watchdog at the deadline less the lead: clean.
    let r = killed(251, 250);
    assert!(r.violations.is_empty(), "{}", r.render_text());
    // Handed a deadline the history never recorded (one renewal later).
    let r = killed(701, 700);
    only(&r, Invariant::S5);
    assert!(
        r.violations.iter().any(|v| v
            .message
            .contains("ran 401.000 ms past the term's deadline (its watchdog held the kill deadline 400.000 ms after it)")),
        "{}",
        r.render_text()
    );
    // Late to kill at the deadline it held.
    let r = killed(340, 250);
    only(&r, Invariant::S5);
    assert!(
        r.violations.iter().any(|v| v
            .message
            .contains("(its watchdog held the kill deadline 50.000 ms before it)")),
        "{}",
        r.render_text()
    );
}

impl H {
    /// Records added by `build` carry the process incarnation `inc`.
    fn proc(self, inc: &str, build: impl FnOnce(H) -> H) -> H {
        let from = self.0.len();
        let mut h = build(self);
        for r in &mut h.0[from..] {
            r.inc = Some(inc.to_owned());
        }
        h
    }
}

/// Two processes with the node name n1: p1 runs a child in term 2 (deadline 910 ms) and is
/// paused; p2, a restart with the same instance id, starts at `restart_ms` and promotes term 9
/// 10 ms later with its own child, which stops 500 ms after the restart. p1's watchdog kills
/// p1's child at 860 ms; p1 resumes, demotes at 950 ms and stops.
fn same_name_twice(restart_ms: u64, with_inc: bool) -> H {
    let p1 = |h: H| {
        h.start(0, "n1")
            .promote(10, "n1", 2, 910)
            .child_start(20, "n1", 2, 7)
            .child_stop(860, "n1", 2, 7)
            .demote(950, "n1", 2)
            .stop(960, "n1")
    };
    let p2 = |h: H| {
        h.start(restart_ms, "n1")
            .promote(restart_ms + 10, "n1", 9, restart_ms + 1000)
            .child_start(restart_ms + 20, "n1", 9, 8)
            .child_stop(restart_ms + 500, "n1", 9, 8)
            .demote(restart_ms + 510, "n1", 9)
            .stop(restart_ms + 520, "n1")
    };
    let h = H::trial(1000);
    if with_inc {
        h.proc("p1", p1).proc("p2", p2)
    } else {
        p2(p1(h))
    }
}

/// A killed manager (p1) whose watchdog wrote the child's records late — `child_start` after
/// the restart's (p2's) start on a loaded machine, then `child_stop` (`manager_gone`) before
/// p2's promotion — did not act beside p2: the watchdog's records are another process's, they
/// show the child alive (judged as the child's interval), not the manager. Clean; before,
/// the late `child_start` kept p1's term acting until its deadline (S4 against p2's term).
#[test]
fn a_watchdog_s_late_records_do_not_keep_a_killed_manager_acting() {
    let p1 = |h: H| {
        h.start(0, "n1")
            .promote(10, "n1", 2, 2000)
            .child_start(305, "n1", 2, 7)
            .child_killed(320, "n1", 2, 7, "manager_gone")
    };
    let p2 = |h: H| {
        h.start(300, "n1")
            .promote(330, "n1", 9, 1330)
            .child_start(340, "n1", 9, 8)
            .child_stop(800, "n1", 9, 8)
            .demote(810, "n1", 9)
            .stop(820, "n1")
    };
    let r = H::trial(1000).proc("p1", p1).proc("p2", p2).check();
    assert!(r.is_clean(), "{}", r.render_text());
    // The child really overlapping p2's term is still flagged: its stop after p2's promotion.
    let late_kill = |h: H| {
        h.start(0, "n1")
            .promote(10, "n1", 2, 2000)
            .child_start(305, "n1", 2, 7)
            .child_killed(400, "n1", 2, 7, "manager_gone")
    };
    let r = H::trial(1000).proc("p1", late_kill).proc("p2", p2).check();
    only(&r, Invariant::S4);
}

#[test]
fn s4_judges_two_processes_with_one_node_name_apart() {
    // p2's term began at 310 ms while p1's child ran until 860 ms: two processes acted (until
    // p2's own term ended at 810 ms).
    let r = same_name_twice(300, true).check();
    only(&r, Invariant::S4);
    let v = &r.violations[0];
    assert_eq!(v.nodes, ["n1", "n1"], "{}", r.render_text());
    assert!(
        v.message.contains("n1 (process p1, term 2)")
            && v.message.contains("n1 (process p2, term 9)"),
        "{}",
        r.render_text()
    );
    assert!(
        (v.until_ms.unwrap_or(0.0) - v.at_ms - 500.0).abs() < 1.0,
        "{}",
        r.render_text()
    );
    // Each process keeps its own discipline (S6 per process): nothing else is flagged.
    assert_eq!(r.stats.promotes, 2);
    assert_eq!(r.stats.child_runs, 2);
    // A restart after p1's deadline (its child was gone before): clean.
    let r = same_name_twice(920, true).check();
    assert!(r.is_clean(), "{}", r.render_text());
    // The same records without incarnations (histories recorded before them) are judged as
    // before: one process per node name at a time, split at each start — no S4 between them.
    let r = same_name_twice(300, false).check();
    assert!(!r.has(Invariant::S4), "{}", r.render_text());
    let r = same_name_twice(920, false).check();
    assert!(!r.has(Invariant::S4), "{}", r.render_text());
}
