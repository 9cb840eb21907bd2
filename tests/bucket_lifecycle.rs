//! The bucket itself changing under the managers: deleted and recreated (new epoch), or
//! configured with a `max_age` too short for the leases.

mod support;

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use std::sync::{Arc, Mutex};

use nats_roles::{
    Error, FencingToken, FnCallbacks, InstanceId, Leadership, RoleManager, RoleName, RoleSpec,
    Timing,
};
use support::NatsServer;
use support::roles::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_bucket_is_noticed_and_roles_come_back_with_a_newer_epoch() {
    let server = NatsServer::start().await;
    let client = support::connect(&server.url()).await;
    let js = jetstream::new(client.clone());
    let role = RoleName::new("phoenix").unwrap();

    // Every promoted token, in order: they must strictly increase across the recreation.
    let tokens: Arc<Mutex<Vec<FencingToken>>> = Arc::default();
    let seen = tokens.clone();
    let callbacks = FnCallbacks::new(
        move |l: Leadership| {
            seen.lock().unwrap().push(l.token());
            async {}
        },
        |_| async {},
    );
    let manager = RoleManager::builder(client, InstanceId::new("a").unwrap())
        .bucket("lifecycle")
        .auto_create(1)
        .role(
            RoleSpec::new(role.clone())
                .timing(fast())
                .callbacks(callbacks),
        )
        .start()
        .await
        .unwrap();
    let handle = manager.role(&role).unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), handle.wait_leader())
        .await
        .expect("leader")
        .expect("running");

    // An operator deletes the bucket and creates it again.
    let started = tokio::time::Instant::now();
    js.delete_key_value("lifecycle").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    support::create_kv(
        &js,
        kv::Config {
            bucket: "lifecycle".into(),
            history: 1,
            limit_markers: Some(Duration::from_secs(60)),
            ..Default::default()
        },
    )
    .await;

    // The old term ends; a new one starts in the new bucket with a larger token.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let second = loop {
        if let Some(l) = handle.leadership()
            && l.token() > first.token()
        {
            break l;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new term in the recreated bucket within 20 s (status {:?})",
            handle.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!first.is_valid());
    assert!(
        second.token().epoch() > first.token().epoch(),
        "a new epoch"
    );
    let promoted = tokens.lock().unwrap().clone();
    assert!(
        promoted.windows(2).all(|w| w[0] < w[1]),
        "promoted tokens went back: {:?}",
        promoted
            .iter()
            .map(|t| (t.epoch(), t.term()))
            .collect::<Vec<_>>()
    );
    println!("bucket recreation: new term after {:?}", started.elapsed());
    let entry = js
        .get_key_value("lifecycle")
        .await
        .unwrap()
        .entry("role.phoenix")
        .await
        .unwrap()
        .expect("lease in the new bucket");
    assert_eq!(entry.revision, second.revision().max(entry.revision));
    manager.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Recreating the bucket under two managers: the holder's term ends at once (`bucket_reset`,
