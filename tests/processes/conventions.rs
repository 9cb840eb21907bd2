//! The conventions operators bring from other tools, as real processes: NATS contexts of the
//! `nats` tool for every command that connects, no ANSI colour off a terminal or with
//! `NO_COLOR`, connection errors that name the servers tried.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use testkit::NatsServer;
use testkit::cli::CliOutput;
use testkit::process::{SIGTERM, signal};
use tokio::io::{AsyncBufReadExt, BufReader};

const LIMIT: Duration = Duration::from_secs(30);

async fn run(args: &[&str], env: &[(&str, &str)]) -> CliOutput {
    testkit::cli::run(args, env, LIMIT).await
}

/// A `$XDG_CONFIG_HOME` with the contexts `(name, json)`, `selected` chosen in context.txt.
fn contexts(dir: &Path, all: &[(&str, String)], selected: &str) {
    let folder = dir.join("nats/context");
    std::fs::create_dir_all(&folder).expect("mkdir");
    for (name, json) in all {
        std::fs::write(folder.join(format!("{name}.json")), json).expect("write context");
    }
    std::fs::write(dir.join("nats/context.txt"), selected).expect("select");
}

/// Spawns `nats-roles run` with `args` and `env`, stdout and stderr piped; returns the child
/// and the first line (of either stream) that contains `wanted`, or fails after 20 s with
/// everything it printed.
async fn run_until(
    args: &[&str],
    env: &[(&str, &str)],
    wanted: &str,
) -> (tokio::process::Child, String) {
    let mut cmd = testkit::cli::command(testkit::nats_roles_bin());
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn nats-roles");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = child.stdout.take().expect("stdout");
    let err = child.stderr.take().expect("stderr");
    for stream in [
        Box::new(out) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
        Box::new(err),
    ] {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let mut seen = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = rx.recv().await {
            if line.contains(wanted) {
                return Some(line);
            }
            seen.push(line);
        }
        None
    })
    .await;
    match found {
        Ok(Some(line)) => (child, line),
        _ => panic!(
            "nats-roles {args:?} printed no line with {wanted:?} within 20 s:\n{}",
            seen.join("\n")
        ),
    }
}

