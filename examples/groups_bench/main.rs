//! Role-group benchmark of the `nats-roles` binary (protocol Q14): one group `shard` on
//! `nats-roles run` processes with placement on, against one real nats-server. Prints a
//! Markdown table per step:
//!
//! 1. 256 shards over 8 instances started together: time until all are held and until the
//!    spread is even (every instance within ±1 of its share, then no holder change for 5 s);
//!    the spread (min / max members per instance) at both;
//! 2. a 9th instance joins: moves (holder changes of members that had a holder) against the
//!    minimum (the members the new instance must receive, ⌊256/9⌋ = 28), time until even;
//! 3. SIGKILL of the busiest instance: per shard, time from the kill until re-held
//!    (p50/p99/max, how many within TTL + 100 ms), also counted from its session's expiry
//!    marker; then the restart of the same id and the moves back;
//! 4. rolling restart of all 9 (SIGTERM, its shards re-held, start again with the same id,
//!    spread even again, next): moves per shard (max, p99; the target is ≤ 2);
//! 5. `nats-roles scale shard 512 --wait`, then `128`: how long each took, time until the
//!    spread is even, moves of the members kept (that exist before and after) against the
//!    minimum.
//!
//! ```text
//! cargo build --release --all-features --example groups_bench --bin nats-roles
//! target/release/examples/groups_bench                          # ≈ 6 min
//! target/release/examples/groups_bench --instances 3 --count 24 # a quick look
//! GROUPS_BENCH_TTL_MS=2000 target/release/examples/groups_bench # another TTL
//! ```
//!
//! The instances run `target/<profile>/nats-roles` beside the example (build both with the
//! same profile and features, as above). Placement uses its defaults (stability window 5 s,
//! leave delay 10 s, claim grace 500 ms, cooldown 30 s, move budget 10/s); TTL 3 s unless
//! `--ttl-ms` / `GROUPS_BENCH_TTL_MS` says otherwise, heartbeat a quarter of it. Holder
//! changes are what the bench's own KV watcher sees (`../scale_bench/observe.rs`), stamped
//! with its monotonic clock. Figures are in docs/benchmarks.md ("Role groups").

// The observer and the /proc and /varz samplers are scale_bench's; not every helper is used.
#[allow(dead_code)]
#[path = "../scale_bench/observe.rs"]
mod observe;
#[allow(dead_code)]
#[path = "../scale_bench/sample.rs"]
mod sample;

mod fleet;
mod measure;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser;

use fleet::{Fleet, QUIET};
use measure::{
    GROUP, histogram, member_index, minimum_moves, moves, pct_usize, per_member, spread_text,
    vacancy_text,
};
use sample::{ms, varz_msgs};

#[derive(Parser, Debug)]
#[command(
    about = "Role groups (protocol Q14) with placement: spread, join, crash, rolling \
                   restart and scaling of one group over nats-roles processes"
)]
struct Args {
    /// Instances started first (one more joins in step 2).
    #[arg(long, default_value_t = 8)]
    instances: usize,
    /// The group's configured count (step 5 scales to twice it, then to half of it).
    #[arg(long, default_value_t = 256)]
    count: usize,
    /// The members' TTL in milliseconds (heartbeat: a quarter of it).
    #[arg(long, env = "GROUPS_BENCH_TTL_MS", default_value_t = 3000)]
    ttl_ms: u64,
    /// The longest wait for a spread to settle, in seconds.
    #[arg(long, default_value_t = 180)]
    limit_secs: u64,
    /// Start the fleet on a bucket it creates (step 1 then includes the young-bucket hold of
    /// TTL + a heartbeat, protocol Q6); by default a first instance without the group creates
    /// it and the fleet starts once it is older than that.
    #[arg(long)]
    fresh_bucket: bool,
}

/// Placement's default leave delay: a member gone without a graceful stop still counts this
/// long, so the bench waits it out before it calls a crash's spread final.
const LEAVE_DELAY: Duration = Duration::from_secs(10);

