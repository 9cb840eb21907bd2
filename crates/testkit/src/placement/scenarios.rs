//! The two scenarios (spreading over 3 → 5 → 4 → 3 instances; priority takeover).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::*;

/// One membership change and what it cost.
#[derive(Debug, Clone)]
pub struct Step {
    pub what: &'static str,
    /// Ownership changes after the change.
    pub moves: usize,
    /// Fewest ownership changes that reach spread <= 1 on the new membership.
    pub minimum: usize,
    /// From the change to the last ownership change (spread <= 1 from then on).
    pub converged: Duration,
}

/// What the spreading scenario measured.
#[derive(Debug)]
pub struct SpreadReport {
    pub steps: Vec<Step>,
    /// Vacancies of voluntary hand-overs (joins, graceful leave): delete marker to next put.
    pub voluntary_gaps: Vec<(String, Duration)>,
    /// Vacancies after the crash: expiry marker to next put.
    pub crash_gaps: Vec<(String, bool, Duration)>,
    /// From the SIGKILL to the last of the crashed instance's roles taken over.
    pub crash_takeover: Duration,
    /// Ownership changes during the steady state (`steady`).
    pub steady_churn: usize,
}

/// 60 roles: 3 instances, two join (5), one leaves gracefully (4), one is SIGKILLed (3), then
/// `steady` of steady state. Leadership overlap is checked from the logs before returning.
pub async fn spread_scenario(bin: &Path, url: &str, steady: Duration) -> SpreadReport {
    let dir = fleet_dir();
    let bucket = unique_bucket("place");
    let all = roles(60);
    let role_cfg = without_priority(&all);
    let config = write_config(dir.path(), "all", &bucket, &role_cfg);
    let mut fleet = Fleet::new(bin, url, dir);
    let mut steps: Vec<Step> = Vec::new();
    let step = |what: &'static str,
                before: &BTreeMap<String, Option<String>>,
                t: Instant,
                live: &[&str],
                last: Instant,
                rec: &Recorder| {
        let s = Step {
            what,
            moves: rec.moves_since(t).len(),
            minimum: minimum_moves(before, live),
            converged: last.saturating_duration_since(t),
        };
        eprintln!(
            "{what}: {} moves (minimum {}), converged after {:?}",
            s.moves, s.minimum, s.converged
        );
        s
    };

    let t0 = Instant::now();
    let abc = ["node-a", "node-b", "node-c"];
    for id in abc {
        fleet.start(id, &config);
    }
    let (rec, watch) = Recorder::start_converged(url, &bucket, 60, &abc, t0).await;

    // Two join at once: 20 each -> 12 each.
    let mut live: Vec<&str> = abc.to_vec();
    let before = rec.holders();
    let t = Instant::now();
    fleet.start("node-d", &config);
    fleet.start("node-e", &config);
    live.extend(["node-d", "node-e"]);
    let bound = TTL * 3 + STABILITY * 3;
    let last = converge(&rec, 60, &live, t, Duration::from_secs(1), bound).await;
    steps.push(step("join 3->5", &before, t, &live, last, &rec));
    let voluntary_from = t;

    // A graceful leave: 12 each -> 15 each.
    let before = rec.holders();
    let t = Instant::now();
    fleet.sigterm("node-b").await;
    live.retain(|i| *i != "node-b");
    let bound = TTL * 3 + Duration::from_secs(2);
    let last = converge(&rec, 60, &live, t, Duration::from_secs(1), bound).await;
    steps.push(step("graceful leave 5->4", &before, t, &live, last, &rec));
    let voluntary_gaps = rec
        .gaps_since(voluntary_from)
        .into_iter()
        .filter(|(_, expired, _)| !expired)
        .map(|(r, _, g)| (r, g))
        .collect();

    // A crash: 15 each -> 20 each.
    let before = rec.holders();
    let t = Instant::now();
    fleet.sigkill("node-d").await;
    live.retain(|i| *i != "node-d");
    let bound = TTL * 3 + LEAVE_DELAY * 2;
    let last = converge(&rec, 60, &live, t, Duration::from_secs(1), bound).await;
    steps.push(step("SIGKILL 4->3", &before, t, &live, last, &rec));
    let crash_gaps = rec.gaps_since(t);
    let crash_takeover = rec
        .moves_since(t)
        .iter()
        .map(|c| c.at - t)
        .max()
        .unwrap_or_default();

    // Steady state.
    let steady_from = Instant::now();
    tokio::time::sleep(steady).await;
    let steady_churn = rec.churn_since(steady_from);

    fleet
        .stop_and_check(&["node-a", "node-c", "node-e"], &[])
        .await;
    watch.abort();
    SpreadReport {
        steps,
        voluntary_gaps,
        crash_gaps,
        crash_takeover,
        steady_churn,
    }
}

