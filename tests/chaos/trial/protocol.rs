//! The faults of issue 24 (protocol v2 under foreign writers, lost evidence, permissions
//! changed at run time, a bucket lifecycle, and a stream-leader change during the followers'
//! backstop reads). Each round judges liveness itself: every role with a live candidate must
//! be held again within `2 × (ttl + heartbeat + 500 ms) + 1 s` of the fault's end (the
//! trial's longest TTL; `reheld_bound_ms`), or the round notes a problem and repairs what the
//! harness broke (so later rounds still test something). Safety is the checker's (S1-S6).

use std::time::Duration;

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use futures_util::StreamExt;
use nats_roles::tooling::history::Phase;
use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use tokio::time::Instant;
use uuid::Uuid;

use testkit::proxy::Mode;

use super::system::System;
use super::{BUCKET, Kind, backstop_ms, ms, reheld_bound_ms};

/// One round of an issue-24 fault.
pub(super) async fn round(sys: &mut System, fault: Kind, rng: &mut StdRng) {
    match fault {
        Kind::ForeignSession => foreign_session(sys, rng).await,
        Kind::ForeignRole => foreign_role(sys, rng).await,
        Kind::MarkersAgedOut => markers_aged_out(sys, rng).await,
        Kind::RefusedRelease => refused_release(sys, rng).await,
        Kind::BucketRecreate => bucket_recreate(sys).await,
        Kind::BackstopLeader => backstop_leader(sys, rng).await,
        other => unreachable!("{} is not an issue-24 fault", other.name()),
    }
}

/// The fault picked for round `round` of a `protocol` trial: each of the five in turn (the
/// bucket recreation last: it starts the spare node).
pub(super) fn protocol_pick(round: usize) -> Kind {
    const ORDER: [Kind; 5] = [
        Kind::ForeignSession,
        Kind::ForeignRole,
        Kind::MarkersAgedOut,
        Kind::RefusedRelease,
        Kind::BucketRecreate,
    ];
    ORDER[round % ORDER.len()]
}

/// Waits until every role with a live candidate is held again, counting from `ended` (the
/// fault's end); notes the time, or a problem when the bound passed.
async fn reheld(sys: &mut System, ended: Instant) -> bool {
    let bound = ms(reheld_bound_ms(sys.kind));
    let name = sys.note.fault.name();
    let held = sys
        .expect_all_held(
            bound.saturating_sub(ended.elapsed()),
            &format!("of the end of the fault {name} (bound {bound:?} from that end)"),
        )
        .await;
    let took = held.then(|| ended.elapsed());
    eprintln!(
        "chaos: {} round {}: {name}: every role held again {took:?} after the fault ended (bound {bound:?})",
        sys.kind.name(),
        sys.note.round
    );
    sys.reheld.push((name, took));
    held
}

/// The session value stored under `key` (a JSON object), if it is a value.
async fn session_value(sys: &System, key: &str) -> Option<Value> {
    let entry = sys.kv.entry(key).await.ok().flatten()?;
    serde_json::from_slice::<Value>(&entry.value)
        .ok()
        .filter(Value::is_object)
}

fn session_key(id: &str, ttl_ms: u64) -> String {
    format!("session.{id}.{ttl_ms}")
}

/// Issue 24 B7: a foreign client overwrites both session keys of a live holder (its shared
/// roles' class and its private role's class) with valid sessions of another incarnation of
/// the same instance id, without a TTL (a restored backup, a buggy tool). The instance must
/// be back (its private role held) within the bound.
async fn foreign_session(sys: &mut System, rng: &mut StdRng) {
    let Some((i, _)) = sys.holder_target(rng).await else {
        return;
    };
    let id = sys.nodes[i].id().to_owned();
    let keys = [
        session_key(&id, sys.ttl_ms),
        session_key(&id, 2 * sys.ttl_ms),
    ];
    let mut values = Vec::new();
    for key in &keys {
        let Some(mut v) = session_value(sys, key).await else {
            sys.problem(format!("{key} holds no session value"));
            return;
        };
        v["incarnation"] = json!(Uuid::new_v4());
        v["session"] = json!(Uuid::new_v4());
        values.push((key.clone(), v));
    }
    sys.primary("foreign_session", &id);
    for (key, v) in &values {
        sys.kv
            .put(key, serde_json::to_vec(v).expect("json").into())
            .await
            .expect("foreign session write");
    }
    sys.fault("foreign_session", &id, Phase::End);
    let ended = Instant::now();
    if !reheld(sys, ended).await {
        // Repair: remove the foreign values, so that the instance can start a session again.
        sys.fault("repair", &id, Phase::Start);
        for key in &keys {
            let _ = sys.kv.delete(key).await;
        }
        sys.fault("repair", &id, Phase::End);
    }
}

