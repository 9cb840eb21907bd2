//! The `nats-roles` binary as real OS processes against a real nats-server: configuration
//! errors, 3 instances sharing 20 roles, crash fail-over (SIGKILL), graceful hand-over
//! (SIGTERM) and restart adoption.
//!
//! Every wait is bounded and driven by the processes' stdout lines (one line per transition,
//! see `src/main.rs`), read by one task per process and timestamped as soon as they are read.
//! Children are killed (SIGKILL) when their guard is dropped, also while a failed test unwinds;
//! a failing test prints the tail of every process's stderr and stdout.

mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use tokio::time::Instant;

use testkit::cli::CliOutput;
use testkit::process::{SIGKILL, SIGTERM};

use harness::*;

// ---------------------------------------------------------------------------------------------
// 1. Configuration errors
// ---------------------------------------------------------------------------------------------

async fn cli(args: &[&str], env: &[(&str, &str)]) -> CliOutput {
    testkit::cli::run(args, env, Duration::from_secs(20)).await
}

fn assert_usage_error(r: &CliOutput, what: &str, needles: &[&str]) {
    assert_eq!(
        r.code,
        Some(2),
        "{what}: expected exit 2, got {:?}\n{}",
        r.code,
        r.text()
    );
    for needle in needles {
        assert!(
            r.text().contains(needle),
            "{what}: output lacks {needle:?}:\n{}",
            r.text()
        );
    }
}

#[tokio::test]
async fn config_errors_exit_2_with_the_field_name_and_no_panic() {
    let dir = tempdir();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write config");
        path.to_str().expect("utf-8 path").to_owned()
    };

    // Valid files: the shipped example and a generated one.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("roles.example.yaml");
    let example = example.to_str().expect("utf-8 path");
    let r = cli(&["validate", example], &[]).await;
    assert_eq!(
        r.code,
        Some(0),
        "validate roles.example.yaml:\n{}",
        r.text()
    );
    assert!(r.stdout.contains("ok"), "{}", r.text());
    let good = write_config(dir.path(), "good", Timing::FAST, &shard_roles(3));
    let good = good.to_str().expect("utf-8 path").to_owned();
    let r = cli(&["validate", &good], &[]).await;
    assert_eq!(r.code, Some(0), "validate generated config:\n{}", r.text());

    // Not YAML / wrong shape.
    let broken = file("broken.yaml", "roles:\n  - name: [a\n");
    let r = cli(&["validate", &broken], &[]).await;
    assert_usage_error(&r, "broken YAML", &["invalid configuration", "line 2"]);
    let unknown = file("unknown.yaml", "bucket:\n  nmae: roles\n");
    let r = cli(&["validate", &unknown], &[]).await;
    assert_usage_error(&r, "unknown key", &["nmae", "line 2"]);
    let bad_name = file("name.yaml", "roles:\n  - name: \"bad name!\"\n");
    let r = cli(&["validate", &bad_name], &[]).await;
    assert_usage_error(&r, "bad role name", &["role name", "bad name!"]);

    // Well-formed but invalid values: every problem is reported with its field.
    let values = file(
        "values.yaml",
        "bucket:\n  replicas: 9\ntiming:\n  ttl: 3s\n  heartbeat: 2s\nroles:\n  - name: a\n  \
         - name: b\n    ttl: 1500ms\n",
    );
    let r = cli(&["validate", &values], &[]).await;
    assert_usage_error(
        &r,
        "invalid values",
        &["bucket.replicas", "timing.heartbeat", "roles[1].ttl"],
    );

    // `run` with the same problems: exit 2 before connecting anywhere.
    let unreachable = "nats://127.0.0.1:1";
    let r = cli(
        &[
            "run",
            "--config",
            &values,
            "--instance-id",
            "x",
            "--server",
            unreachable,
        ],
        &[],
    )
    .await;
    assert_usage_error(
        &r,
        "run: invalid values",
        &["invalid configuration", "timing.heartbeat"],
    );
    assert!(r.stdout.is_empty(), "run printed transitions: {}", r.stdout);
    let r = cli(&["run", "--config", &broken, "--instance-id", "x"], &[]).await;
    assert_usage_error(&r, "run: broken YAML", &["invalid configuration", "line 2"]);
    let missing = dir.path().join("missing.yaml");
    let missing = missing.to_str().expect("utf-8 path");
    let r = cli(&["run", "--config", missing, "--instance-id", "x"], &[]).await;
    assert_usage_error(&r, "run: missing file", &["missing.yaml"]);
    let r = cli(&["run", "--config", &good, "--server", unreachable], &[]).await;
    assert_usage_error(&r, "run: no instance id", &["instance.id"]);
    let r = cli(&["run", "--config", &good, "--instance-id", "a b"], &[]).await;
    assert_usage_error(&r, "run: bad --instance-id", &["--instance-id"]);
    let r = cli(
        &["run", "--config", &good, "--instance-id", "x"],
        &[("NATS_URL", "ftp://h:1")],
    )
    .await;
    assert_usage_error(&r, "run: bad NATS_URL", &["NATS_URL"]);
    let r = cli(
        &["run", "--config", &good],
        &[("NATS_ROLES_INSTANCE_ID", "a/b")],
    )
    .await;
    assert_usage_error(
        &r,
        "run: bad NATS_ROLES_INSTANCE_ID",
        &["NATS_ROLES_INSTANCE_ID"],
    );
    let r = cli(
        &[
            "run",
            "--config",
            &good,
            "--instance-id",
            "x",
            "--server",
            "nats://h:0",
        ],
        &[],
    )
    .await;
    assert_usage_error(&r, "run: bad --server", &["nats://h:0"]);
}

