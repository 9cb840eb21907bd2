//! The operator side against real nats-server processes: eviction racing the holder's
//! renewals, and the NATS permission sets of docs/operations.md (each one tested with a server
//! configured with exactly that set).

use std::time::Duration;

use crate::BIN;
use async_nats::jetstream::{self, kv};
use nats_roles::config::NatsConfig;
use nats_roles::tooling::inspect::{Expect, Inspector};
use nats_roles::tooling::value::LeaseValue;
use nats_roles::{InstanceId, RoleManager, RoleSpec};
use testkit::NatsServer;
use testkit::cli::CliOutput;
use testkit::instances::Deployment;
use testkit::roles::{lease_bucket, role};
use tokio::time::Instant;
use uuid::Uuid;

/// A lease value of `holder`'s term `nonce` (`term`: `None` in the write that starts it).
fn lease(holder: &str, nonce: Uuid, term: Option<u64>) -> bytes::Bytes {
    LeaseValue {
        v: nats_roles::tooling::value::VALUE_VERSION,
        holder: InstanceId::new(holder).expect("valid id"),
        incarnation: Uuid::nil(),
        session: uuid::Uuid::nil(),
        session_key: nats_roles::tooling::value::session_key(
            &InstanceId::new(holder).expect("valid id"),
            10_000,
        ),
        nonce,
        term,
        priority: 0,
        ttl_ms: 10_000,
        meta: Default::default(),
        acquired_at: None,
        renewed_at: None,
    }
    .to_bytes()
}

// ---------------------------------------------------------------------------------------------
// Eviction vs. renewals (issue 17, item 7)
// ---------------------------------------------------------------------------------------------

/// A live holder renews every heartbeat, so a renewal can land between the eviction's read
/// and its conditional delete. That renewal keeps the term: the eviction must go ahead (on
/// the new revision), not answer "changed while it was being evicted".
///
/// The holder here renews every ~2 ms (a real one every heartbeat, hundreds of ms), which
/// makes the race happen in most tries instead of once in ~40.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_goes_ahead_when_the_holder_renews_the_same_term_meanwhile() {
    const TRIES: usize = 40;
    let server = NatsServer::start().await;
    let admin = testkit::connect(&server.url()).await;
    let kv = testkit::create_kv(&jetstream::new(admin), lease_bucket("op-evict")).await;
    let config = NatsConfig {
        servers: vec![server.url()],
        ..NatsConfig::default()
    };
    let (client, errors) = nats_roles::connect(&config, "evict-test")
        .await
        .expect("connect");
    let inspector = Inspector::open(&client, "op-evict", &errors, Duration::from_secs(5))
        .await
        .expect("open the bucket");
    let r = role("busy");
    let mut renewals_during_evictions = 0;
    for i in 0..TRIES {
        // A new term, renewed until the eviction makes the next renewal fail.
        let nonce = Uuid::new_v4();
        let first = kv
            .create("role.busy", lease("holder", nonce, None))
            .await
            .expect("start a term");
        let renewer = tokio::spawn({
            let kv = kv.clone();
            async move {
                let mut revision = first;
                let mut renewals = 0u32;
                while let Ok(next) = kv
                    .update("role.busy", lease("holder", nonce, Some(first)), revision)
                    .await
                {
                    revision = next;
                    renewals += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                renewals
            }
        });
        let evicted = match inspector.evict(&r, Expect::any()).await {
            Ok(evicted) => evicted,
            Err(e) => {
                renewer.abort();
                panic!("try {i}: eviction failed with only same-term renewals going on: {e}");
            }
        };
        renewals_during_evictions += renewer.await.expect("renewer");
        assert_eq!(evicted.term, Some(first), "try {i}: {evicted:?}");
        assert_eq!(evicted.holder.as_deref(), Some("holder"), "try {i}");
        let after = kv.entry("role.busy").await.expect("read");
        assert!(
            after.is_some_and(|e| e.operation != kv::Operation::Put),
            "try {i}: the lease is still there"
        );
    }
    eprintln!("{TRIES} evictions, {renewals_during_evictions} renewals in flight meanwhile");
}

// ---------------------------------------------------------------------------------------------
// Permission sets of docs/operations.md (issue 17, item 1)
// ---------------------------------------------------------------------------------------------

/// Passwords filled into the documented block.
const PASSWORDS: [(&str, &str); 3] = [
    ("$ROLES_PASSWORD", "run-pw"),
    ("$ROLES_OPERATOR_PASSWORD", "operator-pw"),
    ("$ROLES_VIEWER_PASSWORD", "viewer-pw"),
];

