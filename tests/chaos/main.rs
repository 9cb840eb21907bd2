//! The chaos suite: real nats-server processes, real workload-node processes
//! (`examples/chaos_node`), seeded fault schedules, and the history checker's verdict on every
//! trial (invariants S1-S6, L1-L3 of `docs/reliability.md`).
//!
//! * **CI tier** (`cargo nextest run --test chaos`): one test per fault type, one short trial
//!   each (the issue-24 faults each once, on one fleet); the correct-build tests and
//!   `drop-ttl` run alone, the other broken modes two at a time (see `.config/nextest.toml`).
//!   Safety tests never retry.
//! * **Soak** (`NATS_ROLES_SOAK=1 cargo nextest run --profile soak --test chaos soak
//!   --no-capture`): hundreds of
//!   trials over every fault type, longer schedules, steady-state windows, RSS/fd sampling,
//!   negative-control statistics, and a summary table (see `docs/reliability.md`).
//!   `CHAOS_TRIALS=N` sets the trials per fault type of the soak (and of every CI test);
//!   `CHAOS_ONLY=kind,kind` runs only those kinds of the soak's plan (names as in the table).
//!
//! A correct build's trial passes only when the report is clean **and** every round's fault
//! hit a holder, the rounds that must fail over did, and the holders acted and wrote fenced
//! data (`trial/verdict.rs`); a broken mode passes only when the checker flags the invariant
//! that mode breaks (`Kind::targets`), not any violation.
//!
//! Seeds: every run prints `CHAOS_SEED=<n>`; setting it replays the same schedules (the
//! processes' timing still varies). Each trial keeps its histories under
//! `target/chaos/<kind>-<n>-<seed>/` with `report.txt`, and `timeline.html` when the verdict is
//! not clean.

mod trial;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use trial::{Kind, Outcome, Spec};

/// The run's base seed: `CHAOS_SEED`, else from the clock; printed once.
pub fn base_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let seed = std::env::var("CHAOS_SEED")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("chaos: CHAOS_SEED={seed} (set it to replay these schedules)");
        seed
    })
}

/// Seed of trial `index` of `kind`: a mix of the base seed, the kind's name and the index.
fn trial_seed(kind: Kind, index: usize) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in kind.name().bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut x = base_seed() ^ h ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) % 1_000_000_000
}

