//! A panic in a role driver is fail-stop (issue 27; docs/failure-semantics.md, docs/layout.md
//! "One driver per session class"): the class's session is abandoned — its terms end at once,
//! it is renewed no more and expires — so other instances take its roles without a restart,
//! and what the process says (status, `/api/self`, `/readyz`, stdout, the history) agrees.
//! A test seam (`NATS_ROLES_TEST_PANIC_IF_EXISTS`, cargo feature `negative-controls`) makes a
//! driver panic at its next liveness probe, which `run` sends under a systemd watchdog.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use testkit::instances::Deployment;
use testkit::server::NatsServer;

use super::exec::make_executable;
use super::notify_socket::NotifySocket;
use super::systemd::deployment;

/// A panic in a role driver is fail-stop (issue 27, docs/failure-semantics.md): node-a holds
/// `alpha` under a systemd watchdog, node-b campaigns; a test seam
/// (`NATS_ROLES_TEST_PANIC_IF_EXISTS`, cargo feature `negative-controls`) makes node-a's role
/// driver panic at its next liveness probe. Its session is abandoned — no renewal, no delete
/// — so its term lapses at its deadline, the session key expires on the server and node-b
/// takes `alpha` without anyone restarting node-a; the watchdog pings stop. The histories are
/// clean (no overlap: node-b's term begins after node-a's last deadline). Before the fix the
/// session went on renewing the term of a driver that no longer ran: `alpha` stayed with
/// node-a, unserved, until a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_role_driver_abandons_its_session_and_the_role_moves_without_a_restart() {
    let server = NatsServer::start().await;
    let socket = NotifySocket::bind();
    let mut d = deployment(&server.url(), "sdpanic", &["alpha"], "");
    let trigger = arm(&mut d, Some(&socket));
    let a_history = d.dir().join("node-a.jsonl");
    d.start("node-a").await;
    wait_record(&a_history, "promote", Duration::from_secs(20), || {
        d.report()
    })
    .await;
    // node-b (its own deployment: no watchdog, no seam), started after the promotion, only
    // campaigns.
    let mut b = deployment(&server.url(), "sdpanic", &["alpha"], "");
    arm(&mut b, None);
    let b_history = b.dir().join("node-b.jsonl");
    b.start("node-b").await;
    std::fs::write(&trigger, b"").expect("create the panic file");
    let asked = testkit::process::mono_now_ns();
    let limit = Duration::from_secs(10);
    let started = Instant::now();
    while super::exec::records(&b_history, "promote").is_empty() {
        assert!(
            started.elapsed() < limit,
            "node-b did not take alpha within {limit:?} of node-a's driver panic\n{}\n{}",
            d.report(),
            b.report()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (promoted_at, _) = super::exec::records(&b_history, "promote")
        .pop()
        .expect("node-b's promotion");
    let stderr = d.instances[0].stderr();
    assert!(
        stderr.contains("the role driver of a session class panicked")
            && stderr.contains("the session is abandoned"),
        "node-a's log says what happened:\n{stderr}"
    );
    // node-a lives on (nothing restarted it) and no longer pings the watchdog.
    assert!(d.try_exit(0).is_none(), "node-a exited\n{}", d.report());
    // What node-a says agrees with the bucket: it holds nothing (an application following
    // its `/api/self` would otherwise act beside node-b), and it said so on its stdout.
    let port = d.instances[0].port;
    let (status, body) = testkit::http::get(port, "/api/self")
        .await
        .expect("GET /api/self");
    assert_eq!(status, 200, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        view["roles"],
        serde_json::json!([]),
        "node-a still claims: {body}"
    );
    let (_, roles) = testkit::http::get(port, "/api/roles")
        .await
        .expect("GET /api/roles");
    assert!(
        !roles.contains("\"LEADER\""),
        "node-a's /api/roles still says LEADER: {roles}"
    );
    let (ready, why) = testkit::http::get(port, "/readyz")
        .await
        .expect("GET /readyz");
    assert!(
        ready == 503 && why.contains("abandoned") && !why.contains("retrying"),
        "node-a's /readyz: {ready} {why}"
    );
    let out = d.instances[0].stdout();
    assert!(
        out.iter()
            .any(|l| l.starts_with("demoted role=alpha") && l.ends_with("reason=abandoned")),
        "no `demoted … reason=abandoned` line: {out:?}"
    );
    let noticed = Instant::now();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let late = socket
        .with("WATCHDOG=1")
        .into_iter()
        .filter(|x| x.at > noticed)
        .count();
    assert_eq!(late, 0, "node-a still pings\n{}", socket.text());
    eprintln!(
        "node-b promoted {:.0} ms after the panic file appeared",
        promoted_at.saturating_sub(asked) as f64 / 1e6
    );
    b.terminate(0);
    b.wait_exit(0, Duration::from_secs(15)).await;
    d.terminate(0);
    d.wait_exit(0, Duration::from_secs(15)).await;
    check_clean(&a_history, &b_history).await;
}

/// A role driver panics while a graceful release of an `exec` role drains (found by an
/// attack): the child ignores `SIGTERM`, so the release's drain is still waiting for it when
/// the driver panics and the session is abandoned. The term was demoted already (`released`);
/// the abandonment must not record a second `demote` for it (before the fix the history had
/// `demote … released` and then `demote … abandoned` of one term: S6 "demoted term N, which it
/// does not hold"). The child is killed at its watchdog's deadline, before node-b's term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_panic_during_a_release_drain_records_the_demotion_once() {
    let server = NatsServer::start().await;
    let socket = NotifySocket::bind();
    let token = "0123456789abcdef0123";
    let mut d = Deployment::new(&server.url(), "sddrain", &[], "");
    let child = d.dir().join("child.sh");
    std::fs::write(
        &child,
        "#!/bin/sh\ntrap 'echo ignored' TERM\nwhile :; do sleep 0.1; done\n",
    )
    .expect("write the child");
    make_executable(&child);
    let yaml = format!(
        "bucket:\n  name: sddrain\n  replicas: 1\n  auto_create: true\n\
         timing:\n  ttl: 2s\n  heartbeat: 500ms\n\
         shutdown:\n  drain_timeout: 10s\n\
         http:\n  admin_token: \"{token}\"\n\
         roles:\n  - name: worker\n    exec:\n      command: [{}]\n      stop_timeout: 8s\n",
        child.display()
    );
    std::fs::write(&d.config, &yaml).expect("write config");
    let trigger = arm(&mut d, Some(&socket));
    let a_history = d.dir().join("node-a.jsonl");
    d.start("node-a").await;
    wait_record(&a_history, "child_start", Duration::from_secs(20), || {
        d.report()
    })
    .await;
    let mut b = Deployment::new(&server.url(), "sddrain", &[], "");
    std::fs::write(&b.config, &yaml).expect("write config");
    arm(&mut b, None);
    let b_history = b.dir().join("node-b.jsonl");
    b.start("node-b").await;
    let auth = format!("Bearer {token}");
    let (status, body) = testkit::http::request(
        d.instances[0].port,
        "POST",
        "/api/roles/worker/release",
        &[("Authorization", auth.as_str())],
        "",
    )
    .await
    .expect("release");
    assert_eq!(status, 200, "{body}");
    // The drain waits for the child, which ignores SIGTERM; the driver panics meanwhile.
    tokio::time::sleep(Duration::from_millis(500)).await;
    std::fs::write(&trigger, b"").expect("create the panic file");
    wait_record(&b_history, "promote", Duration::from_secs(15), || {
        format!("{}\n{}", d.report(), b.report())
    })
    .await;
    let stderr = d.instances[0].stderr();
    assert!(
        stderr.contains("the session is abandoned"),
        "node-a's driver panicked during the drain:\n{stderr}"
    );
    b.terminate(0);
    b.wait_exit(0, Duration::from_secs(15)).await;
    d.terminate(0);
    d.wait_exit(0, Duration::from_secs(15)).await;
    let demotes = super::exec::records(&a_history, "demote");
    assert_eq!(
        demotes.len(),
        1,
        "one demotion of node-a's term: {demotes:?}"
    );
    check_clean(&a_history, &b_history).await;
}

