//! Role groups on the dashboard, in a real headless browser (protocol Q14): a group of six
//! members is one row — its name, its member count and who holds how many — until a click
//! expands it into the members' rows in index order; a count lowered with `nats-roles scale`
//! shows on the same page without a reload. Chromium and chromedriver are required (as in
//! `dashboard_browser`: the test fails without them, it never skips).
#![cfg(feature = "http")]

use std::time::Duration;

use fantoccini::Locator;
use serde_json::{Value, json};
use testkit::NatsServer;
use testkit::eventually;
use testkit::instances::Deployment;

use super::dashboard_browser::{Driver, browser, js, wait_live};

/// The table as the page shows it: (group row's text, member roles shown in order, other roles).
async fn table(page: &fantoccini::Client) -> Value {
    js(
        page,
        "the roles table",
        "const rows = [...document.querySelectorAll('#roles tr')].filter(tr => !tr.hidden);
         return {
           groups: rows.filter(tr => tr.dataset.group).map(tr => tr.innerText.replace(/\\s+/g, ' ').trim()),
           members: rows.filter(tr => tr.classList.contains('group-member')).map(tr => tr.dataset.role),
           roles: rows.filter(tr => tr.dataset.role && !tr.classList.contains('group-member')).map(tr => tr.dataset.role),
         };",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_is_one_row_until_expanded() {
    let server = NatsServer::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let driver = Driver::start(dir.path()).await;
    let mut d = Deployment::new(
        &server.url(),
        "dashboard-groups",
        &["scheduler"],
        "groups:\n  - name: shard\n    count: 6\n",
    );
    let a = d.start("node-a").await;
    let page = browser(&driver, &dir.path().join("profile")).await;
    page.goto(&d.instances[a].url).await.expect("open the page");
    wait_live(&page).await;

    let collapsed = eventually("the group's row", Duration::from_secs(20), || async {
        let t = table(&page).await;
        (t["groups"] == json!(["▸ shard · 6 members 6 held · node-a 6 6 held here"])).then_some(t)
    })
    .await;
    assert_eq!(collapsed["members"], json!([]), "{collapsed}");
    assert_eq!(collapsed["roles"], json!(["scheduler"]), "{collapsed}");

    page.find(Locator::Css("#roles tr.group button.group-toggle"))
        .await
        .expect("the group's toggle")
        .click()
        .await
        .expect("click");
    let expanded = eventually("the members' rows", Duration::from_secs(10), || async {
        let t = table(&page).await;
        (t["members"].as_array().map(Vec::len) == Some(6)).then_some(t)
    })
    .await;
    assert_eq!(
        expanded["members"],
        json!([
            "shard-0", "shard-1", "shard-2", "shard-3", "shard-4", "shard-5"
        ]),
        "{expanded}"
    );

    let url = server.url();
    let out = testkit::cli::run(
        &[
            "scale",
            "shard",
            "3",
            "--wait",
            "--server",
            &url,
            "--bucket",
            "dashboard-groups",
        ],
        &[],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    let scaled = eventually("three members", Duration::from_secs(10), || async {
        let t = table(&page).await;
        (t["members"] == json!(["shard-0", "shard-1", "shard-2"])).then_some(t)
    })
    .await;
    assert_eq!(
        scaled["groups"],
        json!(["▾ shard · 3 members 3 held · node-a 3 3 held here"]),
        "{scaled}"
    );
    let _ = page.close().await;
}
