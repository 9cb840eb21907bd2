//! Presence records (protocol Q8 rules 1 and 6) against a real nats-server: a manager without
//! placement writes `member.<instance>` listing its live session, with the presence TTL,
//! refreshes it unchanged, rewrites it with a new session after a loss, writes it again after
//! another client deleted it only after a session renewal (and at most once per member
//! heartbeat), and deletes it at a graceful stop; with placement the member record lists the
//! sessions too; a record the NATS user may not write is retried slowly.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures_util::StreamExt;
use nats_roles::config::NatsConfig;
use nats_roles::manager::PlacementSettings;
use nats_roles::tooling::inspect::Inspector;
use nats_roles::{RoleManager, RoleSpec, Timing};
use testkit::roles::*;
use testkit::server_and_client;
use tokio::time::Instant;

/// Session TTL of the test's role: the presence TTL the tests ask for is `max(30 s, 10 × 3 s)`
/// = 30 s (the default is 5 min).
const TTL: Duration = Duration::from_secs(3);
/// The role's heartbeat: one session renewal per second (long, so that an immediate rewrite
/// after a delete would almost never have a renewal before it).
const HEARTBEAT: Duration = Duration::from_secs(1);

const BUCKET: &str = "presence";
const MEMBER: &str = "member.node-a";
const SESSION: &str = "session.node-a.3000";

/// The record and session value as JSON, with the record's revision.
async fn json_of(store: &kv::Store, key: &str) -> Option<(u64, serde_json::Value)> {
    let entry = store.entry(key).await.ok().flatten()?;
    if entry.operation != kv::Operation::Put {
        return None;
    }
    serde_json::from_slice(&entry.value)
        .ok()
        .map(|v| (entry.revision, v))
}

