//! `nats-roles drain INSTANCE` / `undrain INSTANCE`: make one instance hand its roles over (or
//! take part again) through the bucket's drain record (`control.drain.<instance>`), authorised
//! by NATS permissions like `freeze`, and wait until its membership record says so.

use std::time::Duration;

use tokio::time::Instant;

use crate::inspect::Inspector;
use crate::names::InstanceId;
use crate::placement::{DrainRecord, MemberRecord};

use super::conn::{ConnArgs, bucket_failure};
use super::outcome::Failure;

/// Exit code: the instance has no membership record in the bucket (not running, placement
/// off, another bucket); nothing was written.
pub(crate) const EXIT_NOT_A_MEMBER: u8 = 3;
/// Exit code: the instance's record did not say so within `--timeout` (the drain record
/// stays written, or deleted, as asked).
pub(crate) const EXIT_TIMED_OUT: u8 = 4;

/// How often the membership record and the holders are read while waiting.
const POLL: Duration = Duration::from_millis(100);

/// Arguments of `drain`. Its `--timeout` is how long to wait; the request timeout the other
/// operator commands call `--timeout` is `--request-timeout` here.
#[derive(clap::Args, Debug)]
#[command(mut_arg("timeout", |a| a.long("request-timeout")))]
pub(crate) struct DrainArgs {
    /// The instance that should drain.
    instance: String,
    /// Why (kept in the record, logged by the instance), at most 256 bytes.
    #[arg(long, default_value = "")]
    reason: String,
    /// How long to wait for the instance's membership record to say it drains (and, with
    /// --wait, for it to hold no role).
    #[arg(long = "timeout", id = "wait_for", value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    wait_for: Duration,
    /// Also wait until the instance holds no role.
    #[arg(long)]
    wait: bool,
    #[command(flatten)]
    conn: ConnArgs,
}

/// Arguments of `undrain`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("timeout", |a| a.long("request-timeout")))]
pub(crate) struct UndrainArgs {
    /// The instance that should take part again.
    instance: String,
    /// How long to wait for the instance's membership record to say it no longer drains.
    #[arg(long = "timeout", id = "wait_for", value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    wait_for: Duration,
    #[command(flatten)]
    conn: ConnArgs,
}

fn instance(text: &str) -> Result<InstanceId, Failure> {
    InstanceId::new(text)
        .map_err(|e| Failure::Usage(format!("{text:?} is not a valid instance id: it {e}")))
}

async fn member(
    inspector: &Inspector,
    bucket: &str,
    id: &InstanceId,
) -> Result<Option<MemberRecord>, Failure> {
    inspector
        .member(id)
        .await
        .map_err(|e| bucket_failure(bucket, e))
}

async fn held_by(inspector: &Inspector, bucket: &str, id: &InstanceId) -> Result<usize, Failure> {
    Ok(inspector
        .holders()
        .await
        .map_err(|e| bucket_failure(bucket, e))?
        .iter()
        .filter(|h| h.holder.as_ref() == Some(id))
        .count())
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

pub(crate) async fn drain(args: DrainArgs) -> Result<(), Failure> {
    let id = instance(&args.instance)?;
    if args.reason.len() > DrainRecord::MAX_REASON_LEN {
        return Err(Failure::Usage(format!(
            "--reason is longer than {} bytes",
            DrainRecord::MAX_REASON_LEN
        )));
    }
    if args.wait_for.is_zero() {
        return Err(Failure::Usage("--timeout must be above zero".to_owned()));
    }
    let inspector = args.conn.open().await?;
    let bucket = inspector.bucket().to_owned();
    if member(&inspector, &bucket, &id).await?.is_none() {
        return Err(Failure::Exit(
            EXIT_NOT_A_MEMBER,
            format!(
                "not drained: {id} has no membership record in bucket {bucket} (not running, \
                 placement.enabled off, or another bucket); nothing written"
            ),
        ));
    }
    let before = inspector
        .drain_record(&id)
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    let record = DrainRecord::new(&id, &args.reason, &super::identity::operator());
    let started = Instant::now();
    inspector
        .set_drain(&id, Some(&record))
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    if let Some(b) = before {
        println!(
            "replaced the drain record of {id} by {} since {}{}",
            or_unknown(&b.by),
            or_unknown(&b.at),
            reason_note(&b.reason)
        );
    }
    let deadline = started + args.wait_for;
    loop {
        if member(&inspector, &bucket, &id)
            .await?
            .is_some_and(|m| m.draining)
        {
            break;
        }
        if Instant::now() >= deadline {
            return Err(Failure::Exit(
                EXIT_TIMED_OUT,
                format!(
                    "{id}'s membership record did not say draining within {} (the drain record \
                     stays: it drains once it sees it; `nats-roles undrain {id}` withdraws it)",
                    crate::core::fmt_duration(args.wait_for)
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
    let drains_after = started.elapsed();
    let mut held = held_by(&inspector, &bucket, &id).await?;
    if !args.wait {
        println!(
            "draining {id}: its membership record says so ({} after the request); it holds {}{}; \
             `nats-roles undrain {id}` ends it",
            secs(drains_after),
            plural(held, "role"),
            if held == 0 {
                ""
            } else {
                ", placement hands them over one at a time"
            }
        );
        return Ok(());
    }
    while held > 0 {
        if Instant::now() >= deadline {
            return Err(Failure::Exit(
                EXIT_TIMED_OUT,
                format!(
                    "{id} drains but still holds {} after {} (placement hands them over within \
                     its move budget; the drain record stays)",
                    plural(held, "role"),
                    crate::core::fmt_duration(args.wait_for)
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
        held = held_by(&inspector, &bucket, &id).await?;
    }
    println!(
        "drained {id}: its membership record says draining ({} after the request) and it holds \
         no role ({}); `nats-roles undrain {id}` ends it",
        secs(drains_after),
        secs(started.elapsed())
    );
    Ok(())
}

pub(crate) async fn undrain(args: UndrainArgs) -> Result<(), Failure> {
    let id = instance(&args.instance)?;
    if args.wait_for.is_zero() {
        return Err(Failure::Usage("--timeout must be above zero".to_owned()));
    }
    let inspector = args.conn.open().await?;
    let bucket = inspector.bucket().to_owned();
    let before = inspector
        .drain_record(&id)
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    let started = Instant::now();
    inspector
        .set_drain(&id, None)
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    let what = match &before {
        Some(b) => format!(
            "deleted the drain record of {id} (by {} since {}{})",
            or_unknown(&b.by),
            or_unknown(&b.at),
            reason_note(&b.reason)
        ),
        None => format!("no drain record of {id} in bucket {bucket}; made sure of it"),
    };
    if member(&inspector, &bucket, &id).await?.is_none() {
        println!("{what}; {id} has no membership record (not running or placement off)");
        return Ok(());
    }
    let deadline = started + args.wait_for;
    loop {
        if member(&inspector, &bucket, &id)
            .await?
            .is_some_and(|m| !m.draining)
        {
            println!(
                "{what}; {id} takes part again: its membership record says not draining ({} \
                 after the request)",
                secs(started.elapsed())
            );
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Failure::Exit(
                EXIT_TIMED_OUT,
                format!(
                    "{what}; but {id}'s membership record still says draining after {}: it \
                     drains by its own flag too (placement.draining, POST /api/drain), or is \
                     stopping",
                    crate::core::fmt_duration(args.wait_for)
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "unknown" } else { s }
}

fn reason_note(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(", reason {reason:?}")
    }
}
