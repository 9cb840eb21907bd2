//! `nats-roles run` under systemd (issue 25, item 1; docs/deploy.md): the notification
//! protocol against a real `NOTIFY_SOCKET` datagram socket bound by the test — `STATUS=` while
//! it starts, `READY=1` only once it campaigns, `WATCHDOG=1` every half of `WATCHDOG_USEC`
//! while the manager answers its liveness probes (and none once a task of it is wedged, nor
//! when `WATCHDOG_PID` names another process), `STOPPING=1` and `EXTEND_TIMEOUT_USEC` while a
//! stop hands a role over, nothing at all without `NOTIFY_SOCKET` — and the unit file in
//! deploy/systemd/, checked by `systemd-analyze verify` and held against the binary.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use testkit::instances::Deployment;
use testkit::process::{SIGTERM, signal};
use testkit::server::NatsServer;

use super::exec::{alive, make_executable};
use super::notify_socket::{Datagram, NotifySocket};

/// A deployment of `roles` (fast timing) in `bucket` with `extra_roles` YAML appended to the
/// role list.
pub(crate) fn deployment(url: &str, bucket: &str, roles: &[&str], extra_roles: &str) -> Deployment {
    let d = Deployment::new(url, bucket, &[], "");
    let mut yaml = format!(
        "bucket:\n  name: {bucket}\n  replicas: 1\n  auto_create: true\n\
         timing:\n  ttl: 1s\n  heartbeat: 250ms\n  operation_timeout: 500ms\n  \
         disconnect_grace: 1s\nroles:\n"
    );
    for role in roles {
        yaml.push_str(&format!("  - name: {role}\n"));
    }
    yaml.push_str(extra_roles);
    std::fs::write(&d.config, yaml).expect("write config");
    d
}

/// Whether instance 0 printed a line starting with `prefix`.
fn printed(d: &Deployment, prefix: &str) -> bool {
    d.instances[0]
        .stdout()
        .iter()
        .any(|l| l.starts_with(prefix))
}

/// `GET /api/roles/{role}`: this instance's state of the role (`local.state`).
async fn local_state(port: u16, role: &str) -> String {
    let (status, body) = testkit::http::get(port, &format!("/api/roles/{role}"))
        .await
        .unwrap_or_else(|e| panic!("GET /api/roles/{role}: {e}"));
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    json["local"]["state"]
        .as_str()
        .unwrap_or_else(|| panic!("no local.state in {json}"))
        .to_owned()
}

