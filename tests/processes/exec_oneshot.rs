//! `nats-roles validate` for the programs of `exec` roles and hooks, and the one-shot
//! `nats-roles exec` (real processes, a real nats-server): commands under one role run one at a
//! time, the exit status is the command's, SIGTERM (also to its whole process tree or group) and
//! SIGHUP stop the command gracefully and release the role.

use std::time::{Duration, Instant};

use testkit::NatsServer;
use testkit::process::{SIGTERM, signal};

/// `nats-roles validate` refuses a command that does not exist or is not executable, with the
/// line of the value.
#[tokio::test]
async fn validate_refuses_missing_and_non_executable_commands() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plain = dir.path().join("plain.sh");
    std::fs::write(&plain, "#!/bin/sh\n").expect("write");
    let config = dir.path().join("roles.yaml");
    std::fs::write(
        &config,
        format!(
            "roles:\n  - name: a\n    exec:\n      command: [no-such-program-anywhere]\n  \
             - name: b\n    exec:\n      command: [{}]\n  - name: c\n    on_promote:\n      \
             command: []\n  - name: d\n    exec:\n      command: [sh]\n      stop_timeout: 1m\n      \
             stop_signal: SIGSEGV\n",
            plain.display()
        ),
    )
    .expect("write config");
    let path = config.display().to_string();
    let out = testkit::cli::run(&["validate", &path], &[], Duration::from_secs(30)).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(out.stderr.contains("SIGSEGV"), "{}", out.text());
    std::fs::write(
        &config,
        format!(
            "roles:\n  - name: a\n    exec:\n      command: [no-such-program-anywhere]\n  \
             - name: b\n    exec:\n      command: [{}]\n  - name: c\n    on_promote:\n      \
             command: []\n  - name: d\n    exec:\n      command: [sh]\n      stop_timeout: 1m\n",
            plain.display()
        ),
    )
    .expect("write config");
    let out = testkit::cli::run(&["validate", &path], &[], Duration::from_secs(30)).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    for expected in [
        "roles[0].exec.command[0]",
        "not found in PATH",
        "roles[1].exec.command[0]",
        "is not executable",
        "roles[2].on_promote.command",
        "roles[3].exec.stop_timeout",
        "line 4",
    ] {
        assert!(
            out.stderr.contains(expected),
            "{expected:?} missing:\n{}",
            out.text()
        );
    }
}

/// `nats-roles exec`: two one-shot commands for one role run one after the other and exit
/// with the command's status; SIGTERM stops the command, releases the role and exits with
/// the command's status.
#[tokio::test]
async fn one_shot_exec_runs_commands_one_at_a_time_and_exits_with_their_status() {
    let server = NatsServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("lock.log");
    let url = server.url();
    let one = |name: &'static str| {
        let url = url.clone();
        let log = log.clone();
        async move {
            let script = format!(
                "echo \"in {name}\" >> {log}; sleep 0.7; echo \"out {name}\" >> {log}; exit 7",
                log = log.display()
            );
            testkit::cli::run(
                &[
                    "exec",
                    "--role",
                    "lock",
                    "-s",
                    &url,
                    "--bucket",
                    "exec-lock",
                    "--auto-create",
                    "--instance-id",
                    name,
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
                &[],
                Duration::from_secs(30),
            )
            .await
        }
    };
    let (x, y) = tokio::join!(one("x"), one("y"));
    assert_eq!(x.code, Some(7), "{}", x.text());
    assert_eq!(y.code, Some(7), "{}", y.text());
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines[0].starts_with("in ") && lines[1].starts_with("out "),
        "{lines:?}"
    );
    assert_eq!(
        lines[0][3..],
        lines[1][4..],
        "one command ran at a time: {lines:?}"
    );

    // SIGTERM: the command is stopped, the role released, the status is the command's.
    let bin = testkit::nats_roles_bin();
    let mut cmd = testkit::cli::command(&bin);
    cmd.args([
        "exec",
        "--role",
        "lock",
        "-s",
        &url,
        "--bucket",
        "exec-lock",
    ])
    .args(["--instance-id", "z", "--ttl", "2s", "--", "sh", "-c"])
    .arg(format!("echo started >> {}; exec sleep 100", log.display()));
    let mut child = cmd.spawn().expect("spawn exec");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("started")
    {
        assert!(Instant::now() < deadline, "the command did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal(child.id().expect("pid"), SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exec exits after SIGTERM")
        .expect("wait");
    assert_eq!(status.code(), Some(128 + SIGTERM), "{status:?}");
    // Released: another one-shot gets the role at once.
    let took = Instant::now();
    let next = testkit::cli::run(
        &[
            "exec",
            "--role",
            "lock",
            "-s",
            &url,
            "--bucket",
            "exec-lock",
            "--",
            "true",
        ],
        &[],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(next.code, Some(0), "{}", next.text());
    assert!(
        took.elapsed() < Duration::from_secs(5),
        "the role was not released"
    );
}

/// `nats-roles exec` under the signals a service manager or a terminal sends: SIGTERM to every
/// process of its tree at once (systemd's `KillMode=control-group`), `kill -TERM -- -PGID` of
/// its process group, and SIGHUP to it alone. Each takes the graceful path: the command's
/// SIGTERM trap runs, the role is released, and `exec` exits with the command's status (5).
#[tokio::test]
async fn one_shot_exec_stops_gracefully_on_group_wide_signals_and_a_hangup() {
    use testkit::process::{SIGHUP, signal_group, signal_tree};
    let server = NatsServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("trap.log");
    let url = server.url();
    for how in ["tree", "group", "hangup"] {
        let bin = testkit::nats_roles_bin();
        let mut cmd = testkit::cli::command(&bin);
        cmd.args([
            "exec",
            "--role",
            "lock",
            "-s",
            &url,
            "--bucket",
            "exec-signals",
            "--auto-create",
        ])
        .args(["--instance-id", how, "--ttl", "2s", "--", "sh", "-c"])
        .arg(format!(
            "trap 'echo \"trapped $0\" >> {log}; exit 5' TERM; echo \"started $0\" >> {log}; \
             while :; do sleep 0.05; done",
            log = log.display()
        ))
        .arg(how);
        if how == "group" {
            testkit::process::own_group(&mut cmd);
        }
        let mut child = cmd.spawn().expect("spawn exec");
        let pid = child.id().expect("pid");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(&format!("started {how}"))
        {
            assert!(
                Instant::now() < deadline,
                "{how}: the command did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The trap is set before the command says it started.
        match how {
            "tree" => {
                let pids = signal_tree(pid, SIGTERM);
                assert!(pids.len() >= 3, "exec, watchdog, command: {pids:?}");
            }
            "group" => signal_group(pid, SIGTERM),
            _ => signal(pid, SIGHUP),
        }
        let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .unwrap_or_else(|_| panic!("{how}: exec exits after the signal"))
            .expect("wait");
        let lines = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(status.code(), Some(5), "{how}: {status:?}\n{lines}");
        assert!(
            lines.contains(&format!("trapped {how}")),
            "{how}: the command's trap ran:\n{lines}"
        );
    }
    // Released each time: another one-shot gets the role at once.
    let took = Instant::now();
    let next = testkit::cli::run(
        &[
            "exec",
            "--role",
            "lock",
            "-s",
            &url,
            "--bucket",
            "exec-signals",
            "--",
            "true",
        ],
        &[],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(next.code, Some(0), "{}", next.text());
    assert!(
        took.elapsed() < Duration::from_secs(2),
        "the role was not released"
    );
}
