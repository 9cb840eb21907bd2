//! The order of `nats-roles run`'s stdout lines across instances: a holder's `demoted` line
//! is written before its release is sent, so before any successor's `promoted` (people
//! watching a console and scripts reading several instances' stdout rely on it). Both
//! instances write to one file opened for appending, so the file's order is the order of the
//! writes themselves.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use testkit::NatsServer;
use testkit::instances::Deployment;
use tokio::time::Instant;

const LIMIT: Duration = Duration::from_secs(30);
const ROLES: usize = 40;

fn spawn(d: &Deployment, id: &str, out: &std::fs::File) -> tokio::process::Child {
    let mut cmd = testkit::cli::command(testkit::nats_roles_bin());
    cmd.arg("run")
        .arg("--config")
        .arg(&d.config)
        .args(["--instance-id", id, "--server", &d.nats_url, "--no-http"])
        .stdout(Stdio::from(out.try_clone().expect("clone")))
        .stderr(Stdio::from(
            std::fs::File::create(d.dir().join(format!("{id}.log"))).expect("log"),
        ));
    cmd.spawn().expect("spawn nats-roles run")
}

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn wait_for(path: &std::path::Path, what: &str, ok: impl Fn(&[String]) -> bool) {
    let until = Instant::now() + LIMIT;
    while !ok(&lines(path)) {
        assert!(
            Instant::now() < until,
            "{what}:\n{}",
            lines(path).join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// node-a holds forty roles, node-b campaigns too; SIGTERM to node-a hands all forty over
/// to node-b. In the shared stdout file, every `promoted role=R` follows the `demoted
/// role=R` of the term before it: no role is announced promoted while the old holder's line
/// still says it holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_demoted_line_is_written_before_the_successors_promoted_line() {
    let server = NatsServer::start().await;
    let names: Vec<String> = (0..ROLES).map(|i| format!("r{i:02}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let d = Deployment::new(
        &server.url(),
        "transition-lines",
        &refs,
        "timing:\n  ttl: 2s\n  heartbeat: 500ms\n",
    );
    let path = d.dir().join("stdout.txt");
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("stdout file");
    let mut a = spawn(&d, "node-a", &out);
    wait_for(&path, "node-a never held every role", |l| {
        l.iter().filter(|l| l.starts_with("promoted ")).count() == ROLES
    })
    .await;
    let mut b = spawn(&d, "node-b", &out);
    // node-b is up once it printed the holders it sees (node-a prints its own as well).
    wait_for(&path, "node-b did not start", |l| {
        l.iter()
            .filter(|l| l.starts_with("holder role=r00 holder=node-a"))
            .count()
            >= 2
    })
    .await;
    testkit::process::signal(a.id().expect("pid"), libc::SIGTERM);
    let status = tokio::time::timeout(LIMIT, a.wait())
        .await
        .expect("node-a stopped")
        .expect("wait");
    assert!(status.success(), "{status:?}");
    wait_for(&path, "node-b never took every role", |l| {
        l.iter().filter(|l| l.starts_with("promoted ")).count() == 2 * ROLES
    })
    .await;
    let _ = b.start_kill();

    // Per role: promoted, demoted, promoted — never two promotions in a row.
    let mut last: BTreeMap<String, &str> = BTreeMap::new();
    let all = lines(&path);
    for (n, line) in all.iter().enumerate() {
        let mut words = line.split(' ');
        let what = words.next().unwrap_or_default();
        if what != "promoted" && what != "demoted" {
            continue;
        }
        let role = words
            .next()
            .and_then(|w| w.strip_prefix("role="))
            .expect("role=")
            .to_owned();
        if what == "promoted" {
            assert_ne!(
                last.get(&role).copied(),
                Some("promoted"),
                "line {}: {line:?} before the old holder's demoted line:\n{}",
                n + 1,
                all.join("\n")
            );
        }
        last.insert(role, what);
    }
}
