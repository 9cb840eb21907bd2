//! `nats-roles history check`: judge a recorded history (docs/reliability.md).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::history::{check_loaded, load_paths, render_html};

use super::outcome::{EXIT_RUNTIME, EXIT_USAGE};

/// `history` subcommands.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum HistoryCommand {
    /// Check a history against the safety and liveness invariants. Exit 0: clean;
    /// 1: violations; 2: the history cannot be read.
    Check(CheckArgs),
}

/// Arguments of `history check`.
#[derive(clap::Args, Debug)]
pub(crate) struct CheckArgs {
    /// A directory of `*.jsonl` files, or the files themselves.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Also write an HTML timeline (per-role swim lanes, faults, violations) to this file.
    #[arg(long, value_name = "OUT.html")]
    timeline: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs a `history` subcommand.
pub(crate) fn run(command: HistoryCommand) -> ExitCode {
    match command {
        HistoryCommand::Check(args) => check(&args),
    }
}

fn check(args: &CheckArgs) -> ExitCode {
    let loaded = match load_paths(&args.paths) {
        Ok(l) => l,
        Err(err) => {
            eprintln!("nats-roles: {err}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let report = check_loaded(&loaded);
    if let Some(path) = &args.timeline
        && let Err(err) = std::fs::write(path, render_html(&report))
    {
        eprintln!("nats-roles: {}: {err}", path.display());
        return ExitCode::from(EXIT_USAGE);
    }
    let text = if args.json {
        report.to_json()
    } else {
        report.render_text()
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", text.trim_end());
    let _ = out.flush();
    if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_RUNTIME)
    }
}