/// `run` started while its server is down: `STATUS=starting: …` names each failed attempt and
/// no `READY=1` comes while it retries; once the server is back `READY=1` comes — once — with
/// a summary of roles that all take part (the API shows them campaigning, held or observed),
/// then `STATUS=` follows the promotions. `WATCHDOG_PID` names another process: no
/// `WATCHDOG=1` at all. SIGTERM: `STOPPING=1`, exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_comes_once_every_role_campaigns_and_status_says_why_it_is_still_starting() {
    let mut server = NatsServer::start().await;
    server.kill();
    let socket = NotifySocket::bind();
    let mut d = deployment(
        &server.url(),
        "sdready",
        &["alpha", "beta"],
        "  - name: gamma\n    campaign: false\n",
    );
    d.env("NOTIFY_SOCKET", socket.path());
    d.env("WATCHDOG_USEC", "1000000");
    // Another process's watchdog (sd_watchdog_enabled(3)): this one must not ping.
    d.env("WATCHDOG_PID", "1");
    d.spawn("node-a").await;
    let port = d.instances[0].port;
    socket
        .wait(
            &d,
            Duration::from_secs(10),
            "starting: cannot connect",
            |x| {
                x.value("STATUS")
                    .is_some_and(|s| s.starts_with("starting: cannot connect to NATS"))
            },
        )
        .await;
    // Several attempts later: still no READY.
    socket
        .wait(&d, Duration::from_secs(10), "for attempt 3", |x| {
            x.value("STATUS").is_some_and(|s| s.contains("(attempt 3)"))
        })
        .await;
    assert!(
        socket.with("READY=1").is_empty(),
        "READY=1 while it cannot connect:\n{}",
        socket.text()
    );
    server.restart().await;
    let ready = socket
        .wait(&d, Duration::from_secs(15), "READY=1", |x| x.has("READY=1"))
        .await;
    let summary = ready.value("STATUS").unwrap_or_default().to_owned();
    assert!(
        summary.starts_with("holding ") && summary.contains(" of 2 roles, observing 1"),
        "the READY datagram carries the summary: {summary:?}\n{}",
        socket.text()
    );
    assert!(
        !summary.contains("not connected") && !summary.contains("waiting for the bucket watcher"),
        "READY=1 before it was connected and caught up: {summary:?}"
    );
    for role in ["alpha", "beta"] {
        let state = local_state(port, role).await;
        assert!(
            ["CANDIDATE", "LEADER", "FOLLOWER"].contains(&state.as_str()),
            "{role} is {state} after READY=1"
        );
    }
    assert_eq!(local_state(port, "gamma").await, "FOLLOWER");
    let statuses = socket.statuses();
    let before_ready: Vec<&String> = statuses
        .iter()
        .take_while(|s| **s != summary)
        .filter(|s| s.starts_with("starting: "))
        .collect();
    assert!(
        before_ready.len() >= 3,
        "a STATUS per failed attempt before READY: {statuses:?}"
    );
    socket
        .wait(&d, Duration::from_secs(10), "holding both roles", |x| {
            x.value("STATUS") == Some("holding 2 of 2 roles, observing 1")
        })
        .await;
    assert!(
        printed(&d, "promoted role=alpha") && printed(&d, "promoted role=beta"),
        "{}",
        d.report()
    );
    d.terminate(0);
    let stopping = socket
        .wait(&d, Duration::from_secs(10), "STOPPING=1", |x| {
            x.has("STOPPING=1")
        })
        .await;
    assert_eq!(
        stopping.value("STATUS"),
        Some("stopping: handing over 2 roles"),
        "{}",
        socket.text()
    );
    let status = d.wait_exit(0, Duration::from_secs(15)).await;
    assert!(status.success(), "exit {status}\n{}", d.report());
    assert_eq!(socket.with("READY=1").len(), 1, "{}", socket.text());
    assert!(
        socket.with("WATCHDOG=1").is_empty(),
        "WATCHDOG=1 although WATCHDOG_PID names another process:\n{}",
        socket.text()
    );
    eprintln!("notifications:\n{}", socket.text());
}