/// Records histories (`{dir}/{id}.jsonl`) and, with `socket`, arms the panic seam under a
/// systemd watchdog (probes every 0.5 s): the driver panics once the returned file exists.
fn arm(d: &mut Deployment, socket: Option<&NotifySocket>) -> PathBuf {
    d.arg("--history");
    d.arg("{dir}/{id}.jsonl");
    let trigger = d.dir().join("panic");
    if let Some(socket) = socket {
        d.env("NOTIFY_SOCKET", socket.path());
        d.env("WATCHDOG_USEC", "1000000");
        d.env(
            "NATS_ROLES_TEST_PANIC_IF_EXISTS",
            trigger.to_str().expect("path"),
        );
    }
    trigger
}

/// Waits (at most `limit`) until `history` holds an `ev` record.
async fn wait_record(history: &Path, ev: &str, limit: Duration, report: impl Fn() -> String) {
    let started = Instant::now();
    while super::exec::records(history, ev).is_empty() {
        assert!(
            started.elapsed() < limit,
            "no `{ev}` in {} within {limit:?}\n{}",
            history.display(),
            report()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `nats-roles history check` over both histories: clean.
async fn check_clean(a: &Path, b: &Path) {
    let files = [a.display().to_string(), b.display().to_string()];
    let out = testkit::cli::run(
        &["history", "check", &files[0], &files[1]],
        &[],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains("CLEAN"), "{}", out.text());
}
