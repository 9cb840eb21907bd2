//! The fault rounds: what one round of each kind does to the system. Each round marks the
//! fault that must hit a holder as its primary fault (`System::primary`); a round that finds
//! no holder to aim at notes a problem and does nothing.

use std::time::Duration;

use nats_roles::InstanceId;
use nats_roles::tooling::history::Phase;
use nats_roles::tooling::presence::{SUCCESSORS, follow_order};
use rand::Rng;
use rand::rngs::StdRng;
use tokio::time::Instant;

use testkit::proxy::{Dir, Mode};

use super::system::System;
use super::{BUCKET, Kind, ms, protocol};

/// One fault round of `fault` (for `Mixed`/`Endurance`, the round's pick).
pub(super) async fn one_round(sys: &mut System, fault: Kind, round: usize, rng: &mut StdRng) {
    match fault {
        Kind::Sigkill => {
            let downtime = rng.random_range(1.2..3.0);
            crash_holder(sys, rng, downtime).await;
        }
        Kind::Sigstop => {
            let Some((i, _)) = sys.holder_target(rng).await else {
                return;
            };
            let id = sys.nodes[i].id().to_owned();
            sys.primary("sigstop", &id);
            sys.nodes[i].pause();
            sys.ttls(rng.random_range(1.5..3.0)).await;
            sys.nodes[i].resume();
            sys.fault("sigcont", &id, Phase::End);
        }
        Kind::ServerRestart => {
            if !sys.wait_all_held(Duration::from_secs(10)).await {
                sys.problem("no holder before the server kill".into());
                return;
            }
            sys.primary("server_kill", "server");
            let server = sys.server.as_mut().expect("single-server trial");
            server.kill();
            sys.ttls(rng.random_range(0.3..2.0)).await;
            let server = sys.server.as_mut().expect("single-server trial");
            server.restart().await;
            sys.fault("server_restart", "server", Phase::End);
        }
        Kind::LeaderKill | Kind::LeaderPause => {
            if !sys.wait_all_held(Duration::from_secs(20)).await {
                sys.problem("no holder before the stream-leader fault".into());
                return;
            }
            let leader = sys.stream_leader().await;
            // Server names (n1..n3) would read as node ids in the history: prefix them.
            let target = format!("server:{leader}");
            let cluster = sys.cluster.as_ref().expect("cluster trial");
            let i = cluster
                .index_of(&leader)
                .unwrap_or_else(|| panic!("stream leader {leader} is not a cluster node"));
            if fault == Kind::LeaderKill {
                sys.primary("leader_kill", &target);
                sys.cluster.as_mut().expect("cluster trial").kill(i);
                tokio::time::sleep(ms(sys.ttl_ms).mul_f64(rng.random_range(1.0..2.5))).await;
                sys.cluster
                    .as_mut()
                    .expect("cluster trial")
                    .restart(i)
                    .await;
                sys.fault("leader_restart", &target, Phase::End);
            } else {
                sys.primary("leader_pause", &target);
                sys.cluster.as_mut().expect("cluster trial").pause(i);
                tokio::time::sleep(ms(sys.ttl_ms).mul_f64(rng.random_range(1.0..3.0))).await;
                sys.cluster.as_mut().expect("cluster trial").resume(i);
                sys.fault("leader_resume", &target, Phase::End);
            }
        }
        Kind::QuorumLoss => {
            if !sys.wait_all_held(Duration::from_secs(20)).await {
                sys.problem("no holder before the quorum loss".into());
                return;
            }
            // Two of three servers die: no stream leader, no meta leader. Returns once the
            // stream has a leader again (quorum back).
            let cluster = sys.cluster.as_ref().expect("cluster trial");
            let first = rng.random_range(0..cluster.len());
            let second = (first + rng.random_range(1..cluster.len())) % cluster.len();
            let targets = format!(
                "server:{}+server:{}",
                cluster.node(first).name(),
                cluster.node(second).name()
            );
            sys.primary("quorum_loss", &targets);
            let cluster = sys.cluster.as_mut().expect("cluster trial");
            cluster.kill(first);
            cluster.kill(second);
            sys.ttls(3.0).await;
            let cluster = sys.cluster.as_mut().expect("cluster trial");
            cluster.spawn_together(&[first, second]);
            // Quorum is back when every node is healthy, they agree on a meta leader, and the
            // bucket's stream has a leader (the survivor may report a stale one until then).
            cluster.wait_ready().await;
            sys.stream_leader().await;
            sys.fault("quorum_back", &targets, Phase::End);
        }
        Kind::DiskFull => {
            if !sys.wait_all_held(Duration::from_secs(10)).await {
                sys.problem("no holder before the disk filled".into());
                return;
            }
            // The operator's disk (or account limit) is full: the stream refuses new bytes.
            let mut stream = sys
                .js
                .get_stream(format!("KV_{BUCKET}"))
                .await
                .expect("bucket stream");
            let info = stream.info().await.expect("stream info").clone();
            let mut config = info.config.clone();
            let before = config.max_bytes;
            config.max_bytes = i64::try_from(info.state.bytes).unwrap_or(i64::MAX).max(1);
            sys.primary("disk_full", "server");
            sys.js
                .update_stream(&config)
                .await
                .expect("lower max_bytes");
            sys.ttls(rng.random_range(2.0..3.0)).await;
            config.max_bytes = before;
            sys.js
                .update_stream(&config)
                .await
                .expect("raise max_bytes");
            sys.fault("disk_freed", "server", Phase::End);
        }
        Kind::ProxyStall => {
            let Some((i, _)) = sys.holder_target(rng).await else {
                return;
            };
            proxy_fault(sys, rng, i, "proxy_stall", Mode::Stall, 1.5..3.0).await;
        }
        Kind::ProxyReset => {
            let Some((i, _)) = sys.holder_target(rng).await else {
                return;
            };
            let id = sys.nodes[i].id().to_owned();
            sys.primary("proxy_reset", &id);
            for _ in 0..rng.random_range(1..4) {
                sys.proxy(i).reset();
                tokio::time::sleep(ms(rng.random_range(50..400))).await;
            }
            sys.fault("heal", &id, Phase::End);
        }
        Kind::ProxyOneway => {
            let Some((i, _)) = sys.holder_target(rng).await else {
                return;
            };
            let dir = if rng.random_bool(0.5) {
                Dir::Up
            } else {
                Dir::Down
            };
            proxy_fault(sys, rng, i, "proxy_oneway", Mode::OneWay(dir), 1.5..3.0).await;
        }
        Kind::ProxyDelay => {
            let Some((i, _)) = sys.holder_target(rng).await else {
                return;
            };
            let delay = Mode::Delay(ms(rng.random_range(50..400)));
            proxy_fault(sys, rng, i, "proxy_delay", delay, 2.0..4.0).await;
        }
        Kind::Clock(_) => clock_round(sys).await,
        Kind::Herd => {
            // In turn: a crash (vacancy by expiry), a graceful stop (vacancy by release), and
            // a crash of the holder together with all its successors (protocol Q8: nobody
            // follows its sessions any more; the members after them must find its end).
            let Some((i, _)) = sys.holder_target(rng).await else {
                return;
            };
            let id = sys.nodes[i].id().to_owned();
            let mut stopped = vec![i];
            match round % 3 {
                0 => {
                    sys.primary("sigkill", &id);
                    sys.nodes[i].kill().await;
                }
                1 => {
                    sys.primary("sigterm", &id);
                    sys.nodes[i].terminate(Duration::from_secs(20)).await;
                }
                _ => {
                    let members: Vec<InstanceId> = sys
                        .nodes
                        .iter()
                        .filter_map(|n| InstanceId::new(n.id()).ok())
                        .collect();
                    let holder = InstanceId::new(id.as_str()).expect("a node id is an instance id");
                    let successors: Vec<usize> = follow_order(&holder, &members)
                        .iter()
                        .take(SUCCESSORS)
                        .map(|s| sys.node_index(s.as_str()))
                        .collect();
                    // Its own fault name: the checker's "the key did not expire" bound (TTL
                    // after the last renewal plus slack) is the one-holder crash's; here the
                    // members after the successors find the end (Q8), within TTL + one
                    // backstop period, which the trial's L1 gap bound covers.
                    sys.primary("sigkill_with_successors", &id);
                    sys.nodes[i].kill().await;
                    for j in successors {
                        let sid = sys.nodes[j].id().to_owned();
                        sys.fault("sigkill", &sid, Phase::Start);
                        sys.nodes[j].kill().await;
                        stopped.push(j);
                    }
                }
            }
            sys.expect_all_held(Duration::from_secs(10), "after the holder stopped")
                .await;
            for j in stopped {
                let sid = sys.nodes[j].id().to_owned();
                sys.start_node(j).await;
                sys.fault("restart", &sid, Phase::End);
            }
        }
        Kind::ForeignSession
        | Kind::ForeignRole
        | Kind::MarkersAgedOut
        | Kind::RefusedRelease
        | Kind::BucketRecreate
        | Kind::BackstopLeader => protocol::round(sys, fault, rng).await,
        Kind::Negative("renew-after-loss") => protocol::session_delete(sys, rng).await,
        Kind::Negative(_) => {
            // One schedule that gives every broken mode its chance: a partition of the holder
            // (deadline discipline), a graceful hand-over (demote, contention) and a crash
            // (expiry), in a seeded order.
            match (round + sys.rotation) % 3 {
                0 => Box::pin(one_round(sys, Kind::ProxyStall, round, rng)).await,
                1 => {
                    let Some((i, _)) = sys.holder_target(rng).await else {
                        return;
                    };
                    let id = sys.nodes[i].id().to_owned();
                    sys.primary("sigterm", &id);
                    sys.nodes[i].terminate(Duration::from_secs(20)).await;
                    sys.ttls(0.5).await;
                    sys.start_node(i).await;
                    sys.fault("restart", &id, Phase::End);
                }
                // Dead for 3 TTLs: longer than the followers' observed-expiry backstop
                // (TTL + heartbeat + 500 ms), so that a lease that does not expire shows as a
                // late fail-over instead of being adopted by the restarted holder.
                _ => crash_holder(sys, rng, 3.0).await,
            }
        }
        Kind::Protocol | Kind::ClusterMix | Kind::Mixed | Kind::Endurance => {
            unreachable!("picked per round")
        }
    }
}

