//! Example 2: a control-plane service that runs a periodic sweeper and a scheduler only while it
//! holds their roles, persisting its progress with fenced writes.
//!
//! ```sh
//! cargo run --example control_plane -- node-a
//! cargo run --example control_plane -- node-b   # takes over when node-a stops
//! ```
//!
//! A fenced write is stored by the NATS server only while this instance's lease is still at the
//! revision it knows: a paused or partitioned ex-leader cannot overwrite its successor's state.

mod common;

use std::time::Duration;

use nats_roles::{
    FenceError, InstanceId, Leadership, RoleManager, RoleName, RoleSpec, run_while_leader,
};

/// The sweeper: every 500 ms, one sweep, then record how far it got.
async fn sweeper(leadership: Leadership) {
    let mut swept = 0u64;
    while leadership.is_valid() {
        swept += 1; // ... the real work goes here ...
        match leadership
            .fenced_put("progress", format!("swept {swept} batches"))
            .await
        {
            Ok(_) => {}
            Err(FenceError::Fenced { .. }) => return, // no longer ours: stop at once
            Err(err) => eprintln!("sweeper: cannot record progress: {err}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The scheduler: assigns jobs every second; checks the lease against the KV before a critical
/// step.
async fn scheduler(leadership: Leadership) {
    let mut job = 0u64;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if leadership.validate().await.is_err() {
            return;
        }
        job += 1;
        let assignment = format!("job-{job} -> worker-{}", job % 3);
        if leadership
            .fenced_put("last-assignment", assignment.clone())
            .await
            .is_ok()
        {
            println!("scheduler (term {}): {assignment}", leadership.term());
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let instance = InstanceId::new(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "example-2".into()),
    )?;
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".into());
    let client = async_nats::connect(url).await?;

    let manager = RoleManager::builder(client, instance)
        .auto_create(1)
        .role(RoleSpec::new(RoleName::new("sweeper")?).callbacks(run_while_leader(sweeper)))
        .role(RoleSpec::new(RoleName::new("scheduler")?).callbacks(run_while_leader(scheduler)))
        .start()
        .await?;

    let mut events = manager.events();
    let stop = common::wait_for_stop();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            event = events.recv() => match event {
                Ok(nats_roles::RoleEvent::Promoted { role, term }) => println!("now holding {role} (term {term})"),
                Ok(nats_roles::RoleEvent::Demoted { role, reason, .. }) => println!("gave up {role}: {reason}"),
                Ok(_) | Err(_) => {}
            },
        }
    }
    manager.shutdown(Duration::from_secs(10)).await?;
    println!("stopped");
    Ok(())
}
