//! `nats-roles status`: every held role, its holder, term and ages.

use std::time::SystemTime;

use std::collections::BTreeMap;

use crate::inspect::{RoleList, RoleView, instances};
use crate::placement::{Candidate, plan};
use crate::{InstanceId, RoleName};

use super::conn::{ConnArgs, bucket_failure};
use super::outcome::Failure;
use super::table::{age, render};

/// Arguments of `status`.
#[derive(clap::Args, Debug)]
pub(crate) struct StatusArgs {
    /// Print JSON (the shape of `GET /api/roles`) instead of a table.
    #[arg(long)]
    json: bool,
    /// List every member of a role group as a row of its own (by default a group is one
    /// line of the GROUP table).
    #[arg(long)]
    expand: bool,
    #[command(flatten)]
    conn: ConnArgs,
}

pub(crate) async fn run(args: StatusArgs) -> Result<(), Failure> {
    let inspector = args.conn.open().await?;
    let holders = inspector
        .holders()
        .await
        .map_err(|e| bucket_failure(inspector.bucket(), e))?;
    let now = SystemTime::now();
    // Placement (docs/placement.md): the plan over the members present now (no stability
    // window or leave delay: this is a snapshot, not an instance).
    let members = inspector
        .members()
        .await
        .map_err(|e| bucket_failure(inspector.bucket(), e))?;
    let candidates: Vec<Candidate> = members.iter().map(Candidate::from).collect();
    let held: BTreeMap<RoleName, InstanceId> = holders
        .iter()
        .filter_map(|h| Some((h.role.clone(), h.holder.clone()?)))
        .collect();
    let placement = plan(&candidates, &held);
    let member_groups = inspector
        .member_groups()
        .await
        .map_err(|e| bucket_failure(inspector.bucket(), e))?;
    let records = inspector
        .group_records()
        .await
        .map_err(|e| bucket_failure(inspector.bucket(), e))?;
    let groups = super::status_groups::Groups::new(&member_groups, &records);
    let slot_counts = inspector
        .slot_counts()
        .await
        .map_err(|e| bucket_failure(inspector.bucket(), e))?;
    let list = RoleList::new(
        inspector.bucket(),
        None,
        holders
            .iter()
            .map(|h| {
                RoleView::held(h, false, now)
                    .with_preferred(placement.preferred.get(&h.role))
                    .in_groups(groups.names())
                    .with_slot_counts(&slot_counts)
            })
            .collect(),
    );
    let with_placement = !members.is_empty();
    if args.json {
        let text = serde_json::to_string_pretty(&list)
            .map_err(|e| Failure::Runtime(format!("cannot encode JSON: {e}")))?;
        println!("{text}");
        return Ok(());
    }
    if let Some(line) = super::frozen::line(&inspector, &members).await? {
        println!("{line}\n");
    }
    let by_instance = instances(&holders, None);
    println!(
        "bucket {}: {} role{} held by {} instance{}",
        list.bucket,
        list.roles.len(),
        if list.roles.len() == 1 { "" } else { "s" },
        by_instance.len(),
        if by_instance.len() == 1 { "" } else { "s" }
    );
    if list.roles.is_empty() {
        return Ok(());
    }
    println!();
    let mut headers = vec![
        "ROLE",
        "HOLDER",
        "TERM",
        "TOKEN",
        "HELD FOR",
        "RENEWED",
        "PRIO",
        "DASHBOARD",
    ];
    let mut right = vec![false, false, true, false, true, true, true, false];
    if !groups.is_empty() {
        print!("{}", groups.table(&list.roles));
        println!();
    }
    let slotted: std::collections::BTreeSet<&str> = list
        .roles
        .iter()
        .filter(|v| v.slot.is_some())
        .map(|v| v.role.as_str())
        .collect();
    for role in &slotted {
        match RoleName::new(*role).ok().and_then(|r| slot_counts.get(&r)) {
            Some(n) => println!("role {role}: {n} slots (recorded in control.slots.{role})"),
            None => println!("role {role}: no valid slot count record (control.slots.{role})"),
        }
    }
    if !slotted.is_empty() {
        println!();
    }
    let rows: Vec<Vec<String>> = list
        .roles
        .iter()
        .filter(|v| args.expand || v.group.is_none())
        .map(|v| {
            let mut row = role_row(v);
            if with_placement {
                row.push(match (&v.preferred, &v.preferred_reason) {
                    (Some(p), Some(r)) => format!("{p} ({r})"),
                    _ => "-".to_owned(),
                });
            }
            row
        })
        .collect();
    if with_placement {
        headers.push("PREFERRED");
        right.push(false);
    }
    if !rows.is_empty() {
        print!("{}", render(&headers, &right, &rows));
        println!();
    }
    let rows: Vec<Vec<String>> = by_instance
        .iter()
        .map(|i| {
            let roles: Vec<String> = i
                .roles
                .iter()
                .map(|r| crate::inspect::shown_name(&r.role, r.slot))
                .collect();
            vec![
                i.instance.clone(),
                i.roles.len().to_string(),
                roles.join(", "),
            ]
        })
        .collect();
    print!(
        "{}",
        render(
            &["INSTANCE", "HOLDS", "ROLES"],
            &[false, true, false],
            &rows
        )
    );
    Ok(())
}

fn role_row(v: &RoleView) -> Vec<String> {
    let opt = |o: Option<String>| o.unwrap_or_else(|| "-".to_owned());
    vec![
        v.shown_name(),
        v.holder
            .clone()
            .unwrap_or_else(|| "<foreign value>".to_owned()),
        opt(v.term.map(|t| t.to_string())),
        opt(v.token.clone()),
        opt(v.held_for_ms.map(age)),
        opt(v.renewal_age_ms.map(|a| format!("{} ago", age(a)))),
        opt(v.priority.map(|p| p.to_string())),
        opt(v.holder_url.clone()),
    ]
}