/// The clock round: hand the only role to the faked node (node 0) by stopping the other node
/// gracefully (then restarting it), check that node 0 holds it, and partition node 0 so that
/// its own (slowed) deadline is what ends its acting.
async fn clock_round(sys: &mut System) {
    let role = sys.roles[0].clone();
    let faked = sys.nodes[0].id().to_owned();
    let holder = sys.held_by(&role).await;
    if holder.as_deref() != Some(faked.as_str()) {
        let other = sys.node_index(holder.as_deref().unwrap_or("n2"));
        if other != 0 {
            sys.nodes[other].terminate(Duration::from_secs(20)).await;
            sys.expect_all_held(Duration::from_secs(10), "after the other node stopped")
                .await;
            sys.start_node(other).await;
        }
    }
    // The slowed node must hold the role when its link is cut, or the round tests nothing.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sys.held_by(&role).await.as_deref() != Some(faked.as_str()) {
        if Instant::now() >= deadline {
            sys.problem(format!(
                "the faked node {faked} did not hold {role} before its link was cut"
            ));
            return;
        }
        tokio::time::sleep(ms(50)).await;
    }
    sys.primary("proxy_stall", &faked);
    sys.proxy(0).set_mode(Mode::Stall);
    sys.ttls(3.0).await;
    sys.proxy(0).set_mode(Mode::Pass);
    sys.fault("heal", &faked, Phase::End);
}

/// SIGKILLs the holder of a random role and restarts it after `downtime` × TTL (the restarted
/// process adopts its lease if it is still there).
pub(super) async fn crash_holder(sys: &mut System, rng: &mut StdRng, downtime: f64) {
    let Some((i, _)) = sys.holder_target(rng).await else {
        return;
    };
    let id = sys.nodes[i].id().to_owned();
    sys.primary("sigkill", &id);
    sys.nodes[i].kill().await;
    sys.ttls(downtime).await;
    sys.start_node(i).await;
    sys.fault("restart", &id, Phase::End);
}

/// Puts node `i`'s proxy in `mode` for a random number of TTLs out of `ttls`, then heals it
/// (logged as the fault `name` on that node).
async fn proxy_fault(
    sys: &mut System,
    rng: &mut StdRng,
    i: usize,
    name: &str,
    mode: Mode,
    ttls: std::ops::Range<f64>,
) {
    let id = sys.nodes[i].id().to_owned();
    sys.primary(name, &id);
    sys.proxy(i).set_mode(mode);
    sys.ttls(rng.random_range(ttls)).await;
    sys.proxy(i).set_mode(Mode::Pass);
    sys.fault("heal", &id, Phase::End);
}