/// Waits (at most `limit`) until `key` holds a value `ok` accepts; that value.
async fn wait_json(
    store: &kv::Store,
    key: &str,
    limit: Duration,
    what: &str,
    ok: impl Fn(u64, &serde_json::Value) -> bool,
) -> (u64, serde_json::Value) {
    let deadline = Instant::now() + limit;
    loop {
        let now = json_of(store, key).await;
        if let Some((rev, v)) = &now
            && ok(*rev, v)
        {
            return (*rev, v.clone());
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {limit:?}; {key} holds {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The session uuid `session.node-a.3000` holds now.
async fn session_uuid(store: &kv::Store) -> String {
    let (_, v) = wait_json(
        store,
        SESSION,
        Duration::from_secs(10),
        "a live session",
        |_, v| v["session"].is_string(),
    )
    .await;
    v["session"].as_str().expect("a string").to_owned()
}

/// The session the record lists for the 3 s class.
fn listed(record: &serde_json::Value) -> Option<&str> {
    record["sessions"]["3000"].as_str()
}

/// Protocol Q8 rule 1 and rule 6 for an instance without placement: its presence record
/// (`placement: false`, no roles) lists its live session with `Nats-TTL` 30 (the presence TTL),
/// is rewritten unchanged within a third of it, names the new session after the session was
/// lost and restarted, comes back after another client deleted it only after a session renewal
/// that follows the delete in the stream, and is deleted at a graceful stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_without_placement_writes_a_presence_record_of_its_live_sessions() {
    let (server, client) = server_and_client().await;
    let timing = Timing {
        ttl: TTL,
        heartbeat: HEARTBEAT,
        ..fast()
    };
    let a = RoleManager::builder(client.clone(), inst("node-a"))
        .presence_ttl(Duration::from_secs(30))
        .bucket(BUCKET)
        .auto_create(1)
        .role(RoleSpec::new(role("x")).timing(timing))
        .start()
        .await
        .expect("node-a starts");
    let store = jetstream::new(client.clone())
        .get_key_value(BUCKET)
        .await
        .expect("the bucket");

    // 1. The presence record lists the live session, with the presence TTL.
    let first = session_uuid(&store).await;
    let (rev, record) = wait_json(
        &store,
        MEMBER,
        Duration::from_secs(10),
        "a presence record",
        |_, v| listed(v).is_some(),
    )
    .await;
    assert_eq!(listed(&record), Some(first.as_str()), "{record}");
    assert_eq!(record["placement"], false, "{record}");
    assert_eq!(record["instance"], "node-a", "{record}");
    assert!(
        record["roles"]
            .as_object()
            .is_some_and(serde_json::Map::is_empty),
        "{record}"
    );
    let stream = jetstream::new(client.clone())
        .get_stream(format!("KV_{BUCKET}"))
        .await
        .expect("the stream");
    let raw = stream
        .get_last_raw_message_by_subject(&format!("$KV.{BUCKET}.{MEMBER}"))
        .await
        .expect("the record's message");
    assert_eq!(
        raw.headers
            .get("Nats-TTL")
            .map(async_nats::HeaderValue::as_str),
        Some("30"),
        "the presence TTL: {:?}",
        raw.headers
    );

    // Placement readers (`nats-roles plan`, `status`, `drain`) do not count it as a member.
    let (inspect_client, errors) = nats_roles::connect(
        &NatsConfig {
            servers: vec![server.url()],
            ..NatsConfig::default()
        },
        "presence",
    )
    .await
    .expect("connect");
    let inspector = Inspector::open(&inspect_client, BUCKET, &errors, Duration::from_secs(5))
        .await
        .expect("open");
    let members = inspector.members().await.expect("members");
    assert!(
        members.is_empty(),
        "a presence record read as a placement member: {members:?}"
    );

    // 2. Rewritten unchanged every third of the presence TTL (10 s; 5 s of margin).
    let (refreshed, again) = wait_json(
        &store,
        MEMBER,
        Duration::from_secs(15),
        "a refresh",
        |r, _| r > rev,
    )
    .await;
    assert_eq!(again, record, "a refresh changes nothing but the revision");

    // 3. Another client deletes the session key: the session is lost, a new one starts, and
    // the record names it.
    store.delete(SESSION).await.expect("delete the session key");
    let (_, renamed) = wait_json(
        &store,
        MEMBER,
        Duration::from_secs(10),
        "the new session listed",
        |r, v| r > refreshed && listed(v).is_some_and(|s| s != first),
    )
    .await;
    let second = session_uuid(&store).await;
    assert_eq!(listed(&renamed), Some(second.as_str()), "{renamed}");

    // 4. Another client deletes the record: it comes back, after a session renewal that
    // follows the delete in the stream (Q8 rule 6).
    let mut watch = store
        .watch_many([MEMBER, SESSION])
        .await
        .expect("watch the record and the session");
    store.delete(MEMBER).await.expect("delete the record");
    let mut deleted_at = None;
    let mut renewed_after_delete = None;
    let order = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(entry)) = watch.next().await {
            match (entry.key.as_str(), entry.operation) {
                (MEMBER, kv::Operation::Delete) => deleted_at = Some(entry.revision),
                (SESSION, kv::Operation::Put) if deleted_at.is_some() => {
                    renewed_after_delete.get_or_insert(entry.revision);
                }
                (MEMBER, kv::Operation::Put) if deleted_at.is_some() => {
                    return (
                        entry.revision,
                        serde_json::from_slice::<serde_json::Value>(&entry.value),
                    );
                }
                _ => {}
            }
        }
        panic!("the watch ended");
    })
    .await;
    let Ok((rewritten, value)) = order else {
        panic!("the record was not written again within 10 s of its delete (at {deleted_at:?})");
    };
    let value = value.expect("a JSON record");
    assert_eq!(listed(&value), Some(second.as_str()), "{value}");
    assert!(
        renewed_after_delete.is_some_and(|s| s < rewritten),
        "the record came back at revision {rewritten} without a session renewal between its \
         delete at {deleted_at:?} and it (first renewal after the delete: \
         {renewed_after_delete:?})"
    );

    // 5. A graceful stop deletes the record.
    a.shutdown(Duration::from_secs(5))
        .await
        .expect("a clean stop");
    let entry = store.entry(MEMBER).await.expect("read the record");
    assert!(
        entry
            .as_ref()
            .is_none_or(|e| e.operation != kv::Operation::Put),
        "the record is still there after a graceful stop: {entry:?}"
    );
}

