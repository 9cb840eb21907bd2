//! Negative controls: deliberately broken variants the checker must catch.

use crate::core::backoff::SplitMix64;

use super::check::CheckOpts;
use super::clock::SEC;
use super::kv::KvFlaws;
use super::render::report;
use super::rng::Rng;
use super::scenario::{Fault, FaultKind, LIVENESS_SLACK, Net, Scenario, Target, TimingSpec};
use super::world::{Flaws, run_checked};
use crate::history::Invariant;

/// A fault-free scenario for the negative controls, derived from `seed`: `nodes.0` to
/// `nodes.1` machines, every fault aimed at the holder.
pub(super) fn control_scenario(
    seed: u64,
    nodes: (u64, u64),
    hb_div: u32,
    faults: &[Fault],
) -> Scenario {
    let mut r = Rng(SplitMix64::new(seed ^ 0x00c0_ffee));
    Scenario {
        seed,
        nodes: usize::try_from(r.between(nodes.0, nodes.1 + 1)).unwrap_or(3),
        roles: 1 + usize::try_from(r.next() % 3).unwrap_or(0),
        observer: false,
        immune: false,
        timing: TimingSpec {
            ttl_s: 2 + r.next() % 2,
            hb_div,
            margin_pct: 10,
            op_pct: 40,
            grace_pct: 70,
            jitter_ms: r.next() % 5,
        },
        net: Net::default(),
        drift: r.chance(50),
        no_ttl: false,
        validate: false,
        marker_ttl_ms: None,
        fresh_bucket: false,
        slots: 0,
        faults: faults.to_vec(),
    }
}

pub(super) fn at(permille: u64, kind: FaultKind) -> Fault {
    Fault {
        at_permille: permille,
        kind,
        target: Target::Leader,
    }
}

/// Runs 100 seeds with and without a flaw; returns how many flawed runs broke one of
/// `rules`. The runs without the flaw (and with `opts.ignore_deadline` off) must all pass.
pub(super) fn catch_rate(
    scenario: impl Fn(u64) -> Scenario,
    flaws: Flaws,
    opts: impl Fn(&Scenario) -> CheckOpts,
    rules: &[Invariant],
) -> usize {
    (0..100u64)
        .filter(|&seed| {
            let sc = scenario(seed);
            let opts = opts(&sc);
            let baseline = CheckOpts {
                ignore_deadline: false,
                ..opts
            };
            let (trace, clean) = run_checked(&sc, Flaws::default(), baseline);
            assert!(
                clean.is_empty(),
                "control baseline fails: {}",
                report(&sc, &trace, &clean)
            );
            let (_, found) = run_checked(&sc, flaws, opts);
            let caught = found.iter().any(|v| rules.contains(&v.rule));
            if !caught && std::env::var_os("SIM_SHOW_MISSED").is_some() {
                println!("missed seed {seed}: {found:?}");
            }
            caught
        })
        .count()
}

/// (a) A KV that ignores the expected revision lets several candidates win one vacancy.
#[test]
fn control_plain_put_breaks_exclusivity() {
    let release = FaultKind::Release { cooldown_ms: 0 };
    let faults = [
        at(200, FaultKind::Crash),
        at(400, release),
        at(600, release),
        at(800, release),
    ];
    let flaws = Flaws {
        kv: KvFlaws {
            ignore_cas: true,
            ..KvFlaws::default()
        },
        ..Flaws::default()
    };
    let scenario = |seed| control_scenario(seed, (3, 5), 4, &faults);
    let caught = catch_rate(scenario, flaws, |_| CheckOpts::default(), &[Invariant::S4]);
    println!("plain put: {caught}/100 runs caught");
    assert!(caught >= 95, "only {caught}/100 runs caught");
}

