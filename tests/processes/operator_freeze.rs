//! Freezes you can see, with real `nats-roles run` processes (placement on) and a real
//! nats-server: `status` and `plan` print an active freeze first (who, why, since), a second
//! `freeze` names the one it replaces, and each instance logs a freeze, its replacement and
//! its end once each.

use std::time::Duration;

use testkit::NatsServer;
use testkit::cli::CliOutput;
use testkit::instances::Deployment;
use tokio::time::Instant;

const LIMIT: Duration = Duration::from_secs(30);

async fn cli(server: &NatsServer, bucket: &str, user: &str, args: &[&str]) -> CliOutput {
    let url = server.url();
    let mut all = args.to_vec();
    all.extend_from_slice(&["--server", &url, "--bucket", bucket]);
    testkit::cli::run(&all, &[("USER", user)], LIMIT).await
}

fn count(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// Waits until every instance's log has `needle` once, then a little longer (several
/// re-plans), and asserts it is still there exactly once.
async fn logged_once(d: &Deployment, needle: &str) {
    let until = Instant::now() + LIMIT;
    while d.instances.iter().any(|i| count(&i.stderr(), needle) == 0) {
        assert!(
            Instant::now() < until,
            "{needle:?} not logged\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Re-plans tick every second and on every member heartbeat: several of them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for i in &d.instances {
        assert_eq!(
            count(&i.stderr(), needle),
            1,
            "{}: {needle:?}\n{}",
            i.id,
            i.stderr()
        );
    }
}

/// Two instances, placement on. alice freezes (`status` and `plan` print `FROZEN … by
/// alice@HOST since … (reason "deploy")` first; each instance logs the freeze once); bob
/// freezes again (his command says it replaced alice's; each instance logs the replacement
/// once); unfreeze names bob's freeze, and each instance logs the end once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freezes_are_shown_first_named_when_replaced_and_logged_once() {
    let server = NatsServer::start().await;
    let bucket = "freeze-visible";
    let roles: Vec<(String, Option<i32>)> = ["r1", "r2"]
        .iter()
        .map(|r| ((*r).to_owned(), None))
        .collect();
    let mut d = Deployment::new(&server.url(), bucket, &[], "");
    let config = testkit::placement::write_config(d.dir(), "placement", bucket, &roles);
    std::fs::copy(&config, &d.config).expect("config");
    d.start("node-a").await;
    d.start("node-b").await;

    let out = cli(&server, bucket, "alice", &["freeze", "--reason", "deploy"]).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(!out.stdout.contains("replaced"), "{}", out.text());
    for cmd in ["status", "plan"] {
        let out = cli(&server, bucket, "viewer", &[cmd]).await;
        assert_eq!(out.code, Some(0), "{}", out.text());
        let first = out.stdout.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("FROZEN: voluntary placement moves are frozen by alice@")
                && first.contains(" since ")
                && first.contains("ago)")
                && first.contains("(reason \"deploy\")"),
            "{cmd}: {}",
            out.text()
        );
    }
    logged_once(&d, "placement: voluntary moves frozen by alice@").await;

    let out = cli(&server, bucket, "bob", &["freeze", "--reason", "incident"]).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(
        out.stdout.contains("replaced the freeze by alice@")
            && out.stdout.contains("(reason \"deploy\")"),
        "{}",
        out.text()
    );
    logged_once(&d, "placement: voluntary moves frozen by bob@").await;
    for i in &d.instances {
        let log = i.stderr();
        let line = log
            .lines()
            .find(|l| l.contains("frozen by bob@"))
            .unwrap_or_default();
        assert!(
            line.contains("replaces: frozen by alice@"),
            "{}: {line}",
            i.id
        );
    }

    let out = cli(&server, bucket, "carol", &["unfreeze"]).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains("(the freeze by bob@"), "{}", out.text());
    logged_once(&d, "placement: voluntary moves no longer frozen").await;
    let out = cli(&server, bucket, "viewer", &["status"]).await;
    assert!(!out.stdout.contains("FROZEN"), "{}", out.text());
}
