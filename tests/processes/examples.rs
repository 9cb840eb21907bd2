//! Runs every example against a real nats-server, as a newcomer would.

use std::process::Stdio;
use std::time::Duration;

use testkit::NatsServer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// The compiled example `name` against `server`, logging warnings only, with piped output.
fn example(name: &str, server: &NatsServer) -> Command {
    let mut cmd = Command::new(testkit::example_bin(name));
    cmd.env("NATS_URL", server.url())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Runs an example for `secs` seconds and returns its stdout; fails on a non-zero exit.
async fn run(server: &NatsServer, name: &str, args: &[&str], secs: u64) -> String {
    let child = example(name, server)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("RUN_FOR_SECS", secs.to_string())
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

    // Example 2 holds "sweeper" and "scheduler"; example 3 observes "scheduler" meanwhile. (The
    // bucket is new: no role is acquired before it is a TTL + heartbeat old, 3.75 s with the
    // default timing, protocol Q6.)
    let (control, router) = tokio::join!(run(&server, "control_plane", &["node-a"], 7), async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        run(&server, "router", &[], 4).await
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

    // A role never written in this bucket: its key has no entry, so it is acquired a TTL +
    // heartbeat (3.75 s) after it was first read (protocol Q5 rule 1).
    // Beside it, the sharded worker of a role group: it holds all 8 partitions alone and
    // revokes each at its shutdown.
    let (single, sharded) = tokio::join!(
        run(&server, "single_role", &["solo"], 5),
        run(&server, "sharded_worker", &["worker-a"], 5)
    );
    for i in 0..8 {
        assert!(
            sharded.contains(&format!("assigned partition {i} (term")),
            "{sharded}"
        );
        assert!(
            sharded.contains(&format!("revoked partition {i} (shutdown)")),
            "{sharded}"
        );
    }
    assert!(
        sharded.contains("holding {0, 1, 2, 3, 4, 5, 6, 7} of 8"),
        "{sharded}"
    );
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

/// The README's library example and the crate docs' quick start are examples/quick_start.rs,
/// word for word, and it runs as written: two copies against a fresh server (no bucket yet),
/// the first holds the role, Ctrl-C hands it to the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_of_the_readme_and_the_crate_docs_runs_as_written() {
    let root = env!("CARGO_MANIFEST_DIR");
    let code = std::fs::read_to_string(format!("{root}/examples/quick_start.rs"))
        .expect("read examples/quick_start.rs");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("read README.md");
    let block = readme
        .split("\n## The library\n")
        .nth(1)
        .and_then(|s| s.split("```rust,no_run\n").nth(1))
        .and_then(|s| s.split("\n```\n").next())
        .expect("a rust block in the README's library section");
    assert_eq!(
        format!("{block}\n"),
        code,
        "the README's library example differs from examples/quick_start.rs"
    );
    let lib = std::fs::read_to_string(format!("{root}/src/lib.rs")).expect("read src/lib.rs");
    assert!(
        lib.contains(r#"include_str!("../examples/quick_start.rs")"#),
        "the crate docs' quick start is not examples/quick_start.rs"
    );

    let server = NatsServer::start().await;
    let start = |id: &str| {
        example("quick_start", &server)
            .env("NATS_ROLES_INSTANCE_ID", id)
            .spawn()
            .expect("start quick_start")
    };
    let mut a = start("qs-a");
    let mut a_out = BufReader::new(a.stdout.take().expect("stdout")).lines();
    let line = next_line(&mut a_out).await;
    assert_eq!(
        line.split(" term ").next(),
        Some("promoted: scheduler"),
        "{line}"
    );
    let mut b = start("qs-b");
    let mut b_out = BufReader::new(b.stdout.take().expect("stdout")).lines();
    // qs-b waits as a candidate; Ctrl-C on qs-a hands the role over.
    interrupt(&a);
    assert_eq!(next_line(&mut a_out).await, "demoted: scheduler (shutdown)");
    assert_eq!(next_line(&mut a_out).await, "stopped");
    assert_exits_cleanly(&mut a, "qs-a").await;
    let line = next_line(&mut b_out).await;
    assert!(line.starts_with("promoted: scheduler term "), "{line}");
    interrupt(&b);
    assert_eq!(next_line(&mut b_out).await, "demoted: scheduler (shutdown)");
    assert_exits_cleanly(&mut b, "qs-b").await;
}

/// Waits (10 s) for `child` (`name`) to exit, successfully.
async fn assert_exits_cleanly(child: &mut tokio::process::Child, name: &str) {
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap_or_else(|_| panic!("{name} did not exit within 10 s"))
        .expect("wait");
    assert!(status.success(), "{name}: {status:?}");
}

/// The next stdout line (10 s at most).
async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a line within 10 s")
        .expect("read stdout")
        .expect("stdout still open")
}

/// Ctrl-C (SIGINT) to a child process.
fn interrupt(child: &tokio::process::Child) {
    let pid = child.id().expect("running");
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -INT {pid}");
}

/// `examples/follow_self.py` (Python, standard library only) follows an instance's roles
/// through the `GET /api/self` long-poll: it prints the roles held, then the change when one
/// is released through the admin API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_follower_sees_its_instance_s_roles_change() {
    const TOKEN: &str = "follow-self-admin-token-0123";
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| {
            std::process::Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("python3 is needed by this test (Debian package python3); it is not installed");
    let server = NatsServer::start().await;
    let mut d = testkit::instances::Deployment::new(
        &server.url(),
        "follow-self",
        &["alpha", "beta"],
        &format!("http:\n  admin_token: {TOKEN}\n"),
    );
    let i = d.start("node-a").await;
    let (url, port) = (d.instances[i].url.clone(), d.instances[i].port);
    let mut follower = Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/follow_self.py"
        ))
        .arg(&url)
        .env("FOLLOW_CHANGES", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the follower");
    let mut lines = BufReader::new(follower.stdout.take().expect("stdout")).lines();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(15), lines.next_line())
            .await
            .expect("a line within 15 s")
            .expect("read")
            .expect("the follower is running")
    };
    // The first answer may come before both roles are held: read until both are.
    let mut line = next().await;
    while !(line.contains("alpha (term") && line.contains("beta (term")) {
        line = next().await;
    }
    assert!(line.starts_with("node-a holds "), "{line}");
    let auth = format!("Bearer {TOKEN}");
    let (code, body) = testkit::http::request(
        port,
        "POST",
        "/api/roles/alpha/release",
        &[("Authorization", &auth)],
        r#"{"cooldown": "1m"}"#,
    )
    .await
    .expect("release");
    assert!(code == 200 || code == 202, "{code}: {body}");
    let line = next().await;
    assert!(line.starts_with("node-a holds beta (term"), "{line}");
    assert!(!line.contains("alpha"), "{line}");
    let _ = follower.kill().await;
    d.terminate(i);
    d.wait_exit(i, Duration::from_secs(10)).await;
}

