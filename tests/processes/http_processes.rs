//! End to end: a real nats-server and three `nats-roles run` processes serving their dashboards.
//! What each instance's HTTP API says agrees with the KV bucket; admin actions are audited;
//! SIGTERM ends a process promptly even while a client holds its event stream open.
#![cfg(feature = "http")]

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream;
use nats_roles::tooling::inspect::{InstanceList, RoleList};
use testkit::NatsServer;
use testkit::eventually;
use testkit::http::{self, get_json};
use testkit::instances::Deployment;
use tokio::io::AsyncWriteExt;

const ROLES: [&str; 6] = [
    "scheduler",
    "billing",
    "gc",
    "shard-0",
    "shard-1",
    "shard-2",
];
const ADMIN: &str = "e2e-admin-token-0123456789";

/// `role -> (holder, term, http meta)` as stored in the bucket.
async fn kv_holders(kv: &jetstream::kv::Store) -> BTreeMap<String, (String, u64, Option<String>)> {
    let mut out = BTreeMap::new();
    for role in ROLES {
        let Ok(Some(entry)) = kv.entry(format!("role.{role}")).await else {
            continue;
        };
        if entry.operation != jetstream::kv::Operation::Put {
            continue;
        }
        let value: serde_json::Value = serde_json::from_slice(&entry.value).unwrap_or_default();
        let (Some(holder), term) = (value["holder"].as_str(), value["term"].as_u64()) else {
            continue;
        };
        out.insert(
            role.to_owned(),
            (
                holder.to_owned(),
                term.unwrap_or(entry.revision),
                value["meta"]["http"].as_str().map(str::to_owned),
            ),
        );
    }
    out
}