/// A file with type errors, unknown fields, a missing name and rule violations: `validate`
/// and `run` list every problem at once, each with its path, line, column and what is
/// expected in words, and exit 2.
#[tokio::test]
async fn validate_and_run_list_every_problem_with_path_line_column_and_words() {
    let dir = tempdir();
    let path = dir.path().join("several.yaml");
    std::fs::write(
        &path,
        "nats:\n  servers: nats://127.0.0.1:1\ntiming:\n  ttl: \"3\"\n  heartbeat: soon\n\
         bucket:\n  replicas: many\n  auto_create: yes\nroles:\n  - name: a\n    campain: true\n\
         \x20   priority: high\n  - description: no name\n  - name: b\n    weight: 0\n    \
         exec:\n      command: python3 job.py\n",
    )
    .expect("write config");
    let path = path.to_str().expect("utf-8 path");
    let expected = [
        "timing.ttl: expected a duration such as `3s` or `750ms`, found the string \"3\" \
         (line 4, column 8)",
        "timing.heartbeat: expected a duration such as `3s` or `750ms`, found the string \
         \"soon\" (line 5, column 14)",
        "bucket.replicas: expected a whole number, 0 or more, found the string \"many\" \
         (line 7, column 13)",
        "bucket.auto_create: expected true or false, found the string \"yes\" (line 8, column 16)",
        "roles[0].campain: unknown field `campain` in roles[0]; did you mean `campaign`? \
         (line 11, column 5)",
        "roles[0].priority: expected a whole number from -2147483648 to 2147483647, found the \
         string \"high\" (line 12, column 15)",
        "roles[1].name: the required field `name` is missing in roles[1] (expected a role name) \
         (line 13, column 5)",
        "roles[2].exec.command: \"python3 job.py\" has spaces: write the program and its \
         arguments as a list",
        "(no shell; `[sh, -c, \"…\"]` for one) (line 17, column 16)",
        "roles[2].weight: 0 is out of range: a role's cost must be between 1 and 1000 \
         (line 15, column 13)",
    ];
    let r = cli(&["validate", path], &[]).await;
    assert_usage_error(&r, "validate", &expected);
    assert!(r.text().contains("(9 problems)"), "{}", r.text());
    assert!(!r.text().contains("panicked"), "{}", r.text());
    let r = cli(&["run", "--config", path, "--instance-id", "x"], &[]).await;
    assert_usage_error(&r, "run", &expected);
    assert!(r.stdout.is_empty(), "run printed transitions: {}", r.stdout);
}

