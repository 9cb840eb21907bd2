//! `nats-roles exec` like `flock -n` / `flock -w` (real processes, a real nats-server):
//! `--no-wait` gives up at once on a role another process holds, `--wait D` gives up after D
//! or runs the command when the role frees up in time, the one stderr line naming the holder,
//! a quiet stderr on a normal run, and the exit statuses of a command that cannot start.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use testkit::NatsServer;
use testkit::cli::CliOutput;
use testkit::process::{SIGTERM, signal};

/// `exec --role lock` on `bucket` as instance `id`, with `extra` flags before `--` and
/// `script` run by `sh -c`.
async fn exec(url: &str, bucket: &str, id: &str, extra: &[&str], script: &str) -> CliOutput {
    let mut args = vec![
        "exec",
        "--role",
        "lock",
        "-s",
        url,
        "--bucket",
        bucket,
        "--auto-create",
        "--instance-id",
        id,
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    testkit::cli::run(&args, &[], Duration::from_secs(60)).await
}

/// A process holding the role `lock` of `bucket` as instance `holder`: its command appends
/// `started` to `log`, then runs `rest` (`exec sleep 60`: it holds until stopped).
struct Holder {
    child: tokio::process::Child,
}

impl Holder {
    async fn start(url: &str, bucket: &str, log: &Path, rest: &str) -> Self {
        let mut cmd = testkit::cli::command(testkit::nats_roles_bin());
        cmd.args(["exec", "--role", "lock", "-s", url, "--bucket", bucket])
            .args(["--auto-create", "--instance-id", "holder", "--ttl", "2s"])
            .args(["--", "sh", "-c"])
            .arg(format!("echo started >> {}; {rest}", log.display()));
        cmd.stderr(std::process::Stdio::piped());
        let child = cmd.spawn().expect("spawn the holder");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains("started")
        {
            assert!(
                Instant::now() < deadline,
                "the holder's command did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self { child }
    }

    /// SIGTERM: the holder stops its command and releases the role.
    async fn stop(mut self) {
        signal(self.child.id().expect("pid"), SIGTERM);
        tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .expect("the holder exits after SIGTERM")
            .expect("wait");
    }
}

fn temp_log(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

/// Lines of stderr that are log records of warnings or errors.
fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect()
}

/// `--no-wait` while another process holds the role: exit 75 without running the command,
/// after only what it takes to learn the role's state (bound 5 s on a loaded machine: the
/// holder holds for 60 s, so a wait would blow it), with one line naming the holder and term;
/// `--conflict-exit-code` changes the status.
#[tokio::test]
async fn no_wait_gives_up_at_once_on_a_role_another_process_holds() {
    let server = NatsServer::start().await;
    let url = server.url();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = temp_log(&dir, "holder.log");
    let ran = temp_log(&dir, "ran.log");
    let holder = Holder::start(&url, "exec-no-wait", &log, "exec sleep 60").await;
    let script = format!("echo ran >> {}", ran.display());

    let out = exec(&url, "exec-no-wait", "waiter", &["--no-wait"], &script).await;
    assert_eq!(out.code, Some(75), "{}", out.text());
    assert!(
        out.took < Duration::from_secs(5),
        "--no-wait waited: {}",
        out.text()
    );
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {}", out.text());
    assert!(
        lines[0].starts_with("nats-roles: role lock is held by holder (term ")
            && lines[0].ends_with("); not waiting (--no-wait)"),
        "{}",
        out.text()
    );

    let out = exec(
        &url,
        "exec-no-wait",
        "waiter",
        &["-n", "--conflict-exit-code", "9"],
        &script,
    )
    .await;
    assert_eq!(out.code, Some(9), "{}", out.text());
    assert!(!ran.exists(), "the command never ran");
    holder.stop().await;
}

/// `--wait 2s` while another process holds the role for longer: one line saying it waits and
/// for whom, then after at least 2 s exit 75 without running the command.
#[tokio::test]
async fn wait_gives_up_after_the_duration_without_running_the_command() {
    let server = NatsServer::start().await;
    let url = server.url();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = temp_log(&dir, "holder.log");
    let ran = temp_log(&dir, "ran.log");
    let holder = Holder::start(&url, "exec-wait-expires", &log, "exec sleep 60").await;
    let script = format!("echo ran >> {}", ran.display());

    let out = exec(
        &url,
        "exec-wait-expires",
        "waiter",
        &["--wait", "2s"],
        &script,
    )
    .await;
    assert_eq!(out.code, Some(75), "{}", out.text());
    assert!(
        out.took >= Duration::from_secs(2),
        "gave up before 2 s: {}",
        out.text()
    );
    assert!(
        out.took < Duration::from_secs(15),
        "kept waiting: {}",
        out.text()
    );
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.text());
    assert!(
        lines[0].starts_with("nats-roles: waiting up to 2s for role lock held by holder (term ")
            && lines[0].ends_with(")…"),
        "{}",
        out.text()
    );
    assert!(
        lines[1].starts_with("nats-roles: gave up waiting for role lock after 2s: held by holder"),
        "{}",
        out.text()
    );
    assert!(!ran.exists(), "the command never ran");
    holder.stop().await;
}

/// `--wait 30s` while the holder's command ends after about 2 s: the waiter says for whom it
/// waits, gets the role when the holder releases it, says so, runs its command and exits
/// with its status. Neither process prints a warning or an error.
#[tokio::test]
async fn wait_runs_the_command_when_the_role_frees_up_in_time() {
    let server = NatsServer::start().await;
    let url = server.url();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = temp_log(&dir, "holder.log");
    let bucket = "exec-wait-frees";
    let rest = format!("sleep 2; echo done >> {}", log.display());
    let mut holder = Holder::start(&url, bucket, &log, &rest).await;

    let script = format!("echo ran >> {}; exit 4", log.display());
    let out = exec(&url, bucket, "waiter", &["--wait", "30s"], &script).await;
    assert_eq!(out.code, Some(4), "the command's status: {}", out.text());
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.text());
    assert!(
        lines[0].starts_with("nats-roles: waiting up to 30s for role lock held by holder (term "),
        "{}",
        out.text()
    );
    assert!(
        lines[1].starts_with("nats-roles: got role lock (term "),
        "{}",
        out.text()
    );
    let order: Vec<String> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(order, ["started", "done", "ran"], "one after the other");

    let status = tokio::time::timeout(Duration::from_secs(15), holder.child.wait())
        .await
        .expect("the holder exits when its command ends")
        .expect("wait");
    assert_eq!(status.code(), Some(0));
}

/// A normal run — uncontended, and the holder whose command ends by itself while another
/// waits — writes nothing to stderr: no `role command exited; releasing the role`, no
/// `cannot release the role` (the one-shot's release raced the manager's stop). Several runs,
/// as that race went either way.
#[tokio::test]
async fn a_normal_run_writes_nothing_to_stderr() {
    let server = NatsServer::start().await;
    let url = server.url();
    for i in 0..5 {
        let out = exec(&url, "exec-quiet", "quiet", &[], "echo hi; exit 0").await;
        assert_eq!(out.code, Some(0), "run {i}: {}", out.text());
        assert_eq!(out.stdout, "hi\n", "run {i}: {}", out.text());
        assert!(warnings(&out.stderr).is_empty(), "run {i}: {}", out.text());
        assert_eq!(out.stderr, "", "run {i}: {}", out.text());
    }
    // The holder of a contended role, whose command ends by itself while another waits: it
    // exits with its command's status, quietly.
    let dir = tempfile::tempdir().expect("temp dir");
    let log = temp_log(&dir, "holder.log");
    let mut holder = Holder::start(&url, "exec-quiet", &log, "sleep 1.5").await;
    let stderr = holder.child.stderr.take().expect("the holder's stderr");
    let waiter = exec(&url, "exec-quiet", "waiter", &[], "true").await;
    assert_eq!(waiter.code, Some(0), "{}", waiter.text());
    assert!(warnings(&waiter.stderr).is_empty(), "{}", waiter.text());
    let status = tokio::time::timeout(Duration::from_secs(15), holder.child.wait())
        .await
        .expect("the holder exits when its command ends")
        .expect("wait");
    let mut text = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut { stderr }, &mut text)
        .await
        .expect("read the holder's stderr");
    assert_eq!(status.code(), Some(0), "{text}");
    assert_eq!(text, "", "the holder's stderr");
}