/// The bucket's holders once every role of [`ROLES`] is held (none by `not_by`) and each
/// instance serving on `ports` shows the same holder and term for every role in `/api/roles`.
async fn settled(
    kv: jetstream::kv::Store,
    ports: Vec<u16>,
    not_by: Option<String>,
) -> Option<BTreeMap<String, (String, u64, Option<String>)>> {
    let stored = kv_holders(&kv).await;
    if stored.len() != ROLES.len() || stored.values().any(|(h, _, _)| Some(h) == not_by.as_ref()) {
        return None;
    }
    let want: BTreeMap<String, (String, u64)> = stored
        .iter()
        .map(|(r, (h, t, _))| (r.clone(), (h.clone(), *t)))
        .collect();
    for port in ports {
        let list: RoleList = get_json(port, "/api/roles").await;
        let seen: BTreeMap<String, (String, u64)> = list
            .roles
            .iter()
            .filter_map(|r| Some((r.role.clone(), (r.holder.clone()?, r.term?))))
            .collect();
        if seen != want {
            return None;
        }
    }
    Some(stored)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_serve_what_the_kv_says() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let mut d = Deployment::new(&server.url(), "e2e", &ROLES, "");
    d.env("NATS_ROLES_ADMIN_TOKEN", ADMIN);
    for id in ["node-a", "node-b", "node-c"] {
        d.start(id).await;
    }
    let js = jetstream::new(client);
    let kv = eventually("the bucket", Duration::from_secs(10), || {
        let js = js.clone();
        async move { js.get_key_value("e2e").await.ok() }
    })
    .await;

    // Every instance's /api/roles agrees with the KV on holder and term of every role.
    let urls: BTreeMap<String, String> = d
        .instances
        .iter()
        .map(|i| (i.id.clone(), i.url.clone()))
        .collect();
    let ports: Vec<u16> = d.instances.iter().map(|i| i.port).collect();
    let stored = eventually(
        "every instance agrees with the KV",
        Duration::from_secs(15),
        || settled(kv.clone(), ports.clone(), None),
    )
    .await;
    // Each holder advertises its real dashboard URL in the lease.
    for (role, (holder, _, http_meta)) in &stored {
        assert_eq!(http_meta.as_ref(), urls.get(holder), "meta.http of {role}");
    }
    // /api/instances: who holds what, the same from every instance.
    for (i, port) in ports.iter().enumerate() {
        let list: InstanceList = get_json(*port, "/api/instances").await;
        let me = list
            .instances
            .iter()
            .find(|x| x.this_instance)
            .unwrap_or_else(|| panic!("instance {i} lists itself"));
        assert_eq!(me.instance, d.instances[i].id);
        for inst in &list.instances {
            let held: Vec<&str> = inst.roles.iter().map(|r| r.role.as_str()).collect();
            let want: Vec<&str> = stored
                .iter()
                .filter(|(_, (h, _, _))| *h == inst.instance)
                .map(|(r, _)| r.as_str())
                .collect();
            assert_eq!(
                held, want,
                "roles of {} according to instance {i}",
                inst.instance
            );
        }
    }
    let (status, body) = http::request(ports[0], "GET", "/readyz", &[], "")
        .await
        .expect("readyz");
    assert_eq!(status, 200, "{body}");

    // An admin action through one instance is written to its audit log with the caller.
    let (role, (holder, term, _)) = stored.iter().next().expect("a role");
    let auth = format!("Bearer {ADMIN}");
    let body = format!(r#"{{"term": {term}}}"#);
    let (status, reply) = http::request(
        ports[2],
        "POST",
        &format!("/api/roles/{role}/evict"),
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        &body,
    )
    .await
    .expect("evict");
    assert_eq!(status, 200, "{reply}");
    let (status, _) = http::request(
        ports[2],
        "POST",
        &format!("/api/roles/{role}/evict"),
        &[],
        "",
    )
    .await
    .expect("evict without a token");
    assert_eq!(status, 401);
    let audit = eventually("two audit lines", Duration::from_secs(5), || {
        let stderr = d.instances[2].stderr();
        async move {
            let lines: Vec<String> = stderr
                .lines()
                .filter(|l| l.contains("audit"))
                .map(str::to_owned)
                .collect();
            (lines.len() >= 2).then_some(lines)
        }
    })
    .await;
    assert!(
        audit[0].contains("action=\"evict\"") || audit[0].contains("action=evict"),
        "{audit:?}"
    );
    assert!(audit[0].contains("outcome=\"evicted\"") || audit[0].contains("outcome=evicted"));
    assert!(
        audit[0].contains(holder.as_str()) && audit[0].contains("127.0.0.1"),
        "{audit:?}"
    );
    assert!(audit[1].contains("missing_token"), "{audit:?}");
    assert!(
        !audit.concat().contains(ADMIN),
        "the admin token is logged: {audit:?}"
    );

    // SIGTERM to the first holder while a client holds its event stream open: it releases
    // its roles (the stream shows it), exits 0 at once, and the others take over.
    let first = d
        .instances
        .iter()
        .position(|i| stored.values().any(|(h, _, _)| *h == i.id))
        .expect("some instance holds roles");
    let mut sse =
        testkit::tcp::send(ports[first], b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let mut got = Vec::new();
    testkit::tcp::read_until(
        &mut sse,
        &mut got,
        testkit::tcp::HELLO,
        Duration::from_secs(5),
    )
    .await;
    let started = tokio::time::Instant::now();
    d.terminate(first);
    let status = d.wait_exit(first, Duration::from_secs(8)).await;
    assert!(status.success(), "exit status {status}\n{}", d.report());
    let closed = testkit::tcp::read_to_close(&mut sse, &mut got, Duration::from_secs(2)).await;
    assert!(closed, "the event stream stayed open after exit");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(6), "shutdown took {took:?}");
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains("\"type\":\"demoted\"") && text.contains("\"reason\":\"shutdown\""),
        "{text}"
    );

    // The survivors hold every role, and say so.
    let gone = d.instances[first].id.clone();
    let survivor = ports[(first + 1) % 3];
    eventually(
        "the survivors hold every role",
        Duration::from_secs(10),
        || settled(kv.clone(), vec![survivor], Some(gone.clone())),
    )
    .await;
}

/// A nats-server and one `nats-roles run` process, `node-a`, taking part in role `alpha` in
/// `bucket` (with `admin` as its admin token): the server, the deployment, the process's pid
/// and HTTP port. Keep the first two until the end of the test (dropping them stops both).
async fn node_a(bucket: &str, admin: Option<&str>) -> (NatsServer, Deployment, u32, u16) {
    let server = NatsServer::start().await;
    let mut d = Deployment::new(&server.url(), bucket, &["alpha"], "");
    if let Some(token) = admin {
        d.env("NATS_ROLES_ADMIN_TOKEN", token);
    }
    let i = d.start("node-a").await;
    let (pid, port) = (d.instances[i].pid(), d.instances[i].port);
    (server, d, pid, port)
}

