//! `nats-roles evict <role>`: CAS-delete a role's lease, after a confirmation.

use std::io::{BufRead, IsTerminal, Write};
use std::time::SystemTime;

use crate::RoleName;
use crate::inspect::{EvictError, Expect, RoleView};

use super::conn::{ConnArgs, bucket_failure, denied};
use super::outcome::Failure;
use super::table::age;

/// Arguments of `evict`.
#[derive(clap::Args, Debug)]
pub(crate) struct EvictArgs {
    /// The role whose holder to evict.
    role: String,
    /// Do not ask for confirmation (needed when stdin is not a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
    /// Evict only if the lease is still at this revision.
    #[arg(long, value_name = "N")]
    revision: Option<u64>,
    /// Evict only if the role is still in this term.
    #[arg(long, value_name = "N")]
    term: Option<u64>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: ConnArgs,
}

pub(crate) async fn run(args: EvictArgs) -> Result<(), Failure> {
    let role = RoleName::from_key_name(args.role.as_str())
        .map_err(|e| Failure::Usage(format!("{:?} is not a valid role name: it {e}", args.role)))?;
    let interactive = std::io::stdin().is_terminal();
    if !args.yes && !interactive {
        return Err(Failure::Usage(format!(
            "refusing to evict {role} without confirmation: stdin is not a terminal (pass --yes)"
        )));
    }
    let inspector = args.conn.open().await?;
    let bucket = inspector.bucket().to_owned();
    let mut expect = Expect {
        revision: args.revision,
        term: args.term,
    };
    if !args.yes {
        let holder = inspector
            .holder(&role)
            .await
            .map_err(|e| bucket_failure(&bucket, e))?
            .ok_or_else(|| {
                Failure::Runtime(format!(
                    "role {role} is not held in bucket {bucket}; nothing to evict"
                ))
            })?;
        let view = RoleView::held(&holder, false, SystemTime::now());
        let question = format!(
            "Evict {} from role {role} (term {}, revision {}, renewed {} ago) in bucket {bucket}?\n\
             It stops acting at once; any candidate, {} included, may then take the role. [y/N] ",
            view.holder.as_deref().unwrap_or("<foreign value>"),
            view.term.map_or_else(|| "?".to_owned(), |t| t.to_string()),
            holder.revision,
            view.renewal_age_ms.map_or_else(|| "?".to_owned(), age),
            view.holder.as_deref().unwrap_or("the holder"),
        );
        if !confirm(question).await? {
            return Err(Failure::Runtime(
                "not confirmed; nothing evicted".to_owned(),
            ));
        }
        // What was confirmed: this term (a rewrite within it moves the revision).
        if expect.term.is_none() {
            expect.term = holder.term;
        }
    }
    match inspector.evict(&role, expect).await {
        Ok(evicted) => {
            if args.json {
                let text = serde_json::to_string(&evicted)
                    .map_err(|e| Failure::Runtime(format!("cannot encode JSON: {e}")))?;
                println!("{text}");
            } else {
                println!(
                    "evicted {} from role {role} (term {}, revision {}; delete marker at revision {})",
                    evicted.holder.as_deref().unwrap_or("<foreign value>"),
                    evicted
                        .term
                        .map_or_else(|| "?".to_owned(), |t| t.to_string()),
                    evicted.revision,
                    evicted.marker_revision
                );
            }
            Ok(())
        }
        Err(e @ EvictError::UnknownRole { .. }) => Err(Failure::Runtime(format!(
            "{e} (bucket {bucket}); nothing evicted"
        ))),
        Err(EvictError::PermissionDenied {
            subject, operation, ..
        }) => Err(Failure::Runtime(format!(
            "{}; nothing evicted",
            denied(&bucket, &format!("{subject} ({operation})"))
        ))),
        Err(e) => Err(Failure::Runtime(e.to_string())),
    }
}

/// Asks on stderr, reads a line from stdin.
async fn confirm(question: String) -> Result<bool, Failure> {
    tokio::task::spawn_blocking(move || {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(question.as_bytes());
        let _ = err.flush();
        let mut answer = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut answer)
            .map(|_| matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
    })
    .await
    .map_err(|e| Failure::Runtime(format!("cannot read the answer: {e}")))?
    .map_err(|e| Failure::Runtime(format!("cannot read the answer: {e}")))
}