/// A role value as a holder writes it (protocol Q2), naming `holder`'s session `key` with
/// `session` uuid and `incarnation`.
fn role_value(holder: &str, incarnation: &Value, session: &Value, key: &str, ttl_ms: u64) -> Value {
    json!({
        "v": 2,
        "holder": holder,
        "incarnation": incarnation,
        "session": session,
        "session_key": key,
        "nonce": Uuid::new_v4(),
        "priority": 0,
        "ttl_ms": ttl_ms,
    })
}

/// Issue 24 B8: a foreign client writes four role values, each naming a live session of an
/// instance that does not hold that role: a shared role naming a non-holder's session with
/// another incarnation (the round's primary fault, on the role's holder); a shared role
/// naming a non-holder's real session; a shared role naming a non-holder's session of the
/// other TTL class; and one node's private role naming another node's session (a role that
/// instance does not campaign for). Every role must be held again within the bound.
async fn foreign_role(sys: &mut System, rng: &mut StdRng) {
    if !sys
        .expect_all_held(Duration::from_secs(10), "before the foreign role writes")
        .await
    {
        return;
    }
    let shared: Vec<String> = sys.roles[..sys.shared].to_vec();
    let ids: Vec<String> = sys
        .nodes
        .iter()
        .filter(|n| n.is_running() && !n.is_paused())
        .map(|n| n.id().to_owned())
        .collect();
    let first = rng.random_range(0..shared.len());
    const VARIANTS: [&str; 3] = [
        "a non-holder's session, another incarnation",
        "a non-holder's session, its own incarnation",
        "a non-holder's session of the other TTL class",
    ];
    let mut writes: Vec<(String, String, Value)> = Vec::new();
    for k in 0..3 {
        let role = shared[(first + k) % shared.len()].clone();
        let Some(holder) = sys.held_by(&role).await else {
            sys.problem(format!("{role} lost its holder before the foreign write"));
            return;
        };
        let others: Vec<&String> = ids.iter().filter(|n| **n != holder).collect();
        let named = others[rng.random_range(0..others.len())].clone();
        let ttl = if k == 2 { 2 * sys.ttl_ms } else { sys.ttl_ms };
        let key = session_key(&named, ttl);
        let Some(s) = session_value(sys, &key).await else {
            sys.problem(format!("{key} holds no session value"));
            return;
        };
        let incarnation = if k == 0 {
            json!(Uuid::new_v4())
        } else {
            s["incarnation"].clone()
        };
        let value = role_value(&named, &incarnation, &s["session"], &key, sys.ttl_ms);
        eprintln!(
            "chaos: foreign role value: role.{role} (held by {holder}) names {key}: {}",
            VARIANTS[k]
        );
        writes.push((role, holder, value));
    }
    // A private role naming another node's session of the private roles' class.
    let owner = ids[rng.random_range(0..ids.len())].clone();
    let named = ids
        .iter()
        .find(|n| **n != owner)
        .cloned()
        .unwrap_or_else(|| owner.clone());
    let key = session_key(&named, 2 * sys.ttl_ms);
    let Some(s) = session_value(sys, &key).await else {
        sys.problem(format!("{key} holds no session value"));
        return;
    };
    eprintln!(
        "chaos: foreign role value: role.p-{owner} (held by {owner}) names {key}: an instance \
         that does not campaign for the role"
    );
    writes.push((
        format!("p-{owner}"),
        owner,
        role_value(
            &named,
            &s["incarnation"],
            &s["session"],
            &key,
            2 * sys.ttl_ms,
        ),
    ));
    for (k, (role, holder, value)) in writes.iter().enumerate() {
        if k == 0 {
            sys.primary("foreign_role", holder);
        } else {
            sys.fault("foreign_role", holder, Phase::Start);
        }
        sys.kv
            .put(
                format!("role.{role}"),
                serde_json::to_vec(value).expect("json").into(),
            )
            .await
            .expect("foreign role write");
        sys.fault("foreign_role", holder, Phase::End);
    }
    let ended = Instant::now();
    if !reheld(sys, ended).await {
        sys.fault("repair", "bucket", Phase::Start);
        for (role, _, _) in &writes {
            let _ = sys.kv.delete(format!("role.{role}")).await;
        }
        sys.fault("repair", "bucket", Phase::End);
    }
}

