use std::time::Duration;

use nats_roles::{Demotion, FnCallbacks, InstanceId, Leadership, RoleManager, RoleName, RoleSpec};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Which server, and who this instance is (distinct per process).
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".into());
    let id = std::env::var("NATS_ROLES_INSTANCE_ID")
        .unwrap_or_else(|_| format!("node-{}", std::process::id()));
    let client = async_nats::connect(url).await?;
    let manager = RoleManager::builder(client, InstanceId::new(id)?)
        // Creates the bucket `roles` (1 replica) if it is missing. In production create it
        // yourself (docs/operations.md) and leave this line out.
        .auto_create(1)
        .role(
            RoleSpec::new(RoleName::new("scheduler")?).callbacks(FnCallbacks::new(
                |l: Leadership| async move {
                    println!("promoted: {} term {}", l.role(), l.term());
                    tokio::spawn(async move {
                        while l.is_valid() {
                            // leader-only work; persist with l.fenced_put("state", bytes).await
                            tokio::select! {
                                () = l.cancelled() => break,
                                () = tokio::time::sleep(Duration::from_millis(100)) => {}
                            }
                        }
                    });
                },
                |d: Demotion| async move {
                    println!("demoted: {} ({})", d.leadership.role(), d.reason);
                },
            )),
        )
        .start()
        .await?;
    // Run until Ctrl-C, then hand the role over: another instance takes it within milliseconds.
    tokio::signal::ctrl_c().await?;
    manager.shutdown(Duration::from_secs(10)).await?;
    println!("stopped");
    Ok(())
}