/// One NATS context with the server's URL and a user's credentials serves `exec`
/// (`NATS_CONTEXT`), `status` (the context selected in context.txt, no flags at all) and `run`
/// (`--context`, over a configuration file whose servers are wrong); `--context` beats the
/// selected context. Without the context the same commands are refused by the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_context_serves_every_command_that_connects() {
    let server = NatsServer::start_with_config(
        "authorization { users = [ { user: ctx, password: ctx-secret } ] }",
    )
    .await;
    let url = server.url();
    let home = tempfile::tempdir().expect("temp dir");
    contexts(
        home.path(),
        &[
            (
                "good",
                format!(r#"{{"url": "{url}", "user": "ctx", "password": "ctx-secret"}}"#),
            ),
            ("wrong", r#"{"url": "nats://127.0.0.1:1"}"#.to_owned()),
        ],
        "good",
    );
    let xdg = home.path().to_string_lossy().into_owned();
    let with_contexts = [("XDG_CONFIG_HOME", xdg.as_str())];

    // Control: the server wants the credentials.
    let out = run(&["status", "-s", &url, "--bucket", "ctx"], &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.text());
    assert!(out.stderr.contains("uthorization"), "{}", out.text());

    let out = run(
        &[
            "exec",
            "--role",
            "solo",
            "--bucket",
            "ctx",
            "--auto-create",
            "--",
            "true",
        ],
        &[("XDG_CONFIG_HOME", &xdg), ("NATS_CONTEXT", "good")],
    )
    .await;
    assert_eq!(out.code, Some(0), "exec with NATS_CONTEXT: {}", out.text());

    let out = run(&["status", "--bucket", "ctx"], &with_contexts).await;
    assert_eq!(
        out.code,
        Some(0),
        "status, selected context: {}",
        out.text()
    );
    assert!(out.stdout.contains("bucket ctx"), "{}", out.text());

    let out = run(
        &["status", "--bucket", "ctx", "--context", "wrong"],
        &with_contexts,
    )
    .await;
    assert_eq!(
        out.code,
        Some(1),
        "--context beats the selection: {}",
        out.text()
    );
    assert!(
        out.stderr.contains("tried nats://127.0.0.1:1:"),
        "{}",
        out.text()
    );

    let config = home.path().join("roles.yaml");
    std::fs::write(
        &config,
        "nats:\n  servers: [\"nats://127.0.0.1:1\"]\nbucket:\n  name: ctx\ninstance:\n  id: node-a\n\
         roles:\n  - name: alpha\n",
    )
    .expect("write config");
    let config = config.to_string_lossy().into_owned();
    let (mut child, line) = run_until(
        &["run", "--config", &config, "--context", "good", "--no-http"],
        &with_contexts,
        "promoted role=alpha",
    )
    .await;
    assert!(line.starts_with("promoted role=alpha term="), "{line}");
    signal(child.id().expect("pid"), SIGTERM);
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .expect("run exits after SIGTERM")
        .expect("wait");
    assert!(status.success(), "{status:?}");
}

/// `run` does not follow the context selected with `nats context select` (a service's
/// connection does not change with an operator's shell), and a connection error names the
/// servers it tried, in `run` (its retry warnings), `status` and `exec`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_errors_name_the_servers_tried() {
    let servers = "nats://nonexistent.invalid:4222,nats://127.0.0.1:1";
    let tried = "tried nats://nonexistent.invalid:4222, nats://127.0.0.1:1: ";
    let out = run(&["status", "-s", servers], &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.text());
    assert!(out.stderr.contains(tried), "{}", out.text());
    let out = run(&["exec", "--role", "r", "-s", servers, "--", "true"], &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.text());
    assert!(out.stderr.contains(tried), "{}", out.text());

    let home = tempfile::tempdir().expect("temp dir");
    contexts(
        home.path(),
        &[("selected", r#"{"url": "nats://127.0.0.1:2"}"#.to_owned())],
        "selected",
    );
    let config = home.path().join("roles.yaml");
    std::fs::write(
        &config,
        format!("nats:\n  servers: [{servers}]\ninstance:\n  id: node-a\n"),
    )
    .expect("write config");
    let xdg = home.path().to_string_lossy().into_owned();
    let (mut child, line) = run_until(
        &["run", "--config", &config.to_string_lossy(), "--no-http"],
        &[("XDG_CONFIG_HOME", &xdg)],
        "start-up failed; retrying",
    )
    .await;
    let _ = child.start_kill();
    assert!(line.contains(tried), "{line}");
}

/// Runs `command` (a shell command line) on a pseudo terminal (util-linux `script`); what the
/// terminal showed.
async fn on_tty(command: &str, env: &[(&str, &str)]) -> String {
    let mut cmd = testkit::cli::command("script");
    cmd.args(["-qec", command, "/dev/null"])
        .env("TERM", "xterm")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(LIMIT, cmd.output())
        .await
        .expect("finished")
        .unwrap_or_else(|e| panic!("`script` (util-linux) is needed for this test: {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const ESC: char = '\u{1b}';

/// Logs carry ANSI colour only on a terminal and never with `NO_COLOR`: `exec` on a pipe (it
/// coloured pipes), `exec` on a terminal with and without `NO_COLOR`, `run` on a terminal with
/// `NO_COLOR` (it ignored it), and clap's help.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_colour_off_a_terminal_or_with_no_color() {
    let server = NatsServer::start().await;
    let url = server.url();
    let bin = testkit::nats_roles_bin().to_string_lossy().into_owned();
    let exec = [
        "exec",
        "--role",
        "colour",
        "-s",
        &url,
        "--auto-create",
        "--",
        "true",
    ];
    let info = [("RUST_LOG", "info")];

    let out = run(&exec, &info).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(
        out.stderr.contains("NATS connected"),
        "no log lines:\n{}",
        out.text()
    );
    assert!(
        !out.stderr.contains(ESC),
        "ANSI escapes on a pipe:\n{:?}",
        out.stderr
    );

    let line = format!("{bin} {}", exec.join(" "));
    let coloured = on_tty(&line, &info).await;
    assert!(coloured.contains("NATS connected"), "{coloured}");
    assert!(
        coloured.contains(ESC),
        "no colour on a terminal (the control):\n{coloured:?}"
    );
    let plain = on_tty(&line, &[("RUST_LOG", "info"), ("NO_COLOR", "1")]).await;
    assert!(plain.contains("NATS connected"), "{plain}");
    assert!(!plain.contains(ESC), "colour despite NO_COLOR:\n{plain:?}");

    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("roles.yaml");
    std::fs::write(&config, "instance:\n  id: node-a\n").expect("write config");
    let run_line = format!(
        "timeout -s INT 3 {bin} run --config {} -s nats://127.0.0.1:1 --no-http",
        config.display()
    );
    let plain = on_tty(&run_line, &[("NO_COLOR", "1")]).await;
    assert!(plain.contains("start-up failed; retrying"), "{plain}");
    assert!(
        !plain.contains(ESC),
        "run: colour despite NO_COLOR:\n{plain:?}"
    );

    let help = format!("{bin} --help");
    assert!(
        on_tty(&help, &[]).await.contains(ESC),
        "clap's help is coloured on a terminal"
    );
    assert!(!on_tty(&help, &[("NO_COLOR", "1")]).await.contains(ESC));
    assert!(!run(&["--help"], &[]).await.stdout.contains(ESC));
}