/// `WATCHDOG_USEC=1 s`: `WATCHDOG=1` every 0.5 s, each after the manager's tasks answered
/// their probe — also while NATS is down (liveness is not connectivity). Then a test seam
/// wedges the role task (`NATS_ROLES_TEST_WEDGE_IF_EXISTS`, cargo feature
/// `negative-controls`): the pings stop, the log names the task, while the process still runs
/// and serves HTTP — what a timer thread would have kept pinging for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_pings_every_half_period_while_the_manager_answers_and_stop_when_it_is_wedged() {
    const PERIOD: Duration = Duration::from_millis(500);
    let mut server = NatsServer::start().await;
    let socket = NotifySocket::bind();
    let mut d = deployment(&server.url(), "sdwatchdog", &["alpha"], "");
    let wedge = d.dir().join("wedge");
    d.env("NOTIFY_SOCKET", socket.path());
    d.env("WATCHDOG_USEC", "1000000");
    d.env(
        "NATS_ROLES_TEST_WEDGE_IF_EXISTS",
        wedge.to_str().expect("path"),
    );
    d.start("node-a").await;
    let port = d.instances[0].port;
    socket
        .wait(&d, Duration::from_secs(10), "READY=1", |x| x.has("READY=1"))
        .await;
    let connected_from = Instant::now();
    tokio::time::sleep(Duration::from_millis(1_600)).await;

    // NATS goes away: the manager still answers.
    server.kill();
    let disconnected = socket
        .wait(&d, Duration::from_secs(10), "not connected", |x| {
            x.value("STATUS")
                .is_some_and(|s| s.contains("not connected to NATS"))
        })
        .await;
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let pings: Vec<Instant> = socket.with("WATCHDOG=1").iter().map(|x| x.at).collect();
    let connected_pings = pings.iter().filter(|t| **t >= connected_from).count();
    let disconnected_pings = pings.iter().filter(|t| **t >= disconnected.at).count();
    assert!(
        connected_pings >= 4 && disconnected_pings >= 2,
        "pings: {connected_pings} since READY, {disconnected_pings} since NATS is down\n{}",
        socket.text()
    );
    // The cadence: half of WATCHDOG_USEC. Never faster than 80 % of it; never a gap of a whole
    // WATCHDOG_USEC (systemd would restart the service) — a loaded CI machine may delay one.
    let gaps: Vec<Duration> = pings.windows(2).map(|w| w[1] - w[0]).collect();
    let mut sorted = gaps.clone();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    assert!(
        gaps.iter().all(|g| *g >= PERIOD * 4 / 5 && *g < PERIOD * 2)
            && median >= PERIOD * 9 / 10
            && median <= PERIOD * 13 / 10,
        "gaps between pings {gaps:?} (median {median:?}), period {PERIOD:?}\n{}",
        socket.text()
    );

    // The role task wedges at its next probe.
    std::fs::write(&wedge, b"").expect("create the wedge file");
    let wedged_at = Instant::now();
    let deadline = wedged_at + Duration::from_secs(10);
    while !d.instances[0].stderr().contains("the manager is wedged") {
        assert!(
            Instant::now() < deadline,
            "no wedge reported\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let noticed = Instant::now();
    let stderr = d.instances[0].stderr();
    assert!(
        stderr.contains("role alpha"),
        "the log names the task:\n{stderr}"
    );
    tokio::time::sleep(PERIOD * 5).await;
    let late: Vec<Datagram> = socket
        .with("WATCHDOG=1")
        .into_iter()
        .filter(|x| x.at > noticed)
        .collect();
    assert!(
        late.is_empty(),
        "{} pings after the wedge was noticed\n{}",
        late.len(),
        socket.text()
    );
    let last = pings_before(&socket, noticed);
    let silent = last.map(|t| t.elapsed());
    assert!(
        silent.is_some_and(|s| s >= PERIOD * 2 * 2),
        "silent only {silent:?}: systemd would not have restarted it"
    );
    // The process itself lives on and serves: only its manager is wedged.
    assert!(d.try_exit(0).is_none(), "run exited\n{}", d.report());
    let (status, _) = testkit::http::get(port, "/healthz")
        .await
        .expect("GET /healthz");
    assert_eq!(status, 200);
    eprintln!(
        "{} pings, median gap {median:?}; silent for {silent:?} once wedged\n{}",
        pings.len(),
        socket.text()
    );
}

/// The instant of the last `WATCHDOG=1` before `t`.
fn pings_before(socket: &NotifySocket, t: Instant) -> Option<Instant> {
    socket
        .with("WATCHDOG=1")
        .into_iter()
        .map(|x| x.at)
        .rfind(|at| *at <= t)
}

/// The `exec` child of the drain test: records the systemd variables it sees, and on SIGTERM
/// takes 1.5 s to stop (a graceful stop that takes time; the TTL of 3 s keeps the term's local
/// deadline, at which the watchdog kills the child even during a release, 2.2 s or more away).
const SLOW_CHILD: &str = r#"#!/bin/sh
echo "start $$ notify=${NOTIFY_SOCKET-unset} watchdog=${WATCHDOG_USEC-unset}/${WATCHDOG_PID-unset}" >> "$LOG"
trap 'echo "term $$" >> "$LOG"; sleep 1.5; echo "gone $$" >> "$LOG"; exit 0' TERM
while :; do sleep 0.05; done
"#;

/// SIGTERM to `run` alone (`KillMode=mixed`) while its `exec` child takes 1.5 s to stop:
/// `STOPPING=1` with `STATUS=stopping: handing over 1 role` at once, `EXTEND_TIMEOUT_USEC`
/// every second while the role is still being handed over, `STATUS=stopped: every role
/// released` after, exit 0 — and nothing of the tree is left by then (the final SIGKILL of
/// `KillMode=mixed` meets nothing). The child did not inherit systemd's variables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_and_extend_timeout_while_a_drain_hands_the_role_over() {
    let server = NatsServer::start().await;
    let socket = NotifySocket::bind();
    let mut d = deployment(&server.url(), "sddrain", &[], "");
    let dir = d.dir().to_path_buf();
    let script = dir.join("child.sh");
    std::fs::write(&script, SLOW_CHILD).expect("write child");
    make_executable(&script);
    let log = dir.join("child.log");
    let yaml = format!(
        "bucket:\n  name: sddrain\n  replicas: 1\n  auto_create: true\n\
         timing:\n  ttl: 3s\n  heartbeat: 500ms\n\
         shutdown:\n  timeout: 8s\n  drain_timeout: 5s\n\
         roles:\n  - name: worker\n    exec:\n      command: [{script}]\n      \
         stop_timeout: 4s\n      env: {{LOG: {log}}}\n",
        script = script.display(),
        log = log.display(),
    );
    std::fs::write(&d.config, yaml).expect("write config");
    d.env("NOTIFY_SOCKET", socket.path());
    d.start("node-a").await;
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !read_log().contains("start ") {
        assert!(
            Instant::now() < deadline,
            "the child did not start\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let child: u32 = read_log()
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("the child's pid");
    assert!(
        read_log().contains("notify=unset watchdog=unset/unset"),
        "the child inherited systemd's variables: {}",
        read_log()
    );
    socket
        .wait(&d, Duration::from_secs(10), "holding the role", |x| {
            x.value("STATUS") == Some("holding 1 of 1 role")
        })
        .await;

    let signalled = Instant::now();
    signal(d.instances[0].pid(), SIGTERM);
    let stopping = socket
        .wait(&d, Duration::from_secs(5), "STOPPING=1", |x| {
            x.has("STOPPING=1")
        })
        .await;
    assert_eq!(
        stopping.value("STATUS"),
        Some("stopping: handing over 1 role")
    );
    assert!(
        stopping.at - signalled < Duration::from_secs(1),
        "STOPPING=1 {:?} after the signal",
        stopping.at - signalled
    );
    let status = d.wait_exit(0, Duration::from_secs(15)).await;
    let exited = Instant::now();
    assert!(status.success(), "exit {status}\n{}", d.report());
    assert!(
        read_log().contains("gone "),
        "{}\n{}\n{}",
        read_log(),
        socket.text(),
        d.report()
    );
    let took = exited - signalled;
    let extends = socket.with_prefix("EXTEND_TIMEOUT_USEC=");
    let stopped = socket
        .wait(&d, Duration::from_secs(1), "stopped", |x| {
            x.value("STATUS") == Some("stopped: every role released")
        })
        .await;
    assert!(
        extends.len() >= 2,
        "EXTEND_TIMEOUT_USEC every second of a {took:?} stop:\n{}",
        socket.text()
    );
    for x in &extends {
        let usec: u64 = x
            .value("EXTEND_TIMEOUT_USEC")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("EXTEND_TIMEOUT_USEC is a number: {x:?}"));
        assert!(
            (1..=5_000_000).contains(&usec),
            "EXTEND_TIMEOUT_USEC={usec}"
        );
        assert!(
            x.at >= stopping.at && x.at < stopped.at,
            "{}",
            socket.text()
        );
    }
    // Sent while the role was being handed over: the last one less than a second before the
    // release ended, none after.
    let last = extends.last().map(|x| x.at).expect("an extension");
    assert!(
        stopped.at - last <= Duration::from_millis(1_500),
        "the last extension {:?} before the end\n{}",
        stopped.at - last,
        socket.text()
    );
    assert!(
        socket.with("WATCHDOG=1").is_empty(),
        "WATCHDOG=1 without WATCHDOG_USEC:\n{}",
        socket.text()
    );
    // KillMode=mixed SIGKILLs what is left once `run` exits: on the graceful path nothing of
    // the child is (the release waited until it was gone).
    assert!(!alive(child), "the exec child {child} outlived run");
    eprintln!(
        "stop took {took:?}; {} extensions\n{}",
        extends.len(),
        socket.text()
    );
}

/// Without `NOTIFY_SOCKET` nothing of the protocol runs, not even the watchdog's probes:
/// `WATCHDOG_USEC` is set and the wedge seam is armed from the start, so a single probe would
/// wedge the role task and its release on SIGTERM would time out (exit 1). It holds its role,
/// releases it and exits 0; the socket bound by the test receives nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_at_all_without_notify_socket() {
    let server = NatsServer::start().await;
    let socket = NotifySocket::bind();
    let mut d = deployment(&server.url(), "sdsilent", &["alpha"], "");
    let wedge = d.dir().join("wedge");
    std::fs::write(&wedge, b"").expect("create the wedge file");
    d.env("WATCHDOG_USEC", "500000");
    d.env(
        "NATS_ROLES_TEST_WEDGE_IF_EXISTS",
        wedge.to_str().expect("path"),
    );
    d.start("node-a").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !printed(&d, "promoted role=alpha") {
        assert!(Instant::now() < deadline, "not promoted\n{}", d.report());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Several watchdog periods.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    d.terminate(0);
    let status = d.wait_exit(0, Duration::from_secs(15)).await;
    assert!(status.success(), "exit {status}\n{}", d.report());
    assert!(printed(&d, "demoted role=alpha"), "{}", d.report());
    let stderr = d.instances[0].stderr();
    assert!(
        !stderr.contains("systemd notifications on") && !stderr.contains("wedged"),
        "{stderr}"
    );
    assert!(socket.all().is_empty(), "{}", socket.text());
}

/// The repository's unit file, its example environment file and sysusers snippet.
fn deploy_file(name: &str) -> PathBuf {
    testkit::repo_root().join("deploy/systemd").join(name)
}

/// Runs a systemd tool; panics loudly when it is missing (Debian package `systemd`,
/// `scripts/install-tools.sh --systemd`).
fn systemd_tool(tool: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {tool} ({e}): install the Debian package `systemd` \
                 (scripts/install-tools.sh --systemd); this test never skips"
            )
        })
}

