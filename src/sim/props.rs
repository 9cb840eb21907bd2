//! The properties, run on random scenarios, and a fixed scenario to replay a failing case.

use proptest::prelude::*;

use crate::core::types::{Action, DemoteReason, ReleaseReason, WriteKind};

use super::check::CheckOpts;
use super::clock::{MS, Nanos, secs};
use super::kv::EntryKind;
use super::render::{render, report};
use super::scenario::{Fault, FaultKind, Net, Scenario, Target, TimingSpec};
use super::strategy::{
    aged_marker_scenario, config, fault_free_scenario, faulty_scenario, foreign_value_scenario,
    graceful_scenario, reset_scenario, slot_scenario, successors_scenario, targeted_config,
};
use super::trace::{Rec, Seen, Trace};
use super::world::{Flaws, HERD_CAP, run_checked};

proptest! {
    #![proptest_config(config())]

    /// S2–S6 and L1's timer rules under every fault the simulation knows.
    #[test]
    fn safe_under_faults(sc in faulty_scenario()) {
        let (trace, violations) = run_checked(&sc, Flaws::default(), sc.check_opts());
        prop_assert!(violations.is_empty(), "{}", report(&sc, &trace, &violations));
    }

    /// S2–S6 plus L1 (fail-over within the bound, prompt stops) when only processes fail.
    #[test]
    fn live_without_network_faults(sc in fault_free_scenario()) {
        let opts = sc.check_opts();
        prop_assert!(opts.liveness.is_some());
        let (trace, violations) = run_checked(&sc, Flaws::default(), opts);
        prop_assert!(violations.is_empty(), "{}", report(&sc, &trace, &violations));
    }
}

proptest! {
    #![proptest_config(targeted_config())]

    /// S2–S7 and L1's timer rules with slots (Q15) when only processes and keys fail (no
    /// network faults): role 0 has 2–3 slots on every process, their permit driven as the
    /// role driver does; S7 (no process acts on two slots of a role at once) is checked with
    /// the others. Not the fail-over bound: a slot needs a process of its own, and crashes
    /// may leave fewer processes than slots.
    /// S2–S7 and L1's timer rules with slots (Q15) under every fault the simulation knows,
    /// network faults included.
    #[test]
    fn slots_safe_under_faults(sc in slot_scenario(true)) {
        let (trace, violations) = run_checked(&sc, Flaws::default(), sc.check_opts());
        prop_assert!(violations.is_empty(), "{}", report(&sc, &trace, &violations));
    }

    #[test]
    fn slots_safe_without_network_faults(sc in slot_scenario(false)) {
        let opts = CheckOpts { liveness: None, stop_bound: None, ..sc.check_opts() };
        let (trace, violations) = run_checked(&sc, Flaws::default(), opts);
        prop_assert!(violations.is_empty(), "{}", report(&sc, &trace, &violations));
    }

    /// Every follower paused while the holder crashes, expiry markers that age out before
    /// they resume: S2–S6, and the role is held again within a backstop period after the last
    /// resume (the followers reap the session they still believe in, learn that the key has
    /// no entry, and reap on revision 0; issue 24 item 6).
    #[test]
    fn live_after_aged_out_markers(sc in aged_marker_scenario()) {
        let opts = CheckOpts {
            liveness: Some(sc.aged_marker_bound()),
            ..sc.check_opts()
        };
        let (trace, violations) = run_checked(&sc, Flaws::default(), opts);
        prop_assert!(violations.is_empty(), "{}", report(&sc, &trace, &violations));
    }

    /// A bucket deleted and recreated while holders act (paused, cut off, or neither) and a
    /// fresh process right after: S2–S6 across the epochs (acting intervals in server time,
    /// tokens `(epoch, term)`), and the roles held again once the new bucket is TTL +
    /// heartbeat old (issue 24 item 3).
    #[test]
    fn safe_and_live_across_bucket_resets(sc in reset_scenario()) {
        let opts = CheckOpts {
            liveness: Some(sc.failover_bound() + sc.max_campaign_delay()),
            stop_bound: None,
            ..sc.check_opts()
        };
        let (trace, violations) = run_checked(&sc, Flaws::default(), opts);
        prop_assert!(violations.is_empty(), "{}", report(&sc, &trace, &violations));
    }

    /// The holder of role 0 killed together with its successors (Q8): S2–S6, and the role
    /// held again within the second tier's bound (a TTL and a backstop period after the
    /// crash: a survivor reads the session key, deletes the record, and every candidate
    /// follows the orphan).
    #[test]
    fn live_when_a_holder_dies_with_its_successors(sc in successors_scenario()) {
        let opts = CheckOpts {
            liveness: Some(sc.second_tier_bound()),
            stop_bound: None,
            ..sc.check_opts()
        };
        let (trace, violations) = run_checked(&sc, Flaws::default(), opts);
        prop_assert!(violations.is_empty(), "{}", report(&sc, &trace, &violations));
    }

    /// Role values naming live sessions of instances that do not act on them, and refused
    /// releases: S2–S6, and every role held again within the fail-over bound after the last
    /// fault (issue 24 items 8 and 9: the named instance takes the value over or lists it as
    /// released in its session, Q4 and Q5 rule 5).
    #[test]
    fn live_with_foreign_role_values_and_refused_releases(sc in foreign_value_scenario()) {
        let opts = sc.check_opts();
        prop_assert!(opts.liveness.is_some());
        let (trace, violations) = run_checked(&sc, Flaws::default(), opts);
        prop_assert!(violations.is_empty(), "{}", report(&sc, &trace, &violations));
    }
}

