//! The operator commands (`status`, `watch`, `evict`, `validate`) as real processes against a
//! real nats-server, with role managers holding roles in the same process as the test.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use crate::BIN;
use nats_roles::tooling::inspect::{EventView, Evicted, RoleList};
use nats_roles::{InstanceId, RoleEvent, RoleManager, RoleSpec};
use testkit::NatsServer;
use testkit::cli::CliOutput;
use testkit::roles::{role, wait_until};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(10);

async fn manager(url: &str, id: &str, bucket: &str, roles: &[&str]) -> Arc<RoleManager> {
    let client = testkit::connect(url).await;
    let mut builder = RoleManager::builder(client, InstanceId::new(id).expect("valid id"))
        .bucket(bucket)
        .auto_create(1)
        .meta(BTreeMap::from([(
            "http".to_owned(),
            format!("http://{id}.test:8080/"),
        )]));
    for name in roles {
        builder = builder.role(RoleSpec::new(role(name)));
    }
    let manager = builder.start().await.expect("manager starts");
    tokio::time::timeout(WAIT, manager.caught_up())
        .await
        .expect("caught up");
    Arc::new(manager)
}

/// Runs `nats-roles args...` with stdin from /dev/null and a clean environment plus `env`.
async fn run(args: &[&str], env: &[(&str, &str)]) -> CliOutput {
    testkit::cli::run(args, env, Duration::from_secs(20)).await
}