fn soak() -> bool {
    std::env::var("NATS_ROLES_SOAK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `CHAOS_ONLY`: the kinds of the soak's plan to run (all when unset).
fn only() -> Option<Vec<String>> {
    std::env::var("CHAOS_ONLY")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.split(',').map(|k| k.trim().to_owned()).collect())
}

fn trials_override() -> Option<usize> {
    std::env::var("CHAOS_TRIALS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
}

/// Runs `trials` trials of `kind` with `rounds` fault rounds each, sequentially.
async fn series(kind: Kind, trials: usize, rounds: usize, steady: bool) -> Vec<Outcome> {
    let mut out = Vec::with_capacity(trials);
    for index in 0..trials {
        let spec = Spec {
            kind,
            seed: trial_seed(kind, index),
            index,
            rounds,
            steady,
        };
        out.push(trial::run(spec).await);
    }
    out
}

/// Panics with the first unexpected verdict (must-pass kinds: every trial clean and without
/// harness problems; broken modes: at least 95 % of trials flagged by a targeted invariant).
fn assert_expected(kind: Kind, outcomes: &[Outcome]) {
    if kind.must_pass() {
        if let Some(bad) = outcomes.iter().find(|o| !o.as_expected()) {
            panic!("{}", bad.failure());
        }
    } else {
        let flagged = outcomes.iter().filter(|o| o.as_expected()).count();
        let needed = (outcomes.len() * 95).div_ceil(100);
        if flagged < needed {
            let missed = outcomes
                .iter()
                .find(|o| !o.as_expected())
                .map(Outcome::failure)
                .unwrap_or_default();
            panic!(
                "{}: only {flagged} of {} trials flagged (need >= 95 %); first miss:\n{missed}",
                kind.name(),
                outcomes.len()
            );
        }
    }
}

/// Runs one CI series (`CHAOS_TRIALS` overrides the trial count) and checks it.
async fn ci(kind: Kind, trials: usize, rounds: usize) {
    let trials = trials_override().unwrap_or(trials);
    let outcomes = series(kind, trials, rounds, false).await;
    eprintln!("{}", table(&outcomes));
    for o in outcomes.iter().filter(|o| !o.recoveries.is_empty()) {
        eprintln!(
            "chaos: {} #{}: every role held again {:?} after the system healed",
            kind.name(),
            o.spec.index,
            o.recoveries
        );
    }
    for o in outcomes.iter().filter(|o| !o.reheld.is_empty()) {
        eprintln!(
            "chaos: {} #{}: every role held again after the fault's end: {:?}",
            kind.name(),
            o.spec.index,
            o.reheld
        );
    }
    assert_expected(kind, &outcomes);
}

// ---------------------------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------------------------

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}

/// The summary table: per trial kind the trials, violations, trials with violations (for
/// broken modes: flagged by a targeted invariant), fail-over p50/p99 per fault (holder's fault
/// → next promote), acquire attempts per vacancy, and for the issue-24 faults the time to every
/// role held again; per node the RSS/fd range of endurance runs.
fn table(outcomes: &[Outcome]) -> String {
    #[derive(Default)]
    struct Row {
        trials: usize,
        violations: usize,
        flagged: usize,
        unexpected: usize,
        secs: f64,
    }
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    let mut failovers: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut attempts: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut resources = Vec::new();
    let mut reheld: BTreeMap<String, (usize, Vec<f64>)> = BTreeMap::new();
    for o in outcomes {
        for (fault, took) in &o.reheld {
            let e = reheld.entry(fault.clone()).or_default();
            match took {
                Some(d) => e.1.push(d.as_secs_f64() * 1000.0),
                None => e.0 += 1,
            }
        }
        let name = o.spec.kind.name();
        let row = rows.entry(name.clone()).or_default();
        row.trials += 1;
        row.violations += o.report.violations.len();
        row.flagged += usize::from(if o.spec.kind.must_pass() {
            !o.report.is_clean()
        } else {
            o.flagged()
        });
        row.unexpected += usize::from(!o.as_expected());
        row.secs += o.elapsed.as_secs_f64();
        if o.spec.kind.must_pass() {
            for f in &o.report.stats.failovers {
                if let Some(d) = f.duration_ms {
                    failovers
                        .entry(format!("{name}/{}", f.fault))
                        .or_default()
                        .push(d);
                }
            }
            // The first vacancy of a trial is the start-up one (every node campaigns at once).
            for v in o.report.stats.vacancies.iter().skip(1) {
                attempts
                    .entry(name.clone())
                    .or_default()
                    .push(v.acquire_attempts as f64);
            }
        }
        for (node, samples) in &o.resources {
            if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
                let rss_max = samples.iter().map(|s| s.0).max().unwrap_or(0);
                let fd_max = samples.iter().map(|s| s.1).max().unwrap_or(0);
                resources.push(format!(
                    "{name} #{} {node}: {} samples, RSS {} -> {} KiB (max {rss_max}), fds {} -> {} (max {fd_max})",
                    o.spec.index,
                    samples.len(),
                    first.0,
                    last.0,
                    first.1,
                    last.1
                ));
            }
        }
    }
    let mut s = String::from(
        "\n| trial kind | trials | violations | trials flagged | unexpected verdicts | time (s) |\n|---|---|---|---|---|---|\n",
    );
    for (name, r) in &rows {
        s += &format!(
            "| {name} | {} | {} | {} | {} | {:.0} |\n",
            r.trials, r.violations, r.flagged, r.unexpected, r.secs
        );
    }
    s += "\n| fail-over (kind/fault) | n | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|\n";
    for (name, mut v) in failovers {
        v.sort_by(f64::total_cmp);
        s += &format!(
            "| {name} | {} | {} | {} | {} |\n",
            v.len(),
            fmt_ms(percentile(&v, 50.0)),
            fmt_ms(percentile(&v, 99.0)),
            fmt_ms(v.last().copied())
        );
    }
    s += "\n| acquire CAS attempts per vacancy (kind) | vacancies | mean | p50 | max |\n|---|---|---|---|---|\n";
    for (name, mut v) in attempts {
        v.sort_by(f64::total_cmp);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        s += &format!(
            "| {name} | {} | {mean:.1} | {} | {} |\n",
            v.len(),
            fmt_ms(percentile(&v, 50.0)),
            fmt_ms(v.last().copied())
        );
    }
    if !reheld.is_empty() {
        s += "\n| issue-24 fault: every role held again after its end | rounds | not within the bound | p50 ms | max ms |\n|---|---|---|---|---|\n";
        for (name, (missed, mut v)) in reheld {
            v.sort_by(f64::total_cmp);
            s += &format!(
                "| {name} | {} | {missed} | {} | {} |\n",
                v.len() + missed,
                fmt_ms(percentile(&v, 50.0)),
                fmt_ms(v.last().copied())
            );
        }
    }
    if !resources.is_empty() {
        s += "\nresources:\n";
        for r in resources {
            s += &format!("  {r}\n");
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// CI tier: one test per fault type
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_holder() {
    ci(Kind::Sigkill, 1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_of_the_holder_longer_than_the_ttl() {
    ci(Kind::Sigstop, 1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_kill_and_restart_on_the_same_store() {
    ci(Kind::ServerRestart, 1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_stream_leader_kill() {
    ci(Kind::LeaderKill, 1, 1).await;
}

/// The stream leader paused (SIGSTOP) for 1-3 TTL; then, on the same cluster and fleet (issue
/// 24 item 14), the stream leader steps down while the followers' backstop leader reads (sent
/// on continuing after a stop longer than the backstop period) are in flight, the holder's
/// session live throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_stream_leader_pause_then_change_during_backstop_reads() {
    ci(Kind::ClusterMix, 1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_quorum_loss_and_return() {
    ci(Kind::QuorumLoss, 1, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_then_freed() {
    ci(Kind::DiskFull, 1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_stall_partitions_the_holder() {
    ci(Kind::ProxyStall, 1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_reset_of_the_holders_connections() {
    ci(Kind::ProxyReset, 1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_one_way_partition() {
    ci(Kind::ProxyOneway, 1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_delay_on_the_holders_link() {
    ci(Kind::ProxyDelay, 1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_at_rate_0_9_keeps_lease_discipline() {
    ci(Kind::Clock(90), 1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_at_rate_0_5_is_flagged() {
    ci(Kind::Clock(50), 1, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herd_of_50_candidates_for_one_role() {
    ci(Kind::Herd, 1, 3).await;
}

/// Issue 24 (B6-B9, A3): a foreign session value without TTL, foreign role values naming live
/// non-holder sessions, markers aged out while the followers were stopped, a refused release,
/// a bucket recreated with a fresh process started right after — each once, on one server and
/// one fleet. Every role must be held again within `2 × (ttl + heartbeat + 500 ms) + 1 s` of
/// each fault's end (6.5 s: the private roles' TTL class is 2 s), and the history must check
/// clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_faults_each_once_on_one_fleet() {
    ci(Kind::Protocol, 1, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_plain_put_is_flagged() {
    ci(Kind::Negative("plain-put"), 1, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_drop_ttl_is_flagged() {
    ci(Kind::Negative("drop-ttl"), 1, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_no_local_deadline_is_flagged() {
    ci(Kind::Negative("no-local-deadline"), 1, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_skip_demote_is_flagged() {
    ci(Kind::Negative("skip-demote"), 1, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_ignore_session_is_flagged() {
    // One trial: the flaw shows in every round (the history test in tests/server covers it
    // too); CI time is budgeted.
    ci(Kind::Negative("ignore-session"), 1, 3).await;
}

/// Protocol v2 (Q4): role tasks that never hear of their session's loss (a foreign delete of
/// the session key, each round) and keep their terms on the next session: flagged S4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_renew_after_loss_is_flagged() {
    ci(Kind::Negative("renew-after-loss"), 1, 3).await;
}

// ---------------------------------------------------------------------------------------------
// Soak
// ---------------------------------------------------------------------------------------------

/// Without `NATS_ROLES_SOAK`: a small version of the soak (mixed faults with a steady-state
/// window, and an endurance run with resource sampling) so that its code runs in CI. With it:
/// the full soak over every fault type and the summary table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_mixed_faults_steady_state_and_resources() {
    let mut all = Vec::new();
    if soak() {
        let n = trials_override();
        let only = only();
        let plan: [(Kind, usize, usize, bool); 28] = [
            (Kind::Sigkill, 22, 3, false),
            (Kind::Sigstop, 22, 3, false),
            (Kind::ServerRestart, 12, 2, false),
            (Kind::ProxyStall, 16, 3, false),
            (Kind::ProxyReset, 12, 3, false),
            (Kind::ProxyOneway, 12, 3, false),
            (Kind::ProxyDelay, 12, 3, false),
            (Kind::Mixed, 8, 4, true),
            (Kind::LeaderKill, 4, 1, false),
            (Kind::LeaderPause, 4, 1, false),
            (Kind::QuorumLoss, 4, 1, false),
            (Kind::DiskFull, 8, 2, false),
            (Kind::Clock(90), 10, 2, false),
            (Kind::Clock(50), 5, 1, false),
            (Kind::Herd, 2, 6, false),
            (Kind::Negative("plain-put"), 15, 3, false),
            (Kind::Negative("drop-ttl"), 15, 3, false),
            (Kind::Negative("no-local-deadline"), 15, 3, false),
            (Kind::Negative("skip-demote"), 15, 3, false),
            (Kind::Negative("ignore-session"), 15, 3, false),
            (Kind::Negative("renew-after-loss"), 15, 3, false),
            // Issue 24: each fault alone (several rounds on one fleet), and all five mixed.
            (Kind::ForeignSession, 6, 3, false),
            (Kind::ForeignRole, 6, 3, false),
            (Kind::MarkersAgedOut, 6, 2, false),
            (Kind::RefusedRelease, 6, 2, false),
            (Kind::BucketRecreate, 6, 2, false),
            (Kind::Protocol, 4, 10, false),
            (Kind::BackstopLeader, 6, 3, false),
        ];
        for (kind, trials, rounds, steady) in plan {
            if only.as_ref().is_some_and(|o| !o.contains(&kind.name())) {
                continue;
            }
            let outcomes = series(kind, n.unwrap_or(trials), rounds, steady).await;
            all.extend(outcomes);
            eprintln!("chaos soak so far:{}", table(&all));
        }
        if only
            .as_ref()
            .is_none_or(|o| o.iter().any(|k| k == "endurance"))
        {
            all.extend(series(Kind::Endurance, 1, 40, true).await);
        }
    } else {
        all.extend(series(Kind::Mixed, 1, 3, true).await);
        all.extend(series(Kind::Endurance, 1, 3, false).await);
    }
    let summary = table(&all);
    eprintln!("chaos soak summary (CHAOS_SEED={}):{summary}", base_seed());
    let _ = std::fs::create_dir_all(trial::chaos_root());
    let _ = std::fs::write(trial::chaos_root().join("soak-summary.md"), &summary);
    // Every kind: correct runs clean, broken modes flagged in >= 95 % of trials.
    let mut by_kind: BTreeMap<Kind, Vec<Outcome>> = BTreeMap::new();
    for o in all {
        by_kind.entry(o.spec.kind).or_default().push(o);
    }
    for (kind, outcomes) in &by_kind {
        assert_expected(*kind, outcomes);
    }
}
