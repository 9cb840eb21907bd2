//! Protocol Q8 attacked from outside (issue 27): real `nats-roles run` processes on one
//! server, a holder killed and another client writing the holder's member record in ways the
//! fleet did not write it. A member record is never a vacancy rule, so safety must hold
//! (histories judged by `nats-roles history check`); and whatever the record says, the dead
//! holder's role must be re-held by the one candidate that is not among the holder's
//! successors within a bound that does not depend on what the foreign record claims.
//!
//! The fleet: holder `h` and candidate `b` campaign for `fx` (their histories are recorded);
//! three more instances campaign only for `other` and are `h`'s successors (`b` ranks last for
//! `h`), so `b` learns of `h`'s end only by following `h` as an orphan once a successor
//! deleted `h`'s record (Q8 rule 4) — or, as `h`'s second tier, from its own leader reads.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream;
use nats_roles::InstanceId;
use nats_roles::tooling::history::Phase;
use nats_roles::tooling::presence::{SUCCESSORS, follow_order};
use testkit::instances::Deployment;
use testkit::process::{SIGKILL, signal};
use testkit::server::NatsServer;
use tokio::time::Instant;

const TIMING: &str = "timing:\n  ttl: 2s\n  heartbeat: 500ms\n";
const HOLDER: &str = "h0";
const OTHERS: [&str; 4] = ["m1", "m2", "m3", "m4"];

struct Fleet {
    _server: NatsServer,
    /// `h` and `b` (role `fx`, histories).
    cands: Deployment,
    /// The successors (role `other`).
    rest: Deployment,
    kv: jetstream::kv::Store,
    b: String,
}

/// `h`'s candidate that ranks last among the other members for `h` (not a successor).
fn not_a_successor() -> (String, Vec<String>) {
    let h = InstanceId::new(HOLDER).expect("valid");
    let others: Vec<InstanceId> = OTHERS
        .iter()
        .map(|i| InstanceId::new(*i).expect("valid"))
        .collect();
    let order = follow_order(&h, &others);
    let b = order.last().expect("four others").to_string();
    let successors: Vec<String> = order
        .iter()
        .take(SUCCESSORS)
        .map(ToString::to_string)
        .collect();
    assert!(!successors.contains(&b));
    (b, successors)
}

async fn fleet(bucket: &str) -> Fleet {
    let server = NatsServer::start().await;
    let (b, successors) = not_a_successor();
    let mut cands = Deployment::new(&server.url(), bucket, &["fx"], TIMING);
    cands.arg("--history");
    cands.arg("{dir}/{id}.jsonl");
    let mut rest = Deployment::new(&server.url(), bucket, &["other"], TIMING);
    let js = jetstream::new(testkit::client::connect(&server.url()).await);
    cands.start(HOLDER).await;
    let kv = js.get_key_value(bucket).await.expect("the bucket");
    wait(&kv, "h holds fx", Duration::from_secs(20), async |kv| {
        holder(kv, "fx").await.as_deref() == Some(HOLDER)
    })
    .await;
    for s in &successors {
        rest.start(s).await;
    }
    cands.start(&b).await;
    let all: BTreeSet<String> = std::iter::once(HOLDER.to_owned())
        .chain(OTHERS.iter().map(|s| (*s).to_owned()))
        .collect();
    wait(
        &kv,
        "every member record listing a session",
        Duration::from_secs(20),
        async |kv| listed(kv, &all).await == all,
    )
    .await;
    // The orphan grace (1.5 s) and a heartbeat: the followers settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(holder(&kv, "fx").await.as_deref(), Some(HOLDER));
    Fleet {
        _server: server,
        cands,
        rest,
        kv,
        b,
    }
}

async fn holder(kv: &jetstream::kv::Store, role: &str) -> Option<String> {
    let v = kv.get(format!("role.{role}")).await.ok()??;
    let v: serde_json::Value = serde_json::from_slice(&v).ok()?;
    v["holder"].as_str().map(ToOwned::to_owned)
}

async fn listed(kv: &jetstream::kv::Store, ids: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for id in ids {
        if let Ok(Some(v)) = kv.get(format!("member.{id}")).await
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&v)
            && v["sessions"].as_object().is_some_and(|s| !s.is_empty())
        {
            out.insert(id.clone());
        }
    }
    out
}

