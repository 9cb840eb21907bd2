//! Running one trial: set-up (servers, bucket, nodes), the seeded rounds, the graceful end,
//! and the verdict (the checker's report and what the harness saw).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use nats_roles::tooling::history::{TrialInfo, check_loaded, load_paths, render_html};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use testkit::faults::{HarnessLog, Node, NodeConfig};
use testkit::proxy::{Mode, Proxy};
use testkit::{NatsCluster, NatsServer, connect, connect_with, create_kv};

use super::faults::one_round;
use super::protocol::protocol_pick;
use super::system::{Auth, System};
use super::verdict::{self, RoundNote};
use super::{BUCKET, HERD_NODES, Kind, Outcome, Spec, chaos_root, l1_bound_ms, ms, ttl_ms};

/// Runs one trial to the checker's verdict. Panics only on harness failures (a server or node
/// that does not start), never on a verdict: the caller decides.
pub async fn run(spec: Spec) -> Outcome {
    let started = Instant::now();
    let kind = spec.kind;
    let dir = chaos_root().join(format!("{}-{}-{}", kind.name(), spec.index, spec.seed));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    eprintln!(
        "chaos: trial {} #{} seed={} dir={}",
        kind.name(),
        spec.index,
        spec.seed,
        dir.display()
    );
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let ttl = ttl_ms(kind);
    let clock = match kind {
        Kind::Clock(r) => f64::from(r) / 100.0,
        _ => 1.0,
    };
    let log = HarnessLog::create(
        &dir,
        TrialInfo {
            seed: spec.seed,
            kind: kind.name(),
            ttl_ms: ttl,
            margin: 0.1,
            clock,
            heartbeat_ms: Some(ttl / 4),
            l1_bound_ms: Some(l1_bound_ms(kind)),
            ..TrialInfo::default()
        },
    );

    let (n_nodes, n_shared) = match kind {
        // 50 debug processes (before protocol Q8 every instance watched every session, K²
        // deliveries, and 100 made the watchers lag past the liveness bound on 2 cores). The
        // 100-candidate herd is measured in release builds by `examples/scale_bench`
        // (docs/benchmarks.md, "Scale").
        Kind::Herd => (HERD_NODES, 1),
        Kind::Clock(_) => (2, 1),
        Kind::Endurance => (3, 3),
        // The missing CAS shows only where two claims of one vacancy overlap (about one
        // vacancy in five on this machine): eight roles give each trial some forty vacancies,
        // so that a single trial (the CI run) is flagged whatever the load spreads apart —
        // with two roles a loaded CI run once had none (issue 27).
        Kind::Negative("plain-put") => (3, 8),
        // Three running nodes and a spare (the fresh process of a bucket recreation).
        k if k.protocol() => (4, 3),
        _ => (3, 2),
    };
    let ids: Vec<String> = (0..n_nodes)
        .map(|i| {
            if kind == Kind::Herd {
                format!("h{:03}", i + 1)
            } else {
                format!("n{}", i + 1)
            }
        })
        .collect();
    let auth = kind.protocol().then(|| Auth { nodes: ids.clone() });

    // Servers and the bucket (created by the harness so replicas and markers are as intended).
    let (server, cluster, url, replicas) = if kind.cluster() {
        let cluster = NatsCluster::start(3).await;
        let url = cluster.seed_urls();
        (None, Some(cluster), url, 3)
    } else {
        let config = auth.as_ref().map(|a| a.config(None)).unwrap_or_default();
        let server = NatsServer::start_with_config(&config).await;
        let url = server.url();
        (Some(server), None, url, 1)
    };
    let client = if auth.is_some() {
        connect_with(&url, || {
            async_nats::ConnectOptions::with_user_and_password("admin".into(), "a".into())
        })
        .await
    } else {
        connect(&url).await
    };
    let js = jetstream::new(client);
    let bucket = kv::Config {
        bucket: BUCKET.into(),
        history: 1,
        num_replicas: replicas,
        // The protocol set-up's markers age out after a second (issue 24 B6: a follower that
        // is away longer never sees them).
        limit_markers: Some(Duration::from_secs(if kind.protocol() { 1 } else { 60 })),
        ..Default::default()
    };
    let kv = create_kv(&js, bucket.clone()).await;

    let shared: Vec<String> = (0..n_shared).map(|i| format!("r{i}")).collect();
    let mut roles = shared.clone();
    let mut proxies = BTreeMap::new();
    let mut nodes = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let urls = if let Some(server) = &server
            && kind != Kind::Herd
        {
            let upstream = format!("127.0.0.1:{}", server.port())
                .parse()
                .expect("socket address");
            let proxy = Proxy::start(upstream).await;
            let url = proxy.url();
            proxies.insert(id.clone(), proxy);
            vec![url]
        } else {
            url.split(',').map(str::to_owned).collect()
        };
        let mut node_roles = shared.clone();
        let mut role_ttls = Vec::new();
        if kind.protocol() {
            // A private role in a second TTL class: the node is its only candidate, so
            // "every role held" also says that every node campaigns again.
            let private = format!("p-{id}");
            node_roles.push(private.clone());
            role_ttls.push((private.clone(), 2 * ttl));
            roles.push(private);
        }
        nodes.push(Node::new(NodeConfig {
            id: id.clone(),
            urls,
            user: auth.as_ref().map(|_| (id.clone(), "p".to_owned())),
            bucket: BUCKET.into(),
            replicas,
            roles: node_roles,
            ttl_ms: ttl,
            role_ttls,
            margin: 0.1,
            fenced_interval_ms: 100,
            negative: match kind {
                Kind::Negative(m) => Some(m.to_owned()),
                _ => None,
            },
            clock_rate: match kind {
                Kind::Clock(_) if i == 0 => Some(clock),
                _ => None,
            },
            history: dir.clone(),
        }));
    }
    let spare = kind.protocol().then(|| n_nodes - 1);
    let mut sys = System {
        kind,
        server,
        cluster,
        kv,
        js,
        bucket,
        proxies,
        nodes,
        log,
        roles,
        shared: n_shared,
        ttl_ms: ttl,
        rotation: rng.random_range(0..3),
        auth,
        spare,
        leaving: BTreeSet::new(),
        spans: Vec::new(),
        note: RoundNote {
            round: 0,
            fault: kind,
            primary: None,
            what: String::new(),
            target: String::new(),
        },
        reheld: Vec::new(),
        problems: Vec::new(),
    };

    // Start: for the clock trial the faked node first, so that it holds the role.
    if let Kind::Clock(_) = kind {
        sys.start_node(0).await;
        sys.expect_all_held(Duration::from_secs(20), "of the faked node's start")
            .await;
        sys.start_node(1).await;
    } else if kind == Kind::Herd {
        // Start the herd in batches: 100 debug processes at once would starve 2 cores.
        for chunk in (0..n_nodes).collect::<Vec<_>>().chunks(10) {
            for &i in chunk {
                sys.nodes[i].spawn();
            }
            for &i in chunk {
                sys.nodes[i].wait_ready(Duration::from_secs(60)).await;
            }
        }
    } else {
        let starting: Vec<usize> = (0..n_nodes).filter(|&i| Some(i) != spare).collect();
        for &i in &starting {
            sys.nodes[i].spawn();
        }
        for &i in &starting {
            sys.nodes[i].wait_ready(Duration::from_secs(30)).await;
        }
    }
    sys.expect_all_held(Duration::from_secs(20), "of the start")
        .await;
    // Let the holders renew a few times, so that their histories (flushed every 50 ms) show
    // the terms before the first fault can kill a holder.
    sys.ttls(1.0).await;

    let mut resources = BTreeMap::new();
    let mut recoveries = Vec::new();
    let mut notes = Vec::new();
    for round in 0..spec.rounds {
        let fault = match kind {
            Kind::Mixed => {
                const MIX: [Kind; 7] = [
                    Kind::Sigkill,
                    Kind::Sigstop,
                    Kind::ServerRestart,
                    Kind::ProxyStall,
                    Kind::ProxyReset,
                    Kind::ProxyOneway,
                    Kind::ProxyDelay,
                ];
                MIX[rng.random_range(0..MIX.len())]
            }
            Kind::Endurance => {
                const MIX: [Kind; 5] = [
                    Kind::Sigstop,
                    Kind::ProxyStall,
                    Kind::ProxyReset,
                    Kind::ProxyOneway,
                    Kind::ProxyDelay,
                ];
                MIX[rng.random_range(0..MIX.len())]
            }
            Kind::Protocol => protocol_pick(round),
            Kind::ClusterMix if round.is_multiple_of(2) => Kind::LeaderPause,
            Kind::ClusterMix => Kind::BackstopLeader,
            k => k,
        };
        sys.note = RoundNote {
            round,
            fault,
            primary: None,
            what: String::new(),
            target: String::new(),
        };
        one_round(&mut sys, fault, round, &mut rng).await;
        notes.push(sys.note.clone());
        if matches!(fault, Kind::QuorumLoss | Kind::DiskFull) {
            // one_round returned when the system healed: every role held within 2 × TTL.
            let healed = Instant::now();
            let bound = sys.ttl() * 2;
            if sys
                .expect_all_held(bound, "of the system healing (bound 2 x TTL)")
                .await
            {
                recoveries.push(healed.elapsed());
            }
        }
        let bound = ms(l1_bound_ms(kind)) + Duration::from_secs(10);
        sys.expect_all_held(bound, "of the round's end (L1 bound + 10 s)")
            .await;
        // Settle: every role held again for a while before the next fault (and before the
        // end, so that the checker sees the recovery).
        sys.ttls(1.0).await;
        if kind == Kind::Endurance {
            sys.sample_resources(&mut resources);
        }
    }

    if spec.steady {
        // Settle, then a fault-free window of 10 × TTL with no demotion allowed (L3).
        sys.ttls(2.0).await;
        sys.sample_resources(&mut resources);
        let from = nats_roles::tooling::history::mono_now_ns();
        sys.ttls(10.0).await;
        let to = nats_roles::tooling::history::mono_now_ns();
        sys.sample_resources(&mut resources);
        sys.log.update_trial(|t| {
            t.steady_from_ns = Some(from);
            t.steady_to_ns = Some(to);
        });
    }
    let mut harness_problems = std::mem::take(&mut sys.problems);
    harness_problems.extend(resource_problems(&resources));

    // Graceful end: heal everything, stop every node with SIGTERM.
    for p in sys.proxies.values() {
        p.set_mode(Mode::Pass);
    }
    let stops = sys
        .nodes
        .iter_mut()
        .map(|n| async move {
            let running = n.is_running();
            let status = n.terminate(Duration::from_secs(20)).await;
            (n.id().to_owned(), running, status)
        })
        .collect::<Vec<_>>();
    for (id, running, status) in futures_util::future::join_all(stops).await {
        if running && !status.is_some_and(|s| s.success()) && kind.must_pass() {
            harness_problems.push(format!("node {id} did not exit cleanly: {status:?}"));
        }
    }
    let reheld = std::mem::take(&mut sys.reheld);
    drop(sys);

    // Verdict.
    let loaded = load_paths(std::slice::from_ref(&dir))
        .unwrap_or_else(|e| panic!("load histories of {}: {e}", dir.display()));
    let report = check_loaded(&loaded);
    if kind.must_pass() {
        harness_problems.extend(verdict::problems(&report, &notes, &ids));
    }
    let mut text = report.render_text();
    if !harness_problems.is_empty() {
        text += &format!("\nharness problems:\n  {}\n", harness_problems.join("\n  "));
    }
    let _ = std::fs::write(dir.join("report.txt"), &text);
    let outcome = Outcome {
        spec,
        report,
        dir: dir.clone(),
        elapsed: started.elapsed(),
        resources,
        recoveries,
        reheld,
        harness_problems,
    };
    if !outcome.as_expected() || !outcome.report.is_clean() {
        let _ = std::fs::write(dir.join("timeline.html"), render_html(&outcome.report));
    }
    eprintln!(
        "chaos: trial {} #{} seed={} took {:.1} s: {} violation(s), {} harness problem(s){}",
        kind.name(),
        outcome.spec.index,
        outcome.spec.seed,
        outcome.elapsed.as_secs_f64(),
        outcome.report.violations.len(),
        outcome.harness_problems.len(),
        if outcome.as_expected() {
            ""
        } else {
            " — UNEXPECTED"
        }
    );
    outcome
}

/// RSS must not grow by more than 50 % + 8 MiB and fds by more than 8 between the first and
/// the last sample of a node (only nodes sampled at least 3 times are judged).
fn resource_problems(resources: &BTreeMap<String, Vec<(u64, usize)>>) -> Vec<String> {
    let mut problems = Vec::new();
    for (id, samples) in resources {
        if samples.len() < 3 {
            continue;
        }
        // The first sample is taken after the first round: start-up allocations are done.
        let (rss0, fd0) = samples[0];
        let rss_max = samples.iter().map(|s| s.0).max().unwrap_or(0);
        let fd_max = samples.iter().map(|s| s.1).max().unwrap_or(0);
        if rss_max > rss0 + rss0 / 2 + 8 * 1024 {
            problems.push(format!("{id}: RSS grew from {rss0} KiB to {rss_max} KiB"));
        }
        if fd_max > fd0 + 8 {
            problems.push(format!("{id}: open fds grew from {fd0} to {fd_max}"));
        }
    }
    problems
}