/// Time from `from` to `to`, in ms, or "NOT settled".
fn since(from: Instant, to: Option<Instant>) -> String {
    to.map_or("NOT settled".to_owned(), |t| {
        ms(Some(t.saturating_duration_since(from)))
    })
}

struct Bench {
    args: Args,
    server: testkit::NatsServer,
    fleet: Fleet,
    ttl: Duration,
    limit: Duration,
    /// The group's count now.
    count: usize,
}

impl Bench {
    /// Server messages in and out so far.
    async fn msgs(&self) -> (u64, u64) {
        varz_msgs(&[&self.server]).await
    }

    async fn msgs_row(&self, before: (u64, u64)) {
        let after = self.msgs().await;
        println!(
            "| server messages in / out during the step | {} / {} |",
            after.0 - before.0,
            after.1 - before.1
        );
    }

    /// Step 2: one more instance joins.
    async fn join(&mut self, id: &str) {
        let msgs = self.msgs().await;
        let before = self.fleet.observer.holders();
        let mut pre = self.fleet.counts(self.count);
        pre.insert(id.to_owned(), 0);
        let minimum = minimum_moves(&pre, self.count);
        let t = Instant::now();
        self.fleet.start_one(id).await;
        let started = t.elapsed();
        let settled = self.fleet.settle(self.count, t, self.limit).await;
        let changes = self.fleet.observer.changes_since(t);
        let mv = moves(&before, &changes);
        let first = changes
            .iter()
            .find(|c| c.holder.as_deref() == Some(id))
            .map(|c| c.at);
        let per = per_member(&mv);
        println!(
            "\n### 2. A {}th instance joins ({} members)\n",
            self.fleet.live.len(),
            self.count
        );
        println!("| measure | value |\n|---|---|");
        println!(
            "| moves (holder changes of held members) / minimum | **{} / {minimum}** |",
            mv.len()
        );
        println!(
            "| members moved more than once | {} |",
            per.values().filter(|n| **n > 1).count()
        );
        println!("| {id} started (manager up) | {} ms |", ms(Some(started)));
        println!("| {id}'s first member | {} ms |", since(t, first));
        println!(
            "| converged (last move before an even spread and {} s quiet) | **{} ms** |",
            QUIET.as_secs(),
            since(t, settled)
        );
        println!(
            "| spread after (min / max per instance) | {} |",
            spread_text(&self.fleet.counts(self.count))
        );
        println!(
            "| vacancy per move p50 / p99 / max ms | {} |",
            vacancy_text(&mv)
        );
        self.msgs_row(msgs).await;
    }