/// Runs `nats-roles args...` on a pseudo terminal (util-linux `script`), typing `answer`.
async fn run_on_tty(args: &[&str], answer: &str) -> CliOutput {
    let command = std::iter::once(BIN)
        .chain(args.iter().copied())
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = testkit::cli::command("script");
    cmd.args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("`script` (util-linux) is needed for the TTY test: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt;
        stdin
            .write_all(answer.as_bytes())
            .await
            .expect("type the answer");
    }
    let started = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("finished within 20 s")
        .expect("script ran");
    CliOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_every_holder_as_a_table_or_json() {
    let server = NatsServer::start().await;
    let url = server.url();
    let a = manager(&url, "node-a", "cli-status", &["alpha", "beta"]).await;
    wait_until(WAIT, "node-a leads", || {
        a.is_leader(&role("alpha")) && a.is_leader(&role("beta"))
    })
    .await;
    let b = manager(&url, "node-b", "cli-status", &["gamma"]).await;
    wait_until(WAIT, "node-b leads gamma", || b.is_leader(&role("gamma"))).await;

    let out = run(
        &[
            "status",
            "--server",
            &url,
            "--bucket",
            "cli-status",
            "--json",
        ],
        &[],
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    let list: RoleList = serde_json::from_str(&out.stdout).expect("status --json is a RoleList");
    assert_eq!(
        (list.bucket.as_str(), list.instance.as_deref()),
        ("cli-status", None)
    );
    let got: Vec<(String, Option<String>, Option<u64>)> = list
        .roles
        .iter()
        .map(|r| (r.role.clone(), r.holder.clone(), r.term))
        .collect();
    let term = |m: &RoleManager, r: &str| m.leadership(&role(r)).map(|l| l.term());
    let want = vec![
        (
            "alpha".to_owned(),
            Some("node-a".to_owned()),
            term(&a, "alpha"),
        ),
        (
            "beta".to_owned(),
            Some("node-a".to_owned()),
            term(&a, "beta"),
        ),
        (
            "gamma".to_owned(),
            Some("node-b".to_owned()),
            term(&b, "gamma"),
        ),
    ];
    assert_eq!(got, want);
    let alpha = &list.roles[0];
    assert_eq!(
        alpha.holder_url.as_deref(),
        Some("http://node-a.test:8080/")
    );
    assert!(alpha.renewal_age_ms.is_some() && alpha.held_for_ms.is_some());
    assert!(alpha.local.is_none());
    // Not even as `"local": null` (docs/http-api.md: "without `local`").
    let raw: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    for r in raw["roles"].as_array().expect("roles") {
        assert!(
            r.get("local").is_none(),
            "a `local` key in status --json: {r}"
        );
    }
    for m in [&a, &b] {
        for r in m.roles() {
            let token = m.leadership(&r).expect("leading").token();
            assert!(!out.stdout.contains(&token.expose()), "full token printed");
            assert!(!out.stdout.contains(&token.nonce().simple().to_string()));
        }
    }

    // The same through the environment, and through a configuration file, as a table.
    let env = [
        ("NATS_URL", url.as_str()),
        ("NATS_ROLES_BUCKET", "cli-status"),
    ];
    let table = run(&["status"], &env).await;
    assert_eq!(table.code, Some(0), "{}", table.text());
    assert!(
        table
            .stdout
            .starts_with("bucket cli-status: 3 roles held by 2 instances"),
        "{}",
        table.text()
    );
    let header = table.stdout.lines().nth(2).unwrap_or_default();
    for column in [
        "ROLE", "HOLDER", "TERM", "TOKEN", "HELD FOR", "RENEWED", "PRIO",
    ] {
        assert!(header.contains(column), "{header}");
    }
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.starts_with("gamma") && l.contains("node-b"))
    );
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.starts_with("node-a") && l.contains("alpha, beta"))
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("roles.yaml");
    std::fs::write(
        &config,
        format!("nats:\n  servers: [\"{url}\"]\nbucket:\n  name: cli-status\n"),
    )
    .expect("write config");
    let config = config.to_str().expect("UTF-8 path");
    let from_file = run(&["status", "--config", config, "--json"], &[]).await;
    assert_eq!(from_file.code, Some(0), "{}", from_file.text());
    let list: RoleList = serde_json::from_str(&from_file.stdout).expect("RoleList");
    assert_eq!(list.roles.len(), 3);

    // A reader that went away (`status | head -1`): the command ends on SIGPIPE, as `cat`
    // would, without a panic message (before: `failed printing to stdout: Broken pipe`, exit
    // 101).
    let (closed, writer) = std::io::pipe().expect("pipe");
    drop(closed);
    let piped = std::process::Command::new(testkit::bins::nats_roles_bin())
        .args(["status", "--server", &url, "--bucket", "cli-status"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("status into a closed pipe");
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(piped.status.signal(), Some(13), "{piped:?}");
    assert!(
        !String::from_utf8_lossy(&piped.stderr).contains("panicked"),
        "{piped:?}"
    );

    a.shutdown(WAIT).await.expect("clean shutdown");
    b.shutdown(WAIT).await.expect("clean shutdown");
}

/// A running `nats-roles watch` and its stdout lines.
struct Watch {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Watch {
    fn spawn(args: &[&str]) -> Watch {
        let mut cmd = testkit::cli::command(BIN);
        cmd.arg("watch")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("spawn watch");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Watch { child, lines }
    }

    async fn line(&mut self) -> String {
        tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("a line within 10 s")
            .expect("read")
            .expect("watch still running")
    }

    async fn event(&mut self) -> EventView {
        let line = self.line().await;
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not an event ({e}): {line}"))
    }

    async fn exits_ok(mut self) {
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("watch exits after --count transitions")
            .expect("wait");
        assert!(status.success(), "{status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_the_holders_then_each_hand_over() {
    let server = NatsServer::start().await;
    let url = server.url();
    let a = manager(&url, "node-a", "cli-watch", &["alpha"]).await;
    wait_until(WAIT, "node-a leads alpha", || a.is_leader(&role("alpha"))).await;
    let b = manager(&url, "node-b", "cli-watch", &["alpha"]).await;

    let conn = ["-s", url.as_str(), "--bucket", "cli-watch"];
    let mut watch = Watch::spawn(&[&["--json", "--count", "2"][..], &conn[..]].concat());
    let hello = watch.event().await;
    assert!(
        matches!(&hello, EventView::Hello { bucket, .. } if bucket == "cli-watch"),
        "{hello:?}"
    );
    let term_a = a.leadership(&role("alpha")).expect("a leads").term();
    match watch.event().await {
        EventView::Current {
            role,
            holder,
            term,
            token,
            ..
        } => {
            assert_eq!(
                (role.as_str(), holder.as_deref(), term),
                ("alpha", Some("node-a"), Some(term_a))
            );
            assert!(
                token
                    .as_deref()
                    .is_some_and(|t| t.starts_with(&format!("{term_a}·…")))
            );
        }
        other => panic!("expected the current holder, got {other:?}"),
    }
    // Renewals print nothing; a hand-over prints the vacancy, then the new holder.
    tokio::time::sleep(Duration::from_millis(800)).await;
    a.release(&role("alpha"), Duration::from_secs(60))
        .expect("release");
    wait_until(WAIT, "node-b leads alpha", || b.is_leader(&role("alpha"))).await;
    let vacant = watch.event().await;
    assert!(
        matches!(&vacant, EventView::Vacant { role, previous, .. } if role == "alpha" && previous.as_deref() == Some("node-a")),
        "{vacant:?}"
    );
    let holder = watch.event().await;
    let term_b = b.leadership(&role("alpha")).expect("b leads").term();
    assert!(
        matches!(&holder, EventView::Holder { role, holder: Some(h), previous: Some(p), handover: true, term: Some(t), .. }
            if role == "alpha" && h == "node-b" && p == "node-a" && *t == term_b),
        "{holder:?}"
    );
    watch.exits_ok().await;

    // The human-readable form says the same in words.
    let mut watch = Watch::spawn(&[&["--count", "1"][..], &conn[..]].concat());
    assert!(watch.line().await.contains("watching bucket cli-watch"));
    let current = watch.line().await;
    assert!(
        current.contains("current  alpha  node-b  term"),
        "{current}"
    );
    b.release(&role("alpha"), Duration::from_secs(60))
        .expect("release");
    let vacant = watch.line().await;
    assert!(vacant.contains("vacant   alpha  (was node-b)"), "{vacant}");
    watch.exits_ok().await;

    a.shutdown(WAIT).await.expect("clean shutdown");
    b.shutdown(WAIT).await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_asks_first_and_deletes_only_the_confirmed_term() {
    let server = NatsServer::start().await;
    let url = server.url();
    let a = manager(&url, "node-a", "cli-evict", &["alpha", "beta"]).await;
    wait_until(WAIT, "node-a leads", || {
        a.is_leader(&role("alpha")) && a.is_leader(&role("beta"))
    })
    .await;
    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .copied()
            .chain(["-s", url.as_str(), "--bucket", "cli-evict"])
            .map(str::to_owned)
            .collect()
    };
    let run_v = async |v: Vec<String>| {
        let refs: Vec<&str> = v.iter().map(String::as_str).collect();
        run(&refs, &[]).await
    };
    let mut events = a.events();
    let term_alpha = a.leadership(&role("alpha")).expect("leading").term();

    // No terminal and no --yes: refused as a usage error, nothing happens.
    let out = run_v(with(&["evict", "alpha"])).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(out.stderr.contains("--yes"), "{}", out.text());
    assert!(a.is_leader(&role("alpha")));
    // Invalid and unknown roles, stale terms.
    let out = run_v(with(&["evict", "bad.name", "--yes"])).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    let out = run_v(with(&["evict", "nope", "--yes"])).await;
    assert_eq!(out.code, Some(1), "{}", out.text());
    assert!(out.stderr.contains("not in the bucket"), "{}", out.text());
    let stale = (term_alpha + 1000).to_string();
    let out = run_v(with(&["evict", "alpha", "--yes", "--term", &stale])).await;
    assert_eq!(out.code, Some(1), "{}", out.text());
    assert!(out.stderr.contains("nothing evicted"), "{}", out.text());
    assert_eq!(
        a.leadership(&role("alpha")).map(|l| l.term()),
        Some(term_alpha)
    );

    // On a terminal: "n" keeps the holder, "y" evicts it.
    let tty_args = with(&["evict", "alpha"]);
    let refs: Vec<&str> = tty_args.iter().map(String::as_str).collect();
    let out = run_on_tty(&refs, "n\n").await;
    assert_eq!(out.code, Some(1), "{}", out.text());
    assert!(
        out.stdout.contains("Evict node-a from role alpha"),
        "{}",
        out.text()
    );
    assert!(out.stdout.contains("nothing evicted"), "{}", out.text());
    assert_eq!(
        a.leadership(&role("alpha")).map(|l| l.term()),
        Some(term_alpha)
    );
    let out = run_on_tty(&refs, "y\n").await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(
        out.stdout.contains(&format!(
            "evicted node-a from role alpha (term {term_alpha}"
        )),
        "{}",
        out.text()
    );
    let deadline = Instant::now() + WAIT;
    loop {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("node-a hears of the eviction")
            .expect("event");
        if let RoleEvent::Demoted {
            role: r,
            term,
            reason,
        } = event
            && r.as_str() == "alpha"
        {
            assert_eq!((term, reason.as_str()), (term_alpha, "evicted"));
            break;
        }
    }

    // --yes --json for scripts: the result parses back.
    let term_beta = a.leadership(&role("beta")).expect("leading").term();
    let out = run_v(with(&["evict", "beta", "--yes", "--json"])).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    let evicted: Evicted = serde_json::from_str(&out.stdout).expect("Evicted JSON");
    assert_eq!(
        (
            evicted.role.as_str(),
            evicted.holder.as_deref(),
            evicted.term
        ),
        ("beta", Some("node-a"), Some(term_beta))
    );
    assert!(evicted.marker_revision > evicted.revision);
    // The evicted holder campaigns again: a new, higher term.
    wait_until(WAIT, "beta is held again in a new term", || {
        a.leadership(&role("beta"))
            .is_some_and(|l| l.term() > term_beta)
    })
    .await;
    a.shutdown(WAIT).await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_and_usage_errors_exit_1_and_2() {
    let server = NatsServer::start().await;
    let url = server.url();
    let free = testkit::free_port();
    let nowhere = format!("nats://127.0.0.1:{free}");
    let out = run(&["status", "-s", &nowhere, "--timeout", "1s"], &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.text());
    assert!(out.stderr.contains("cannot connect"), "{}", out.text());
    let out = run(&["status", "-s", &url, "--bucket", "missing"], &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.text());
    assert!(
        out.stderr.contains("\"missing\" does not exist"),
        "{}",
        out.text()
    );
    let out = run(&["watch", "-s", &url, "--bucket", "missing"], &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.text());
    let out = run(&["status", "-s", "nats://host:notaport"], &[]).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(out.stderr.contains("nats.servers[0]"), "{}", out.text());
    let out = run(&["status", "--bucket", "bad name"], &[]).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    let out = run(&["status", "--config", "/nonexistent/roles.yaml"], &[]).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    let out = run(&["status", "--timeout", "soon"], &[]).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    let out = run(&["status", "--no-such-flag"], &[]).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    let out = run(&["status", "--user", "u"], &[]).await;
    assert_eq!(out.code, Some(2), "user without password: {}", out.text());
    let out = run(&["evict"], &[]).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    let out = run(&["--help"], &[]).await;
    assert_eq!(out.code, Some(0));
    for sub in ["status", "watch", "evict", "validate", "run"] {
        assert!(out.stdout.contains(sub), "help lacks {sub}: {}", out.stdout);
    }
}

#[tokio::test]
async fn validate_prints_every_problem_with_line_and_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "bucket:\n  replicas: 9\nhttp:\n  listen: \"localhost\"\n  admin_token: short\n\
         timing:\n  ttl: 3s\n  heartbeat: 2s\nroles:\n  - name: a\n  - name: a\n",
    )
    .expect("write");
    let path = path.to_str().expect("UTF-8 path");
    let out = run(&["validate", path], &[]).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    for (field, line) in [
        ("bucket.replicas", 2),
        ("http.listen", 4),
        ("http.admin_token", 5),
        ("timing.heartbeat", 8),
        ("roles[1].name", 11),
    ] {
        let shown = out
            .stderr
            .lines()
            .find(|l| l.contains(field))
            .unwrap_or_else(|| panic!("{field} not reported:\n{}", out.text()));
        assert!(shown.contains(&format!("line {line}, column")), "{shown}");
    }
    assert!(out.stderr.contains("(5 problems)"), "{}", out.text());

    // A missing file is a usage error that says so, not an "invalid configuration".
    let missing = dir.path().join("missing.yaml");
    let missing = missing.to_str().expect("UTF-8 path");
    let out = run(&["validate", missing], &[]).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr.contains("cannot read") && out.stderr.contains("missing.yaml"),
        "{}",
        out.text()
    );
    assert!(
        !out.stderr.contains("invalid configuration"),
        "{}",
        out.text()
    );
}

/// A FIFO without a writer, a socket, a device or a directory given as the configuration file is
/// refused at once (exit 2) by `validate`, `run` and the operator commands: none of them opens
/// it for reading first (opening a FIFO without a writer blocks).
#[cfg(unix)]
#[tokio::test]
async fn validate_and_run_refuse_files_that_are_not_regular_without_blocking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let socket = dir.path().join("socket.yaml");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind socket");
    let quick = Duration::from_secs(5);
    for (path, kind) in [
        (fifo.as_path(), "a FIFO (named pipe)"),
        (socket.as_path(), "a socket"),
        (std::path::Path::new("/dev/zero"), "a character device"),
        (dir.path(), "a directory"),
    ] {
        let path = path.to_str().expect("UTF-8 path");
        let expected = format!("{path}: it is {kind}, not a regular file");
        let commands: [&[&str]; 3] = [
            &["validate", path],
            &["run", "--config", path, "--instance-id", "a", "--no-http"],
            &["status", "--config", path],
        ];
        for args in commands {
            let out = testkit::cli::run(args, &[], quick).await;
            assert_eq!(out.code, Some(2), "{args:?}: {}", out.text());
            assert!(out.stderr.contains(&expected), "{args:?}: {}", out.text());
        }
    }
}

/// Values the server cannot honour, non-finite numbers, invalid UTF-8 and oversized files: each
/// message points at the place (line and column, byte offset) and names the right size.
#[tokio::test]
async fn validate_points_at_absurd_durations_non_finite_numbers_and_bad_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write");
        path.to_str().expect("UTF-8 path").to_owned()
    };
    let cases = [
        (
            write("ttl.yaml", b"timing:\n  ttl: 1000000000y\n"),
            vec!["timing.ttl: 1000000000years is longer than the maximum 1h (line 2, column 8)"],
        ),
        (
            write(
                "role.yaml",
                b"roles:\n  - name: a\n    ttl: 2h\n    heartbeat: 10m\n    disconnect_grace: 1000000000y\n",
            ),
            vec![
                "roles[0].ttl: 2h is longer than the maximum 1h (role \"a\") (line 3, column 10)",
                "roles[0].disconnect_grace: 1000000000years must not exceed ttl 2h (role \"a\") (line 5, column 23)",
            ],
        ),
        (
            write("shutdown.yaml", b"shutdown:\n  timeout: 1000000000y\n  drain_timeout: 1000000000y\n"),
            vec!["shutdown.timeout: 1000000000years is longer than the maximum 1h (line 2, column 12)"],
        ),
        (
            write("nan.yaml", b"timing:\n  deadline_margin: .nan\n"),
            vec!["timing.deadline_margin: NaN is out of range: it must be greater than 0.0 and less than 0.5 (line 2, column 20)"],
        ),
        (
            write("inf.yaml", b"timing:\n  deadline_margin: .inf\n"),
            vec!["timing.deadline_margin: inf is out of range: it must be greater than 0.0 and less than 0.5 (line 2, column 20)"],
        ),
        (
            write("utf8.yaml", b"timing:\n  ttl: 3s\n  heartbeat: 1s \xff\n"),
            vec!["invalid configuration at line 3, column 17: the file is not valid UTF-8: invalid byte 0xff at byte offset 34"],
        ),
    ];
    for (path, expected) in &cases {
        for args in [
            vec!["validate", path.as_str()],
            vec!["run", "--config", path, "--instance-id", "a", "--no-http"],
        ] {
            let out = run(&args, &[]).await;
            assert_eq!(out.code, Some(2), "{args:?}: {}", out.text());
            for line in expected {
                assert!(
                    out.stderr.contains(line),
                    "{args:?}: {line:?} not in\n{}",
                    out.text()
                );
            }
        }
    }

    // 50 MB (sparse): the message names its real size, not the 1 MiB + 1 bytes read.
    let big = dir.path().join("big.yaml");
    std::fs::File::create(&big)
        .and_then(|f| f.set_len(50_000_000))
        .expect("sparse file");
    let out = run(&["validate", big.to_str().expect("UTF-8 path")], &[]).await;
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr.contains(
            "the configuration is 50000000 bytes (47.7 MiB); at most 1048576 bytes (1 MiB) are accepted"
        ),
        "{}",
        out.text()
    );
}