/// not at its deadline) when its renewal finds the key gone; roles added (or removed and
/// re-added) after the reset start on the new epoch; fencing tokens strictly increase per role
/// across the whole sequence, and the history checker finds no two valid holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_bucket_ends_terms_at_once_and_new_roles_take_the_new_epoch() {
    use nats_roles::history::{
        Event, HistoryRecorder, Record, TrialInfo, check_loaded, load_paths, mono_now_ns,
    };
    use nats_roles::{DemoteReason, RoleEvent};

    let server = NatsServer::start().await;
    let client = support::connect(&server.url()).await;
    let js = jetstream::new(client.clone());
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_path_buf();
    let trial = TrialInfo {
        kind: "bucket-reset".into(),
        ttl_ms: 1000,
        margin: 0.1,
        clock: 1.0,
        heartbeat_ms: Some(250),
        ..TrialInfo::default()
    };
    std::fs::write(
        dir.join("harness.jsonl"),
        format!(
            "{}\n",
            Record::harness(mono_now_ns(), None, Event::Trial(trial)).to_line()
        ),
    )
    .expect("harness file");
    let (p, late) = (RoleName::new("p").unwrap(), RoleName::new("late").unwrap());
    let mut managers = Vec::new();
    let mut recorders = Vec::new();
    for id in ["a", "b"] {
        let id = InstanceId::new(id).unwrap();
        let recorder = HistoryRecorder::in_dir(&dir, &id).expect("recorder");
        let m = RoleManager::builder(client.clone(), id)
            .bucket("reset")
            .auto_create(1)
            .history(recorder.clone())
            .role(RoleSpec::new(p.clone()).timing(fast()))
            .start()
            .await
            .unwrap();
        managers.push(m);
        recorders.push(recorder);
        // `a` first, so that it holds `p`.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let holder = managers
        .iter()
        .position(|m| m.is_leader(&p))
        .expect("someone holds p");
    let first = managers[holder].leadership(&p).expect("term");
    let mut events = managers[holder].events();

    // The operator deletes the bucket and creates it again.
    js.delete_key_value("reset").await.unwrap();
    let recreated = tokio::time::Instant::now();
    support::create_kv(
        &js,
        kv::Config {
            bucket: "reset".into(),
            history: 1,
            limit_markers: Some(Duration::from_secs(60)),
            ..Default::default()
        },
    )
    .await;
    // The holder's next renewal (within a heartbeat) finds the key gone: its term ends at
    // once, long before its deadline (TTL 1 s x 0.9).
    let reason = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match events.recv().await {
                Ok(RoleEvent::Demoted { role, reason, .. }) if role == p => return reason,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("events closed: {e}"),
            }
        }
    })
    .await
    .expect("the holder's term did not end");
    let ended = recreated.elapsed();
    println!("bucket recreation: term ended after {ended:?} ({reason})");
    assert_eq!(reason, DemoteReason::BucketReset, "ended by {reason}");
    assert!(!first.is_valid());

    // `p` is held again in the new epoch; a role added now starts there too.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let again = loop {
        if let Some(l) = managers.iter().find_map(|m| m.leadership(&p))
            && l.token().epoch() > first.token().epoch()
        {
            break l;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "p not held in the new epoch within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for m in &managers {
        m.add_role(RoleSpec::new(late.clone()).timing(fast()))
            .expect("add late");
    }
    let handle = managers[0].role(&late).expect("late");
    let holder_of_late = loop {
        if let Some(l) = managers.iter().find_map(|m| m.leadership(&late)) {
            break l;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "late not held within 20 s ({:?})",
            handle.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        holder_of_late.token().epoch(),
        again.token().epoch(),
        "a role added after the reset took the old epoch"
    );
    for m in &managers {
        m.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    for r in &recorders {
        r.stop();
    }
    let loaded = load_paths(&[dir.clone()]).expect("history loads");
    let report = check_loaded(&loaded);
    assert!(report.is_clean(), "{}", report.render_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_max_age_shorter_than_the_ttl_is_refused() {
    let server = NatsServer::start().await;
    let client = support::connect(&server.url()).await;
    let js = jetstream::new(client.clone());
    // An old-style bucket: no limit markers, one max_age for all keys.
    support::create_kv(
        &js,
        kv::Config {
            bucket: "short".into(),
            history: 1,
            max_age: Duration::from_secs(2),
            ..Default::default()
        },
    )
    .await;
    let timing = Timing {
        ttl: Duration::from_secs(3),
        heartbeat: Duration::from_millis(750),
        ..fast()
    };
    let result = RoleManager::builder(client, InstanceId::new("a").unwrap())
        .bucket("short")
        .role(RoleSpec::new(RoleName::new("r").unwrap()).timing(timing))
        .start()
        .await;
    match result {
        Err(Error::BucketMaxAgeTooShort { max_age, ttl, .. }) => {
            assert_eq!(max_age, Duration::from_secs(2));
            assert_eq!(ttl, Duration::from_secs(3));
        }
        other => panic!("expected BucketMaxAgeTooShort, got {other:?}"),
    }
}