// ---------------------------------------------------------------------------------------------
// 2. 3 instances × 20 roles
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn three_instances_twenty_roles_each_role_has_exactly_one_holder() {
    let _serial = SERIAL.lock().await;
    let (setup, roles, mut procs) = Setup::new("twenty", Timing::FAST, 20).await;

    let started = Instant::now();
    let holders = start_and_settle(&mut procs, &THREE, &roles, Duration::from_secs(5)).await;
    eprintln!(
        "all 20 roles promoted {:?} after starting 3 processes",
        started.elapsed()
    );

    // The KV agrees with the promotions: holder and term of every role key.
    let store = setup.store().await;
    for (role, (proc, term)) in &holders {
        let (holder, kv_term, _, _) = kv_lease(&store, role)
            .await
            .unwrap_or_else(|| panic!("role.{role} holds no lease"));
        assert_eq!(
            holder, procs.procs[*proc].id,
            "role {role}: KV holder vs promoted line"
        );
        assert_eq!(kv_term, *term, "role {role}: KV term vs promoted line");
    }
    // Still exactly one promotion per role and no demotion (lines that arrived meanwhile).
    procs.drain();
    let p = promotions(&procs.log, None);
    for role in &roles {
        let printed: Vec<(usize, u64)> = p
            .get(role)
            .map(|l| l.iter().map(|(proc, _, term, _)| (*proc, *term)).collect())
            .unwrap_or_default();
        assert!(
            printed.iter().all(|x| *x == holders[role]) && printed.len() <= 1,
            "role {role}: promotions {printed:?}, settled on {:?}",
            holders[role]
        );
    }
    let logged: Vec<(usize, String, u64)> =
        (0..3).flat_map(|n| procs.logged_promotions(n)).collect();
    assert_eq!(
        logged.len(),
        roles.len(),
        "promotions in the logs: {logged:?}"
    );
    let demoted: Vec<_> = procs
        .log
        .iter()
        .filter(|o| matches!(o.ev, Some(Ev::Demoted { .. })))
        .collect();
    assert!(demoted.is_empty(), "unexpected demotions: {demoted:?}");
    // Nothing else in the bucket claims a role, and each instance keeps exactly one session
    // (one TTL class: the fast timing's 1 s) and its presence record (protocol Q8).
    let keys: BTreeSet<String> = store
        .keys()
        .await
        .expect("list keys")
        .filter_map(|k| async move { k.ok() })
        .collect()
        .await;
    let mut expected: BTreeSet<String> = roles.iter().map(|r| format!("role.{r}")).collect();
    expected.extend(THREE.iter().map(|id| format!("session.{id}.1000")));
    expected.extend(THREE.iter().map(|id| format!("member.{id}")));
    assert_eq!(keys, expected);
}