/// `VmRSS` of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// Uploads that announce 1.9 MB, send all but one byte and stall, without a token: the
/// process refuses each before reading its body (401, connection closed), so its memory does
/// not grow with them (before, each body was buffered: 150 such clients took 24 → 301 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_unauthenticated_uploads_do_not_grow_memory() {
    const CLIENTS: usize = 40;
    const SIZE: usize = 1_900_000;
    let (_server, _d, pid, port) = node_a("uploads", Some(ADMIN)).await;
    // Warm up the paths a refusal takes, then take the baseline.
    let (status, _) = http::request(port, "POST", "/api/roles/alpha/evict", &[], "")
        .await
        .expect("evict without a token");
    assert_eq!(status, 401);
    let before = rss_kib(pid);
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(tokio::spawn(async move {
            let mut stream = testkit::tcp::connect(port).await;
            let head = format!(
                "POST /api/roles/alpha/evict HTTP/1.1\r\nHost: x\r\n\
                 Content-Type: application/json\r\nContent-Length: {SIZE}\r\n\r\n"
            );
            let mut upload = head.into_bytes();
            upload.resize(upload.len() + SIZE - 1, b' ');
            // The server may refuse (and close) long before the upload is written.
            let _ = tokio::time::timeout(Duration::from_secs(5), stream.write_all(&upload)).await;
            // Stall: wait for the answer (or the end of the connection), never send the rest.
            let mut answer = Vec::new();
            let refused =
                testkit::tcp::read_to_close(&mut stream, &mut answer, Duration::from_secs(5)).await;
            (
                refused,
                String::from_utf8_lossy(&answer).into_owned(),
                stream,
            )
        }));
    }
    let mut answers = Vec::new();
    let mut open = Vec::new();
    for client in clients {
        let (refused, answer, stream) = client.await.expect("client task");
        answers.push((refused, answer));
        open.push(stream);
    }
    let after = rss_kib(pid);
    let grown = after.saturating_sub(before);
    println!("{CLIENTS} stalled uploads: VmRSS {before} -> {after} KiB");
    assert!(
        grown < 16 * 1024,
        "{CLIENTS} stalled uploads grew the process from {before} to {after} KiB"
    );
    for (refused, answer) in &answers {
        assert!(*refused, "a stalled upload was kept open without an answer");
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 401"),
            "{answer}"
        );
    }
    assert!(
        answers.iter().any(|(_, a)| a.starts_with("HTTP/1.1 401")),
        "no refusal arrived: {answers:?}"
    );
    drop(open);
    // Still serving.
    let (status, body) = http::request(port, "GET", "/healthz", &[], "")
        .await
        .expect("healthz");
    assert_eq!(status, 200, "{body}");
}

/// Sets the soft open-file limit (`RLIMIT_NOFILE`) of process `pid`.
fn limit_open_files(pid: u32, soft: u64) {
    let pid = libc::pid_t::try_from(pid).expect("a pid");
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `old` is a valid, writable rlimit and no new limit is passed.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &raw mut old) };
    assert_eq!(rc, 0, "read the open-file limit of {pid}");
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: old.rlim_max,
    };
    // SAFETY: `new` is a valid rlimit; the old value is not asked for.
    let rc = unsafe {
        libc::prlimit(
            pid,
            libc::RLIMIT_NOFILE,
            &raw const new,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "set the open-file limit of {pid}");
}

/// Open file descriptors of process `pid`.
fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(Iterator::count)
        .unwrap_or_default()
}

/// With a low open-file limit and far more idle connections open against it than it has
/// descriptors, the process still answers `/healthz` (idle connections make room) and keeps
/// its roles (NATS is left the descriptors it needs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_under_a_low_open_file_limit() {
    const LIMIT: u64 = 64;
    const IDLE: usize = 200;
    let (_server, d, pid, port) = node_a("fds", None).await;
    eventually("node-a holds alpha", Duration::from_secs(10), || async {
        let list: RoleList = get_json(port, "/api/roles").await;
        list.roles
            .iter()
            .any(|r| r.role == "alpha" && r.holder.as_deref() == Some("node-a"))
            .then_some(())
    })
    .await;
    let baseline = open_files(pid);
    limit_open_files(pid, LIMIT);
    let mut idle = Vec::new();
    for n in 0..IDLE {
        let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
        match tokio::time::timeout(Duration::from_secs(2), connect).await {
            Ok(Ok(stream)) => idle.push(stream),
            Ok(Err(e)) => panic!("idle connection {n}: {e}"),
            Err(_) => panic!(
                "idle connection {n}: not accepted within 2 s ({LIMIT} files allowed, \
                 {baseline} open before, {} now)",
                open_files(pid)
            ),
        }
    }
    let (status, body) = http::request(port, "GET", "/healthz", &[], "")
        .await
        .unwrap_or_else(|e| {
            panic!(
                "/healthz with {IDLE} idle connections open and {LIMIT} files allowed \
                 ({baseline} open before): {e}\n{}",
                d.report()
            )
        });
    assert_eq!(status, 200, "{body}");
    let open = open_files(pid);
    assert!(open <= LIMIT as usize, "{open} files open");
    let (status, body) = http::request(port, "GET", "/readyz", &[], "")
        .await
        .expect("readyz");
    assert_eq!(status, 200, "{body}");
    println!("open files: {baseline} before, {open} with {IDLE} idle connections");
    drop(idle);
}

