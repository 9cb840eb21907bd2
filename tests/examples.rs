//! Runs every example against a real nats-server, as a newcomer would.

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use support::NatsServer;
use tokio::process::Command;

/// The compiled example `name` (built by `cargo build --all-targets`, which scripts/test.sh runs
/// before the tests).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target directory");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "example binary {} is missing: run `cargo build --examples` first",
        path.display()
    );
    path
}

/// Runs an example for `secs` seconds and returns its stdout; fails on a non-zero exit.
async fn run(server: &NatsServer, name: &str, args: &[&str], secs: u64) -> String {
    let child = Command::new(example(name))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NATS_URL", server.url())
        .env("RUN_FOR_SECS", secs.to_string())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start example");
    let out = tokio::time::timeout(Duration::from_secs(secs + 20), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("example {name} did not stop"))
        .expect("example output");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "example {name} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        !stderr.contains("panicked"),
        "example {name} panicked:\n{stderr}"
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_runs_against_a_real_server() {
    let server = NatsServer::start().await;

    // Example 2 holds "sweeper" and "scheduler"; example 3 observes "scheduler" meanwhile.
    let (control, router) = tokio::join!(run(&server, "control_plane", &["node-a"], 5), async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        run(&server, "router", &[], 2).await
    });
    assert!(control.contains("now holding sweeper"), "{control}");
    assert!(control.contains("now holding scheduler"), "{control}");
    assert!(
        control.contains("scheduler (term "),
        "scheduler never assigned a job:\n{control}"
    );
    assert!(control.contains("stopped"), "{control}");
    assert!(
        router.contains("scheduler is node-a"),
        "router did not find the scheduler:\n{router}"
    );

    let single = run(&server, "single_role", &["solo"], 2).await;
    assert!(single.contains("promoted: term"), "{single}");
    assert!(
        single.contains("demoted: term") && single.contains("(shutdown)"),
        "{single}"
    );

    let configured = run(
        &server,
        "from_config",
        &["roles.example.yaml", "cfg-node"],
        3,
    )
    .await;
    assert!(
        configured.contains("holding scheduler (term"),
        "{configured}"
    );
    assert!(
        configured.contains("released scheduler (shutdown)"),
        "{configured}"
    );
}
