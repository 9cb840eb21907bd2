//! Example 1: the smallest election — one role, one process.
//!
//! Start a JetStream-enabled nats-server (e.g. `.tools/bin/nats-server -js`), then run two or
//! more copies in different terminals and stop the leader with Ctrl-C:
//!
//! ```sh
//! cargo run --example single_role -- node-a
//! cargo run --example single_role -- node-b
//! ```
//!
//! `NATS_URL` selects the server (default `127.0.0.1:4222`); `RUN_FOR_SECS` stops the example
//! after that many seconds (used by the test that runs every example).

mod common;

use std::time::Duration;

use nats_roles::{
    Demotion, Election, FnCallbacks, InstanceId, Leadership, RoleManager, RoleName, RoleSpec,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let instance = InstanceId::new(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "example-1".into()),
    )?;
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".into());
    let client = async_nats::connect(url).await?;

    let spec =
        RoleSpec::new(RoleName::new("example-leader")?).callbacks(FnCallbacks::new(
            |l: Leadership| async move { println!("promoted: term {}", l.term()) },
            |d: Demotion| async move {
                println!("demoted: term {} ({})", d.leadership.term(), d.reason)
            },
        ));
    let builder = RoleManager::builder(client, instance).auto_create(1);
    let election = Election::start(builder, spec).await?;

    common::wait_for_stop().await;
    election.shutdown(Duration::from_secs(5)).await?;
    println!("stopped");
    Ok(())
}
