//! S7 on synthetic histories: one process's terms on two slots of a role overlap (flagged),
//! follow each other (clean), or two processes hold one slot each (clean).

use super::*;
use crate::history::event::{Event, Record, TrialInfo};

const E: u64 = 7;
const BASE: u64 = 1_000_000_000_000;

fn at(ms: u64) -> u64 {
    BASE + ms * 1_000_000
}

fn trial() -> Vec<Record> {
    vec![Record::harness(
        at(0),
        None,
        Event::Trial(TrialInfo {
            seed: 1,
            kind: "test".into(),
            ttl_ms: 1000,
            margin: 0.1,
            clock: 1.0,
            ..TrialInfo::default()
        }),
    )]
}

fn start(h: &mut Vec<Record>, ms: u64, node: &str) {
    h.push(Record::node(
        at(ms),
        node,
        None,
        Event::Start {
            roles: vec!["idx.0".into(), "idx.1".into()],
            clock_rate: 1.0,
            real_mono_ns: None,
        },
    ));
}

/// `node` holds `role` in `term` from `from` ms to `to` ms (a clean release).
fn term(h: &mut Vec<Record>, node: &str, role: &str, term: u64, from: u64, to: u64) {
    h.push(Record::node(
        at(from),
        node,
        Some(role),
        Event::Promote {
            epoch: E,
            term,
            deadline_ns: at(from + 900),
        },
    ));
    h.push(Record::node(
        at(to),
        node,
        Some(role),
        Event::Demote {
            epoch: E,
            term,
            reason: "shutdown".into(),
            held_ms: None,
        },
    ));
}

fn stop(h: &mut Vec<Record>, ms: u64, node: &str) {
    h.push(Record::node(at(ms), node, None, Event::Stop));
}

#[test]
fn s7_one_process_on_two_slots_at_once_is_flagged() {
    let mut h = trial();
    start(&mut h, 0, "n1");
    term(&mut h, "n1", "idx.0", 2, 10, 500);
    term(&mut h, "n1", "idx.1", 3, 400, 800);
    stop(&mut h, 900, "n1");
    let report = check(&h);
    assert!(report.has(Invariant::S7), "{}", report.render_text());
    assert!(
        report
            .violations
            .iter()
            .all(|v| v.invariant == Invariant::S7),
        "{}",
        report.render_text()
    );
    let v = &report.violations[0];
    assert_eq!(v.nodes, ["n1"]);
    assert_eq!(v.terms, [2, 3]);
    assert!(v.message.contains("two slots of role idx"), "{}", v.message);
}

#[test]
fn s7_consecutive_slots_and_slots_of_two_processes_pass() {
    let mut h = trial();
    start(&mut h, 0, "n1");
    start(&mut h, 0, "n2");
    // n1: slot 0, then slot 1 after its term on slot 0 ended.
    term(&mut h, "n1", "idx.0", 2, 10, 500);
    term(&mut h, "n1", "idx.1", 5, 510, 800);
    // n2 holds slot 1 then slot 0 beside n1: one slot each at any time.
    term(&mut h, "n2", "idx.1", 3, 20, 505);
    term(&mut h, "n2", "idx.0", 4, 505, 850);
    stop(&mut h, 900, "n1");
    stop(&mut h, 900, "n2");
    let report = check(&h);
    assert!(report.violations.is_empty(), "{}", report.render_text());
}

/// Roles whose names only look alike are not slots of one role: `idx` and `idx.0` are the
/// role and its slot, and a role without slots takes no part in S7.
#[test]
fn s7_ignores_roles_that_are_not_slots() {
    let mut h = trial();
    start(&mut h, 0, "n1");
    term(&mut h, "n1", "idx", 2, 10, 500);
    term(&mut h, "n1", "idx.0", 3, 100, 600);
    term(&mut h, "n1", "other", 4, 100, 600);
    stop(&mut h, 900, "n1");
    let report = check(&h);
    assert!(!report.has(Invariant::S7), "{}", report.render_text());
}
