//! `nats-roles watch`: the current holders, then every transition as it happens.

use std::collections::HashMap;
use std::time::SystemTime;

use crate::RoleName;
use crate::inspect::{EventView, TransitionTracker, format_time, redact_token};
use futures_util::StreamExt;

use super::conn::{ConnArgs, bucket_failure};
use super::outcome::Failure;

/// Arguments of `watch`.
#[derive(clap::Args, Debug)]
pub(crate) struct WatchArgs {
    /// Print one JSON object per line (the events of `GET /api/events`).
    #[arg(long)]
    json: bool,
    /// Exit (0) after this many transitions.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    #[command(flatten)]
    conn: ConnArgs,
}

pub(crate) async fn run(args: WatchArgs) -> Result<(), Failure> {
    let inspector = args.conn.open().await?;
    let bucket = inspector.bucket().to_owned();
    let runtime = |e: crate::Error| bucket_failure(&bucket, e);
    // Watch first, then read: no change can fall between the two.
    let mut updates = inspector.watch().await.map_err(runtime)?;
    let holders = inspector.holders().await.map_err(runtime)?;
    let mut known: HashMap<RoleName, u64> = holders
        .iter()
        .map(|h| (h.role.clone(), h.revision))
        .collect();
    let mut tracker = TransitionTracker::new(&holders);
    let now = format_time(SystemTime::now());
    print(
        &EventView::Hello {
            instance: None,
            bucket: bucket.clone(),
            cursor: None,
            admin: None,
            at: now.clone(),
        },
        args.json,
    );
    for h in &holders {
        print(
            &EventView::Current {
                role: h.role.to_string(),
                holder: h.holder.as_ref().map(ToString::to_string),
                term: h.term,
                token: h.token.as_ref().map(redact_token),
                at: now.clone(),
            },
            args.json,
        );
    }
    let mut seen = 0;
    if args.count == Some(0) {
        return Ok(());
    }
    let stop = super::signal::wait_signal();
    tokio::pin!(stop);
    loop {
        let update = tokio::select! {
            biased;
            () = &mut stop => return Ok(()),
            u = updates.next() => u,
        };
        let update = match update {
            Some(Ok(u)) => u,
            Some(Err(e)) => return Err(runtime(e)),
            None => {
                return Err(Failure::Runtime(format!(
                    "bucket {bucket}: the watch ended"
                )));
            }
        };
        if known
            .get(&update.role)
            .is_some_and(|r| update.revision <= *r)
        {
            continue; // already part of what was read
        }
        known.insert(update.role.clone(), update.revision);
        let Some(event) = tracker.holder(&update.role, update.holder.as_ref(), SystemTime::now())
        else {
            continue; // a renewal
        };
        print(&event, args.json);
        seen += 1;
        if args.count.is_some_and(|n| seen >= n) {
            return Ok(());
        }
    }
}

fn print(event: &EventView, json: bool) {
    let line = if json {
        serde_json::to_string(event).unwrap_or_default()
    } else {
        human(event)
    };
    if !line.is_empty() {
        println!("{line}");
    }
}

fn human(event: &EventView) -> String {
    let term = |t: &Option<u64>| t.map_or_else(|| "?".to_owned(), |t| t.to_string());
    let who = |h: &Option<String>| h.clone().unwrap_or_else(|| "<foreign value>".to_owned());
    match event {
        EventView::Hello { bucket, at, .. } => {
            format!("{at}  watching bucket {bucket} (Ctrl-C to stop)")
        }
        EventView::Current {
            role,
            holder,
            term: t,
            token,
            at,
        } => format!(
            "{at}  current  {role}  {}  term {}  {}",
            who(holder),
            term(t),
            token.as_deref().unwrap_or("")
        )
        .trim_end()
        .to_owned(),
        EventView::Holder {
            role,
            holder,
            previous,
            handover,
            term: t,
            token,
            at,
        } => {
            let how = match (handover, previous) {
                (true, Some(p)) => format!("  handed over from {p}"),
                (false, Some(p)) if Some(p) == holder.as_ref() => "  re-acquired".to_owned(),
                _ => String::new(),
            };
            format!(
                "{at}  holder   {role}  {}  term {}  {}{how}",
                who(holder),
                term(t),
                token.as_deref().unwrap_or("")
            )
        }
        EventView::Vacant { role, previous, at } => format!(
            "{at}  vacant   {role}{}",
            previous
                .as_ref()
                .map_or_else(String::new, |p| format!("  (was {p})"))
        ),
        EventView::Resync { missed, at } => format!("{at}  resync   {missed} events missed"),
        other => format!("{other:?}"),
    }
}
