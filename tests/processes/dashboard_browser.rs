//! The dashboard in a real headless browser (Debian `chromium` + `chromium-driver`, driven over
//! WebDriver by fantoccini): three `nats-roles run` processes; the page of one that holds
//! nothing shows every role with its holder; the holder is stopped (SIGTERM) and the page shows
//! the new holders and the hand-over without a reload; no fencing token appears unredacted.
//!
//! Chromium and chromedriver are required: without them this test fails (it never skips) and
//! says how to install them (`bash scripts/install-tools.sh --chromium`, which `scripts/test.sh`
//! runs). The screenshot of the page after the hand-over is written to
//! `target/dashboard.png`, and to `docs/dashboard.png` when that file is missing or
//! `UPDATE_DASHBOARD_SCREENSHOT=1` is set.
#![cfg(feature = "http")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use nats_roles::tooling::inspect::RoleList;
use serde_json::{Value, json};
use testkit::NatsServer;
use testkit::eventually;
use testkit::http::get_json;
use testkit::instances::Deployment;

const INSTALL: &str = "install them with `bash scripts/install-tools.sh --chromium` \
                       (apt-get install chromium chromium-driver), or point CHROMIUM_BIN and \
                       CHROMEDRIVER_BIN at them";
const ROLES: [&str; 5] = [
    "scheduler",
    "billing-sweeper",
    "gc-collector",
    "shard-0",
    "shard-1",
];

