//! `nats-roles plan`: the moves placement would make from the bucket's state now, after some
//! members drain, leave or join (what-if; changes nothing). `nats-roles freeze` / `unfreeze`:
//! stop or restart every instance's voluntary placement moves.

use std::collections::BTreeMap;

use crate::placement::{FreezeRecord, Joining, Move, WhatIf, simulate};
use crate::{InstanceId, RoleName};

use super::conn::{ConnArgs, bucket_failure};
use super::outcome::Failure;
use super::table::render;

/// Arguments of `plan`.
#[derive(clap::Args, Debug)]
pub(crate) struct PlanArgs {
    /// Simulate that this member starts draining (repeatable).
    #[arg(long, value_name = "ID")]
    drain: Vec<String>,
    /// Simulate that a member joins: `ID[:WEIGHT[:ZONE]]`, campaigning for every role the
    /// others campaign for (repeatable).
    #[arg(long, value_name = "ID[:WEIGHT[:ZONE]]")]
    join: Vec<String>,
    /// Simulate that this member leaves (repeatable).
    #[arg(long, value_name = "ID")]
    leave: Vec<String>,
    /// Print JSON (the shape of `POST /api/plan/simulate`).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: ConnArgs,
}

fn instance(text: &str, flag: &str) -> Result<InstanceId, Failure> {
    InstanceId::new(text)
        .map_err(|e| Failure::Usage(format!("--{flag} {text:?} is not an instance id: it {e}")))
}

pub(crate) async fn run(args: PlanArgs) -> Result<(), Failure> {
    let changes = WhatIf {
        drain: args
            .drain
            .iter()
            .map(|d| instance(d, "drain"))
            .collect::<Result<_, _>>()?,
        leave: args
            .leave
            .iter()
            .map(|d| instance(d, "leave"))
            .collect::<Result<_, _>>()?,
        join: args
            .join
            .iter()
            .map(|j| Joining::parse(j).map_err(|e| Failure::Usage(format!("--join {j:?}: {e}"))))
            .collect::<Result<_, _>>()?,
    };
    let inspector = args.conn.open().await?;
    let bucket = inspector.bucket().to_owned();
    let members = inspector
        .members()
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    if members.is_empty() {
        return Err(Failure::Runtime(format!(
            "bucket {bucket} has no placement members (is placement.enabled on?); nothing to plan"
        )));
    }
    changes.check(&members).map_err(Failure::Usage)?;
    let holders: BTreeMap<RoleName, InstanceId> = inspector
        .holders()
        .await
        .map_err(|e| bucket_failure(&bucket, e))?
        .into_iter()
        .filter_map(|h| Some((h.role, h.holder?)))
        .collect();
    let sim = simulate(&members, &holders, &changes);
    if args.json {
        let text = serde_json::to_string_pretty(&sim)
            .map_err(|e| Failure::Runtime(format!("cannot encode JSON: {e}")))?;
        println!("{text}");
        return Ok(());
    }
    if let Some(line) = super::frozen::line(&inspector, &members).await? {
        println!("{line}\n");
    }
    println!(
        "bucket {bucket}: {} member{}, {} held role{}; {} hand-over{}, {} vacan{} filled{}",
        members.len(),
        if members.len() == 1 { "" } else { "s" },
        holders.len(),
        if holders.len() == 1 { "" } else { "s" },
        sim.moves.len(),
        if sim.moves.len() == 1 { "" } else { "s" },
        sim.fills.len(),
        if sim.fills.len() == 1 { "cy" } else { "cies" },
        if sim.pending > 0 {
            format!(
                " ({} move{} pending already without these changes)",
                sim.pending,
                if sim.pending == 1 { "" } else { "s" }
            )
        } else {
            String::new()
        }
    );
    let rows = |moves: &[Move]| -> Vec<Vec<String>> {
        moves
            .iter()
            .map(|m| {
                vec![
                    m.role.to_string(),
                    m.from
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), ToString::to_string),
                    m.to.to_string(),
                    m.reason.to_string(),
                ]
            })
            .collect()
    };
    let mut all = rows(&sim.moves);
    all.extend(rows(&sim.fills));
    if !all.is_empty() {
        println!();
        print!(
            "{}",
            render(&["ROLE", "FROM", "TO", "REASON"], &[false; 4], &all)
        );
    }
    if !sim.unheld.is_empty() {
        let names: Vec<String> = sim.unheld.iter().map(ToString::to_string).collect();
        println!(
            "\nleft unheld — no member left campaigns for {}: {}",
            if names.len() == 1 { "it" } else { "them" },
            names.join(", ")
        );
    }
    let no_room: Vec<String> = sim
        .unplaced
        .iter()
        .filter(|r| !sim.unheld.contains(r))
        .map(ToString::to_string)
        .collect();
    if !no_room.is_empty() {
        println!(
            "\nno preferred holder (no eligible candidate with room): {}",
            no_room.join(", ")
        );
    }
    if !sim.zones.is_empty() {
        print!("{}", zones_note(&sim.zones, &changes.join));
    }
    Ok(())
}