// ---------------------------------------------------------------------------------------------
// 3. SIGKILL of a holder
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn sigkill_of_a_holder_moves_its_roles_within_ttl_plus_500ms() {
    let _serial = SERIAL.lock().await;
    let timing = Timing::FAST;
    let (setup, roles, mut procs) = Setup::new("sigkill", timing, 20).await;
    let holders = start_and_settle(&mut procs, &THREE, &roles, Duration::from_secs(5)).await;
    let victim = busiest(&holders);
    let victim_roles = held_by(&holders, victim);
    let store = setup.store().await;
    let recorder = KvRecorder::start(&store).await;

    let t0 = Instant::now();
    procs.signal(victim, SIGKILL);
    let limit = timing.ttl() + Duration::from_millis(500);
    let taken = procs
        .wait_promoted_since(
            "the victim's roles promoted elsewhere",
            limit + Duration::from_secs(3),
            &victim_roles,
            t0,
        )
        .await;
    let mut max = Duration::ZERO;
    for role in victim_roles.keys() {
        let (proc, _, term, at) = &taken[role][0];
        assert_ne!(*proc, victim);
        assert!(
            *term > victim_roles[role],
            "role {role}: new term {term} not after {}",
            victim_roles[role]
        );
        max = max.max(at.duration_since(t0));
    }
    eprintln!(
        "SIGKILL: {} roles of {} failed over; max {max:?} (limit {limit:?})",
        victim_roles.len(),
        procs.procs[victim].id
    );
    assert!(
        max <= limit,
        "slowest fail-over took {max:?}, limit {limit:?}"
    );

    // Exactly one new holder per role. The only tolerated extra transition: the new holder is
    // demoted with reason=expired right after its takeover and takes the role again. That
    // happens when a follower's observed-expiry backstop (ttl + heartbeat after the last
    // renewal it saw) fires while nats-server, whose expiry timer runs at most every 250 ms,
    // is expiring the old lease at the same moment, and the server's expiry marker lands
    // after the takeover write (reported; a flap, not two holders).
    procs.drain();
    let after = promotions(&procs.log, Some(t0));
    assert!(
        after.keys().all(|r| victim_roles.contains_key(r)),
        "survivors' roles were promoted again: {after:?}"
    );
    for role in victim_roles.keys() {
        let list = &after[role];
        let trace = recorder.describe(role, t0);
        assert!(
            list.iter().all(|(p, ..)| *p == list[0].0),
            "role {role} promoted by several processes: {list:?}; KV history:{trace}"
        );
        let expired: Vec<u64> = procs
            .log
            .iter()
            .filter(|o| o.proc == list[0].0 && o.at >= t0)
            .filter_map(|o| match &o.ev {
                Some(Ev::Demoted {
                    role: r,
                    term,
                    reason,
                }) if r == role && reason == "expired" => Some(*term),
                _ => None,
            })
            .collect();
        assert_eq!(
            list.len(),
            1 + expired.len(),
            "role {role}: promotions {list:?}, expiry demotions {expired:?}; KV history:{trace}"
        );
        if !expired.is_empty() {
            eprintln!(
                "note: role {role} flapped after the takeover (expiry marker after the new \
                 term): {list:?}; KV history:{trace}"
            );
        }
    }
    let demoted: Vec<_> = procs
        .log
        .iter()
        .filter(|o| o.proc != victim)
        .filter(|o| match &o.ev {
            Some(Ev::Demoted { role, reason, .. }) => {
                !(victim_roles.contains_key(role) && reason == "expired")
            }
            _ => false,
        })
        .collect();
    assert!(demoted.is_empty(), "survivors demoted: {demoted:?}");
}