    /// Step 3: SIGKILL of the busiest instance, then its restart under the same id.
    async fn crash(&mut self) {
        let msgs = self.msgs().await;
        let before = self.fleet.observer.holders();
        let (victim, roles) = self.fleet.busiest();
        let t = self.fleet.kill(&victim).await;
        let limit = self.ttl + Duration::from_millis(100);
        let got = self
            .fleet
            .observer
            .retaken(&roles, &victim, t, self.ttl * 5 + Duration::from_secs(10))
            .await;
        let expiry = self
            .fleet
            .observer
            .session_end(&victim, t, self.ttl * 3)
            .await;
        let settled = self.fleet.settle(self.count, t, self.limit).await;
        // A crashed member still counts for the leave delay: what placement does when it
        // ends belongs to this step.
        let after_leave = t + LEAVE_DELAY + Duration::from_secs(1);
        tokio::time::sleep_until(after_leave.into()).await;
        let settled = match settled {
            Some(_) => self.fleet.settle(self.count, t, self.limit).await,
            None => None,
        };
        let mv = moves(&before, &self.fleet.observer.changes_since(t));
        let extra = mv.iter().filter(|m| !roles.contains(&m.role)).count();
        println!("\n### 3. SIGKILL of {victim} ({} shards)\n", roles.len());
        println!(
            "| event | shards | p50 ms | p99 ms | max ms | within TTL + 100 ms | not re-held |"
        );
        println!("|---|---|---|---|---|---|---|");
        println!(
            "{}",
            measure::latency_row(&format!("SIGKILL {victim} → re-held"), &got, limit)
        );
        if let Some(expired) = expiry {
            let offset = expired.saturating_duration_since(t);
            let after: Vec<Option<Duration>> = got
                .iter()
                .map(|d| d.map(|d| d.saturating_sub(offset)))
                .collect();
            println!(
                "{}",
                measure::latency_row(
                    &format!(
                        "… from {victim}'s session expiry marker ({:.0} ms after the kill)",
                        offset.as_secs_f64() * 1000.0
                    ),
                    &after,
                    limit
                )
            );
        } else {
            println!("| (no session expiry marker of {victim} seen) | | | | | | |");
        }
        println!("\n| measure | value |\n|---|---|");
        println!(
            "| moves after the kill (its shards re-held; other members moved) | {} ({}; {extra}) |",
            mv.len(),
            mv.len() - extra
        );
        println!(
            "| even over {} instances (last move, until {} s after the kill) | {} ms |",
            self.fleet.live.len(),
            after_leave.duration_since(t).as_secs(),
            since(t, settled)
        );
        println!(
            "| spread after (min / max) | {} |",
            spread_text(&self.fleet.counts(self.count))
        );
        self.msgs_row(msgs).await;

        let before = self.fleet.observer.holders();
        let mut pre = self.fleet.counts(self.count);
        pre.insert(victim.clone(), 0);
        let minimum = minimum_moves(&pre, self.count);
        let t = Instant::now();
        self.fleet.start_one(&victim).await;
        let settled = self.fleet.settle(self.count, t, self.limit).await;
        let mv = moves(&before, &self.fleet.observer.changes_since(t));
        let back = mv
            .iter()
            .filter(|m| roles.contains(&m.role))
            .filter(|m| self.fleet.observer.holders().get(&m.role) == Some(&victim))
            .count();
        println!(
            "| {victim} restarted: moves / minimum | {} / {minimum} ({back} of them its former shards back to it) |",
            mv.len()
        );
        println!(
            "| {victim} restarted: converged | {} ms |",
            since(t, settled)
        );
        println!(
            "| spread after the restart (min / max) | {} |",
            spread_text(&self.fleet.counts(self.count))
        );
    }

    /// Step 4: every instance in turn: SIGTERM, its shards re-held, start again, even again.
    async fn rolling_restart(&mut self) {
        let msgs = self.msgs().await;
        let before = self.fleet.observer.holders();
        let ids = self.fleet.live.clone();
        let t_all = Instant::now();
        println!(
            "\n### 4. Rolling restart of all {} instances (SIGTERM, shards re-held, start again with the same id, spread even and {} s quiet, next)\n",
            ids.len(),
            QUIET.as_secs()
        );
        println!(
            "| instance | shards | SIGTERM → re-held p50 / p99 / max ms | restart → even ms | moves in its turn |"
        );
        println!("|---|---|---|---|---|");
        let mut not_settled = 0;
        for id in &ids {
            let holders = self.fleet.observer.holders();
            let roles: Vec<String> = holders
                .iter()
                .filter(|(_, h)| *h == id)
                .map(|(r, _)| r.clone())
                .collect();
            let t = self.fleet.terminate(id);
            self.fleet.reap(id).await;
            let got = self
                .fleet
                .observer
                .retaken(&roles, id, t, self.ttl * 5)
                .await;
            let mut d: Vec<Duration> = got.iter().flatten().copied().collect();
            d.sort();
            let back = Instant::now();
            self.fleet.start_one(id).await;
            let settled = self.fleet.settle(self.count, back, self.limit).await;
            if settled.is_none() {
                not_settled += 1;
            }
            let turn = moves(&holders, &self.fleet.observer.changes_since(t));
            println!(
                "| {id} | {} | {} / {} / {}{} | {} | {} |",
                roles.len(),
                ms(sample::pct(&d, 50.0)),
                ms(sample::pct(&d, 99.0)),
                ms(d.last().copied()),
                match got.iter().filter(|g| g.is_none()).count() {
                    0 => String::new(),
                    n => format!(" ({n} NOT re-held)"),
                },
                since(back, settled),
                turn.len()
            );
        }
        let mv = moves(&before, &self.fleet.observer.changes_since(t_all));
        let per = per_member(&mv);
        let all: Vec<usize> = (0..self.count)
            .map(|i| per.get(&format!("{GROUP}-{i}")).copied().unwrap_or(0))
            .collect();
        let max = all.iter().max().copied().unwrap_or(0);
        println!("\n| measure | value |\n|---|---|");
        println!(
            "| moves per shard: max / p99 / p50 (target ≤ 2) | **{max} / {} / {}** |",
            pct_usize(&all, 99.0).unwrap_or(0),
            pct_usize(&all, 50.0).unwrap_or(0)
        );
        println!(
            "| shards by number of moves | {:?} |",
            histogram(&per, self.count)
        );
        println!("| moves in all | {} |", mv.len());
        println!(
            "| vacancy per move p50 / p99 / max ms | {} |",
            vacancy_text(&mv)
        );
        let changes = self.fleet.observer.changes_since(t_all);
        for (role, _) in per.iter().filter(|(_, n)| **n > 2).take(5) {
            let path: Vec<String> = std::iter::once(format!(
                "{} (start)",
                before.get(role).map_or("-", String::as_str)
            ))
            .chain(changes.iter().filter(|c| &c.role == role).filter_map(|c| {
                let h = c.holder.as_ref()?;
                Some(format!(
                    "{h} at {:.1} s",
                    c.at.duration_since(t_all).as_secs_f64()
                ))
            }))
            .collect();
            println!("| {role}'s holders | {} |", path.join(" → "));
        }
        println!(
            "| whole rolling restart | {:.1} s ({not_settled} turns NOT settled) |",
            t_all.elapsed().as_secs_f64()
        );
        println!(
            "| spread after (min / max) | {} |",
            spread_text(&self.fleet.counts(self.count))
        );
        self.msgs_row(msgs).await;
    }

