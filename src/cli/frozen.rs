//! The freeze line `status` and `plan` print first while voluntary placement moves are
//! frozen: by whom, since when (and how long ago), why — or which members' configuration
//! freezes them.

use std::time::SystemTime;

use crate::inspect::Inspector;
use crate::placement::{FreezeRecord, MemberRecord};

use super::conn::bucket_failure;
use super::outcome::Failure;
use super::table::age;

/// `by alice@h since 2026-… (3m12s ago) (reason "…")`.
pub(crate) fn describe(record: &FreezeRecord) -> String {
    let ago = humantime::parse_rfc3339_weak(&record.at)
        .ok()
        .and_then(|at| SystemTime::now().duration_since(at).ok())
        .map(|d| {
            format!(
                " ({} ago)",
                age(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            )
        })
        .unwrap_or_default();
    format!(
        "by {} since {}{ago}{}",
        if record.by.is_empty() {
            "unknown"
        } else {
            &record.by
        },
        if record.at.is_empty() {
            "unknown"
        } else {
            &record.at
        },
        if record.reason.is_empty() {
            String::new()
        } else {
            format!(" (reason {:?})", record.reason)
        }
    )
}

/// The freeze line, if voluntary moves are frozen (an operator's record, or members whose
/// record says `frozen`); `members` are the bucket's membership records.
pub(crate) async fn line(
    inspector: &Inspector,
    members: &[MemberRecord],
) -> Result<Option<String>, Failure> {
    let record = inspector
        .freeze_state()
        .await
        .map_err(|e| bucket_failure(inspector.bucket(), e))?;
    if let Some(r) = record {
        return Ok(Some(format!(
            "FROZEN: voluntary placement moves are frozen {} — vacant roles are still taken; \
             `nats-roles unfreeze` ends it",
            describe(&r)
        )));
    }
    let frozen: Vec<&str> = members
        .iter()
        .filter(|m| m.frozen)
        .map(|m| m.instance.as_str())
        .collect();
    Ok((!frozen.is_empty()).then(|| {
        format!(
            "FROZEN: voluntary placement moves are frozen by the configuration or admin API of {} \
             (placement.frozen) — vacant roles are still taken",
            frozen.join(", ")
        )
    }))
}