proptest! {
    #![proptest_config(config())]

    /// A stopped leader deletes its role keys and another machine takes over within
    /// milliseconds (after the herd delay at most).
    #[test]
    fn graceful_stop_hands_over(sc in graceful_scenario()) {
        let (trace, violations) = run_checked(&sc, Flaws::default(), sc.check_opts());
        prop_assert!(violations.is_empty(), "{}", report(&sc, &trace, &violations));
        let jitter = sc.timing.jitter_ms * MS;
        if let Err(e) = check_graceful(&trace, jitter) {
            let window = render(&trace, sc.duration() / 4, sc.duration() / 4 + 100 * MS);
            prop_assert!(false, "{e} in {sc:?}\n{window}");
        }
    }
}

/// The graceful hand-over after the stop in [`graceful_scenario`].
pub(super) fn check_graceful(trace: &Trace, jitter: Nanos) -> Result<(), String> {
    let (n, asked) = trace
        .nodes
        .iter()
        .enumerate()
        .find_map(|(i, node)| {
            node.recs.iter().find_map(|r| match r {
                Rec::Input {
                    g,
                    what: Seen::Stop,
                } if node.role == 0 => Some((i, *g)),
                _ => None,
            })
        })
        .ok_or("no stop was delivered")?;
    let acts = || {
        trace.nodes[n].recs.iter().filter_map(|r| match r {
            Rec::Act { g, action, .. } => Some((*g, &**action)),
            _ => None,
        })
    };
    let released = DemoteReason::Released(ReleaseReason::Shutdown);
    if !acts().any(|(g, a)| {
        g == asked && matches!(a, Action::Demote { reason, drain: true, .. } if *reason == released)
    }) {
        return Err(format!("node {n} did not demote with a drain when stopped"));
    }
    let del = trace.logs[0]
        .iter()
        .find(|e| e.at >= asked && !matches!(e.kind, EntryKind::Put(_)))
        .ok_or("the key was never vacated")?;
    if !matches!(del.kind, EntryKind::Delete) || del.writer != Some((n, WriteKind::Release)) {
        return Err(format!(
            "the key was vacated by {:?} {:?}, not a delete",
            del.kind, del.writer
        ));
    }
    let next = trace
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, node)| *i != n && node.role == 0)
        .flat_map(|(_, node)| node.recs.iter())
        .filter_map(|r| match r {
            Rec::Act { g, action, .. }
                if *g >= del.at && matches!(**action, Action::Promote { .. }) =>
            {
                Some(*g)
            }
            _ => None,
        })
        .min()
        .ok_or("nobody promoted after the delete")?;
    let herd = u64::try_from(HERD_CAP.as_nanos()).unwrap_or(0);
    let bound = jitter + herd + 15 * MS;
    if next - del.at > bound {
        return Err(format!(
            "promote {} after the delete at {}",
            secs(next - del.at),
            secs(del.at)
        ));
    }
    if !acts().any(|(g, a)| g >= del.at && matches!(a, Action::Stopped)) {
        return Err(format!("node {n} never reported Stopped"));
    }
    Ok(())
}