/// `run` prints its `http url=` line first, before the transitions of the roles it wins while
/// starting (README, docs/http-api.md): many roles, so that some are won while the manager
/// still starts the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_prints_the_http_url_before_any_transition() {
    const ROLES: usize = 200;
    let server = NatsServer::start().await;
    let names: Vec<String> = (0..ROLES).map(|i| format!("r{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut d = testkit::instances::Deployment::new(&server.url(), "url-first", &names, "");
    let i = d.start("node-a").await;
    let deadline = Instant::now() + WAIT;
    let lines = loop {
        let lines = d.instances[i].stdout();
        let promoted = lines.iter().filter(|l| l.starts_with("promoted ")).count();
        if promoted == ROLES {
            break lines;
        }
        assert!(
            Instant::now() < deadline,
            "{promoted} of {ROLES} roles promoted\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        lines[0].starts_with("http url="),
        "the first stdout line is not the URL: {:?}",
        &lines[..lines.len().min(3)]
    );
}

/// Protocol v2 (Q5): the role keys of a SIGKILLed instance stay in the bucket (no TTL of their
/// own), but once its session expired `status` lists its roles as vacant and `watch` prints
/// their vacancies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_dead_instance_s_roles_vacant_after_its_session_expired() {
    let server = NatsServer::start().await;
    let url = server.url();
    let mut d = testkit::instances::Deployment::new(
        &url,
        "cli-dead",
        &["alpha", "beta"],
        "timing:\n  ttl: 1s\n  heartbeat: 250ms\n  operation_timeout: 500ms\n  disconnect_grace: 1000ms\n",
    );
    let a = d.start("node-a").await;
    let status = || async {
        let out = run(
            &["status", "--server", &url, "--bucket", "cli-dead", "--json"],
            &[],
        )
        .await;
        assert_eq!(out.code, Some(0), "{}", out.text());
        let list: RoleList = serde_json::from_str(&out.stdout).expect("a RoleList");
        list.roles
            .iter()
            .map(|r| (r.role.clone(), r.holder.clone()))
            .collect::<Vec<_>>()
    };
    let held = vec![
        ("alpha".to_owned(), Some("node-a".to_owned())),
        ("beta".to_owned(), Some("node-a".to_owned())),
    ];
    testkit::eventually("node-a holds both roles", WAIT, || async {
        (status().await == held).then_some(())
    })
    .await;
    // A `watch` started before the kill prints both vacancies when the session ends.
    let mut watch = Watch::spawn(&["--json", "--count", "2", "-s", &url, "--bucket", "cli-dead"]);
    assert!(matches!(watch.event().await, EventView::Hello { .. }));
    for _ in 0..2 {
        assert!(matches!(watch.event().await, EventView::Current { .. }));
    }
    testkit::process::signal(d.instances[a].pid(), libc::SIGKILL);
    let killed = Instant::now();
    let mut vacated = Vec::new();
    for _ in 0..2 {
        match watch.event().await {
            EventView::Vacant { role, previous, .. } => {
                assert_eq!(previous.as_deref(), Some("node-a"));
                vacated.push(role);
            }
            other => panic!("expected a vacancy, got {other:?}"),
        }
    }
    vacated.sort();
    assert_eq!(vacated, ["alpha", "beta"]);
    watch.exits_ok().await;
    testkit::eventually("both roles listed vacant", WAIT, || async {
        status().await.is_empty().then_some(())
    })
    .await;
    // The session's TTL is 1 s (the server expires it up to ~1 s later at most).
    assert!(
        killed.elapsed() >= Duration::from_millis(900),
        "{:?}",
        killed.elapsed()
    );
    // The role keys are still there: vacancy comes from the session, not from a deletion.
    let js = async_nats::jetstream::new(testkit::connect(&url).await);
    let kv = js.get_key_value("cli-dead").await.expect("the bucket");
    let entry = kv
        .entry("role.alpha")
        .await
        .expect("read")
        .expect("role.alpha present");
    assert_eq!(entry.operation, async_nats::jetstream::kv::Operation::Put);
}