/// The shell and Python examples run as `exec` roles of one instance (their output reaches
/// the manager's stdout prefixed with the role, they stop on the stop signal), and the shell
/// follower sees the instance's roles through `GET /api/self`.
#[tokio::test]
async fn the_shell_and_python_exec_examples_run_as_roles_and_the_shell_follower_sees_them() {
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| {
            std::process::Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("python3 is needed by this test (Debian package python3); it is not installed");
    let curl_ok = std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        curl_ok,
        "curl is needed by this test (Debian package curl); it is not installed"
    );
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let server = NatsServer::start().await;
    let mut d = testkit::instances::Deployment::new(&server.url(), "exec-examples", &[], "");
    std::fs::write(
        &d.config,
        format!(
            "bucket:\n  name: exec-examples\n  replicas: 1\n  auto_create: true\nroles:\n\
             \x20 - name: sh-role\n    exec:\n      command: [{examples}/exec_role.sh]\n      \
             env: {{EXEC_ROLE_INTERVAL: \"0.2\"}}\n\
             \x20 - name: py-role\n    exec:\n      command: [{python}, {examples}/exec_role.py]\n      \
             env: {{EXEC_ROLE_INTERVAL: \"0.2\"}}\n"
        ),
    )
    .expect("write config");
    let i = d.start("node-a").await;
    let has = |d: &testkit::instances::Deployment, prefix: &str| {
        d.instances[i]
            .stdout()
            .iter()
            .any(|l| l.starts_with(prefix))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !(has(&d, "[sh-role] work 2 of sh-role in term")
        && has(&d, "[py-role] work 2 of py-role in term"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "both examples working within 15 s\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        has(&d, "[sh-role] leading: node-a holds sh-role (term "),
        "{}",
        d.report()
    );
    assert!(
        has(&d, "[py-role] leading: node-a holds py-role (term "),
        "{}",
        d.report()
    );

    // The shell follower: its first answer lists both roles.
    let follower = Command::new("sh")
        .arg(format!("{examples}/follow_self.sh"))
        .arg(&d.instances[i].url)
        .env("FOLLOW_CHANGES", "1")
        .stdin(Stdio::null())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(20), follower)
        .await
        .expect("the follower answers within 20 s")
        .expect("run the follower");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text.lines().next().unwrap_or_default();
    assert!(line.starts_with("node-a holds: "), "{text}");
    assert!(
        line.contains("sh-role") && line.contains("py-role"),
        "{text}"
    );

    d.terminate(i);
    let status = d.wait_exit(i, Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}\n{}", d.report());
    assert!(
        has(&d, "[sh-role] stopping: node-a gives up sh-role"),
        "{}",
        d.report()
    );
    assert!(
        has(&d, "[py-role] stopping: node-a gives up py-role"),
        "{}",
        d.report()
    );
}