/// `deploy/systemd/nats-roles.service` with its `ExecStart` pointing at the built binary (the
/// path must resolve), in a temporary directory under its own name.
fn unit_copy(dir: &Path) -> PathBuf {
    let unit = std::fs::read_to_string(deploy_file("nats-roles.service")).expect("read the unit");
    let installed = "ExecStart=/usr/local/bin/nats-roles ";
    assert!(unit.contains(installed), "the unit runs {installed}");
    let bin = testkit::nats_roles_bin();
    let unit = unit.replace(installed, &format!("ExecStart={} ", bin.display()));
    let path = dir.join("nats-roles.service");
    std::fs::write(&path, unit).expect("write the unit copy");
    path
}

/// `systemd-analyze verify` accepts the unit without a single warning (it only warns, exit 0,
/// about unknown keys or bad values: any output fails), `systemd-analyze security` rates its
/// hardening (exposure at most 2.0, "OK"), and `systemd-sysusers` accepts the sysusers snippet.
#[test]
fn systemd_analyze_verifies_the_unit() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let unit = unit_copy(dir.path());
    let unit = unit.to_str().expect("path");
    let out = systemd_tool("systemd-analyze", &["verify", "--man=no", unit]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.trim().is_empty(),
        "systemd-analyze verify: {}\n{text}",
        out.status
    );
    let out = systemd_tool("systemd-analyze", &["security", "--offline=yes", unit]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let exposure: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for nats-roles.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{text}"));
    assert!(exposure <= 2.0, "exposure {exposure}:\n{text}");
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("etc")).expect("mkdir");
    let snippet = deploy_file("nats-roles.sysusers.conf");
    let out = systemd_tool(
        "systemd-sysusers",
        &[
            "--dry-run",
            &format!("--root={}", root.display()),
            snippet.to_str().expect("path"),
        ],
    );
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("Creating user 'nats-roles'"),
        "systemd-sysusers: {}\n{text}",
        out.status
    );
    eprintln!("systemd-analyze security: exposure {exposure}");
}