// ---------------------------------------------------------------------------------------------
// 4. SIGTERM of a holder
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn sigterm_of_a_holder_hands_its_roles_over_within_500ms() {
    let _serial = SERIAL.lock().await;
    let (setup, roles, mut procs) = Setup::new("sigterm", Timing::FAST, 20).await;
    let holders = start_and_settle(&mut procs, &THREE, &roles, Duration::from_secs(5)).await;
    let victim = busiest(&holders);
    let victim_id = procs.procs[victim].id.clone();
    let victim_roles = held_by(&holders, victim);

    // Record every change of the role keys from before the signal on: the watcher has
    // delivered the current lease of each of the victim's roles before the signal is sent.
    let store = setup.store().await;
    let recorder = KvRecorder::start(&store).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !victim_roles.keys().all(|r| !recorder.history(r).is_empty()) {
        assert!(
            Instant::now() < deadline,
            "the recorder did not deliver the current leases"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let t0 = Instant::now();
    procs.signal(victim, SIGTERM);
    let limit = Duration::from_millis(500);
    let taken = procs
        .wait_promoted_since(
            "the victim's roles promoted elsewhere",
            Duration::from_secs(5),
            &victim_roles,
            t0,
        )
        .await;
    let mut max = Duration::ZERO;
    for role in victim_roles.keys() {
        let list = &taken[role];
        assert_eq!(
            list.len(),
            1,
            "role {role} promoted more than once: {list:?}; KV history:{}",
            recorder.describe(role, t0)
        );
        assert_ne!(list[0].0, victim);
        max = max.max(list[0].3.duration_since(t0));
    }
    eprintln!(
        "SIGTERM: {} roles of {victim_id} handed over; max {max:?} (limit {limit:?})",
        victim_roles.len()
    );
    assert!(
        max <= limit,
        "slowest hand-over took {max:?}, limit {limit:?}"
    );

    // The process exits 0 after releasing, and said so per role.
    let status = procs.wait_exit(victim, Duration::from_secs(10)).await;
    assert_eq!(
        status.code(),
        Some(0),
        "exit status of {victim_id}: {status}"
    );
    let lines = procs.events_of(victim);
    for (role, term) in &victim_roles {
        let expected = Ev::Demoted {
            role: role.clone(),
            term: *term,
            reason: "shutdown".into(),
        };
        assert!(
            lines.contains(&expected),
            "no {expected:?} from {victim_id}: {lines:?}"
        );
    }

    // In the KV: a delete marker (not an expiry/purge) directly before each new term. The
    // bucket keeps one entry per key: a marker replaced by the successor's put within a
    // millisecond or two may be gone before the recorder's consumer reaches it (seen on a
    // loaded CI machine: 4.4 ms from the signal to the successor's put). Such a role shows
    // the victim's term directly before the new one; at least one role must show its marker,
    // and none an expiry or purge (the 500 ms bound above already rules out an expiry).
    let mut markers_seen = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !victim_roles.keys().all(|r| {
        recorder
            .history(r)
            .iter()
            .any(|e| e.revision == taken[r][0].2)
    }) {
        assert!(
            Instant::now() < deadline,
            "watcher did not see the new terms"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for role in victim_roles.keys() {
        let new_term = taken[role][0].2;
        let history = recorder.history(role);
        let trace = recorder.describe(role, t0);
        let at = history
            .iter()
            .position(|e| e.revision == new_term)
            .expect("new term seen");
        assert!(
            at > 0,
            "role.{role}: nothing recorded before term {new_term}:{trace}"
        );
        let before = &history[at - 1];
        let victim_term = victim_roles[role];
        if before.operation == kv::Operation::Delete {
            markers_seen += 1;
        } else {
            assert!(
                before.operation == kv::Operation::Put && before.revision == victim_term,
                "role.{role}: the change before term {new_term} is neither a delete marker \
                 nor the victim's term {victim_term} (a marker not delivered):{trace}"
            );
        }
        assert!(
            !history.iter().any(|e| e.operation == kv::Operation::Purge),
            "role.{role}: an expiry/purge marker was written:{trace}"
        );
    }
    assert!(
        markers_seen > 0,
        "no delete marker seen before any of the new terms of {:?}",
        victim_roles.keys().collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Restart adoption
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn restart_after_sigkill_adopts_own_roles_before_the_ttl() {
    let _serial = SERIAL.lock().await;
    let timing = Timing::DEFAULT; // ttl 3 s
    let (setup, roles, mut procs) = Setup::new("restart", timing, 5).await;

    // node-a holds every role; node-b follows (it printed a holder line for each).
    let holders = start_and_settle(&mut procs, &["node-a"], &roles, Duration::from_secs(5)).await;
    let b = procs.start("node-b");
    let caught_up = procs
        .try_wait_until(Duration::from_secs(2), |log| {
            let seen: BTreeSet<&str> = log
                .iter()
                .filter(|o| o.proc == b)
                .filter_map(|o| match &o.ev {
                    Some(Ev::Holder { role, holder, .. }) if holder == "node-a" => {
                        Some(role.as_str())
                    }
                    _ => None,
                })
                .collect();
            roles
                .iter()
                .all(|r| seen.contains(r.as_str()))
                .then_some(())
        })
        .await;
    if caught_up.is_none() {
        // `nats-roles run` subscribes to its events only after the watcher started, so the
        // first `holder` lines can be lost (reported bug). After 2 s node-b follows anyway.
        assert!(
            procs.procs[b].child.try_wait().expect("try_wait").is_none(),
            "node-b exited"
        );
        eprintln!("note: node-b did not print a holder line for every role (start-up event race)");
    }
    let store = setup.store().await;
    let (_, _, _, old_incarnation) = kv_lease(&store, &roles[0]).await.expect("lease");
    let recorder = KvRecorder::start(&store).await;

    let t0 = Instant::now();
    procs.signal(0, SIGKILL);
    let status = procs.wait_exit(0, Duration::from_secs(5)).await;
    assert_eq!(
        status.code(),
        None,
        "SIGKILLed process exited normally: {status}"
    );
    let restarted_at = Instant::now();
    let a2 = procs.start("node-a");

    // The adoption writes, as seen in the KV: a put by node-a with a new incarnation.
    let deadline = Instant::now() + timing.ttl() + Duration::from_secs(3);
    let adopted: BTreeMap<String, (Instant, u64)> = loop {
        let found: BTreeMap<String, (Instant, u64)> = roles
            .iter()
            .filter_map(|r| {
                recorder
                    .puts(r)
                    .into_iter()
                    .find(|(_, _, holder, inc)| holder == "node-a" && *inc != old_incarnation)
                    .map(|(at, rev, _, _)| (r.clone(), (at, rev)))
            })
            .collect();
        if found.len() == roles.len() {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "restarted node-a did not rewrite every lease: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // And the process's own account: a `promoted` line per role with the adoption's term.
    let taken = procs
        .try_wait_until(Duration::from_secs(2), |log| {
            let p = promotions(log, Some(t0));
            roles.iter().all(|r| p.contains_key(r)).then_some(p)
        })
        .await
        .unwrap_or_else(|| promotions(&procs.log, Some(t0)));
    let mut max = Duration::ZERO;
    for role in &roles {
        let (seen_at, revision) = adopted[role];
        assert!(
            revision > holders[role].1,
            "role {role}: term did not advance"
        );
        match taken.get(role) {
            Some(list) => {
                assert_eq!(list.len(), 1, "role {role}: {list:?}");
                let (proc, _, term, at) = &list[0];
                assert_eq!(*proc, a2, "role {role} went to another process: {list:?}");
                assert_eq!(
                    *term, revision,
                    "role {role}: promoted term vs adoption write"
                );
                max = max.max(at.duration_since(t0));
            }
            None => {
                // Lost by the start-up event race (see `start_and_settle`): take the log.
                let logged = procs
                    .logged_promotions(a2)
                    .contains(&(a2, role.clone(), revision));
                assert!(
                    logged,
                    "role {role}: no promotion to term {revision} in stdout or stderr"
                );
                eprintln!(
                    "note: role {role}: promotion to term {revision} logged but not printed \
                     (start-up event race)"
                );
                max = max.max(seen_at.duration_since(t0));
            }
        }
    }
    eprintln!(
        "restart adoption: {} roles re-promoted; max {max:?} after SIGKILL, {:?} after the restart",
        roles.len(),
        max.saturating_sub(restarted_at.duration_since(t0))
    );
    assert!(
        max < Duration::from_secs(1),
        "adoption took {max:?} after SIGKILL (ttl {:?})",
        timing.ttl()
    );
    procs.drain();
    assert!(
        !procs
            .events_of(b)
            .iter()
            .any(|e| matches!(e, Ev::Promoted { .. })),
        "node-b took a role: {:?}",
        procs.events_of(b)
    );
}