/// `$env_var`, else the first of `names` on `PATH`; panics with the install hint.
fn find_binary(env_var: &str, names: &[&str]) -> PathBuf {
    if let Some(path) = testkit::bins::path_from_env(env_var, INSTALL) {
        return path;
    }
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&dirs) {
        for name in names {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!("{} not found on PATH; {INSTALL}", names.join(" / "));
}

/// A chromedriver process on a free loopback port; killed on drop.
struct Driver {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Driver {
    async fn start(dir: &Path) -> Driver {
        let bin = find_binary("CHROMEDRIVER_BIN", &["chromedriver"]);
        let port = testkit::free_port();
        let log = dir.join("chromedriver.log");
        let child = Command::new(&bin)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}; {INSTALL}", bin.display()));
        let mut driver = Driver { child, port, log };
        let ready = eventually("chromedriver /status", Duration::from_secs(15), || async {
            status(port)
                .await
                .filter(|body| body.contains("\"ready\":true"))
        });
        if tokio::time::timeout(Duration::from_secs(16), ready)
            .await
            .is_err()
            || driver.child.try_wait().ok().flatten().is_some()
        {
            panic!(
                "chromedriver did not become ready; its log:\n{}",
                std::fs::read_to_string(&driver.log).unwrap_or_default()
            );
        }
        driver
    }
}

/// `GET /status` of chromedriver: its body when it answers 200.
async fn status(port: u16) -> Option<String> {
    match testkit::http::get(port, "/status").await {
        Ok((200, body)) => Some(body),
        _ => None,
    }
}

/// Waits (10 s) until the page says its event stream is live.
async fn wait_live(page: &Client) {
    eventually(
        "the event stream is live",
        Duration::from_secs(10),
        || async {
            let live = page
                .execute("return document.body.dataset.live;", vec![])
                .await
                .ok()?;
            (live == json!("true")).then_some(())
        },
    )
    .await;
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn browser(driver: &Driver, profile: &Path) -> Client {
    let chromium = find_binary("CHROMIUM_BIN", &["chromium", "chromium-browser"]);
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--window-size=1280,1000",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let mut builder = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
    builder.capabilities(caps);
    tokio::time::timeout(
        Duration::from_secs(30),
        builder.connect(&format!("http://127.0.0.1:{}", driver.port)),
    )
    .await
    .unwrap_or_else(|_| panic!("no browser session within 30 s"))
    .unwrap_or_else(|e| {
        panic!(
            "cannot start a Chromium session ({e}); chromedriver log:\n{}",
            std::fs::read_to_string(&driver.log).unwrap_or_default()
        )
    })
}

/// `role -> holder` as the page shows it (empty string: vacant).
async fn page_holders(page: &Client) -> BTreeMap<String, String> {
    let rows = page
        .execute(
            "return [...document.querySelectorAll('#roles tr')]
                .map(tr => [tr.dataset.role, tr.querySelector('td.holder').dataset.holder || '']);",
            vec![],
        )
        .await
        .unwrap_or_else(|e| panic!("read the roles table: {e}"));
    rows.as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|r| Some((r[0].as_str()?.to_owned(), r[1].as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// Every lease nonce in the bucket: part of every full token, so it must never be shown.
async fn lease_nonces(kv: &async_nats::jetstream::kv::Store) -> Vec<String> {
    let mut out = Vec::new();
    for role in ROLES {
        if let Ok(Some(entry)) = kv.entry(format!("role.{role}")).await
            && let Ok(value) = serde_json::from_slice::<Value>(&entry.value)
            && let Some(nonce) = value["nonce"]
                .as_str()
                .and_then(|n| uuid::Uuid::parse_str(n).ok())
        {
            out.push(nonce.to_string());
            out.push(nonce.simple().to_string());
        }
    }
    out
}

async fn assert_no_token_in_page(page: &Client, kv: &async_nats::jetstream::kv::Store) {
    let html = page
        .source()
        .await
        .unwrap_or_else(|e| panic!("page source: {e}"));
    let text = page
        .execute("return document.body.innerText;", vec![])
        .await
        .unwrap_or_else(|e| panic!("page text: {e}"));
    let text = text.as_str().unwrap_or_default();
    let nonces = lease_nonces(kv).await;
    assert!(!nonces.is_empty(), "no leases to check");
    for nonce in nonces {
        assert!(
            !html.contains(&nonce) && !text.contains(&nonce),
            "a full token is on the page"
        );
    }
    assert!(text.contains("·…"), "redacted tokens are shown:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_follows_a_hand_over_live() {
    let dir = tempfile::tempdir().expect("tempdir");
    let driver = Driver::start(dir.path()).await;
    let server = NatsServer::start().await;
    let mut d = Deployment::new(&server.url(), "dashboard", &ROLES, "");
    let a = d.start("node-a").await;
    eventually(
        "node-a holds every role",
        Duration::from_secs(10),
        || async {
            let list: RoleList = get_json(d.instances[a].port, "/api/roles").await;
            list.roles
                .iter()
                .all(|r| r.holder.as_deref() == Some("node-a"))
                .then_some(())
        },
    )
    .await;
    let b = d.start("node-b").await;
    d.start("node-c").await;
    let js = async_nats::jetstream::new(testkit::connect(&server.url()).await);
    let kv = js.get_key_value("dashboard").await.expect("the bucket");

    let page = browser(&driver, &dir.path().join("profile")).await;
    // node-b's dashboard: it holds nothing itself.
    page.goto(&d.instances[b].url)
        .await
        .expect("open the dashboard");
    let all_a: BTreeMap<String, String> = ROLES
        .iter()
        .map(|r| ((*r).to_owned(), "node-a".to_owned()))
        .collect();
    eventually(
        "every role with its holder on the page",
        Duration::from_secs(10),
        || async { (page_holders(&page).await == all_a).then_some(()) },
    )
    .await;
    wait_live(&page).await;
    let served_by = page
        .execute(
            "return document.getElementById('instance').textContent;",
            vec![],
        )
        .await
        .expect("header");
    assert_eq!(served_by, json!("node-b"));
    assert_no_token_in_page(&page, &kv).await;
    // A marker that a reload would wipe out.
    page.execute("window.__noReload = 42;", vec![])
        .await
        .expect("set marker");

    // Stop the holder: its roles move to node-b and node-c, and the page follows.
    d.terminate(a);
    let status = d.wait_exit(a, Duration::from_secs(10)).await;
    assert!(status.success(), "node-a exit {status}\n{}", d.report());
    let moved = eventually(
        "the new holders on the page",
        Duration::from_secs(10),
        || async {
            let holders = page_holders(&page).await;
            (holders.len() == ROLES.len()
                && holders.values().all(|h| h == "node-b" || h == "node-c"))
            .then_some(holders)
        },
    )
    .await;
    let marker = page
        .execute("return window.__noReload;", vec![])
        .await
        .expect("read marker");
    assert_eq!(marker, json!(42), "the page was reloaded");
    // What the page shows is what the KV says.
    let list: RoleList = get_json(d.instances[b].port, "/api/roles").await;
    let api: BTreeMap<String, String> = list
        .roles
        .iter()
        .map(|r| (r.role.clone(), r.holder.clone().unwrap_or_default()))
        .collect();
    assert_eq!(moved, api);
    // Hand-overs are marked: a note on the row and a line in the transitions log.
    let notes = page
        .execute(
            "return [...document.querySelectorAll('#roles .handover')].map(e => e.textContent);",
            vec![],
        )
        .await
        .expect("notes");
    let notes: Vec<String> = notes
        .as_array()
        .map(|n| {
            n.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        notes.len(),
        ROLES.len(),
        "one hand-over note per role: {notes:?}"
    );
    for note in &notes {
        assert!(
            note.starts_with("handed over from node-a to node-"),
            "{note}"
        );
    }
    let log = page
        .execute("return document.getElementById('log').innerText;", vec![])
        .await
        .expect("log");
    assert!(
        log.as_str()
            .is_some_and(|l| l.contains("handed over from node-a")),
        "{log}"
    );
    assert_no_token_in_page(&page, &kv).await;

    // Let the highlight settle a little, then keep a picture of it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let png = page.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    std::fs::write(&target, &png).expect("write the screenshot");
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/dashboard.png");
    if !docs.exists() || std::env::var_os("UPDATE_DASHBOARD_SCREENSHOT").is_some_and(|v| v == "1") {
        std::fs::write(&docs, &png).expect("write docs/dashboard.png");
    }
    page.close().await.expect("close the browser");
}

/// A foreign lease for role `role` held by `holder` with metadata `meta`.
async fn put_foreign_lease(
    kv: &async_nats::jetstream::kv::Store,
    role: &str,
    holder: &str,
    meta: Value,
) {
    // A protocol v2 lease (P2, Q2) naming a session that never existed.
    let lease = json!({
        "v": 2,
        "holder": holder,
        "incarnation": uuid::Uuid::new_v4(),
        "session": uuid::Uuid::new_v4(),
        "session_key": format!("session.{holder}.60000"),
        "nonce": uuid::Uuid::new_v4(),
        "priority": 0,
        "ttl_ms": 60_000,
        "meta": meta,
    });
    kv.put(
        format!("role.{role}"),
        serde_json::to_vec(&lease).expect("JSON").into(),
    )
    .await
    .expect("put a foreign lease");
}

/// Leases written by another client carry hostile metadata: a `javascript:` and a `data:`
/// URL as `meta.http`, and 900 KB of text. The page links only the `https` holder, shows the
/// others as plain text, stays small, and its CSP blocks injected inline script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_metadata_stays_inert_on_the_dashboard() {
    let dir = tempfile::tempdir().expect("tempdir");
    let driver = Driver::start(dir.path()).await;
    let server = NatsServer::start().await;
    let mut d = Deployment::new(&server.url(), "hostile", &["alpha"], "");
    let a = d.start("node-a").await;
    let js = async_nats::jetstream::new(testkit::connect(&server.url()).await);
    let kv = eventually("the bucket", Duration::from_secs(10), || {
        let js = js.clone();
        async move { js.get_key_value("hostile").await.ok() }
    })
    .await;
    put_foreign_lease(
        &kv,
        "beta",
        "intruder-js",
        json!({"http": "javascript:window.__pwned=1", "blob": "x".repeat(900 * 1024)}),
    )
    .await;
    put_foreign_lease(
        &kv,
        "gamma",
        "intruder-data",
        json!({"http": "data:text/html,<script>window.__pwned=2</script>"}),
    )
    .await;
    put_foreign_lease(
        &kv,
        "delta",
        "plain-https",
        json!({"http": "https://plain-https.test:8443/"}),
    )
    .await;

    let page = browser(&driver, &dir.path().join("profile")).await;
    page.goto(&d.instances[a].url)
        .await
        .expect("open the dashboard");
    let want: BTreeMap<String, String> = [
        ("alpha", "node-a"),
        ("beta", "intruder-js"),
        ("delta", "plain-https"),
        ("gamma", "intruder-data"),
    ]
    .into_iter()
    .map(|(r, h)| (r.to_owned(), h.to_owned()))
    .collect();
    eventually(
        "every role with its holder on the page",
        Duration::from_secs(10),
        || async { (page_holders(&page).await == want).then_some(()) },
    )
    .await;
    // Every link on the page is http(s); the https holder is linked (roles and instances).
    let links = page
        .execute(
            "return [...document.querySelectorAll('a')].map(a => a.getAttribute('href'));",
            vec![],
        )
        .await
        .expect("links");
    let links: Vec<String> = links
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    for href in &links {
        assert!(
            href.starts_with("http://") || href.starts_with("https://"),
            "a non-http(s) link on the page: {href}"
        );
    }
    assert_eq!(
        links
            .iter()
            .filter(|h| *h == "https://plain-https.test:8443/")
            .count(),
        2,
        "{links:?}"
    );
    let text = page
        .execute("return document.body.innerText;", vec![])
        .await
        .expect("page text");
    let text = text.as_str().unwrap_or_default();
    assert!(text.len() < 64 * 1024, "{} bytes of text", text.len());
    let pwned = page
        .execute("return window.__pwned === undefined;", vec![])
        .await
        .expect("marker");
    assert_eq!(pwned, json!(true));
    // The page's CSP allows no inline script: an injected one does not run.
    let injected = page
        .execute(
            "const s = document.createElement('script');
             s.textContent = 'window.__inline = 1';
             document.body.appendChild(s);
             return window.__inline === undefined;",
            vec![],
        )
        .await
        .expect("inject");
    assert_eq!(injected, json!(true), "inline script ran");
    // The page itself works under that CSP: its script runs and its style applies.
    wait_live(&page).await;
    let styled = page
        .execute(
            "return getComputedStyle(document.querySelector('header')).display;",
            vec![],
        )
        .await
        .expect("style");
    assert_eq!(styled, json!("flex"), "the stylesheet applies");
    page.close().await.expect("close the browser");
    drop(d);
}