async fn wait(
    kv: &jetstream::kv::Store,
    what: &str,
    limit: Duration,
    done: impl AsyncFn(&jetstream::kv::Store) -> bool,
) {
    let deadline = Instant::now() + limit;
    while !done(kv).await {
        assert!(
            Instant::now() < deadline,
            "not reached within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How another client rewrites `h`'s record right after `h` was killed.
enum Forge {
    /// The record listing one session in a TTL class nobody uses (1 h), no `Nats-TTL`.
    UnusedLongClass,
    /// The record listing a made-up uuid in `h`'s own class.
    FakeUuid,
    /// The record without `sessions` (an older build's).
    NoSessions,
    /// Not a record at all.
    Garbage,
    /// The record as it was, from another incarnation.
    OtherIncarnation,
}

/// Kills `h`, lets another client write `h`'s record as `forge` says (CAS on the record's
/// revision, no TTL), and returns how long `fx` took to be held by `b` (panics after `limit`);
/// then checks the candidates' histories.
async fn attack(bucket: &str, forge: Forge, limit: Duration) -> Duration {
    let mut f = fleet(bucket).await;
    let key = format!("member.{HOLDER}");
    let entry =
        f.kv.entry(key.clone())
            .await
            .expect("read the record")
            .expect("h's record");
    let mut json: serde_json::Value = serde_json::from_slice(&entry.value).expect("json");
    let class = json["sessions"]
        .as_object()
        .and_then(|s| s.keys().next().cloned())
        .expect("a listed session");
    let bytes: Vec<u8> = match forge {
        Forge::UnusedLongClass => {
            json["sessions"] = serde_json::json!({ "3600000": uuid::Uuid::new_v4().to_string() });
            serde_json::to_vec(&json).expect("json")
        }
        Forge::FakeUuid => {
            let mut sessions = serde_json::Map::new();
            sessions.insert(class, serde_json::json!(uuid::Uuid::new_v4().to_string()));
            json["sessions"] = serde_json::Value::Object(sessions);
            serde_json::to_vec(&json).expect("json")
        }
        Forge::NoSessions => {
            json.as_object_mut().expect("object").remove("sessions");
            serde_json::to_vec(&json).expect("json")
        }
        Forge::Garbage => b"garbage".to_vec(),
        Forge::OtherIncarnation => {
            json["incarnation"] = serde_json::json!(uuid::Uuid::new_v4().to_string());
            serde_json::to_vec(&json).expect("json")
        }
    };
    let killed = Instant::now();
    signal(f.cands.instances[0].pid(), SIGKILL);
    f.cands.wait_exit(0, Duration::from_secs(5)).await;
    killed_record(&f.cands, HOLDER);
    f.kv.update(&key, bytes.into(), entry.revision)
        .await
        .expect("the foreign write");
    let b = f.b.clone();
    let deadline = killed + limit;
    loop {
        if holder(&f.kv, "fx").await.as_deref() == Some(b.as_str()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "fx not re-held by {b} within {limit:?} of the kill of {HOLDER} (holder now {:?}, \
             member.{HOLDER} = {:?})\n{}",
            holder(&f.kv, "fx").await,
            f.kv.get(&key)
                .await
                .ok()
                .flatten()
                .map(|v| String::from_utf8_lossy(&v).into_owned()),
            f.cands.report()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = killed.elapsed();
    // b's term a little while, then a graceful stop closes it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    f.cands.terminate(1);
    f.cands.wait_exit(1, Duration::from_secs(10)).await;
    check(&f.cands).await;
    took
}

/// Records in the harness's history that `node` was killed (SIGKILL) by now: its acting
/// ended then (the checker would otherwise keep its term open until its deadline). Written
/// after the process exited, so the recorded end is never before the real one.
fn killed_record(d: &Deployment, node: &str) {
    fault(d, "sigkill", node, Phase::Start);
}

/// Records a fault (`what` of `node`, its start or end) in the harness's history.
fn fault(d: &Deployment, what: &str, node: &str, phase: Phase) {
    use nats_roles::tooling::history::{Event, Record, mono_now_ns};
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(d.dir().join("harness.jsonl"))
        .expect("harness file");
    let event = Event::Fault {
        what: what.into(),
        target: node.to_owned(),
        phase,
    };
    writeln!(
        f,
        "{}",
        Record::harness(mono_now_ns(), None, event).to_line()
    )
    .expect("harness record");
}

/// `nats-roles history check` over the candidates' histories (and the harness's): clean.
async fn check(d: &Deployment) {
    let files: Vec<PathBuf> = std::fs::read_dir(d.dir())
        .expect("the directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert!(files.len() >= 2, "{files:?}");
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    let mut args = vec!["history", "check"];
    args.extend(names.iter().map(String::as_str));
    let out = testkit::cli::run(&args, &[], Duration::from_secs(30)).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains("CLEAN"), "{}", out.text());
}

/// TTL 2 s, backstop period 3 s: `b` follows `h` as an orphan — a successor deleted the
/// forged record once it judged the listed session ended (a marker, another uuid, or one
/// period without a change), or the record does not list the session `fx` rests on (Q8 rule
/// 3c) — and sees its end. 15 s is far from the 1 h the forged record claims and from the
/// presence TTL (which a record written without `Nats-TTL` does not have).
const LIMIT: Duration = Duration::from_secs(15);

/// The record of a dead holder rewritten by another client to list a session in a TTL class
/// nobody uses (1 h) — no such key exists, and the record has no `Nats-TTL`. Before the fix
/// `fx` stayed unheld: the successors judged the listed key by the claimed class (ended after
/// an hour of absence), the record never expires, and `b`, not a successor, never followed
/// `h` (observed: holder still `h0` 15 s after the kill).
#[tokio::test]
async fn a_dead_holder_s_record_listing_an_unused_long_ttl_class_does_not_pin_its_roles() {
    let took = attack("q8-attack-long-class", Forge::UnusedLongClass, LIMIT).await;
    eprintln!("re-held {took:?} after the kill");
}

/// The record of a dead holder rewritten to list a made-up session uuid in its own class.
#[tokio::test]
async fn a_dead_holder_s_record_listing_a_fake_uuid_does_not_pin_its_roles() {
    let took = attack("q8-attack-fake-uuid", Forge::FakeUuid, LIMIT).await;
    eprintln!("re-held {took:?} after the kill");
}

/// The record of a dead holder rewritten without `sessions` (an older build's record).
#[tokio::test]
async fn a_dead_holder_s_record_without_sessions_does_not_pin_its_roles() {
    let took = attack("q8-attack-no-sessions", Forge::NoSessions, LIMIT).await;
    eprintln!("re-held {took:?} after the kill");
}

/// The record of a dead holder replaced by garbage.
#[tokio::test]
async fn a_dead_holder_s_record_replaced_by_garbage_does_not_pin_its_roles() {
    let took = attack("q8-attack-garbage", Forge::Garbage, LIMIT).await;
    eprintln!("re-held {took:?} after the kill");
}

/// The record of a dead holder rewritten, unchanged but for another incarnation, without TTL.
#[tokio::test]
async fn a_dead_holder_s_record_of_another_incarnation_does_not_pin_its_roles() {
    let took = attack("q8-attack-incarnation", Forge::OtherIncarnation, LIMIT).await;
    eprintln!("re-held {took:?} after the kill");
}

/// A fleet of `n` instances `f00…` campaigning for `roles`, histories recorded, every role
/// held and every record listing a session, followers settled.
async fn big_fleet(
    bucket: &str,
    n: usize,
    roles: &[&str],
) -> (NatsServer, Deployment, jetstream::kv::Store) {
    let server = NatsServer::start().await;
    let mut d = Deployment::new(&server.url(), bucket, roles, TIMING);
    d.arg("--history");
    d.arg("{dir}/{id}.jsonl");
    let ids: BTreeSet<String> = (0..n).map(|i| format!("f{i:02}")).collect();
    for id in &ids {
        d.start(id).await;
    }
    let kv = jetstream::new(testkit::client::connect(&server.url()).await)
        .get_key_value(bucket)
        .await
        .expect("the bucket");
    wait(
        &kv,
        "every role held, every record listing a session",
        Duration::from_secs(60),
        async |kv| all_held(kv, roles, &BTreeSet::new()).await && listed(kv, &ids).await == ids,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    (server, d, kv)
}

/// Whether every role of `roles` is held by an instance not in `dead`.
async fn all_held(kv: &jetstream::kv::Store, roles: &[&str], dead: &BTreeSet<String>) -> bool {
    for r in roles {
        match holder(kv, r).await {
            Some(h) if !dead.contains(&h) => {}
            _ => return false,
        }
    }
    true
}

/// Stops every instance and checks the histories.
async fn stop_and_check(d: &mut Deployment, skip: &BTreeSet<usize>) {
    for i in 0..d.instances.len() {
        if !skip.contains(&i) {
            d.terminate(i);
        }
    }
    for i in 0..d.instances.len() {
        if !skip.contains(&i) {
            d.wait_exit(i, Duration::from_secs(15)).await;
        }
    }
    let files: Vec<String> = std::fs::read_dir(d.dir())
        .expect("the directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .map(|p| p.display().to_string())
        .collect();
    let mut args = vec!["history", "check"];
    args.extend(files.iter().map(String::as_str));
    let out = testkit::cli::run(&args, &[], Duration::from_secs(60)).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains("CLEAN"), "{}", out.text());
}

/// Twenty instances, two roles: the holder of `r0` is killed together with its three
/// successors and its three second-tier members (seven processes). The survivors' successors
/// of the dead successors delete their records (one TTL), which moves survivors into the
/// holder's ranking; they follow it from its keys' last entries (the expiry marker) and delete
/// its record; every candidate then follows it as an orphan. Bound: TTL 2 s + backstop period
/// 3 s + 3 s for a loaded 2-core machine — far from the presence TTL (30 s here).
#[tokio::test]
async fn twenty_instances_a_holder_killed_with_its_successors_and_second_tier_is_replaced() {
    const ROLES: [&str; 2] = ["r0", "r1"];
    let (_server, mut d, kv) = big_fleet("q8-attack-twenty", 20, &ROLES).await;
    let h = holder(&kv, "r0").await.expect("r0 held");
    let ids: Vec<InstanceId> = d
        .instances
        .iter()
        .map(|i| InstanceId::new(&i.id).expect("valid"))
        .collect();
    let order = follow_order(&InstanceId::new(&h).expect("valid"), &ids);
    let dead: BTreeSet<String> = std::iter::once(h.clone())
        .chain(order.iter().take(2 * SUCCESSORS).map(ToString::to_string))
        .collect();
    let index: BTreeSet<usize> = d
        .instances
        .iter()
        .enumerate()
        .filter(|(_, i)| dead.contains(&i.id))
        .map(|(n, _)| n)
        .collect();
    let killed = Instant::now();
    for n in &index {
        signal(d.instances[*n].pid(), SIGKILL);
    }
    for n in &index {
        d.wait_exit(*n, Duration::from_secs(5)).await;
        killed_record(&d, &d.instances[*n].id.clone());
    }
    let limit = Duration::from_secs(8);
    let deadline = killed + limit;
    while !all_held(&kv, &ROLES, &dead).await {
        assert!(
            Instant::now() < deadline,
            "roles of {h} not re-held by a survivor within {limit:?} after {dead:?} were killed\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("re-held {:?} after {dead:?} were killed", killed.elapsed());
    stop_and_check(&mut d, &index).await;
}

/// Seven instances, six roles: the successors of `r0`'s holder are stopped (SIGSTOP) and the
/// holder is killed. The stopped successors' sessions expire; their own successors delete
/// their records, survivors move up in the holder's ranking, find its end and delete its
/// record. Every role is re-held by a running instance; after SIGCONT the stopped ones lose
/// their sessions and come back as followers; the histories stay clean.
#[tokio::test]
async fn a_holder_dying_while_its_successors_are_stopped_is_replaced() {
    const ROLES: [&str; 6] = ["r0", "r1", "r2", "r3", "r4", "r5"];
    let (_server, mut d, kv) = big_fleet("q8-attack-stopped", 7, &ROLES).await;
    let h = holder(&kv, "r0").await.expect("r0 held");
    let ids: Vec<InstanceId> = d
        .instances
        .iter()
        .map(|i| InstanceId::new(&i.id).expect("valid"))
        .collect();
    let order = follow_order(&InstanceId::new(&h).expect("valid"), &ids);
    let stopped: BTreeSet<String> = order
        .iter()
        .take(SUCCESSORS)
        .map(ToString::to_string)
        .collect();
    let pos = |id: &str| {
        d.instances
            .iter()
            .position(|i| i.id == id)
            .expect("an instance")
    };
    let hi = pos(&h);
    let stopped_i: Vec<usize> = stopped.iter().map(|s| pos(s)).collect();
    for n in &stopped_i {
        signal(d.instances[*n].pid(), testkit::process::SIGSTOP);
        fault(&d, "sigstop", &d.instances[*n].id, Phase::Start);
    }
    let killed = Instant::now();
    signal(d.instances[hi].pid(), SIGKILL);
    d.wait_exit(hi, Duration::from_secs(5)).await;
    killed_record(&d, &h);
    let mut away = stopped.clone();
    away.insert(h.clone());
    let limit = Duration::from_secs(12);
    let deadline = killed + limit;
    while !all_held(&kv, &ROLES, &away).await {
        assert!(
            Instant::now() < deadline,
            "roles not held by running instances within {limit:?} after {h} was killed and \
             {stopped:?} stopped\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "re-held {:?} after {h} was killed, {stopped:?} stopped",
        killed.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in &stopped_i {
        signal(d.instances[*n].pid(), testkit::process::SIGCONT);
        fault(&d, "sigstop", &d.instances[*n].id, Phase::End);
    }
    let all: BTreeSet<String> = d
        .instances
        .iter()
        .filter(|i| i.id != h)
        .map(|i| i.id.clone())
        .collect();
    wait(
        &kv,
        "every role held, the resumed instances listed again",
        Duration::from_secs(30),
        async |kv| {
            all_held(kv, &ROLES, &BTreeSet::from([h.clone()])).await
                && listed(kv, &all).await == all
        },
    )
    .await;
    stop_and_check(&mut d, &BTreeSet::from([hi])).await;
}

/// The holder is killed and restarted at once with the same instance id but without `fx` in
/// its configuration (the role moved to other machines by a configuration change; the old
/// process crashed instead of releasing). The new process writes its session over the old
/// one's key (same TTL class) and its record lists only the new session. `fx` rests on the
/// old session, which ended: its successors (not candidates for `fx`) see the key change, but
/// the record they judge lists only the live new session, so nobody deletes it; `b` never
/// follows `h` (Q8 rule 7) and `fx` must still be re-held — before Q8 every instance saw the
/// key change and `b` took `fx` at once.
#[tokio::test]
async fn a_holder_restarted_without_its_role_does_not_keep_the_role_unheld() {
    let mut f = fleet("q8-attack-restart").await;
    let killed = Instant::now();
    signal(f.cands.instances[0].pid(), SIGKILL);
    f.cands.wait_exit(0, Duration::from_secs(5)).await;
    killed_record(&f.cands, HOLDER);
    f.rest.start(HOLDER).await;
    let b = f.b.clone();
    let deadline = killed + LIMIT;
    while holder(&f.kv, "fx").await.as_deref() != Some(b.as_str()) {
        assert!(
            Instant::now() < deadline,
            "fx not re-held by {b} within {LIMIT:?} of the restart of {HOLDER} without fx \
             (holder now {:?}, member.{HOLDER} = {:?})\n{}",
            holder(&f.kv, "fx").await,
            f.kv.get(format!("member.{HOLDER}"))
                .await
                .ok()
                .flatten()
                .map(|v| String::from_utf8_lossy(&v).into_owned()),
            f.cands.report()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("re-held {:?} after the restart", killed.elapsed());
    tokio::time::sleep(Duration::from_secs(1)).await;
    f.cands.terminate(1);
    f.cands.wait_exit(1, Duration::from_secs(10)).await;
    check(&f.cands).await;
}

/// Another client rewrites a live instance's record with its own incarnation but without
/// `sessions` (or with any other content): the instance must write its record again within a
/// few member heartbeats, as it does for a record of another incarnation (Q8 rule 6), so that
/// it is not an orphan (followed by every instance) nor misdescribed to placement for long.
/// FAILS on this branch: `MemberLink::observe` tells the writer only of markers, foreign values
/// and other incarnations, so the forged record stays until the writer's next change or
/// presence refresh (a third of the presence TTL: 100 s by default).
#[tokio::test]
async fn a_live_member_s_record_forged_with_its_own_incarnation_is_written_again() {
    let f = fleet("q8-attack-same-incarnation").await;
    let b = f.b.clone();
    let key = format!("member.{b}");
    let entry =
        f.kv.entry(key.clone())
            .await
            .expect("read")
            .expect("b's record");
    let mut json: serde_json::Value = serde_json::from_slice(&entry.value).expect("json");
    json.as_object_mut().expect("object").remove("sessions");
    f.kv.update(
        &key,
        serde_json::to_vec(&json).expect("json").into(),
        entry.revision,
    )
    .await
    .expect("the foreign write");
    let ids = BTreeSet::from([b.clone()]);
    wait(
        &f.kv,
        "b's record listing its session again",
        Duration::from_secs(10),
        async |kv| listed(kv, &ids).await == ids,
    )
    .await;
}