/// Users the test adds: an admin (creates the bucket, holds roles) and the operator set of
/// before issue 17 (no direct gets), whose `status` used to time out after 5 s.
const TEST_USERS: &str = r#"
    { user: admin, password: admin }
    {
      user: no-direct-get, password: ndg,
      permissions: {
        publish: { allow: ["$JS.API.STREAM.INFO.KV_roles", "$JS.API.CONSUMER.CREATE.KV_roles",
                           "$JS.API.CONSUMER.CREATE.KV_roles.>", "$JS.FC.KV_roles.>"] }
        subscribe: { allow: ["_INBOX.>"] }
      }
    }
"#;

/// The `authorization` block of docs/operations.md ("A least-privilege NATS user"), exactly
/// as documented (passwords filled in), plus [`TEST_USERS`].
fn documented_authorization() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md");
    let doc = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let section = doc
        .split("\n## A least-privilege NATS user\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no least-privilege section in {path}"));
    let block = section
        .split("```text\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap_or_else(|| panic!("no text block in the least-privilege section"));
    assert!(block.starts_with("authorization {"), "{block}");
    for user in [
        "user: roles ",
        "user: roles-operator ",
        "user: roles-viewer ",
    ] {
        assert!(block.contains(user), "the documented block has no {user:?}");
    }
    let mut block = block.to_owned();
    for (var, password) in PASSWORDS {
        assert!(block.contains(var), "{var} is not in the documented block");
        block = block.replace(var, &format!("\"{password}\""));
    }
    block.replacen("users = [", &format!("users = [{TEST_USERS}"), 1)
}

/// The server's log lines reporting a permission violation.
fn violations(server: &NatsServer) -> Vec<String> {
    std::fs::read_to_string(server.log_path())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("Violation"))
        .map(str::to_owned)
        .collect()
}

/// Runs `nats-roles args... --server URL --user USER --password PASSWORD`.
async fn cli(server: &NatsServer, user: &str, password: &str, args: &[&str]) -> CliOutput {
    let url = server.url();
    let mut all = args.to_vec();
    all.extend(["--server", &url, "--user", user, "--password", password]);
    testkit::cli::run(&all, &[], Duration::from_secs(20)).await
}