/// What the priority scenario measured.
#[derive(Debug)]
pub struct PriorityReport {
    /// Roles node-p prefers (priority 10; one of each earlier holder).
    pub wanted: BTreeSet<String>,
    /// The wanted roles that may move (not `takeover: never`).
    pub movable: BTreeSet<String>,
    /// Roles whose owner changed after node-p started.
    pub moved_in: BTreeSet<String>,
    /// From node-p's start to the first move.
    pub first_move: Duration,
    /// From node-p's start until it held every preferred role.
    pub all_moved: Duration,
    /// Vacancies of the moves to node-p: (role, was an expiry, length).
    pub gaps_in: Vec<(String, bool, Duration)>,
    /// Roles whose owner changed after node-p stopped.
    pub moved_back: BTreeSet<String>,
    /// Vacancies of the moves back.
    pub gaps_back: Vec<(String, bool, Duration)>,
    /// From node-p's SIGTERM to the last ownership change.
    pub back_after: Duration,
}

/// 12 roles on 3 instances; node-p starts with priority 10 for one role of each holder, then
/// stops gracefully. With `pin_first`, the holders mark `shard-00` `takeover: never` and
/// node-p wants it too. Leadership overlap is checked from the logs before returning.
pub async fn priority_scenario(bin: &Path, url: &str, pin_first: bool) -> PriorityReport {
    let dir = fleet_dir();
    let bucket = unique_bucket("prio");
    let all = roles(12);
    let role_cfg = without_priority(&all);
    let pinned: &[&str] = if pin_first { &["shard-00"] } else { &[] };
    let config = write_config_pinned(dir.path(), "all", &bucket, &role_cfg, pinned);
    let mut fleet = Fleet::new(bin, url, dir);
    let abc = ["node-a", "node-b", "node-c"];
    let t0 = Instant::now();
    for id in abc {
        fleet.start(id, &config);
    }
    let (rec, watch) = Recorder::start_converged(url, &bucket, 12, &abc, t0).await;

    let holders = rec.holders();
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    let pinned_holder = holders.get("shard-00").cloned().flatten();
    for id in abc {
        let role = if pin_first && pinned_holder.as_deref() == Some(id) {
            "shard-00".to_owned()
        } else {
            holders
                .iter()
                .find(|(_, h)| h.as_deref() == Some(id))
                .map(|(r, _)| r.clone())
                .expect("every instance holds roles")
        };
        wanted.insert(role);
    }
    // The roles node-p can get: a pinned role stays where it is.
    let movable: BTreeSet<String> = wanted
        .iter()
        .filter(|r| !pinned.contains(&r.as_str()))
        .cloned()
        .collect();
    let prio_cfg: Vec<(String, Option<i32>)> =
        wanted.iter().map(|r| (r.clone(), Some(10))).collect();
    let p_config = write_config(fleet.dir.path(), "prio", &bucket, &prio_cfg);
    let t = Instant::now();
    fleet.start("node-p", &p_config);
    let deadline = Instant::now() + Duration::from_secs(15);
    let all_moved = loop {
        let h = rec.holders();
        if movable
            .iter()
            .all(|r| h.get(r).and_then(Option::as_deref) == Some("node-p"))
        {
            break t.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "node-p did not get {movable:?}: {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Anything else that would move does so within a TTL.
    tokio::time::sleep(TTL).await;
    let moved_in: BTreeSet<String> = rec.moves_since(t).into_iter().map(|c| c.role).collect();
    let first_move = rec
        .moves_since(t)
        .iter()
        .map(|c| c.at - t)
        .min()
        .unwrap_or_default();
    let gaps_in = rec.gaps_since(t);

    let t = Instant::now();
    fleet.sigterm("node-p").await;
    let last = converge(
        &rec,
        12,
        &abc,
        t,
        Duration::from_secs(1),
        Duration::from_secs(10),
    )
    .await;
    let moved_back: BTreeSet<String> = rec.moves_since(t).into_iter().map(|c| c.role).collect();
    let gaps_back = rec.gaps_since(t);
    fleet.stop_and_check(&abc, &[]).await;
    watch.abort();
    PriorityReport {
        wanted,
        movable,
        moved_in,
        first_move,
        all_moved,
        gaps_in,
        moved_back,
        gaps_back,
        back_after: last.saturating_duration_since(t),
    }
}
