//! Shared by the placement tests (`tests/processes/placement.rs`) and
//! `examples/placement_bench.rs`: `nats-roles run` processes with placement on ([`Fleet`]), the
//! bucket as ground truth (a KV watcher on `role.>`, [`Recorder`]), and the two scenarios
//! (spreading over 3 → 5 → 4 → 3 instances; priority takeover) returning what they measured.
//! The callers decide what to assert or report.

use std::path::{Path, PathBuf};
use std::time::Duration;

mod fleet;
mod operator;
mod recorder;
mod scenarios;

pub use fleet::{Fleet, Proc};
pub use operator::{
    OperatorStep, capacity_scenario, rolling_upgrade_scenario, storm_scenario, zone_scenario,
};
pub use recorder::{Change, Recorder, converge, counts, loads, minimum_moves, spread};
pub use scenarios::{PriorityReport, SpreadReport, Step, priority_scenario, spread_scenario};

pub const TTL: Duration = Duration::from_secs(2);
pub const STABILITY: Duration = Duration::from_secs(1);
pub const LEAVE_DELAY: Duration = Duration::from_secs(2);
pub const CLAIM_GRACE: Duration = Duration::from_millis(300);
pub fn roles(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("shard-{i:02}")).collect()
}

/// `names` without a priority each: placement spreads them.
pub fn without_priority(names: &[String]) -> Vec<(String, Option<i32>)> {
    names.iter().map(|r| (r.clone(), None)).collect()
}

/// A fresh temporary directory for a fleet's configs, logs and histories.
pub fn fleet_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("nats-roles-placement-")
        .disable_cleanup(std::env::var_os("KEEP_FLEET").is_some())
        .tempdir()
        .unwrap_or_else(|e| panic!("temporary directory: {e}"))
}

/// A bucket name no other test uses: `<prefix>-<uuid>`.
pub fn unique_bucket(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// A `run` configuration with placement on: TTL 2 s, stability window 1 s, leave delay 2 s.
pub fn write_config(
    dir: &Path,
    name: &str,
    bucket: &str,
    roles: &[(String, Option<i32>)],
) -> PathBuf {
    write_config_pinned(dir, name, bucket, roles, &[])
}

/// [`write_config`] with `takeover: never` for the roles in `pinned`.
pub fn write_config_pinned(
    dir: &Path,
    name: &str,
    bucket: &str,
    roles: &[(String, Option<i32>)],
    pinned: &[&str],
) -> PathBuf {
    let mut yaml = format!(
        "bucket:\n  name: {bucket}\n  replicas: 1\n  auto_create: true\n\
         timing:\n  ttl: 2s\n  heartbeat: 500ms\n  operation_timeout: 1s\n  disconnect_grace: 2s\n\
         http:\n  enabled: false\n\
         placement:\n  enabled: true\n  stability_window: {}ms\n  leave_delay: {}ms\n  \
         claim_grace: {}ms\n  cooldown: 5s\n  move_budget: 100\n  move_interval: 1s\n\
         roles:\n",
        STABILITY.as_millis(),
        LEAVE_DELAY.as_millis(),
        CLAIM_GRACE.as_millis()
    );
    for (role, prio) in roles {
        yaml.push_str(&format!("  - name: {role}\n"));
        if let Some(p) = prio {
            yaml.push_str(&format!("    priority: {p}\n"));
        }
        if pinned.contains(&role.as_str()) {
            yaml.push_str("    takeover: never\n");
        }
    }
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// Turns on the HTTP API (port chosen by the OS) with `token` as admin token in the
/// configuration at `path`.
pub fn enable_admin_http(path: &Path, token: &str) {
    let yaml = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .replace(
            "http:\n  enabled: false\n",
            &format!("http:\n  listen: 127.0.0.1:0\n  admin_token: {token}\n"),
        );
    std::fs::write(path, yaml).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}
