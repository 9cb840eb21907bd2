//! `nats-roles evict`'s question, asked on a terminal (a pseudo-terminal here) of a real
//! process against a real nats-server: the renewal age it shows is the holder's session
//! renewal (protocol v2 renews the session every heartbeat and writes the role key once per
//! term), the same age `status` shows — not the age of the role key.

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;
use std::time::Duration;

use nats_roles::RoleName;
use nats_roles::tooling::inspect::Inspector;
use testkit::NatsServer;
use testkit::instances::Deployment;
use tokio::time::Instant;

const LIMIT: Duration = Duration::from_secs(30);

/// A pseudo-terminal: (master, slave).
fn pty() -> (std::fs::File, OwnedFd) {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two file descriptors into the valid out-pointers; the name,
    // termios and window size are not asked for (null).
    let rc = unsafe {
        libc::openpty(
            &raw mut master,
            &raw mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened by openpty and are owned by nobody else.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            OwnedFd::from_raw_fd(slave),
        )
    }
}

/// Seconds in an age as `age` prints it (`0.4s`, `12s`, `1m07s`).
fn seconds(age: &str) -> f64 {
    if let Some((m, s)) = age.split_once('m') {
        let m: f64 = m.parse().expect("minutes");
        let s: f64 = s.trim_end_matches('s').parse().expect("seconds");
        return m * 60.0 + s;
    }
    age.trim_end_matches('s').parse().expect("seconds")
}

/// node-a holds a role (TTL 2 s, heartbeat 500 ms) for 5 s; `evict` on a terminal asks
/// "renewed X ago" with X the age of its last session renewal (below the heartbeat plus a
/// margin for a loaded machine), not the 5 s since the role key was written; answered "n",
/// it evicts nothing (exit 1) and node-a still holds the role in the same term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicts_question_shows_the_session_renewal_age_not_the_role_keys() {
    let server = NatsServer::start().await;
    let bucket = "evict-prompt";
    let mut d = Deployment::new(
        &server.url(),
        bucket,
        &["sched"],
        "timing:\n  ttl: 2s\n  heartbeat: 500ms\n",
    );
    d.start("node-a").await;
    let (client, errors) = nats_roles::connect(
        &nats_roles::config::NatsConfig {
            servers: vec![server.url()],
            ..Default::default()
        },
        "evict-test",
    )
    .await
    .expect("connect");
    let i = Inspector::open(&client, bucket, &errors, Duration::from_secs(5))
        .await
        .expect("open");
    let role = RoleName::new("sched").expect("role");
    let until = Instant::now() + LIMIT;
    let term = loop {
        if let Some(h) = i.holder(&role).await.expect("read")
            && h.holder.as_ref().map(|h| h.as_str()) == Some("node-a")
        {
            break h.term;
        }
        assert!(
            Instant::now() < until,
            "node-a never held sched\n{}",
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The role key is written once per term: wait well past a heartbeat.
    tokio::time::sleep(Duration::from_secs(5)).await;

    let (mut master, slave) = pty();
    let url = server.url();
    let mut cmd = testkit::cli::command(testkit::nats_roles_bin());
    cmd.args(["evict", "sched", "--server", &url, "--bucket", bucket])
        .stdin(Stdio::from(slave))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn evict");
    master.write_all(b"n\n").expect("answer");
    let out = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("evict finished")
        .expect("evict output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("not confirmed; nothing evicted"),
        "{stderr}"
    );
    let age = stderr
        .split("renewed ")
        .nth(1)
        .and_then(|rest| rest.split(" ago").next())
        .unwrap_or_else(|| panic!("no renewal age in the question: {stderr}"));
    // Heartbeat 500 ms; 2 s leaves room for a loaded machine and is far below the 5 s the
    // role key has not changed.
    assert!(
        seconds(age) < 2.0,
        "the question shows the role key's age, not the session's: {stderr}"
    );
    let h = i.holder(&role).await.expect("read").expect("still held");
    assert_eq!(h.holder.map(|h| h.to_string()).as_deref(), Some("node-a"));
    assert_eq!(h.term, term);
}