/// (b) A KV that drops the TTL of session renewals never expires a crashed holder's session:
/// fail-over falls back to the session book's backstop (TTL + heartbeat + grace after the last
/// sighting of the session), which the fault-free liveness bound (TTL + slack) rejects.
#[test]
fn control_renew_without_ttl_breaks_liveness() {
    let faults = [
        at(250, FaultKind::Crash),
        at(500, FaultKind::Crash),
        at(750, FaultKind::Crash),
    ];
    let flaws = Flaws {
        kv: KvFlaws {
            no_ttl_on_renew: true,
            ..KvFlaws::default()
        },
        ..Flaws::default()
    };
    // Without drift: a follower clock running fast shortens the backstop's wait in server time.
    let scenario = |seed| Scenario {
        drift: false,
        ..control_scenario(seed, (5, 6), 3, &faults)
    };
    let opts = |sc: &Scenario| CheckOpts {
        liveness: Some(sc.timing.ttl_s * SEC + LIVENESS_SLACK),
        ..CheckOpts::default()
    };
    let caught = catch_rate(scenario, flaws, opts, &[Invariant::L1]);
    println!("renew without TTL: {caught}/100 runs caught");
    assert!(caught >= 95, "only {caught}/100 runs caught");
}

/// (c) Counting a paused holder as acting until it processes its demote (no local deadline)
/// overlaps with the machine that took over after its session expired.
#[test]
fn control_no_local_deadline_breaks_exclusivity() {
    let pause = FaultKind::Pause { ttl_pct: 200 };
    let faults = [at(300, pause), at(650, pause)];
    let scenario = |seed| control_scenario(seed, (3, 5), 4, &faults);
    let opts = |_: &Scenario| CheckOpts {
        ignore_deadline: true,
        ..CheckOpts::default()
    };
    let caught = catch_rate(scenario, Flaws::default(), opts, &[Invariant::S4]);
    println!("no local deadline: {caught}/100 runs caught");
    assert!(caught >= 95, "only {caught}/100 runs caught");
}

/// (d) `ignore-session`: a candidate that takes a role over as soon as it sees another
/// holder, whose session is alive (Q5 ignored), overwrites the acting holder's role key:
/// flagged S4 (the key changes under an acting holder, and the acting intervals overlap).
#[test]
fn control_ignore_session_breaks_exclusivity() {
    let faults = [at(300, FaultKind::Release { cooldown_ms: 0 })];
    let flaws = Flaws {
        ignore_session: true,
        ..Flaws::default()
    };
    let scenario = |seed| control_scenario(seed, (3, 5), 4, &faults);
    let caught = catch_rate(scenario, flaws, |_| CheckOpts::default(), &[Invariant::S4]);
    println!("ignore session: {caught}/100 runs caught");
    assert!(caught >= 95, "only {caught}/100 runs caught");
}

/// (e) `renew-after-loss`: role nodes that never hear of their session's loss, and whose terms
/// the next session's renewals keep extending, go on acting after an operator's eviction of
/// the session, while the others take the roles over at once: flagged S4 (the checker sees the
/// acting intervals overlap and the key change under the acting holder; no S5: the deadlines
/// it hands out are consistent, they just rest on a dead session). In the model an eviction
/// reaches its victim first, so a correct holder stops before anyone takes over.
#[test]
fn control_renew_after_loss_breaks_exclusivity() {
    let faults = [
        at(300, FaultKind::EvictSession),
        at(650, FaultKind::EvictSession),
    ];
    let flaws = Flaws {
        renew_after_loss: true,
        ..Flaws::default()
    };
    let scenario = |seed| control_scenario(seed, (3, 5), 4, &faults);
    let caught = catch_rate(scenario, flaws, |_| CheckOpts::default(), &[Invariant::S4]);
    println!("renew after loss: {caught}/100 runs caught");
    assert!(caught >= 95, "only {caught}/100 runs caught");
}

