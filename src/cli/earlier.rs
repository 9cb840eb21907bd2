//! Before `run` starts its session: waiting for the commands of an earlier process of this
//! instance to end (their role locks, protocol Q12 rule 8), for each role with `exec` (each
//! slot of a role with slots, each member of a role group).

use std::time::Duration;

use tracing::{info, warn};

use crate::InstanceId;
use crate::config::Config;

/// Before this process starts its session: a child of an earlier process of this instance
/// (killed, restarted at once by a supervisor) may still run for a moment — its watchdog kills
/// its group as soon as that process is gone — and restart adoption would hand this process
/// the role at once. Waiting for the role locks (protocol Q12 rule 8) keeps the new term from
/// beginning while the old child acts; bounded by the role's `stop_timeout` and two seconds
/// (the new child still waits for the lock itself).
pub(super) async fn await_earlier_children(
    config: &Config,
    id: &InstanceId,
    dir: Option<&std::path::Path>,
) {
    let Some(dir) = dir else {
        return;
    };
    // The roles, and the members of the groups at their configured counts (a member above
    // them, added by a count record, starts later: its own child waits for the lock).
    let members = config
        .groups
        .iter()
        .flat_map(|g| (0..g.count).filter_map(move |i| g.member(i).ok()));
    let roles: Vec<crate::config::RoleConfig> =
        config.roles.iter().cloned().chain(members).collect();
    for role in roles.iter().filter(|r| r.campaign) {
        let Some(exec) = &role.exec else {
            continue;
        };
        for name in role.role_names() {
            await_earlier_child(config, id, dir, &name, exec.stop_timeout).await;
        }
    }
}

/// [`await_earlier_children`] for one role (one slot of a role with slots).
async fn await_earlier_child(
    config: &Config,
    id: &InstanceId,
    dir: &std::path::Path,
    name: &crate::RoleName,
    stop_timeout: Duration,
) {
    let path = crate::exec::lock::path(dir, &config.bucket.name, id.as_str(), name.as_str());
    let limit = stop_timeout + Duration::from_secs(2);
    let started = tokio::time::Instant::now();
    // Asked every 5 ms (the watchdogs' own retry period); async, so that a signal ends
    // the wait (a blocking wait would hold the runtime's shutdown).
    let outcome = loop {
        match crate::exec::lock::is_free(&path) {
            Ok(true) => break Ok(()),
            Ok(false) if started.elapsed() >= limit => {
                break Err(format!(
                    "a command of an earlier process of this instance still holds {} after {limit:?}",
                    path.display()
                ));
            }
            Ok(false) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(e) => break Err(e),
        }
    };
    match outcome {
        Ok(()) if started.elapsed() >= Duration::from_millis(5) => info!(
            role = %name,
            waited_ms = started.elapsed().as_millis(),
            "waited for the command of an earlier process of this instance to end"
        ),
        Ok(()) => {}
        Err(e) => {
            warn!(role = %name, "{e} (starting anyway: the new command waits for it)")
        }
    }
}