/// With placement the member record is the placement record (no `placement` field: `true`)
/// and lists the live sessions too, with the presence TTL; placement readers list it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_member_record_lists_its_live_sessions_with_the_presence_ttl() {
    let (server, client) = server_and_client().await;
    let timing = Timing {
        ttl: TTL,
        heartbeat: HEARTBEAT,
        ..fast()
    };
    let a = RoleManager::builder(client.clone(), inst("node-a"))
        .presence_ttl(Duration::from_secs(30))
        .bucket(BUCKET)
        .auto_create(1)
        .role(RoleSpec::new(role("x")).timing(timing))
        .placement(PlacementSettings {
            enabled: true,
            ..PlacementSettings::default()
        })
        .start()
        .await
        .expect("node-a starts");
    let store = jetstream::new(client.clone())
        .get_key_value(BUCKET)
        .await
        .expect("the bucket");
    let session = session_uuid(&store).await;
    let (_, record) = wait_json(
        &store,
        MEMBER,
        Duration::from_secs(10),
        "a member record listing the session",
        |_, v| listed(v) == Some(session.as_str()),
    )
    .await;
    assert!(record.get("placement").is_none(), "{record}");
    assert!(record["roles"].get("x").is_some(), "{record}");
    let stream = jetstream::new(client.clone())
        .get_stream(format!("KV_{BUCKET}"))
        .await
        .expect("the stream");
    let raw = stream
        .get_last_raw_message_by_subject(&format!("$KV.{BUCKET}.{MEMBER}"))
        .await
        .expect("the record's message");
    assert_eq!(
        raw.headers
            .get("Nats-TTL")
            .map(async_nats::HeaderValue::as_str),
        Some("30"),
        "{:?}",
        raw.headers
    );
    let (inspect_client, errors) = nats_roles::connect(
        &NatsConfig {
            servers: vec![server.url()],
            ..NatsConfig::default()
        },
        "presence",
    )
    .await
    .expect("connect");
    let inspector = Inspector::open(&inspect_client, BUCKET, &errors, Duration::from_secs(5))
        .await
        .expect("open");
    let members = inspector.members().await.expect("members");
    assert_eq!(members.len(), 1, "{members:?}");
    a.shutdown(Duration::from_secs(5))
        .await
        .expect("a clean stop");
    let entry = store.entry(MEMBER).await.expect("read the record");
    assert!(
        entry
            .as_ref()
            .is_none_or(|e| e.operation != kv::Operation::Put),
        "the record is still there after a graceful stop: {entry:?}"
    );
}

/// Protocol Q8 rule 6: a record deleted by another process again and again is written again at
/// most once per member heartbeat period (a quarter of `placement.member_ttl`: 2 s here, twice
/// the session's renewal period, so the renewal it also waits for does not hide the limit).
/// Two processes with one instance id do not rewrite in a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_deleted_again_and_again_is_written_at_most_once_per_member_heartbeat() {
    let (_server, client) = server_and_client().await;
    let timing = Timing {
        ttl: TTL,
        heartbeat: HEARTBEAT,
        ..fast()
    };
    let a = RoleManager::builder(client.clone(), inst("node-a"))
        .presence_ttl(Duration::from_secs(30))
        .bucket(BUCKET)
        .auto_create(1)
        .role(RoleSpec::new(role("x")).timing(timing))
        .placement(PlacementSettings {
            enabled: true,
            member_ttl: Some(Duration::from_secs(8)),
            ..PlacementSettings::default()
        })
        .start()
        .await
        .expect("node-a starts");
    let store = jetstream::new(client.clone())
        .get_key_value(BUCKET)
        .await
        .expect("the bucket");
    wait_json(
        &store,
        MEMBER,
        Duration::from_secs(10),
        "a member record",
        |_, v| listed(v).is_some(),
    )
    .await;
    let mut watch = store.watch(MEMBER).await.expect("watch the record");
    let mut rewrites = Vec::new();
    store.delete(MEMBER).await.expect("delete the record");
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(Ok(entry)) = watch.next().await {
            if entry.operation != kv::Operation::Put {
                continue;
            }
            rewrites.push(Instant::now());
            if rewrites.len() == 3 {
                return;
            }
            store.delete(MEMBER).await.expect("delete the record");
        }
    })
    .await
    .unwrap_or_else(|_| panic!("3 rewrites within 20 s; seen at {rewrites:?}"));
    for pair in rewrites.windows(2) {
        let gap = pair[1] - pair[0];
        // The limit is 2 s between the rewrites' sends; 200 ms for their round trips.
        assert!(
            gap >= Duration::from_millis(1800),
            "rewritten {gap:?} after the previous rewrite (at most once per member heartbeat, \
             2 s): {rewrites:?}"
        );
    }
    a.shutdown(Duration::from_secs(5))
        .await
        .expect("a clean stop");
}

