//! `nats-roles plan` says why, against real `nats-roles run` processes (placement on, zones)
//! and a real nats-server: a member joining without a zone among members with one is a zone
//! of its own and gets half the roles — the note names the zones, their members and their
//! roles; `--leave` of every member lists the roles left unheld.

use std::time::Duration;

use nats_roles::RoleName;
use nats_roles::tooling::inspect::Inspector;
use testkit::NatsServer;
use testkit::cli::CliOutput;
use testkit::instances::Deployment;
use tokio::time::Instant;

const LIMIT: Duration = Duration::from_secs(30);

async fn plan(server: &NatsServer, bucket: &str, args: &[&str]) -> CliOutput {
    let url = server.url();
    let mut all = vec!["plan", "--server", &url, "--bucket", bucket];
    all.extend_from_slice(args);
    testkit::cli::run(&all, &[], LIMIT).await
}

/// node-a and node-b in zone z1 hold four roles. `plan --join node-d` (no zone) prints that
/// zones decided the shares: zone z1 (node-a, node-b) 2 roles, (no zone) node-d 2 roles, and
/// how to give node-d its zone; `--join node-d:1:z1` prints no zone note. `plan --leave
/// node-a --leave node-b` lists all four roles as left unheld; `--json` carries `unheld` and
/// `zones`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_names_the_zones_that_decided_and_the_roles_left_unheld() {
    let server = NatsServer::start().await;
    let bucket = "plan-why";
    let names = ["r1", "r2", "r3", "r4"];
    let roles: Vec<(String, Option<i32>)> = names.iter().map(|r| ((*r).to_owned(), None)).collect();
    let mut d = Deployment::new(&server.url(), bucket, &[], "");
    let config = testkit::placement::write_config(d.dir(), "placement", bucket, &roles);
    std::fs::copy(&config, &d.config).expect("config");
    d.env("NATS_ROLES_ZONE", "z1");
    d.start("node-a").await;
    d.start("node-b").await;
    let (client, errors) = nats_roles::connect(
        &nats_roles::config::NatsConfig {
            servers: vec![server.url()],
            ..Default::default()
        },
        "plan-test",
    )
    .await
    .expect("connect");
    let i = Inspector::open(&client, bucket, &errors, Duration::from_secs(5))
        .await
        .expect("open");
    let until = Instant::now() + LIMIT;
    loop {
        let mut held = 0;
        for r in names {
            held += usize::from(
                i.holder(&RoleName::new(r).expect("role"))
                    .await
                    .expect("read")
                    .is_some(),
            );
        }
        if held == names.len() {
            break;
        }
        assert!(Instant::now() < until, "roles not held\n{}", d.report());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let out = plan(&server, bucket, &["--join", "node-d"]).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    for line in [
        "note: zones decided the shares",
        "  zone z1: node-a, node-b — 2 roles",
        "  (no zone): node-d — 2 roles",
        "node-d joins without a zone, so it is a zone of its own; give it its zone with --join node-d:1:ZONE",
    ] {
        assert!(
            out.stdout.contains(line),
            "{line:?} missing:\n{}",
            out.text()
        );
    }
    let out = plan(&server, bucket, &["--join", "node-d:1:z1"]).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(!out.stdout.contains("zones decided"), "{}", out.text());

    let out = plan(&server, bucket, &["--leave", "node-a", "--leave", "node-b"]).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(
        out.stdout
            .contains("left unheld — no member left campaigns for them: r1, r2, r3, r4"),
        "{}",
        out.text()
    );
    let out = plan(
        &server,
        bucket,
        &["--leave", "node-a", "--leave", "node-b", "--json"],
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(json["unheld"].as_array().map(Vec::len), Some(4), "{json}");
    let out = plan(&server, bucket, &["--join", "node-d", "--json"]).await;
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(json["zones"].as_array().map(Vec::len), Some(2), "{json}");
}