/// Whether the stream holds no message at all (not even a marker) for `key`.
async fn gone_without_marker(sys: &System, key: &str) -> bool {
    let Ok(stream) = sys.js.get_stream(format!("KV_{BUCKET}")).await else {
        return false;
    };
    stream
        .get_last_raw_message_by_subject(&format!("$KV.{BUCKET}.{key}"))
        .await
        .is_err_and(|e| e.kind() == LastRawMessageErrorKind::NoMessageFound)
}

/// Issue 24 B6: every follower is stopped (SIGSTOP) and cut off (its proxy holds both
/// directions: a stopped process's socket would still receive what the server pushes), the
/// holder is killed (`crash`: not `sigkill`, whose fail-over the checker bounds by the lease's
/// end, which stopped followers cannot meet), its sessions expire and their expiry markers age
/// out (marker TTL 1 s); then the followers' connections are reset (what the proxy held is
/// dropped) and they continue: they never see the markers, and their reconnected watchers
/// start after them. A role must be held again within the bound of the followers continuing.
async fn markers_aged_out(sys: &mut System, rng: &mut StdRng) {
    let Some((h, _)) = sys.holder_target(rng).await else {
        return;
    };
    let holder = sys.nodes[h].id().to_owned();
    let followers: Vec<usize> = (0..sys.nodes.len())
        .filter(|&f| f != h && sys.nodes[f].is_running() && !sys.nodes[f].is_paused())
        .collect();
    for &f in &followers {
        let id = sys.nodes[f].id().to_owned();
        sys.fault("sigstop", &id, Phase::Start);
        sys.proxy(f).set_mode(Mode::Stall);
        sys.nodes[f].pause();
    }
    sys.primary("crash", &holder);
    sys.nodes[h].kill().await;
    // The sessions expire after their TTL (2 × TTL for the private class), the markers one
    // second later (the bucket's marker TTL).
    let keys = [
        session_key(&holder, sys.ttl_ms),
        session_key(&holder, 2 * sys.ttl_ms),
    ];
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut aged_out = false;
    while Instant::now() < deadline {
        let mut all = true;
        for key in &keys {
            all &= gone_without_marker(sys, key).await;
        }
        if all {
            aged_out = true;
            break;
        }
        tokio::time::sleep(ms(100)).await;
    }
    if !aged_out {
        sys.problem(format!(
            "the sessions of {holder} or their markers were still in the stream 15 s after the kill"
        ));
    }
    for &f in &followers {
        let id = sys.nodes[f].id().to_owned();
        sys.proxy(f).reset();
        sys.proxy(f).set_mode(Mode::Pass);
        sys.nodes[f].resume();
        sys.fault("sigcont", &id, Phase::End);
    }
    let ended = Instant::now();
    if !reheld(sys, ended).await {
        // Repair: fresh processes replay the bucket instead of remembering the sessions.
        for &f in &followers {
            let id = sys.nodes[f].id().to_owned();
            sys.fault("repair", &id, Phase::Start);
            sys.nodes[f].terminate(Duration::from_secs(20)).await;
            sys.start_node(f).await;
            sys.fault("repair", &id, Phase::End);
        }
    }
    sys.start_node(h).await;
    sys.fault("restart", &holder, Phase::End);
}