/// A command that cannot start exits as a shell would — 127 when it is not found, 126 when it
/// cannot be run — with a message about the command line, not about configuration fields, and
/// before `exec` contends for the role (here no server is even listening).
#[tokio::test]
async fn an_unstartable_command_exits_127_or_126_before_contending() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plain = dir.path().join("plain.sh");
    std::fs::write(&plain, "#!/bin/sh\n").expect("write");
    let plain = plain.display().to_string();
    let missing = dir.path().join("missing").display().to_string();
    let folder = dir.path().display().to_string();
    for (program, code, says) in [
        (
            "no-such-program-anywhere",
            127,
            "\"no-such-program-anywhere\" was not found in PATH",
        ),
        (missing.as_str(), 127, "No such file or directory"),
        (plain.as_str(), 126, "is not executable"),
        (folder.as_str(), 126, "is not a file"),
    ] {
        let out = testkit::cli::run(
            &[
                "exec",
                "--role",
                "lock",
                "-s",
                "nats://127.0.0.1:1",
                "--",
                program,
                "arg",
            ],
            &[],
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(out.code, Some(code), "{program}: {}", out.text());
        assert!(
            out.stderr
                .starts_with("nats-roles: cannot run the command: ")
                && out.stderr.contains(says)
                && out.stderr.contains(program),
            "{program}: {}",
            out.text()
        );
        assert!(!out.stderr.contains("roles["), "{program}: {}", out.text());
        assert_eq!(out.stderr.lines().count(), 1, "{program}: {}", out.text());
    }
}
