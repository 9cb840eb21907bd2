//! Proptest strategies: random scenarios.

use proptest::prelude::*;

use super::scenario::{Fault, FaultKind, Net, Scenario, Target, TimingSpec};

pub(super) fn timing_spec() -> impl Strategy<Value = TimingSpec> {
    (
        1u64..=5,
        3u32..=8,
        5u32..=45,
        5u32..=90,
        20u32..=100,
        0u64..=20,
    )
        .prop_map(
            |(ttl_s, hb_div, margin_pct, op_pct, grace_pct, jitter_ms)| TimingSpec {
                ttl_s,
                hb_div,
                margin_pct,
                op_pct,
                grace_pct,
                jitter_ms,
            },
        )
}

pub(super) fn net_faults() -> impl Strategy<Value = Net> {
    let pct = || 0u32..=20;
    let writes = (pct(), pct(), pct(), pct(), pct());
    let others = (pct(), pct(), pct(), pct());
    (writes, others).prop_map(
        |(
            (late_pct, slow_write_pct, lost_ack_pct, retry_pct, fail_pct),
            (drop_pct, slow_pct, stale_pct, long_drain_pct),
        )| Net {
            drop_pct,
            slow_pct,
            late_pct,
            slow_write_pct,
            lost_ack_pct,
            retry_pct,
            stale_pct,
            fail_pct,
            long_drain_pct,
        },
    )
}

/// Fault kinds; `all` adds pauses and disconnects (which void the liveness check).
pub(super) fn fault_kind(all: bool) -> BoxedStrategy<FaultKind> {
    let common = prop_oneof![
        2 => Just(FaultKind::Crash),
        1 => Just(FaultKind::Restart),
        1 => (0u64..=2000).prop_map(|downtime_ms| FaultKind::Reboot { downtime_ms }),
        2 => (0u64..=3000).prop_map(|cooldown_ms| FaultKind::Release { cooldown_ms }),
        1 => Just(FaultKind::Stop),
        2 => (0u64..=500).prop_map(|delay_ms| FaultKind::CampaignDelay { delay_ms }),
    ];
    if all {
        prop_oneof![
            4 => common,
            2 => (50u64..=300).prop_map(|ttl_pct| FaultKind::Pause { ttl_pct }),
            1 => (10u64..=200).prop_map(|ttl_pct| FaultKind::Disconnect { ttl_pct }),
        ]
        .boxed()
    } else {
        common.boxed()
    }
}

pub(super) fn faults(all: bool) -> impl Strategy<Value = Vec<Fault>> {
    let target = prop_oneof![3 => Just(Target::Leader), 1 => (0usize..6).prop_map(Target::Node)];
    let fault =
        (0u64..1000, fault_kind(all), target).prop_map(|(at_permille, kind, target)| Fault {
            at_permille,
            kind,
            target,
        });
    prop::collection::vec(fault, 0..=8)
}

/// The flags of a random scenario: an observer, clock drift, no per-key TTL (30 %),
/// validation.
fn scenario_flags() -> impl Strategy<Value = (bool, bool, bool, bool)> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.3),
        any::<bool>(),
    )
}

/// Everything can go wrong.
pub(super) fn faulty_scenario() -> impl Strategy<Value = Scenario> {
    let flags = scenario_flags();
    (
        (any::<u64>(), 1usize..=3),
        2usize..=6,
        flags,
        timing_spec(),
        net_faults(),
        faults(true),
    )
        .prop_map(
            |((seed, roles), nodes, (observer, drift, no_ttl, validate), timing, net, faults)| {
                Scenario {
                    seed,
                    nodes,
                    roles,
                    observer: observer && nodes > 2,
                    immune: false,
                    timing,
                    net,
                    drift,
                    no_ttl,
                    validate,
                    faults,
                }
            },
        )
}

/// A perfect network; crashes, restarts, releases and stops; one node is never hit.
pub(super) fn fault_free_scenario() -> impl Strategy<Value = Scenario> {
    let flags = scenario_flags();
    (
        (any::<u64>(), 1usize..=3),
        2usize..=6,
        flags,
        timing_spec(),
        faults(false),
    )
        .prop_map(
            |((seed, roles), nodes, (observer, drift, no_ttl, validate), timing, faults)| {
                Scenario {
                    seed,
                    nodes,
                    roles,
                    observer: observer && nodes > 2,
                    immune: true,
                    timing,
                    net: Net::default(),
                    drift,
                    no_ttl,
                    validate,
                    faults,
                }
            },
        )
}

/// A perfect network, fast jitter, and the leader stops at a quarter of the run.
pub(super) fn graceful_scenario() -> impl Strategy<Value = Scenario> {
    (
        (any::<u64>(), 1usize..=3),
        2usize..=6,
        timing_spec(),
        0u64..=5,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |((seed, roles), nodes, timing, jitter_ms, drift, no_ttl)| Scenario {
                seed,
                nodes,
                roles,
                observer: false,
                immune: false,
                timing: TimingSpec {
                    jitter_ms,
                    ..timing
                },
                net: Net::default(),
                drift,
                no_ttl,
                validate: true,
                faults: vec![Fault {
                    at_permille: 250,
                    kind: FaultKind::Stop,
                    target: Target::Leader,
                }],
            },
        )
}

/// Cases per property: 1024 (under a second each in a debug build) unless `PROPTEST_CASES`
/// says otherwise.
pub(super) fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1024)
}

pub(super) fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}