/// (f) `read-backstop`: the design reaps replaced — after the backstop period the book reads
/// the session key and takes a read that shows it unchanged as the session's end — rests on
/// that one read. A read served by a deposed stream leader (frozen while the holder renews
/// with the new one) shows the key unchanged, and the follower takes the role of a live
/// holder over: flagged S4. The same runs with reaps are clean: the reap's CAS is applied by
/// the stream leader, which refuses it (the key moved), whatever the reads show.
#[test]
fn control_read_backstop_breaks_exclusivity() {
    let faults: Vec<Fault> = (0..4)
        .map(|k| Fault {
            at_permille: 300,
            kind: FaultKind::DeposedLeader { ttl_pct: 250 },
            target: Target::Follower(k),
        })
        .collect();
    let flaws = Flaws {
        read_backstop: true,
        ..Flaws::default()
    };
    let scenario = |seed| control_scenario(seed, (3, 5), 4, &faults);
    let caught = catch_rate(scenario, flaws, |_| CheckOpts::default(), &[Invariant::S4]);
    println!("read backstop: {caught}/100 runs caught");
    assert!(caught >= 90, "only {caught}/100 runs caught");
}

/// (g) `no-bucket-age`: a process that starts right after the bucket was deleted and
/// recreated, without the reset holds (`handle_bucket_age` not called and a key with no entry
/// acquired at once: the code before issue 24 item 3), acquires at once in the empty bucket
/// while the holder of the old bucket acts until its next session renewal: flagged S4. With
/// either hold, the same runs are clean.
#[test]
fn control_no_bucket_age_breaks_exclusivity() {
    let faults = [at(300, FaultKind::ResetBucket { fresh: true })];
    let flaws = Flaws {
        no_bucket_age: true,
        ..Flaws::default()
    };
    let scenario = |seed| control_scenario(seed, (3, 5), 4, &faults);
    let caught = catch_rate(scenario, flaws, |_| CheckOpts::default(), &[Invariant::S4]);
    println!("no bucket age: {caught}/100 runs caught");
    assert!(caught >= 90, "only {caught}/100 runs caught");
}

/// (h) Q8 with rules 4 and 5 off (no successor deletes a member's record, no second tier, no
/// presence TTL): a holder killed together with its successors keeps its record for good, so
/// nobody follows its session key and its roles stay unheld: flagged L1 against the second
/// tier's bound, which the same runs with the rules meet.
#[test]
fn control_no_record_ends_breaks_liveness() {
    let faults = [at(300, FaultKind::CrashWithSuccessors)];
    let flaws = Flaws {
        no_record_ends: true,
        ..Flaws::default()
    };
    let scenario = |seed| control_scenario(seed, (5, 6), 4, &faults);
    let opts = |sc: &Scenario| CheckOpts {
        liveness: Some(sc.second_tier_bound()),
        ..CheckOpts::default()
    };
    let caught = catch_rate(scenario, flaws, opts, &[Invariant::L1]);
    println!("no record ends: {caught}/100 runs caught");
    assert!(caught >= 90, "only {caught}/100 runs caught");
}

/// (i) Without the slot permit (Q15: every slot of a role may acquire whatever its siblings
/// do), a process wins two slots of a role at once: S7. 2–3 processes, 3 slots, holders
/// crash and release.
#[test]
fn control_no_slot_permit_breaks_s7() {
    let release = FaultKind::Release { cooldown_ms: 0 };
    let faults = [
        at(300, FaultKind::Crash),
        at(500, release),
        at(700, release),
    ];
    let flaws = Flaws {
        slot_no_permit: true,
        ..Flaws::default()
    };
    let scenario = |seed| Scenario {
        slots: 3,
        ..control_scenario(seed, (2, 3), 4, &faults)
    };
    let caught = catch_rate(scenario, flaws, |_| CheckOpts::default(), &[Invariant::S7]);
    println!("no slot permit: {caught}/100 runs caught");
    assert!(caught >= 80, "only {caught}/100 runs caught");
}