/// Issue 24 B9: the holder of a shared role loses its publish permission on that role's key
/// (a server config reload); then (1) it is asked to release its roles while it keeps running
/// (SIGUSR1: `RoleManager::release`, not campaigning again for a minute) — the release of that
/// role is refused — and (2) it is stopped with SIGTERM (its shutdown's release is refused
/// too). After each, the role must be held by another node within the bound (for now: the
/// lead decides whether "reported blocked" is the alternative).
async fn refused_release(sys: &mut System, rng: &mut StdRng) {
    let Some((h, role)) = sys.holder_target(rng).await else {
        return;
    };
    let holder = sys.nodes[h].id().to_owned();
    let subject = format!("$KV.{BUCKET}.role.{role}");
    let revoked = sys
        .auth
        .as_ref()
        .expect("protocol set-up")
        .config(Some((&holder, &subject)));
    reload(sys, &revoked).await;
    eprintln!(
        "chaos: {} round {}: {holder} may no longer publish to {subject}",
        sys.kind.name(),
        sys.note.round
    );
    sys.primary("release_refused", &holder);
    // Its released roles are in their cooldown there: it is no candidate (nor holder) now.
    sys.leaving.insert(h);
    sys.nodes[h].send_signal(libc::SIGUSR1);
    let ended = Instant::now();
    reheld(sys, ended).await;
    sys.fault("sigterm", &holder, Phase::Start);
    sys.nodes[h].send_signal(libc::SIGTERM);
    let ended = Instant::now();
    reheld(sys, ended).await;
    let status = sys.nodes[h].terminate(Duration::from_secs(20)).await;
    eprintln!(
        "chaos: {} round {}: {holder} (release of {role} refused) exited {:?} {:?} after the SIGTERM",
        sys.kind.name(),
        sys.note.round,
        status,
        ended.elapsed()
    );
    sys.leaving.remove(&h);
    let base = sys.auth.as_ref().expect("protocol set-up").config(None);
    reload(sys, &base).await;
    sys.start_node(h).await;
    sys.fault("restart", &holder, Phase::End);
}

/// Reloads the server's `authorization` block and waits until the server says it reloaded.
async fn reload(sys: &mut System, config: &str) {
    let server = sys.server.as_mut().expect("single-server trial");
    let count = |s: &testkit::NatsServer| {
        s.log_tail(100_000)
            .matches("Reloaded server configuration")
            .count()
    };
    let before = count(server);
    server.reload_with(config);
    let deadline = Instant::now() + Duration::from_secs(5);
    while count(sys.server.as_ref().expect("server")) <= before {
        assert!(
            Instant::now() < deadline,
            "nats-server did not reload its configuration within 5 s"
        );
        tokio::time::sleep(ms(20)).await;
    }
}

/// Issue 24 A3: the bucket is deleted and recreated while the holders act, and a fresh
/// instance (the spare node) starts right after: it must not act while an old holder still
/// does (S4, the checker's), and every role must be held again within the bound.
async fn bucket_recreate(sys: &mut System) {
    if !sys
        .expect_all_held(Duration::from_secs(10), "before the bucket recreation")
        .await
    {
        return;
    }
    let spare = sys.spare.expect("protocol set-up");
    if sys.nodes[spare].is_running() {
        // A later round: the spare must be a fresh process again.
        sys.nodes[spare].terminate(Duration::from_secs(20)).await;
    }
    sys.primary("bucket_recreate", "bucket");
    sys.js
        .delete_key_value(BUCKET)
        .await
        .expect("delete the bucket");
    testkit::create_kv(&sys.js, sys.bucket.clone()).await;
    let ended = Instant::now();
    sys.nodes[spare].spawn();
    sys.fault("bucket_recreate", "bucket", Phase::End);
    sys.nodes[spare].wait_ready(Duration::from_secs(30)).await;
    reheld(sys, ended).await;
}