/// A fixed scenario (a leader paused for 1.5 × TTL) that must pass; also a debugging aid: paste
/// the `Scenario` a failing property printed and run
/// `cargo test --lib sim::props::replay -- --nocapture`.
#[test]
fn replay() {
    #[allow(unused_imports)]
    use {FaultKind::*, Target::*};
    let sc = Scenario {
        seed: 1,
        nodes: 3,
        roles: 2,
        observer: false,
        immune: false,
        timing: TimingSpec {
            ttl_s: 3,
            hb_div: 4,
            margin_pct: 10,
            op_pct: 33,
            grace_pct: 66,
            jitter_ms: 1,
        },
        net: Net {
            drop_pct: 5,
            late_pct: 5,
            ..Net::default()
        },
        drift: false,
        no_ttl: false,
        validate: false,
        marker_ttl_ms: None,
        fresh_bucket: false,
        slots: 0,
        faults: vec![Fault {
            at_permille: 300,
            kind: Pause { ttl_pct: 150 },
            target: Leader,
        }],
    };
    let (trace, violations) = run_checked(&sc, Flaws::default(), sc.check_opts());
    println!("{}", report(&sc, &trace, &violations));
    println!("{}", render(&trace, 0, trace.end));
    assert!(
        violations.is_empty(),
        "{}",
        report(&sc, &trace, &violations)
    );
}

/// Issue 24 item 3, found by `safe_under_faults` (finding F1): the bucket is recreated 40 ms
/// into the run, before one process's session was ever written (its writes were lost and
/// slow). Without an epoch check, that process started its session in the new bucket
/// unnoticed; its session book, still the old bucket's, then found the new holder's session
/// "gone" and its takeover overwrote the live holder's role key (S4). The session task
/// confirms the bucket's epoch before its roles hear of a new session (since issue 27: after
/// the start's acknowledgement, see the next case). (A replay of the
/// found run: the flawed variant must still be flagged, or the case no longer tests the
/// check and has to be captured again: it was, with seed 10, when role keys of a bucket in
/// use started holding a delete marker. It runs as the processes did before protocol Q8,
/// `pre_q8`, with the random choices it was captured with: under Q8 it was captured again
/// with seed 97, which no longer reached the window after the next change of whom a process
/// follows.)
#[test]
fn a_session_start_confirms_the_bucket_epoch() {
    let before_q8 = Flaws {
        pre_q8: true,
        ..Flaws::default()
    };
    clean_and_flagged_s4_from(
        &start_check_case(),
        before_q8,
        Flaws {
            no_start_check: true,
            ..before_q8
        },
    );
}

fn start_check_case() -> Scenario {
    #[allow(unused_imports)]
    use {FaultKind::*, Target::*};
    Scenario {
        seed: 10,
        nodes: 5,
        roles: 1,
        observer: false,
        immune: false,
        timing: TimingSpec {
            ttl_s: 2,
            hb_div: 6,
            margin_pct: 12,
            op_pct: 90,
            grace_pct: 94,
            jitter_ms: 6,
        },
        net: Net {
            drop_pct: 18,
            slow_pct: 1,
            slow_write_pct: 16,
            lost_ack_pct: 9,
            stale_pct: 17,
            fail_pct: 2,
            long_drain_pct: 8,
            ..Net::default()
        },
        drift: false,
        no_ttl: false,
        validate: false,
        marker_ttl_ms: None,
        fresh_bucket: false,
        slots: 0,
        faults: vec![
            Fault {
                at_permille: 989,
                kind: Crash,
                target: Leader,
            },
            Fault {
                at_permille: 2,
                kind: ResetBucket { fresh: false },
                target: Leader,
            },
            Fault {
                at_permille: 23,
                kind: RefusedRelease {
                    deny_ms: 463,
                    cooldown_ms: 2647,
                },
                target: Leader,
            },
        ],
    }
}

/// Issue 27, found by `safe_under_faults` in CI: the epoch check of issue 24 (above) ran
/// *before* the session's start write. Process 4 confirmed epoch 1 at 2 ms, the bucket was
/// recreated at 20 ms, and its slow start write landed in epoch 2 at 220 ms unnoticed (its
/// watcher lagged). At 1.66 s its role read a live holder's term (revision 73, process 1's new
/// session); its old session book showed process 1's key with an older uuid at revision 1921
/// — "replaced after the term" in restarted revisions — and its takeover overwrote the live
/// term at 1.774 s, 1.7 ms before the holder learned of it (S4). A check answered after the
/// start was acknowledged proves where it landed: the roles hear of a session only then (Q6).
/// The flawed variant (issue 24's check before the start write) must still be flagged, or the
/// case no longer reaches the window and has to be captured again. It runs as the processes
/// did before protocol Q8 (`pre_q8`: the same random choices as when it was found); with Q8,
/// no seed of 60,000 around this scenario (3–6 processes, the reset at 1–20 ‰, TTL 1–2 s)
/// reached the window (whether Q8 closes it or only makes it rarer was not investigated).
#[test]
fn a_session_is_announced_only_after_its_start_confirmed_the_epoch() {
    let before_q8 = Flaws {
        pre_q8: true,
        ..Flaws::default()
    };
    clean_and_flagged_s4_from(
        &announce_case(),
        before_q8,
        Flaws {
            check_before_start: true,
            ..before_q8
        },
    );
}