/// The bucket `roles` (created by the admin) with `alpha` and `beta` held by an admin
/// manager.
async fn bucket_with_holder(server: &NatsServer) -> RoleManager {
    let admin = testkit::connect_with(&server.url(), || {
        async_nats::ConnectOptions::with_user_and_password("admin".into(), "admin".into())
    })
    .await;
    testkit::create_kv(&jetstream::new(admin.clone()), lease_bucket("roles")).await;
    let manager = RoleManager::builder(admin, InstanceId::new("holder").expect("valid id"))
        .bucket("roles")
        .role(RoleSpec::new(role("alpha")))
        .role(RoleSpec::new(role("beta")))
        .start()
        .await
        .expect("the admin's manager starts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(manager.is_leader(&role("alpha")) && manager.is_leader(&role("beta"))) {
        assert!(Instant::now() < deadline, "the admin never held both roles");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    manager
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_operator_and_viewer_sets_are_enough_for_their_commands() {
    let server = NatsServer::start_with_config(&documented_authorization()).await;
    let _holder = bucket_with_holder(&server).await;

    for (user, password) in [
        ("roles-operator", "operator-pw"),
        ("roles-viewer", "viewer-pw"),
    ] {
        let status = cli(&server, user, password, &["status", "--json"]).await;
        assert_eq!(status.code, Some(0), "{user} status:\n{}", status.text());
        let list: nats_roles::tooling::inspect::RoleList =
            serde_json::from_str(&status.stdout).expect("status --json");
        let roles: Vec<&str> = list.roles.iter().map(|r| r.role.as_str()).collect();
        assert_eq!(roles, ["alpha", "beta"], "{user}: {}", status.text());
        let watch = cli(&server, user, password, &["watch", "--count", "0"]).await;
        assert_eq!(watch.code, Some(0), "{user} watch:\n{}", watch.text());
        assert!(
            watch.stdout.contains("current  alpha  holder"),
            "{}",
            watch.text()
        );
    }
    assert_eq!(
        violations(&server),
        Vec::<String>::new(),
        "status and watch"
    );

    // The operator evicts; the viewer may not, and is told so at once.
    let evict = cli(
        &server,
        "roles-operator",
        "operator-pw",
        &["evict", "alpha", "--yes"],
    )
    .await;
    assert_eq!(evict.code, Some(0), "{}", evict.text());
    assert!(
        evict.stdout.contains("evicted holder from role alpha"),
        "{}",
        evict.text()
    );
    assert_eq!(violations(&server), Vec::<String>::new(), "evict");

    // Freezes and moves write control records: the operator may.
    for args in [
        &["freeze", "--reason", "maintenance"][..],
        &["unfreeze"][..],
        &["move", "beta", "--to", "node-z"][..],
        &["move", "beta", "--cancel"][..],
    ] {
        let out = cli(&server, "roles-operator", "operator-pw", args).await;
        let want = if args[0] == "move" && args.len() == 4 && args[2] == "--to" {
            3 // node-z is not running: not moved, nothing written
        } else {
            0
        };
        assert_eq!(out.code, Some(want), "{args:?}: {}", out.text());
    }
    assert_eq!(violations(&server), Vec::<String>::new(), "freeze, move");

    let denied = cli(
        &server,
        "roles-viewer",
        "viewer-pw",
        &["evict", "beta", "--yes"],
    )
    .await;
    assert_eq!(denied.code, Some(1), "{}", denied.text());
    assert!(
        denied
            .stderr
            .contains("permission denied on $JS.API.STREAM.MSG.GET.KV_roles (publish)"),
        "{}",
        denied.text()
    );
    assert!(denied.took < Duration::from_secs(3), "{}", denied.text());
    let seen = violations(&server);
    assert!(
        !seen.is_empty() && seen.iter().all(|l| l.contains("roles-viewer")),
        "only the viewer's evict is refused: {seen:#?}"
    );
}

/// The bug of issue 17: without direct gets `status` and `watch` timed out after 5 s with
/// `JetStream request failed: timed out`. Now they stop at once, naming the subject.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_permission_is_named_at_once_not_a_timeout() {
    let server = NatsServer::start_with_config(&documented_authorization()).await;
    let _holder = bucket_with_holder(&server).await;
    for args in [&["status"][..], &["watch"], &["evict", "alpha", "--yes"]] {
        let out = cli(&server, "no-direct-get", "ndg", args).await;
        assert_eq!(out.code, Some(1), "{args:?}:\n{}", out.text());
        let expected = if args[0] == "evict" {
            "permission denied on $JS.API.STREAM.MSG.GET.KV_roles (publish)"
        } else {
            "permission denied on $JS.API.DIRECT.GET.KV_roles.$KV.roles.role."
        };
        assert!(out.stderr.contains(expected), "{args:?}:\n{}", out.text());
        assert!(
            out.took < Duration::from_secs(3),
            "{args:?}:\n{}",
            out.text()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_run_set_elects_and_hands_over() {
    let server = NatsServer::start_with_config(&documented_authorization()).await;
    let admin = testkit::connect_with(&server.url(), || {
        async_nats::ConnectOptions::with_user_and_password("admin".into(), "admin".into())
    })
    .await;
    testkit::create_kv(&jetstream::new(admin), lease_bucket("roles")).await;
    let mut d = Deployment::new(
        &server.url(),
        "roles",
        &["alpha"],
        "nats:\n  user: roles\n  password: run-pw\n",
    );
    let a = d.start("node-a").await;
    let promoted = |d: &Deployment, i: usize| {
        d.instances[i]
            .stdout()
            .iter()
            .any(|l| l.starts_with("promoted role=alpha"))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !promoted(&d, a) {
        assert!(
            Instant::now() < deadline,
            "node-a never led\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = d.start("node-b").await;
    // node-b's watcher is up once it has seen the holder.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !d.instances[b]
        .stdout()
        .iter()
        .any(|l| l.starts_with("holder role=alpha holder=node-a"))
    {
        assert!(
            Instant::now() < deadline,
            "node-b never saw node-a\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d.terminate(a);
    let status = d.wait_exit(a, Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}\n{}", d.report());
    let deadline = Instant::now() + Duration::from_secs(2);
    while !promoted(&d, b) {
        assert!(
            Instant::now() < deadline,
            "node-b did not take over\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(violations(&server), Vec::<String>::new(), "{}", d.report());
}

// ---------------------------------------------------------------------------------------------
// Error messages that name the thing (issue 17, item 5)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_missing_nkey_seed_file_is_named() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let seed = dir.path().join("no-such.nk");
    let seed = seed.to_str().expect("UTF-8 path");
    let mut cmd = testkit::cli::command(BIN);
    cmd.args(["status", "--server", "nats://127.0.0.1:1", "--nkey", seed]);
    let out = tokio::time::timeout(Duration::from_secs(20), cmd.output())
        .await
        .expect("finished")
        .expect("ran");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("loading nkey seed file '{seed}'"))
            && stderr.contains("No such file or directory"),
        "{stderr}"
    );
}