/// A duration of the unit (`20s`, `2min`, `1min 30s`) in whole seconds.
fn unit_seconds(value: &str) -> u64 {
    value
        .split_whitespace()
        .map(|part| {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            let n: u64 = digits
                .parse()
                .unwrap_or_else(|_| panic!("duration {value}"));
            match &part[digits.len()..] {
                "" | "s" | "sec" => n,
                "min" | "m" => n * 60,
                other => panic!("unit {other} in {value}"),
            }
        })
        .sum()
}

/// The values of `key=` in the unit, in order.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_owned)
        .collect()
}

/// The unit's timing is held against what the binary does: `TimeoutStopSec` covers the
/// longest stop of `run` with the settings of roles.example.yaml and the defaults
/// (`shutdown.timeout` + 5 s, plus the final OTLP export when one is configured, and
/// `drain_timeout` + `exec.stop_timeout`), `WatchdogSec` is at
/// least 20 s (a task may take up to 10 s to answer a probe), and every environment variable
/// the unit or its example environment file sets is one the binary reads.
#[test]
fn the_unit_s_timeouts_cover_the_binary_and_its_variables_are_read() {
    let unit = std::fs::read_to_string(deploy_file("nats-roles.service")).expect("read the unit");
    let stop = unit_seconds(&unit_values(&unit, "TimeoutStopSec")[0]);
    let watchdog = unit_seconds(&unit_values(&unit, "WatchdogSec")[0]);
    assert!(watchdog >= 20, "WatchdogSec={watchdog}s");
    assert_eq!(unit_values(&unit, "KillMode"), ["mixed"]);
    assert_eq!(unit_values(&unit, "Type"), ["notify"]);
    let example =
        nats_roles::config::Config::load(&testkit::repo_root().join("roles.example.yaml"))
            .expect("roles.example.yaml loads");
    for (what, config) in [
        ("roles.example.yaml", example),
        ("the defaults", nats_roles::config::Config::default()),
    ] {
        let s = &config.shutdown;
        let stop_timeout = config
            .roles
            .iter()
            .filter_map(|r| r.exec.as_ref().map(|e| e.stop_timeout))
            .max()
            .unwrap_or(Duration::from_secs(3));
        // The final OTLP export: up to its timeout for traces and for metrics.
        let otlp = config
            .telemetry
            .otlp
            .as_ref()
            .map_or(Duration::ZERO, |o| 2 * o.timeout);
        let needed =
            (s.timeout + Duration::from_secs(5) + otlp).max(s.drain_timeout + stop_timeout);
        assert!(
            Duration::from_secs(stop) >= needed,
            "TimeoutStopSec={stop}s is below {needed:?} for {what}"
        );
    }
    let mut names: Vec<String> = unit_values(&unit, "Environment")
        .iter()
        .filter_map(|v| v.split('=').next().map(str::to_owned))
        .collect();
    let env = std::fs::read_to_string(deploy_file("nats-roles.env")).expect("read the env file");
    for line in env.lines() {
        let line = line.trim_start_matches('#');
        if let Some((name, _)) = line.split_once('=')
            && !name.is_empty()
            && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        {
            names.push(name.to_owned());
        }
    }
    assert!(names.len() >= 5, "{names:?}");
    let sources = rust_sources(&testkit::repo_root().join("src"));
    for name in &names {
        assert!(
            testkit::cli::ENV.contains(&name.as_str()),
            "{name} is not among the variables the binary reads (testkit::cli::ENV)"
        );
        // RUST_LOG is read by tracing-subscriber (`EnvFilter::try_from_default_env`).
        assert!(
            name == "RUST_LOG" || sources.contains(&format!("\"{name}\"")),
            "no source file of the binary names {name}"
        );
    }
}

/// Every `.rs` file under `dir`, concatenated.
fn rust_sources(dir: &Path) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            all.push_str(&rust_sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            all.push_str(&std::fs::read_to_string(&path).expect("read source"));
        }
    }
    all
}
