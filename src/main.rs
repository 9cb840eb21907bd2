//! The `nats-roles` command: run a role manager from a YAML file, or check a file.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use nats_roles::config::Config;
use nats_roles::{InstanceId, RoleEvent, RoleManager};
use tracing::{error, info};

/// Exit code for runtime failures.
const EXIT_RUNTIME: u8 = 1;
/// Exit code for usage and configuration errors.
const EXIT_USAGE: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "nats-roles",
    version,
    about = "Role elections on NATS JetStream KV"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a role manager with the roles declared in a YAML file.
    Run(RunArgs),
    /// Check a configuration file and print every problem.
    Validate {
        /// The YAML file.
        config: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The YAML configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// This instance's id (overrides instance.id and NATS_ROLES_INSTANCE_ID).
    #[arg(long)]
    instance_id: Option<String>,
    /// NATS server URL; repeat for several (overrides nats.servers and NATS_URL).
    #[arg(long = "server", short = 's')]
    servers: Vec<String>,
    /// Create the bucket if it does not exist.
    #[arg(long)]
    auto_create: bool,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "NATS_ROLES_LOG_FORMAT")]
    log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command {
        Command::Validate { config } => validate(&config),
        Command::Run(args) => run(args),
    }
}

fn validate(path: &std::path::Path) -> ExitCode {
    match Config::load(path) {
        Ok(_) => {
            println!("{}: ok", path.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{}: invalid configuration\n{err}", path.display());
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn load_config(args: &RunArgs) -> Result<Config, String> {
    let mut config =
        Config::load(&args.config).map_err(|e| format!("{}: {e}", args.config.display()))?;
    config
        .apply_env(|name| std::env::var(name).ok())
        .map_err(|e| format!("environment: {e}"))?;
    if let Some(id) = &args.instance_id {
        config.instance.id =
            Some(InstanceId::new(id.clone()).map_err(|e| format!("--instance-id {id:?}: {e}"))?);
    }
    if !args.servers.is_empty() {
        config.nats.servers.clone_from(&args.servers);
    }
    if args.auto_create {
        config.bucket.auto_create = true;
    }
    config
        .validate()
        .map_err(|e| format!("{}: {e}", args.config.display()))?;
    config.require_instance_id().map_err(|e| e.to_string())?;
    Ok(config)
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,async_nats=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn run(args: RunArgs) -> ExitCode {
    let config = match load_config(&args) {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("nats-roles: invalid configuration: {msg}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    init_tracing(args.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("nats-roles: cannot start the runtime: {err}");
            return ExitCode::from(EXIT_RUNTIME);
        }
    };
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            error!("{msg}");
            eprintln!("nats-roles: {msg}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

async fn serve(config: Config) -> Result<(), String> {
    let id = config
        .require_instance_id()
        .map_err(|e| e.to_string())?
        .clone();
    let (client, errors) = nats_roles::connect(&config.nats, &format!("nats-roles/{id}"))
        .await
        .map_err(|e| e.to_string())?;
    let manager = RoleManager::from_config(client, &config, errors)
        .map_err(|e| e.to_string())?
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let mut events = manager.events();
    let printer = tokio::spawn(async move {
        // One line per transition on stdout (logs go to stderr), for people and scripts.
        loop {
            match events.recv().await {
                Ok(event) => print_event(&event),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    shutdown_signal().await;
    info!("shutting down: releasing held roles");
    let result = manager.shutdown(config.shutdown.timeout).await;
    printer.abort();
    result.map_err(|e| e.to_string())
}

fn print_event(event: &RoleEvent) {
    let line = match event {
        RoleEvent::Promoted { role, term } => format!("promoted role={role} term={term}"),
        RoleEvent::Demoted { role, term, reason } => {
            format!("demoted role={role} term={term} reason={reason}")
        }
        RoleEvent::HolderChanged(h) => match &h.holder {
            Some(holder) => format!(
                "holder role={} holder={holder} term={}",
                h.role,
                h.term.unwrap_or(h.revision)
            ),
            None if h.foreign => format!("holder role={} holder=<foreign value>", h.role),
            None => format!("vacant role={}", h.role),
        },
        RoleEvent::DuplicateInstance { role } => format!("duplicate-instance role={role}"),
        RoleEvent::Failed { role, kind } => format!("failed role={role} error={}", kind.as_str()),
        _ => return,
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Completes on SIGINT or SIGTERM; a second signal exits at once.
async fn shutdown_signal() {
    wait_signal().await;
    tokio::spawn(async {
        wait_signal().await;
        eprintln!("nats-roles: second signal, exiting without releasing");
        std::process::exit(i32::from(EXIT_RUNTIME));
    });
}

async fn wait_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