    /// Step 5: `nats-roles scale shard N --wait` for each of `counts`.
    async fn scale(&mut self, counts: &[usize]) {
        println!(
            "\n### 5. `nats-roles scale {GROUP} N --wait` on {} instances\n",
            self.fleet.live.len()
        );
        println!(
            "| count | `scale --wait` returned | even (last move) | kept members moved / minimum | added members moved | removed members taken again | spread after | server msgs in / out |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        let mut lines = Vec::new();
        for &new in counts {
            let msgs = self.msgs().await;
            let old = self.count;
            let kept = old.min(new);
            let before = self.fleet.observer.holders();
            let keep = |r: &String| member_index(r).is_some_and(|i| i < kept);
            let before_kept: BTreeMap<String, String> = before
                .iter()
                .filter(|(r, _)| keep(r))
                .map(|(r, h)| (r.clone(), h.clone()))
                .collect();
            let minimum = minimum_moves(&self.fleet.counts(kept), new);
            let t = Instant::now();
            let wall = time::OffsetDateTime::now_utc();
            let (took, line) = self
                .fleet
                .scale(new, Duration::from_secs(self.args.limit_secs))
                .await;
            self.count = new;
            let at_held = self.fleet.counts(new);
            let settled = self.fleet.settle(new, t, self.limit).await;
            let mut acted: Vec<Duration> =
                self.fleet.acted(wall, new).into_iter().flatten().collect();
            acted.sort();
            let mut first: BTreeMap<String, usize> = BTreeMap::new();
            let mut seen = std::collections::BTreeSet::new();
            for c in self.fleet.observer.changes_since(t) {
                if member_index(&c.role).is_some_and(|i| i >= old && i < new)
                    && let Some(h) = c.holder
                    && seen.insert(c.role)
                {
                    *first.entry(h).or_default() += 1;
                }
            }
            let changes = self.fleet.observer.changes_since(t);
            let (kept_changes, other): (Vec<_>, Vec<_>) =
                changes.into_iter().partition(|c| keep(&c.role));
            let mv = moves(&before_kept, &kept_changes);
            let added = moves(&BTreeMap::new(), &other);
            let added_moves = added
                .iter()
                .filter(|m| member_index(&m.role).is_some_and(|i| i < new))
                .count();
            let retaken = other
                .iter()
                .filter(|c| c.holder.is_some())
                .filter(|c| member_index(&c.role).is_some_and(|i| i >= new))
                .count();
            let after = self.msgs().await;
            println!(
                "| {old} → {new} | {:.2} s | {} ms | **{} / {minimum}** ({} members) | {added_moves} | {} | {} | {} / {} |",
                took.as_secs_f64(),
                since(t, settled),
                mv.len(),
                per_member(&mv).len(),
                if new < old {
                    retaken.to_string()
                } else {
                    "—".to_owned()
                },
                spread_text(&self.fleet.counts(new)),
                after.0 - msgs.0,
                after.1 - msgs.1
            );
            lines.push(format!(
                "{old} → {new}: {line}. Instances that logged the count change: {} of {}, \
                 {} to {} ms after the write; spread when `scale` returned: {}{}",
                acted.len(),
                self.fleet.live.len(),
                ms(acted.first().copied()),
                ms(acted.last().copied()),
                spread_text(&at_held),
                if first.is_empty() {
                    String::new()
                } else {
                    format!("; first holders of the added members: {first:?}")
                }
            ));
        }
        println!("\n`nats-roles scale` said:\n");
        for l in lines {
            println!("- {l}");
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    if args.instances < 2 || !(2..=5000).contains(&args.count) {
        eprintln!("--instances must be at least 2 and --count 2 to 5000");
        std::process::exit(2);
    }
    // Fails loudly when the binary was not built beside the example.
    let bin = testkit::nats_roles_bin();
    eprintln!("instances run {}", bin.display());
    let ttl = Duration::from_millis(args.ttl_ms);
    let limit = Duration::from_secs(args.limit_secs);
    let server = testkit::NatsServer::start().await;
    let url = server.url();
    let ids: Vec<String> = (0..args.instances).map(|i| format!("node-{i}")).collect();
    let count = args.count;
    println!(
        "## Role groups (release build, TTL {} ms, heartbeat {} ms, placement defaults, {} bucket)",
        ttl.as_millis(),
        ttl.as_millis() / 4,
        if args.fresh_bucket {
            "a fresh"
        } else {
            "an existing"
        }
    );

    eprintln!("step 1: {count} shards over {} instances", ids.len());
    let msgs0 = varz_msgs(&[&server]).await;
    let (fleet, t0) = Fleet::start(&url, "groups_bench", ttl, count, &ids, args.fresh_bucket).await;
    let up = t0.elapsed();
    let all_held = fleet.observer.wait_held(count, limit).await;
    let at_held = fleet.counts(count);
    let settled = fleet.settle(count, t0, limit).await;
    let start_moves = moves(&BTreeMap::new(), &fleet.observer.changes_since(t0));
    let mut bench = Bench {
        args,
        server,
        fleet,
        ttl,
        limit,
        count,
    };
    println!(
        "\n### 1. {count} shards over {} instances started together\n",
        ids.len()
    );
    println!("| measure | value |\n|---|---|");
    println!("| every process's manager started | {} ms |", ms(Some(up)));
    println!(
        "| all {count} held (from the first spawn) | **{} ms** |",
        since(t0, all_held)
    );
    println!(
        "| spread when all were held (min / max) | {} |",
        spread_text(&at_held)
    );
    println!(
        "| even spread (last move before ±1 of fair and {} s quiet) | **{} ms** |",
        QUIET.as_secs(),
        since(t0, settled)
    );
    println!(
        "| spread after (min / max) | {} |",
        spread_text(&bench.fleet.counts(count))
    );
    println!("| moves while spreading | {} |", start_moves.len());
    bench.msgs_row(msgs0).await;

    let new_id = format!("node-{}", ids.len());
    eprintln!("step 2: {new_id} joins");
    bench.join(&new_id).await;
    eprintln!("step 3: SIGKILL");
    bench.crash().await;
    eprintln!("step 4: rolling restart");
    bench.rolling_restart().await;
    eprintln!("step 5: scale");
    bench.scale(&[count * 2, count / 2]).await;
    println!();
}