/// A NATS user that may publish anything but its member record.
const AUTH_DENY_MEMBER: &str = r#"authorization {
  users = [
    { user: admin, password: a }
    {
      user: ro, password: r,
      permissions: {
        publish: { allow: [">"], deny: ["$KV.presence.member.node-a"] }
        subscribe: { allow: [">"] }
      }
    }
  ]
}"#;

/// The same users after the operator fixed the permission.
const AUTH_FIXED: &str = r#"authorization {
  users = [
    { user: admin, password: a }
    { user: ro, password: r, permissions: { publish: { allow: [">"] }, subscribe: { allow: [">"] } } }
  ]
}"#;

/// Publish violations of the member record's subject in the server's log.
fn member_violations(server: &testkit::NatsServer) -> usize {
    std::fs::read_to_string(server.log_path())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("Publish Violation") && l.contains("$KV.presence.member.node-a"))
        .count()
}

/// A member record the NATS user may not write (a persistent failure) is retried at a slow
/// cadence — every third of the presence TTL (10 s), not every quarter of a member heartbeat
/// (one permission violation in the server's log each time) — and written once the operator
/// fixed the permission, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_member_record_is_retried_slowly_and_written_once_allowed() {
    let mut server = testkit::NatsServer::start_with_config(AUTH_DENY_MEMBER).await;
    let config = NatsConfig {
        servers: vec![server.url()],
        user: Some("ro".into()),
        password: Some("r".into()),
        ..NatsConfig::default()
    };
    let (client, errors) = nats_roles::connect(&config, "presence-perm")
        .await
        .expect("connect as ro");
    let timing = Timing {
        ttl: TTL,
        heartbeat: HEARTBEAT,
        ..fast()
    };
    let a = RoleManager::builder(client.clone(), inst("node-a"))
        .presence_ttl(Duration::from_secs(30))
        .bucket(BUCKET)
        .auto_create(1)
        .server_errors(errors)
        .role(RoleSpec::new(role("x")).timing(timing))
        .start()
        .await
        .expect("node-a starts");
    let store = jetstream::new(client.clone())
        .get_key_value(BUCKET)
        .await
        .expect("the bucket");
    session_uuid(&store).await;
    // The first attempt is denied at once; 4 s more hold at most one more (the next is 10 s
    // after the first), where a retry every quarter heartbeat (~190 ms) would make about 20.
    let deadline = Instant::now() + Duration::from_secs(5);
    while member_violations(&server) == 0 {
        assert!(
            Instant::now() < deadline,
            "no denied write of the member record in the log"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let denied = member_violations(&server);
    assert!(
        denied <= 2,
        "{denied} denied writes of the member record within 4 s of the first: not slow"
    );
    server.reload_with(AUTH_FIXED);
    let session = session_uuid(&store).await;
    wait_json(
        &store,
        MEMBER,
        Duration::from_secs(15),
        "the record written once allowed",
        |_, v| listed(v) == Some(session.as_str()),
    )
    .await;
    a.shutdown(Duration::from_secs(5))
        .await
        .expect("a clean stop");
}