fn announce_case() -> Scenario {
    #[allow(unused_imports)]
    use {FaultKind::*, Target::*};
    Scenario {
        seed: 9_892_931_365_568_995_072,
        nodes: 6,
        roles: 3,
        observer: true,
        immune: false,
        timing: TimingSpec {
            ttl_s: 1,
            hb_div: 7,
            margin_pct: 14,
            op_pct: 26,
            grace_pct: 20,
            jitter_ms: 0,
        },
        net: Net {
            drop_pct: 1,
            slow_pct: 1,
            late_pct: 8,
            slow_write_pct: 12,
            lost_ack_pct: 8,
            retry_pct: 1,
            stale_pct: 17,
            fail_pct: 6,
            long_drain_pct: 0,
        },
        drift: false,
        no_ttl: false,
        validate: false,
        marker_ttl_ms: None,
        fresh_bucket: false,
        slots: 0,
        faults: vec![Fault {
            at_permille: 2,
            kind: ResetBucket { fresh: false },
            target: Leader,
        }],
    }
}

/// A replay of a found run: clean as the code is (with `base`, a mode such as `pre_q8`), and
/// flagged S4 with `flawed` (else the case no longer reaches the window it pins and has to be
/// captured again).
fn clean_and_flagged_s4_from(sc: &Scenario, base: Flaws, flawed: Flaws) {
    let (trace, violations) = run_checked(sc, base, sc.check_opts());
    assert!(violations.is_empty(), "{}", report(sc, &trace, &violations));
    let (_, found) = run_checked(sc, flawed, sc.check_opts());
    assert!(
        found
            .iter()
            .any(|v| v.rule == crate::history::Invariant::S4),
        "the replay no longer reaches the window it pins ({flawed:?}): {found:?}"
    );
}

/// Q8, found by `live_after_aged_out_markers` (20,000 cases): of two processes, the follower
/// is paused for 2.7 TTLs; the holder crashes meanwhile, its expiry marker ages out, and a
/// foreign value takes the follower's session key, so the follower starts no session for a
/// backstop period after it resumes and its own member record expires (presence TTL). With
/// a presence that counted an instance live only by its own record, the follower then ranked
/// itself out of the holder's successors, stopped following the holder's key and forgot its
/// sighting; it followed it again only as an orphan when the holder's record expired too,
/// and took the role 9 s after the resume (the bound is a backstop period and three ticks).
/// An instance ranks itself live whatever its own record shows (`Presence::ranking`).
#[test]
fn a_follower_whose_own_record_expired_still_follows_the_holder() {
    #[allow(unused_imports)]
    use {FaultKind::*, Target::*};
    let sc = Scenario {
        seed: 0,
        nodes: 2,
        roles: 1,
        observer: false,
        immune: false,
        timing: TimingSpec {
            ttl_s: 3,
            hb_div: 3,
            margin_pct: 5,
            op_pct: 5,
            grace_pct: 20,
            jitter_ms: 0,
        },
        net: Net::default(),
        drift: false,
        no_ttl: false,
        validate: false,
        marker_ttl_ms: Some(1000),
        fresh_bucket: false,
        slots: 0,
        faults: vec![
            Fault {
                at_permille: 142,
                kind: Pause { ttl_pct: 270 },
                target: Follower(0),
            },
            Fault {
                at_permille: 142,
                kind: ForeignSession,
                target: Follower(0),
            },
            Fault {
                at_permille: 164,
                kind: Crash,
                target: Leader,
            },
        ],
    };
    let opts = CheckOpts {
        liveness: Some(sc.aged_marker_bound()),
        ..sc.check_opts()
    };
    let (trace, violations) = run_checked(&sc, Flaws::default(), opts);
    assert!(
        violations.is_empty(),
        "{}",
        report(&sc, &trace, &violations)
    );
}