/// The note saying that zones decided the shares: each zone, its members and its roles, and
/// a hint for a member joining without a zone among members with zones.
fn zones_note(zones: &[crate::placement::ZoneShare], join: &[Joining]) -> String {
    let mut out = format!(
        "\nnote: zones decided the shares: the plan spreads roles over the {} zones first, then \
         over the members of each zone (members without a zone count as one zone):\n",
        zones.len()
    );
    for z in zones {
        let members: Vec<&str> = z.members.iter().map(InstanceId::as_str).collect();
        out.push_str(&format!(
            "  {}: {} — {} role{}\n",
            z.zone
                .as_deref()
                .map_or_else(|| "(no zone)".to_owned(), |z| format!("zone {z}")),
            members.join(", "),
            z.roles,
            if z.roles == 1 { "" } else { "s" }
        ));
    }
    if zones.iter().any(|z| z.zone.is_some()) {
        for j in join.iter().filter(|j| j.zone.is_none()) {
            out.push_str(&format!(
                "  {} joins without a zone, so it is a zone of its own; give it its zone with \
                 --join {}:{}:ZONE\n",
                j.id, j.id, j.weight
            ));
        }
    }
    out
}

/// Arguments of `freeze`.
#[derive(clap::Args, Debug)]
pub(crate) struct FreezeArgs {
    /// Why (shown on every dashboard), at most 256 bytes.
    #[arg(long, default_value = "")]
    reason: String,
    #[command(flatten)]
    conn: ConnArgs,
}

/// Arguments of `unfreeze`.
#[derive(clap::Args, Debug)]
pub(crate) struct UnfreezeArgs {
    #[command(flatten)]
    conn: ConnArgs,
}

pub(crate) async fn freeze(args: FreezeArgs) -> Result<(), Failure> {
    if args.reason.len() > FreezeRecord::MAX_REASON_LEN {
        return Err(Failure::Usage(format!(
            "--reason is longer than {} bytes",
            FreezeRecord::MAX_REASON_LEN
        )));
    }
    let inspector = args.conn.open().await?;
    let bucket = inspector.bucket().to_owned();
    let before = inspector
        .freeze_state()
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    let record = FreezeRecord::new(&args.reason, &super::identity::operator());
    inspector
        .set_freeze(Some(&record))
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    if let Some(b) = before {
        println!("replaced the freeze {}", super::frozen::describe(&b));
    }
    println!(
        "froze voluntary placement moves in bucket {bucket}{} (vacant roles are still taken; \
         `nats-roles unfreeze` ends it)",
        if args.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", args.reason)
        }
    );
    Ok(())
}

pub(crate) async fn unfreeze(args: UnfreezeArgs) -> Result<(), Failure> {
    let inspector = args.conn.open().await?;
    let bucket = inspector.bucket().to_owned();
    let was = inspector
        .freeze_state()
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    inspector
        .set_freeze(None)
        .await
        .map_err(|e| bucket_failure(&bucket, e))?;
    match was {
        Some(r) => println!(
            "unfroze voluntary placement moves in bucket {bucket} (the freeze {})",
            super::frozen::describe(&r)
        ),
        None => println!(
            "not frozen by an operator; made sure of it for voluntary placement moves in bucket {bucket}"
        ),
    }
    Ok(())
}
