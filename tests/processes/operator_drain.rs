//! `nats-roles drain` / `undrain` with real `nats-roles run` processes (placement on) and a
//! real nats-server: the drain record makes the named instance drain and hand every role
//! over, deleting it ends that, an instance without a membership record is refused with its
//! exit code, the instance's own flag (`POST /api/drain`) and the record are OR-ed, and
//! `/readyz` and `GET /api/members` say the same.

use std::time::Duration;

use nats_roles::RoleName;
use nats_roles::tooling::inspect::Inspector;
use serde_json::Value;
use testkit::NatsServer;
use testkit::cli::CliOutput;
use testkit::instances::Deployment;
use tokio::time::Instant;

const LIMIT: Duration = Duration::from_secs(30);
const TOKEN: &str = "drain-cli-admin-token";

async fn inspector(server: &NatsServer, bucket: &str) -> Inspector {
    let (client, errors) = nats_roles::connect(
        &nats_roles::config::NatsConfig {
            servers: vec![server.url()],
            ..Default::default()
        },
        "drain-test",
    )
    .await
    .expect("connect");
    Inspector::open(&client, bucket, &errors, Duration::from_secs(5))
        .await
        .expect("open the bucket")
}

async fn held_by(i: &Inspector, roles: &[&str], id: &str) -> usize {
    let mut n = 0;
    for r in roles {
        let h = i
            .holder(&RoleName::new(*r).expect("role"))
            .await
            .expect("read the holder")
            .and_then(|h| h.holder.map(|h| h.to_string()));
        n += usize::from(h.as_deref() == Some(id));
    }
    n
}

async fn cli(server: &NatsServer, bucket: &str, args: &[&str]) -> CliOutput {
    let url = server.url();
    let mut all = args.to_vec();
    all.extend_from_slice(&["--server", &url, "--bucket", bucket]);
    testkit::cli::run(&all, &[], LIMIT).await
}

async fn get(port: u16, path: &str) -> Value {
    let (_, body) = testkit::http::request(port, "GET", path, &[], "")
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// What `/readyz` and `GET /api/members` say of `id`'s draining (waiting until the two agree).
async fn draining_seen(port: u16, id: &str, want: bool, d: &Deployment) {
    let until = Instant::now() + LIMIT;
    loop {
        let ready = get(port, "/readyz").await;
        let members = get(port, "/api/members").await;
        let member = members["members"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["id"] == id).cloned())
            .unwrap_or(Value::Null);
        if ready["draining"] == want && member["draining"] == want {
            // Draining does not make the instance unready; shutting down would.
            assert_eq!(ready["shutting_down"], false, "{ready}");
            return;
        }
        assert!(
            Instant::now() < until,
            "{id}: /readyz says {ready}, /api/members says {member}; want draining {want}\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn eventually_holds(i: &Inspector, roles: &[&str], id: &str, d: &Deployment) {
    let until = Instant::now() + LIMIT;
    while held_by(i, roles, id).await == 0 {
        assert!(Instant::now() < until, "{id} holds nothing\n{}", d.report());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two instances spread four roles. `drain node-c` (never started) exits 3 and writes nothing;
/// `drain node-a --wait` exits 0 once node-a's membership record says draining and it holds
/// no role (node-b holds all four), and node-a's `/readyz` and `/api/members` both say
/// draining. `POST /api/drain {"draining": false}` on node-a does not end a drain the record
/// asks for (its answer says so). `undrain node-a` exits 0 and node-a takes roles again.
/// Then `POST /api/drain` (the instance's own flag): `/readyz` and `/api/members` agree it
/// drains, and `undrain` exits 4, saying it still drains by its own flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_and_undrain_through_the_bucket_record() {
    let server = NatsServer::start().await;
    let bucket = "drain-cli";
    let names = ["r1", "r2", "r3", "r4"];
    let roles: Vec<(String, Option<i32>)> = names.iter().map(|r| ((*r).to_owned(), None)).collect();
    let mut d = Deployment::new(&server.url(), bucket, &[], "");
    let config = testkit::placement::write_config(d.dir(), "placement", bucket, &roles);
    testkit::placement::enable_admin_http(&config, TOKEN);
    std::fs::copy(&config, &d.config).expect("config");
    d.arg("--history");
    d.arg("{dir}/{id}.jsonl");
    let a = d.start("node-a").await;
    d.start("node-b").await;
    let port = d.instances[a].port;
    let i = inspector(&server, bucket).await;
    eventually_holds(&i, &names, "node-a", &d).await;
    eventually_holds(&i, &names, "node-b", &d).await;

    // Not a member: a clear error, exit 3, nothing written.
    let out = cli(&server, bucket, &["drain", "node-c"]).await;
    assert_eq!(out.code, Some(3), "{}", out.text());
    assert!(
        out.stderr.contains("node-c has no membership record"),
        "{}",
        out.text()
    );
    let c = nats_roles::InstanceId::new("node-c").expect("id");
    assert_eq!(i.drain_record(&c).await.expect("read"), None);

    // Drain node-a and wait until it holds nothing.
    let out = cli(
        &server,
        bucket,
        &[
            "drain",
            "node-a",
            "--reason",
            "kernel update",
            "--wait",
            "--timeout",
            "25s",
        ],
    )
    .await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.text(), d.report());
    assert!(out.stdout.contains("drained node-a"), "{}", out.text());
    assert_eq!(held_by(&i, &names, "node-a").await, 0);
    assert_eq!(held_by(&i, &names, "node-b").await, names.len());
    let record = i
        .drain_record(&nats_roles::InstanceId::new("node-a").expect("id"))
        .await
        .expect("read")
        .expect("the drain record");
    assert_eq!(record.reason, "kernel update");
    assert!(record.by.contains('@'), "{record:?}");
    draining_seen(port, "node-a", true, &d).await;

    // The instance's own flag cannot end a drain the record asks for.
    let auth = format!("Bearer {TOKEN}");
    let (code, body) = testkit::http::request(
        port,
        "POST",
        "/api/drain",
        &[("Authorization", &auth)],
        r#"{"draining": false}"#,
    )
    .await
    .expect("POST /api/drain");
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["draining"], true, "{body}");
    assert!(answer["drain_record_by"].is_string(), "{body}");

    // Undrain: node-a takes part again.
    let out = cli(&server, bucket, &["undrain", "node-a"]).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.text(), d.report());
    assert!(out.stdout.contains("takes part again"), "{}", out.text());
    draining_seen(port, "node-a", false, &d).await;
    eventually_holds(&i, &names, "node-a", &d).await;

    // The instance's own flag: /readyz and /api/members agree; undrain cannot end it.
    let (code, body) =
        testkit::http::request(port, "POST", "/api/drain", &[("Authorization", &auth)], "")
            .await
            .expect("POST /api/drain");
    assert_eq!(code, 200, "{body}");
    draining_seen(port, "node-a", true, &d).await;
    let out = cli(&server, bucket, &["undrain", "node-a", "--timeout", "2s"]).await;
    assert_eq!(out.code, Some(4), "{}", out.text());
    assert!(out.stderr.contains("own flag"), "{}", out.text());

    let dir = d.dir().display().to_string();
    let out = testkit::cli::run(&["history", "check", &dir], &[], LIMIT).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.text(), d.report());
}
