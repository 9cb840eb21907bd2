//! Example: a sharded worker — one process of a fleet that shares 8 partitions of a work queue
//! (a role group, protocol Q14). Each partition is held by exactly one process; a process
//! starts a partition's work in `on_assign` and stops it in `on_revoke`, and a partition moves
//! to another process only after `on_revoke` returned (cooperative rebalancing). The set of
//! partitions held is also a watch (`GroupHandle::assigned`).
//!
//! Start a JetStream-enabled nats-server (e.g. `.tools/bin/nats-server -js`), then run two or
//! three copies (placement spreads the partitions) and stop one with Ctrl-C:
//!
//! ```sh
//! cargo run --example sharded_worker -- worker-a
//! cargo run --example sharded_worker -- worker-b
//! nats-roles scale partition 12     # every worker follows the new count
//! ```
//!
//! `NATS_URL` selects the server (default `127.0.0.1:4222`); `RUN_FOR_SECS` stops the example
//! after that many seconds (used by the test that runs every example).

mod common;

use std::time::Duration;

use nats_roles::callbacks::BoxFuture;
use nats_roles::manager::{GroupCallbacks, GroupMember, GroupRevoke, GroupSpec, PlacementSettings};
use nats_roles::{InstanceId, RoleManager, RoleName, RoleSpec};

/// The work of the partitions this process holds.
struct Partitions;

impl GroupCallbacks for Partitions {
    fn on_assign(&self, member: GroupMember) -> BoxFuture<'_> {
        Box::pin(async move {
            println!(
                "assigned partition {} (term {})",
                member.index,
                member.leadership.term()
            );
            // The partition's work: runs until the term ends (a real worker would consume the
            // partition here, fencing its writes with `member.leadership.token()`).
            let leadership = member.leadership;
            tokio::spawn(async move { leadership.cancelled().await });
        })
    }

    fn on_revoke(&self, member: GroupRevoke) -> BoxFuture<'_> {
        Box::pin(async move {
            // Stop the partition's work and flush; the next holder waits for this.
            println!(
                "revoked partition {} ({})",
                member.index, member.demotion.reason
            );
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let instance = InstanceId::new(std::env::args().nth(1).unwrap_or_else(|| "worker-a".into()))?;
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".into());
    let client = async_nats::connect(url).await?;

    let partition = RoleName::new("partition")?;
    let manager = RoleManager::builder(client, instance)
        .auto_create(1)
        .placement(PlacementSettings {
            enabled: true,
            ..PlacementSettings::default()
        })
        .group(GroupSpec::new(RoleSpec::new(partition.clone()), 8).callbacks(Partitions))
        .start()
        .await?;

    let mut assigned = manager.group(&partition).ok_or("no such group")?.assigned();
    let printer = tokio::spawn(async move {
        while assigned.changed().await.is_ok() {
            let now = assigned.borrow_and_update().clone();
            println!("holding {:?} of {}", now.held, now.count);
        }
    });

    common::wait_for_stop().await;
    manager.shutdown(Duration::from_secs(10)).await?;
    printer.abort();
    println!("stopped");
    Ok(())
}
