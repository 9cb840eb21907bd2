//! `nats-roles move ROLE --to INSTANCE`: hand a role to a named instance (protocol Q13), and
//! `--cancel` to withdraw a move or end its placement hold.

use std::time::Duration;

use crate::moves::{MoveOptions, MoveOutcome};
use crate::names::{InstanceId, RoleName};

use super::conn::{ConnArgs, bucket_failure};
use super::outcome::Failure;

/// Exit code: the role was not moved (vacant, target not live, refused, another move in
/// progress).
pub(crate) const EXIT_NOT_MOVED: u8 = 3;
/// Exit code: the target did not hold the role within the timeout.
pub(crate) const EXIT_TIMED_OUT: u8 = 4;

/// Arguments of `move`. Its `--timeout` is how long to wait for the move; the request
/// timeout the other operator commands call `--timeout` is `--request-timeout` here.
#[derive(clap::Args, Debug)]
#[command(mut_arg("timeout", |a| a.long("request-timeout")))]
pub(crate) struct MoveArgs {
    /// The role to move.
    role: String,
    /// The instance that should hold it (and nobody else).
    #[arg(long, value_name = "INSTANCE", required_unless_present = "cancel")]
    to: Option<String>,
    /// How long to wait for the target to hold the role.
    #[arg(long = "timeout", id = "wait", value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    wait: Duration,
    /// How long placement keeps the role on the target afterwards (0s: not at all).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
    hold: Duration,
    /// How long the other candidates hold back when the holder lets go (at most the role's
    /// TTL).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Withdraw the role's move in progress, or end the placement hold of a moved role.
    #[arg(long, conflicts_with = "to")]
    cancel: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: ConnArgs,
}

pub(crate) async fn run(args: MoveArgs) -> Result<(), Failure> {
    let role = RoleName::new(args.role.as_str())
        .map_err(|e| Failure::Usage(format!("{:?} is not a valid role name: it {e}", args.role)))?;
    if args.cancel {
        return cancel(&args, &role).await;
    }
    let to_arg = args.to.clone().unwrap_or_default();
    let to = InstanceId::new(to_arg.as_str()).map_err(|e| {
        Failure::Usage(format!(
            "--to {to_arg:?} is not a valid instance id: it {e}"
        ))
    })?;
    if args.wait.is_zero() || args.wait > MoveOptions::MAX_TIMEOUT {
        return Err(Failure::Usage(format!(
            "--timeout must be above zero and at most {}",
            crate::core::fmt_duration(MoveOptions::MAX_TIMEOUT)
        )));
    }
    if args.hold > MoveOptions::MAX_HOLD {
        return Err(Failure::Usage(format!(
            "--hold must be at most {}",
            crate::core::fmt_duration(MoveOptions::MAX_HOLD)
        )));
    }
    let inspector = args.conn.open().await?;
    let bucket = inspector.bucket().to_owned();
    let options = MoveOptions::default()
        .with_timeout(args.wait)
        .with_hold(args.hold)
        .with_grace(args.grace)
        .with_by(super::identity::operator());
    if !args.json {
        eprintln!(
            "moving {role} to {to} (waiting up to {})…",
            crate::core::fmt_duration(args.wait)
        );
    }
    let outcome = inspector
        .request_move(&role, &to, &options)
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    if args.json {
        println!("{}", json(&role, &to, &outcome));
    }
    let hold = if args.hold.is_zero() {
        String::new()
    } else {
        format!(
            "; placement will not move it away for {} (`nats-roles move {role} --cancel` ends that)",
            crate::core::fmt_duration(args.hold)
        )
    };
    match outcome {
        MoveOutcome::Moved { term, took } => {
            if !args.json {
                println!(
                    "moved {role} to {to}: term {term}, {:.1} ms after the request{hold}",
                    took.as_secs_f64() * 1000.0
                );
            }
            Ok(())
        }
        MoveOutcome::AlreadyThere { term } => {
            if !args.json {
                println!("{role} is already held by {to} (term {term}); nothing to do");
            }
            Ok(())
        }
        MoveOutcome::Vacant => Err(not_moved(format!(
            "not moved: {role} is not held by anyone in bucket {bucket} (it goes to whoever claims it first)"
        ))),
        MoveOutcome::TargetNotLive => Err(not_moved(format!(
            "not moved: {to} has no live session for {role}'s TTL in bucket {bucket} (not running, not connected, or another bucket)"
        ))),
        MoveOutcome::InProgress { to: other, state } => Err(not_moved(format!(
            "not moved: another move of {role} (to {other}) is {}; wait for it or run `nats-roles move {role} --cancel`",
            state.as_str()
        ))),
        MoveOutcome::Refused(reason) => Err(not_moved(format!(
            "not moved: {to} refused ({reason}): {}",
            reason.describe()
        ))),
        MoveOutcome::TimedOut { holder } => Err(Failure::Exit(
            EXIT_TIMED_OUT,
            format!(
                "not moved: {to} did not hold {role} within {} (the request was withdrawn); {}",
                crate::core::fmt_duration(args.wait),
                match holder {
                    Some(h) => format!("held by {h} now"),
                    None => "nobody holds it now".to_owned(),
                }
            ),
        )),
    }
}

fn not_moved(message: String) -> Failure {
    Failure::Exit(EXIT_NOT_MOVED, message)
}

async fn cancel(args: &MoveArgs, role: &RoleName) -> Result<(), Failure> {
    let inspector = args.conn.open().await?;
    let bucket = inspector.bucket().to_owned();
    let was = inspector
        .cancel_move(role)
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    match was {
        Some(r) => println!(
            "withdrew the move of {role} to {} ({}, asked by {})",
            r.to,
            r.state.as_str(),
            if r.by.is_empty() { "unknown" } else { &r.by }
        ),
        None => println!("no move of {role} in bucket {bucket}; nothing to withdraw"),
    }
    Ok(())
}

/// The outcome as one JSON object.
fn json(role: &RoleName, to: &InstanceId, outcome: &MoveOutcome) -> serde_json::Value {
    let mut v = serde_json::json!({
        "role": role.as_str(),
        "to": to.as_str(),
        "outcome": outcome.as_str(),
        "moved": outcome.is_moved(),
    });
    match outcome {
        MoveOutcome::Moved { term, took } => {
            v["term"] = (*term).into();
            v["took_ms"] = u64::try_from(took.as_millis()).unwrap_or(u64::MAX).into();
        }
        MoveOutcome::AlreadyThere { term } => v["term"] = (*term).into(),
        MoveOutcome::Refused(reason) => v["reason"] = reason.as_str().into(),
        MoveOutcome::InProgress { to, state } => {
            v["other_to"] = to.as_str().into();
            v["other_state"] = state.as_str().into();
        }
        MoveOutcome::TimedOut { holder } => {
            v["holder"] = holder.as_ref().map(|h| h.as_str().to_owned()).into();
        }
        _ => {}
    }
    v
}
