//! `nats-roles scale GROUP COUNT` / `--reset`: set a role group's count for every instance
//! configured with it through the group's count record (`control.group.<name>`, protocol
//! Q14), then wait until the instances' member records say they act on it (and, with
//! `--wait`, until the members below the count are held and none above it is).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::groups::{GroupRecord, MAX_GROUP_COUNT, member_index};
use crate::inspect::Inspector;
use crate::names::{InstanceId, RoleName};

use super::conn::{ConnArgs, bucket_failure};
use super::outcome::Failure;

/// Exit code: no live instance takes part in the group (nothing written without `--force`).
pub(crate) const EXIT_NO_MEMBER: u8 = 3;
/// Exit code: the instances did not act on the count within `--timeout` (the record stays).
pub(crate) const EXIT_TIMED_OUT: u8 = 4;

/// How often the member records and the holders are read while waiting.
const POLL: Duration = Duration::from_millis(100);

/// Arguments of `scale`. Its `--timeout` is how long to wait; the request timeout is
/// `--request-timeout`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("timeout", |a| a.long("request-timeout")))]
pub(crate) struct ScaleArgs {
    /// The group (its `name` in `groups:`).
    group: String,
    /// The new count: members `<group>-0` … `<group>-<COUNT − 1>`, 1 to 10000.
    #[arg(required_unless_present = "reset", conflicts_with = "reset")]
    count: Option<u32>,
    /// Delete the count record: every instance acts on its configured count again.
    #[arg(long)]
    reset: bool,
    /// Write the record even when no live instance takes part in the group.
    #[arg(long)]
    force: bool,
    /// Also wait until every member below the count is held and none at or above it.
    #[arg(long)]
    wait: bool,
    /// How long to wait for the instances (and, with --wait, the holders).
    #[arg(long = "timeout", id = "wait_for", value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    wait_for: Duration,
    #[command(flatten)]
    conn: ConnArgs,
}

/// The instances that take part in `group`, with the count each acts on.
async fn counts(
    inspector: &Inspector,
    group: &RoleName,
) -> Result<BTreeMap<InstanceId, u32>, Failure> {
    let bucket = inspector.bucket();
    Ok(inspector
        .member_groups()
        .await
        .map_err(|e| bucket_failure(bucket, e))?
        .into_iter()
        .filter_map(|(id, groups)| groups.get(group).map(|c| (id, *c)))
        .collect())
}

/// The members of `group` held now, by index.
async fn held(inspector: &Inspector, group: &RoleName) -> Result<Vec<u32>, Failure> {
    let bucket = inspector.bucket();
    Ok(inspector
        .holders()
        .await
        .map_err(|e| bucket_failure(bucket, e))?
        .iter()
        .filter(|h| h.holder.is_some())
        .filter_map(|h| member_index(group, &h.role))
        .collect())
}

fn describe(counts: &BTreeMap<InstanceId, u32>) -> String {
    counts
        .iter()
        .map(|(id, c)| format!("{id} {c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) async fn run(args: ScaleArgs) -> Result<(), Failure> {
    let group = RoleName::new(args.group.as_str()).map_err(|e| {
        Failure::Usage(format!(
            "{:?} is not a valid group name: it {e}",
            args.group
        ))
    })?;
    if let Some(count) = args.count
        && !(1..=MAX_GROUP_COUNT).contains(&count)
    {
        return Err(Failure::Usage(format!(
            "COUNT {count} is out of range: a group has 1 to {MAX_GROUP_COUNT} members"
        )));
    }
    if args.wait_for.is_zero() {
        return Err(Failure::Usage("--timeout must be above zero".to_owned()));
    }
    let inspector = args.conn.open().await?;
    let bucket = inspector.bucket().to_owned();
    let before = counts(&inspector, &group).await?;
    if before.is_empty() && !args.force {
        return Err(Failure::Exit(
            EXIT_NO_MEMBER,
            format!(
                "not scaled: no live instance in bucket {bucket} takes part in the group \
                 {group} (a typo? not running?); nothing written (--force writes the record \
                 anyway: instances configured with the group act on it when they start)"
            ),
        ));
    }
    let previous = inspector
        .group_record(&group)
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    let record = args
        .count
        .map(|c| GroupRecord::new(&group, c, &super::identity::operator()));
    let started = Instant::now();
    inspector
        .set_group_record(&group, record.as_ref())
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    let what = match (&record, &previous) {
        (Some(r), Some(p)) => format!(
            "set {group}'s count to {} (was {} by {})",
            r.count, p.count, p.by
        ),
        (Some(r), None) => format!("set {group}'s count to {}", r.count),
        (None, Some(p)) => format!("deleted {group}'s count record ({} by {})", p.count, p.by),
        (None, None) => format!("{group} has no count record; made sure of it"),
    };
    if before.is_empty() {
        println!("{what}; no live instance takes part in the group yet");
        return Ok(());
    }
    let deadline = started + args.wait_for;
    // The count every instance should act on: the record's, or after a reset its own
    // configured count (not known here: any agreement will do).
    let agreed = loop {
        let now = counts(&inspector, &group).await?;
        let values: std::collections::BTreeSet<u32> = now.values().copied().collect();
        let settled = match (&record, &previous) {
            (Some(r), _) => now.values().all(|c| *c == r.count),
            // After a reset each acts on its configured count, unknown here: agreement on a
            // count other than the deleted record's, or on that one after a second.
            (None, Some(p)) => {
                values.len() == 1
                    && (!values.contains(&p.count) || started.elapsed() >= Duration::from_secs(1))
            }
            (None, None) => values.len() == 1,
        };
        if settled && !now.is_empty() {
            break values.into_iter().next().unwrap_or_default();
        }
        if Instant::now() >= deadline {
            return Err(Failure::Exit(
                EXIT_TIMED_OUT,
                format!(
                    "{what}; but after {} the instances act on: {} (their member records are \
                     rewritten when their watchers deliver the record)",
                    crate::core::fmt_duration(args.wait_for),
                    describe(&now)
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    };
    let acted = started.elapsed();
    if !args.wait {
        println!(
            "{what}; every instance acts on {agreed} ({} after the write)",
            secs(acted)
        );
        return Ok(());
    }
    loop {
        let held = held(&inspector, &group).await?;
        let below = held.iter().filter(|i| **i < agreed).count();
        let above = held.len() - below;
        if below == agreed as usize && above == 0 {
            println!(
                "{what}; every instance acts on {agreed} ({} after the write) and all {agreed} \
                 members are held, none above ({} after the write)",
                secs(acted),
                secs(started.elapsed())
            );
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Failure::Exit(
                EXIT_TIMED_OUT,
                format!(
                    "{what}; every instance acts on {agreed}, but after {} {below} of the \
                     {agreed} members are held and {above} above the count still are",
                    crate::core::fmt_duration(args.wait_for)
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