/// `GET /readyz` of `port`: status and body as JSON.
async fn readyz(port: u16) -> (u16, serde_json::Value) {
    let (status, body) = http::request(port, "GET", "/readyz", &[], "")
        .await
        .unwrap_or_else(|e| panic!("GET /readyz: {e}"));
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    (status, json)
}

/// An instance whose health command fails `failure_threshold` times releases its roles and is
/// not ready (503, `healthy: false`, the reason) while the check fails and during the
/// cooldown, even after the check passes again; the role view says why too. Once the
/// cooldown has passed and a check passes it is ready again and takes the role back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhealthy_instance_is_not_ready_until_its_cooldown_passed_and_a_check_passes() {
    let server = NatsServer::start().await;
    let flags = tempfile::tempdir().expect("temporary directory");
    let flag = flags.path().join("healthy");
    std::fs::write(&flag, "").expect("write the health flag");
    let extra = format!(
        "health:\n  command: [\"test\", \"-e\", \"{}\"]\n  interval: 100ms\n  timeout: 100ms\n  \
         failure_threshold: 2\n  cooldown: 1s\nshutdown:\n  drain_timeout: 200ms\n",
        flag.display()
    );
    let mut d = Deployment::new(&server.url(), "health", &["alpha"], &extra);
    let i = d.start("node-a").await;
    let port = d.instances[i].port;
    let promotions = |d: &Deployment| {
        d.instances[i]
            .stdout()
            .iter()
            .filter(|l| l.starts_with("promoted role=alpha "))
            .count()
    };
    eventually("node-a holds alpha", Duration::from_secs(10), || {
        let held = promotions(&d) == 1;
        async move { held.then_some(()) }
    })
    .await;
    let (status, ready) = readyz(port).await;
    assert_eq!(
        (status, &ready["healthy"]),
        (200, &serde_json::json!(true)),
        "{ready}"
    );

    // The check fails: after two failures the role is released and the instance not ready.
    std::fs::remove_file(&flag).expect("remove the health flag");
    let (ready, failed_at) = eventually(
        "/readyz says unhealthy",
        Duration::from_secs(10),
        || async {
            let (status, ready) = readyz(port).await;
            (status == 503).then(|| (ready, std::time::Instant::now()))
        },
    )
    .await;
    assert_eq!(ready["healthy"], false, "{ready}");
    let reasons = ready["reasons"].as_array().cloned().unwrap_or_default();
    assert!(
        reasons.iter().any(|r| r
            .as_str()
            .is_some_and(|r| r.starts_with("unhealthy: the health check failed"))),
        "{ready}"
    );
    // The role view gives the same reason.
    let role: serde_json::Value = get_json(port, "/api/roles/alpha").await;
    assert!(
        role["local"]["health"]
            .as_str()
            .is_some_and(|h| h.starts_with("unhealthy: ")),
        "{role}"
    );
    eventually(
        "alpha released for ill health",
        Duration::from_secs(5),
        || {
            let released = d.instances[i]
                .stdout()
                .iter()
                .any(|l| l.starts_with("demoted role=alpha ") && l.ends_with(" reason=unhealthy"));
            async move { released.then_some(()) }
        },
    )
    .await;

    // The check passes again, but the cooldown (1 s plus the release time) is still on.
    std::fs::write(&flag, "").expect("write the health flag");
    let (status, ready) = readyz(port).await;
    assert_eq!(status, 503, "ready inside the cooldown: {ready}");
    let reasons = ready["reasons"].to_string();
    assert!(reasons.contains("cooling down for"), "{ready}");

    // Ready again after the cooldown and a passing check; the role is taken back.
    let ready = eventually("/readyz ready again", Duration::from_secs(10), || async {
        let (status, ready) = readyz(port).await;
        (status == 200).then_some(ready)
    })
    .await;
    let unready_for = failed_at.elapsed();
    assert_eq!(ready["healthy"], true, "{ready}");
    assert_eq!(ready["reasons"], serde_json::json!([]), "{ready}");
    let role: serde_json::Value = get_json(port, "/api/roles/alpha").await;
    assert!(role["local"].get("health").is_none(), "{role}");
    eventually("node-a holds alpha again", Duration::from_secs(10), || {
        let again = promotions(&d) == 2;
        async move { again.then_some(()) }
    })
    .await;
    println!("not ready for {unready_for:?} (cooldown 1 s + release bound 1.2 s)");
    assert!(
        d.instances[i]
            .stdout()
            .first()
            .is_some_and(|l| l.starts_with("http url=")),
        "{}",
        d.report()
    );
}
