//! Example 3: an observer that routes requests to the current holder of a role, using the
//! address the holder advertises in its lease (`meta.http`). It never campaigns.
//!
//! ```sh
//! cargo run --example control_plane -- node-a     # holds "scheduler"
//! cargo run --example router
//! ```

mod common;

use std::time::Duration;

use nats_roles::{InstanceId, RoleManager, RoleName, RoleSpec};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".into());
    let client = async_nats::connect(url).await?;
    let scheduler = RoleName::new("scheduler")?;

    // Observe only: this process never becomes the scheduler.
    let manager = RoleManager::builder(client, InstanceId::new("router")?)
        .auto_create(1)
        .role(RoleSpec::new(scheduler.clone()).observe_only())
        .start()
        .await?;

    let mut holder = manager.observe(&scheduler);
    let stop = common::wait_for_stop();
    tokio::pin!(stop);
    loop {
        let route = match holder.borrow_and_update().as_ref() {
            Some(h) => match (&h.holder, h.meta.get("http")) {
                (Some(id), Some(addr)) => format!("route scheduler requests to {id} at {addr}"),
                (Some(id), None) => format!("scheduler is {id} (no address advertised)"),
                (None, _) => "scheduler key holds a foreign value".to_string(),
            },
            None => "no scheduler right now: queue requests".to_string(),
        };
        println!("{route}");
        tokio::select! {
            () = &mut stop => break,
            changed = holder.changed() => if changed.is_err() { break },
        }
    }
    manager.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}