/// Issue 24 item 14: on the cluster, every follower is stopped for the backstop period and a
/// second while the holder renews; the stream leader is told to step down and 0-150 ms later
/// the followers continue: their books find the holder's session unchanged for the backstop
/// period and they send backstop leader reads at once, while the stream's leadership moves.
/// The harness listens on the leader-read subject and fails the round if no read of the
/// holder's session was sent. The holder's session is live throughout: no follower may take
/// its roles (S4), and every role must be held within the bound of the step-down.
async fn backstop_leader(sys: &mut System, rng: &mut StdRng) {
    // After the followers continue, their backstop task and their watcher (which delivers the
    // holder's renewals buffered meanwhile) race: when the watcher wins, the books are current
    // again before a reap is due and no backstop read goes out. Such an attempt tests nothing;
    // it is repeated (at most three times) before the round counts as a harness problem.
    for attempt in 1..=3 {
        match backstop_leader_once(sys, rng).await {
            Some(0) if attempt < 3 => eprintln!(
                "chaos: {} round {}: no backstop read this time (the watcher was first); again",
                sys.kind.name(),
                sys.note.round
            ),
            Some(0) => sys.problem(
                "no backstop read of the holder's session was sent after the followers \
                 continued, in three attempts: the round tested nothing"
                    .to_owned(),
            ),
            _ => return,
        }
    }
}

/// One attempt of [`backstop_leader`]: the number of leader reads of the holder's session
/// sent after the followers continued (`None`: the round could not start).
async fn backstop_leader_once(sys: &mut System, rng: &mut StdRng) -> Option<usize> {
    if !sys
        .expect_all_held(Duration::from_secs(20), "before the followers stopped")
        .await
    {
        return None;
    }
    let (h, _) = sys.holder_target(rng).await?;
    let holder = sys.nodes[h].id().to_owned();
    let followers: Vec<usize> = (0..sys.nodes.len())
        .filter(|&f| f != h && sys.nodes[f].is_running() && !sys.nodes[f].is_paused())
        .collect();
    let client = sys.js.client();
    let mut reads = client
        .subscribe(format!("$JS.API.STREAM.MSG.GET.KV_{BUCKET}"))
        .await
        .expect("subscribe to the leader reads");
    client.flush().await.expect("flush");
    for &f in &followers {
        let id = sys.nodes[f].id().to_owned();
        sys.fault("sigstop", &id, Phase::Start);
        sys.nodes[f].pause();
    }
    tokio::time::sleep(ms(backstop_ms(sys.kind) + 1000)).await;
    let leader = sys.stream_leader().await;
    let target = format!("server:{leader}");
    sys.primary("leader_stepdown", &target);
    let stepping = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .request(
                    format!("$JS.API.STREAM.LEADER.STEPDOWN.KV_{BUCKET}"),
                    "".into(),
                )
                .await
        }
    });
    tokio::time::sleep(ms(rng.random_range(0..150))).await;
    let resumed = Instant::now();
    for &f in &followers {
        let id = sys.nodes[f].id().to_owned();
        sys.nodes[f].resume();
        sys.fault("sigcont", &id, Phase::End);
    }
    let answer = stepping.await.expect("step-down task");
    sys.fault("leader_stepdown", &target, Phase::End);
    let ended = Instant::now();
    match answer {
        Ok(m) if !String::from_utf8_lossy(&m.payload).contains("\"error\"") => {}
        other => sys.problem(format!("the stream leader did not step down: {other:?}")),
    }
    reheld(sys, ended).await;
    // The followers' backstop reads of the holder's session, as the server saw them asked
    // (buffered in the subscription meanwhile).
    let session = format!("session.{holder}.");
    let mut seen = 0;
    while let Ok(Some(m)) = tokio::time::timeout(ms(100), reads.next()).await {
        seen += usize::from(String::from_utf8_lossy(&m.payload).contains(&session));
    }
    eprintln!(
        "chaos: {} round {}: {} leader reads of {holder}'s sessions after the followers \
         continued (the step-down was answered {:?} after they continued)",
        sys.kind.name(),
        sys.note.round,
        seen,
        ended - resumed
    );
    Some(seen)
}

/// The `renew-after-loss` negative control's round: a foreign client deletes the holder's
/// session key. A correct holder demotes when its watcher shows the delete; the broken one
/// keeps its terms (on the next session's renewals) until it sees a role key taken, and its
/// later terms rest on the deleted session, which the others take over at once.
pub(super) async fn session_delete(sys: &mut System, rng: &mut StdRng) {
    let Some((i, _)) = sys.holder_target(rng).await else {
        return;
    };
    let id = sys.nodes[i].id().to_owned();
    sys.primary("session_delete", &id);
    let _ = sys.kv.delete(session_key(&id, sys.ttl_ms)).await;
    sys.fault("session_delete", &id, Phase::End);
}
