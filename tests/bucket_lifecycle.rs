//! The bucket itself changing under the managers: deleted and recreated (new epoch), or
//! configured with a `max_age` too short for the leases; and role timing checked before a role
//! starts.

mod support;

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use std::sync::{Arc, Mutex};

use nats_roles::{
    Error, FencingToken, FnCallbacks, InstanceId, Leadership, RoleManager, RoleName, RoleSpec,
    Timing, TimingError,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_timing_that_breaks_a_rule_is_refused_by_start_and_add_role() {
    let server = NatsServer::start().await;
    let client = support::connect(&server.url()).await;
    let bad = [
        (
            Timing {
                heartbeat: Duration::from_millis(400),
                ..fast()
            },
            "heartbeat",
        ),
        (
            Timing {
                deadline_margin: f64::NAN,
                ..fast()
            },
            "deadline_margin",
        ),
        (
            Timing {
                deadline_margin: 0.7,
                ..fast()
            },
            "deadline_margin",
        ),
        (
            Timing {
                operation_timeout: Duration::from_millis(900),
                ..fast()
            },
            "operation_timeout",
        ),
        (
            Timing {
                ttl: Duration::from_secs(31_557_600_000_000_000),
                ..fast()
            },
            "ttl",
        ),
    ];
    for (timing, field) in bad {
        // start() refuses before touching the bucket (it does not exist).
        let result = RoleManager::builder(client.clone(), inst("a"))
            .bucket("timing-missing")
            .role(RoleSpec::new(role("r")).timing(timing))
            .start()
            .await;
        match result {
            Err(Error::InvalidTiming { role, source }) => {
                assert_eq!(role.as_str(), "r");
                assert_eq!(source.field(), field, "{source}");
            }
            other => panic!("{timing:?}: expected InvalidTiming, got {other:?}"),
        }
    }
    let manager = RoleManager::builder(client, inst("a"))
        .bucket("timing")
        .auto_create(1)
        .start()
        .await
        .unwrap();
    for (timing, field) in bad {
        match manager.add_role(RoleSpec::new(role("r")).timing(timing)) {
            Err(Error::InvalidTiming { source, .. }) => assert_eq!(source.field(), field),
            other => panic!("{timing:?}: expected InvalidTiming, got {other:?}"),
        }
    }
    assert!(manager.roles().is_empty(), "no invalid role was added");
    let err = manager
        .add_role(RoleSpec::new(role("r")).timing(Timing {
            heartbeat: Duration::ZERO,
            ..fast()
        }))
        .unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidTiming {
            source: TimingError::HeartbeatZero,
            ..
        }
    ));
    manager.add_role(spec(&role("r"))).expect("valid timing");
    manager.shutdown(Duration::from_secs(5)).await.unwrap();
}
