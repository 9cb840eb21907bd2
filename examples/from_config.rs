//! Example 4: a manager with several roles and priorities from a YAML file (the same file the
//! `nats-roles` binary reads).
//!
//! ```sh
//! cargo run --example from_config -- roles.example.yaml node-a
//! ```

mod common;

use std::sync::Arc;

use nats_roles::config::Config;
use nats_roles::{
    Demotion, FnCallbacks, InstanceId, Leadership, RoleCallbacks, RoleManager, RoleSpec,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "roles.example.yaml".into());
    let instance = args.next().unwrap_or_else(|| "example-4".into());

    let mut config = Config::load(path.as_ref())?;
    config.apply_env(|name| std::env::var(name).ok())?;
    config.instance.id = Some(InstanceId::new(instance)?);
    let (client, server_errors) = nats_roles::connect(&config.nats, "nats-roles-example").await?;

    // One set of callbacks shared by every role.
    let callbacks: Arc<dyn RoleCallbacks> = Arc::new(FnCallbacks::new(
        |l: Leadership| async move { println!("holding {} (term {})", l.role(), l.term()) },
        |d: Demotion| async move { println!("released {} ({})", d.leadership.role(), d.reason) },
    ));
    // Start from the file (bucket, timing, retry, health ...) but declare the roles ourselves
    // so that each gets the callbacks.
    let roles = std::mem::take(&mut config.roles);
    let mut builder = RoleManager::from_config(client, &config, server_errors)?;
    for role in &roles {
        builder =
            builder.role(RoleSpec::from_config(role, &config).shared_callbacks(callbacks.clone()));
    }
    let manager = builder.start().await?;
    println!(
        "taking part in {} roles as {}",
        roles.len(),
        manager.instance_id()
    );

    common::wait_for_stop().await;
    manager.shutdown(config.shutdown.timeout).await?;
    println!("stopped");
    Ok(())
}
