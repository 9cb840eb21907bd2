//! The command line: `run` (a role manager from a YAML file, with its HTTP dashboard and API),
//! `validate`, and the dispatch to the operator commands.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use super::identity::{BIN_NAME, VERSION};
use super::outcome::{EXIT_RUNTIME, EXIT_USAGE, Failure};
use crate::config::Config;
use crate::{InstanceId, RoleEvent, RoleManager};
use clap::{Parser, Subcommand, ValueEnum};
use tracing::{error, info, warn};

/// How long open HTTP requests may take to finish after the roles were released.
const HTTP_STOP_TIMEOUT: Duration = Duration::from_secs(3);

/// The longest `run` takes from a stop signal to its exit, OTLP aside: the manager's shutdown
/// (at most `shutdown.timeout`, and 100 ms for its tasks), the HTTP server's stop (at most
/// [`HTTP_STOP_TIMEOUT`]) and a second for the rest (the history's last lines, the last
/// notifications); with OTLP export, the final export adds up to its timeout per signal.
/// docs/deploy.md sets systemd's `TimeoutStopSec` above it.
fn stop_bound(config: &Config) -> Duration {
    config.shutdown.timeout
        + Duration::from_millis(100)
        + HTTP_STOP_TIMEOUT
        + Duration::from_secs(1)
}

#[derive(Parser, Debug)]
#[command(
    name = BIN_NAME,
    version = VERSION,
    about = "Role elections on NATS JetStream KV",
    long_about = "Role elections on NATS JetStream KV: one active holder per role, fenced \
                  terms, graceful hand-over. `run` runs a role manager from a YAML file (with \
                  its dashboard, HTTP API and metrics); `exec` holds one role while a command \
                  runs; `status`, `watch`, `evict`, `move`, `plan`, `drain`, `undrain`, `scale`, `freeze` and `unfreeze` talk to \
                  the bucket directly; `history check` judges recorded election histories."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The whole command line (for completions and man pages).
fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a role manager with the roles declared in a YAML file.
    Run(RunArgs),
    /// Check a configuration file and print every problem (with line and column).
    Validate {
        /// The YAML file.
        config: PathBuf,
    },
    /// Show every held role: holder, term, ages (from NATS directly).
    Status(super::status::StatusArgs),
    /// Print the current holders, then every transition as it happens (from NATS directly).
    Watch(super::watch::WatchArgs),
    /// Evict a role's holder: CAS-delete its lease at the current revision (asks first).
    Evict(super::evict::EvictArgs),
    /// What-if: the moves placement would make from the bucket now, after --drain, --join or
    /// --leave (changes nothing).
    Plan(super::plan::PlanArgs),
    /// Hand a role to a named instance, and to nobody else (graceful; placement keeps it
    /// there for --hold). Exit 0 moved, 3 not moved (why is printed), 4 timed out.
    Move(super::moves::MoveArgs),
    /// Make one instance hand every role over and take none (placement), through the bucket's
    /// drain record. Exit 0 draining, 3 not a placement member, 4 timed out.
    Drain(super::drain::DrainArgs),
    /// End the drain `drain` asked for. Exit 0 taking part again, 4 still draining.
    Undrain(super::drain::UndrainArgs),
    /// Set a role group's count for every instance configured with it (its count record);
    /// --reset returns to the configured counts. Exit 0 acted on, 3 no instance takes part,
    /// 4 timed out.
    Scale(super::scale::ScaleArgs),
    /// Freeze every instance's voluntary placement moves (vacant roles are still taken).
    Freeze(super::plan::FreezeArgs),
    /// End an operator's freeze of voluntary placement moves.
    Unfreeze(super::plan::UnfreezeArgs),
    /// Recorded election histories (docs/reliability.md).
    #[command(subcommand)]
    History(super::history::HistoryCommand),
    /// Campaign for one role, run a command while holding it, release it when the command
    /// exits, and exit with its status (docs/exec.md).
    Exec(super::exec::ExecArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or PowerShell.
    Completions(super::generate::CompletionsArgs),
    /// Print the manual page nats-roles(1) as roff, or write every page with --dir.
    Man(super::generate::ManArgs),
    /// Internal: the watchdog of a role's child process (started by `run` and `exec`).
    #[command(hide = true)]
    Watchdog(crate::exec::watchdog::WatchdogArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The YAML configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// This instance's id (overrides instance.id and NATS_ROLES_INSTANCE_ID).
    #[arg(long)]
    instance_id: Option<String>,
    /// Use this NATS context of the nats tool ($XDG_CONFIG_HOME/nats/context/NAME.json) over
    /// the file's nats section; NATS_URL, NATS_CREDS and --server override it.
    #[arg(long, env = super::context::ENV_CONTEXT, value_name = "NAME")]
    context: Option<String>,
    /// NATS server URL; repeat for several (overrides nats.servers and NATS_URL).
    #[arg(long = "server", short = 's')]
    servers: Vec<String>,
    /// Create the bucket if it does not exist.
    #[arg(long)]
    auto_create: bool,
    /// Log format (overrides telemetry.log_format; default text).
    #[arg(long, value_enum, env = "NATS_ROLES_LOG_FORMAT")]
    log_format: Option<LogFormat>,
    /// Serve the dashboard and API on this address, IP:port (overrides http.listen; port 0
    /// picks a free one).
    #[arg(long, value_name = "ADDR", conflicts_with = "no_http")]
    http: Option<std::net::SocketAddr>,
    /// Do not serve the dashboard and API.
    #[arg(long)]
    no_http: bool,
    /// Record this instance's election history as JSON lines to FILE (appended; format in
    /// docs/reliability.md; check it with `nats-roles history check`).
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

pub(crate) fn main() -> ExitCode {
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
    if matches!(
        cli.command,
        Command::Status(_)
            | Command::Watch(_)
            | Command::Plan(_)
            | Command::History(_)
            | Command::Completions(_)
            | Command::Man(_)
            | Command::Validate { .. }
    ) {
        super::pipe::end_quietly_on_a_closed_stdout();
    }
    match cli.command {
        Command::Validate { config } => validate(&config),
        Command::Run(args) => run(args),
        Command::Status(args) => super::outcome::block_on(super::status::run(args)),
        Command::Watch(args) => super::outcome::block_on(super::watch::run(args)),
        Command::Evict(args) => super::outcome::block_on(super::evict::run(args)),
        Command::Plan(args) => super::outcome::block_on(super::plan::run(args)),
        Command::Move(args) => super::outcome::block_on(super::moves::run(args)),
        Command::Drain(args) => super::outcome::block_on(super::drain::drain(args)),
        Command::Undrain(args) => super::outcome::block_on(super::drain::undrain(args)),
        Command::Scale(args) => super::outcome::block_on(super::scale::run(args)),
        Command::Freeze(args) => super::outcome::block_on(super::plan::freeze(args)),
        Command::Unfreeze(args) => super::outcome::block_on(super::plan::unfreeze(args)),
        Command::History(command) => super::history::run(command),
        Command::Exec(args) => super::exec::run(args),
        Command::Completions(args) => super::generate::completions(&args, &command()),
        Command::Man(args) => super::generate::man(&args, command()),
        Command::Watchdog(args) => crate::exec::watchdog::main(args),
    }
}

fn validate(path: &std::path::Path) -> ExitCode {
    match Config::load(path) {
        Ok(config) => {
            for w in config.round_trip_warnings(None) {
                eprintln!(
                    "{}: warning: {}: {} (nats.round_trip {})",
                    path.display(),
                    w.field,
                    w.message,
                    config
                        .nats
                        .round_trip
                        .map(crate::core::fmt_duration)
                        .unwrap_or_default()
                );
            }
            println!("{}: ok", path.display());
            ExitCode::SUCCESS
        }
        Err(
            err @ (crate::config::ConfigError::Io { .. }
            | crate::config::ConfigError::NotAFile { .. }),
        ) => {
            // The message names the file already.
            eprintln!("{err}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(err) => {
            eprintln!("{}: invalid configuration\n{err}", path.display());
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// The configuration of `run`, lowest precedence first: the file, the NATS context named by
/// `--context` or `NATS_CONTEXT` (never the selected one: a service's connection does not
/// follow an operator's `nats context select`), the environment (`Config::apply_env`), the
/// flags.
fn load_config(args: &RunArgs) -> Result<Config, String> {
    let env = |name: &str| std::env::var(name).ok();
    let mut config =
        Config::load(&args.config).map_err(|e| format!("{}: {e}", args.config.display()))?;
    let message = |f: Failure| match f {
        Failure::Usage(m) | Failure::Runtime(m) | Failure::Exit(_, m) => m,
    };
    if let Some(context) =
        super::context::resolve(args.context.as_deref(), false, &env).map_err(message)?
    {
        context.apply(&mut config).map_err(message)?;
    }
    config
        .apply_env(env)
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

/// Installs the process's subscriber: logs on stderr (filtered by `RUST_LOG`, default
/// `info,async_nats=warn`) and, when traces are exported, the OpenTelemetry layer (its own
/// filter: `info` plus the library's `debug` spans of KV operations).
fn init_tracing(format: LogFormat, telemetry: &Telemetry) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,async_nats=warn"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(super::color::stderr_ansi())
        .with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let otel = telemetry.tracing_layer().map(|layer| {
        layer.with_filter(tracing_subscriber::EnvFilter::new(
            "info,nats_roles=debug,async_nats=warn",
        ))
    });
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .init();
}

/// The process's metric and trace providers.
#[cfg(feature = "otel")]
type Telemetry = crate::telemetry::Telemetry;

#[cfg(feature = "otel")]
fn start_telemetry(config: &Config, runtime: &tokio::runtime::Handle) -> Result<Telemetry, String> {
    let id = config
        .instance
        .id
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    Telemetry::new(&config.telemetry, &id, runtime).map_err(|e| e.to_string())
}

/// Without the `otel` feature: no providers, metrics go to the (no-op) global meter.
#[cfg(not(feature = "otel"))]
struct Telemetry;

#[cfg(not(feature = "otel"))]
impl Telemetry {
    fn tracing_layer(&self) -> Option<tracing_subscriber::layer::Identity> {
        None
    }
    fn shutdown(self) {}
}

#[cfg(not(feature = "otel"))]
fn start_telemetry(
    config: &Config,
    _runtime: &tokio::runtime::Handle,
) -> Result<Telemetry, String> {
    if config.telemetry.otlp.is_some() {
        return Err(
            "telemetry.otlp is set but this binary was built without the `otel` feature".into(),
        );
    }
    Ok(Telemetry)
}

fn run(args: RunArgs) -> ExitCode {
    let config = match load_config(&args) {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("nats-roles: invalid configuration: {msg}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    #[cfg(not(feature = "http"))]
    if args.http.is_some() {
        eprintln!("nats-roles: --http: this binary was built without the `http` feature");
        return ExitCode::from(EXIT_USAGE);
    }
    super::heap::limit_arenas();
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
    let telemetry = match start_telemetry(&config, runtime.handle()) {
        Ok(t) => t,
        Err(msg) => {
            eprintln!("nats-roles: {msg}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let format = match args.log_format {
        Some(LogFormat::Json) => LogFormat::Json,
        Some(LogFormat::Text) => LogFormat::Text,
        None => match config.telemetry.log_format {
            crate::config::LogFormat::Json => LogFormat::Json,
            _ => LogFormat::Text,
        },
    };
    init_tracing(format, &telemetry);
    let code = match runtime.block_on(serve(config, &args, &telemetry)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Runtime(msg) | Failure::Usage(msg) | Failure::Exit(_, msg)) => {
            error!("{msg}");
            eprintln!("nats-roles: {msg}");
            ExitCode::from(EXIT_RUNTIME)
        }
    };
    // Exports what is pending; the runtime still runs the exporters' requests.
    telemetry.shutdown();
    code
}

/// The HTTP side of `run`: nothing without the `http` feature.
#[cfg(feature = "http")]
struct Http {
    bound: Option<super::listen::Bound>,
    server: Option<crate::http::ApiServer>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    options: crate::http::ApiOptions,
}

#[cfg(feature = "http")]
impl Http {
    /// Binds the listener (before connecting, so a taken port fails fast) and advertises its
    /// URL in the instance metadata (`http`), unless the configuration sets one.
    async fn bind(
        config: &mut Config,
        args: &RunArgs,
        telemetry: &Telemetry,
    ) -> Result<Self, Failure> {
        let bound = super::listen::bind(&config.http, args.http, args.no_http).await?;
        if let Some(url) = bound.as_ref().and_then(|b| b.advertise.clone()) {
            config.instance.meta.entry("http".to_owned()).or_insert(url);
        }
        let options = crate::http::ApiOptions::default()
            .with_admin_token(config.http.admin_token.clone())
            .with_local_token(config.http.local_token.clone());
        #[cfg(feature = "otel")]
        let options = {
            let reader = telemetry.prometheus().clone();
            options.with_metrics(crate::http::MetricsText::new(move || {
                reader.render().map_err(|e| e.to_string())
            }))
        };
        #[cfg(not(feature = "otel"))]
        let _ = telemetry;
        Ok(Self {
            bound,
            server: None,
            task: None,
            options,
        })
    }

    /// Serves the listener from now on, in the starting state (`/healthz` 200, `/readyz` and
    /// the rest 503 with `progress`), and prints the `http url=` line.
    fn serve(
        &mut self,
        progress: tokio::sync::watch::Receiver<Option<crate::manager::StartProgress>>,
        config: &Config,
    ) {
        let Some(bound) = self.bound.take() else {
            return;
        };
        let server = crate::http::ApiServer::new(self.options.clone(), progress);
        let serving = server.clone();
        self.task = Some(tokio::spawn(
            async move { serving.serve(bound.listener).await },
        ));
        self.server = Some(server);
        info!(url = %bound.local_url, admin = config.http.admin_token.is_some(), "dashboard and API listening");
        print_line(&format!("http url={}", bound.local_url));
    }

    /// The manager has started: its API answers from now on, with the `journal` that followed
    /// its start.
    fn ready(&self, manager: &Arc<RoleManager>, journal: crate::http::EventJournal) {
        if let Some(server) = &self.server {
            server.ready(crate::http::Api::with_journal(
                manager.clone(),
                self.options.clone(),
                journal,
            ));
        }
    }

    /// `/readyz` says not ready from now on.
    fn drain(&self) {
        if let Some(api) = self.server.as_ref().and_then(crate::http::ApiServer::api) {
            api.drain();
        }
    }

    /// Ends the SSE streams and waits (bounded) for the server to finish.
    async fn stop(self) {
        if let Some(server) = &self.server {
            server.stop();
        }
        if let Some(task) = self.task {
            match tokio::time::timeout(HTTP_STOP_TIMEOUT, task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => warn!(error = %e, "HTTP server failed"),
                Ok(Err(e)) => warn!(error = %e, "HTTP server task failed"),
                Err(_) => {
                    warn!("HTTP connections still open after {HTTP_STOP_TIMEOUT:?}; closing them")
                }
            }
        }
    }
}

#[cfg(not(feature = "http"))]
struct Http;

#[cfg(not(feature = "http"))]
impl Http {
    async fn bind(
        config: &mut Config,
        _args: &RunArgs,
        _telemetry: &Telemetry,
    ) -> Result<Self, Failure> {
        if config.http.enabled && config.http.listen.is_some() {
            warn!("http.listen is set but this binary was built without the `http` feature");
        }
        Ok(Self)
    }
    fn serve(
        &mut self,
        _progress: tokio::sync::watch::Receiver<Option<crate::manager::StartProgress>>,
        _config: &Config,
    ) {
    }
    fn ready(&self, _manager: &Arc<RoleManager>, _journal: ()) {}
    fn drain(&self) {}
    async fn stop(self) {}
}

/// What the start-up of `run` produced: the manager (printing its transitions from the
/// start, so the roles won while starting are printed too) and its connection.
struct Started {
    manager: Arc<RoleManager>,
    client: async_nats::Client,
    /// The dashboard's journal, recording since before the start (with timestamps).
    #[cfg(feature = "http")]
    journal: crate::http::EventJournal,
    #[cfg(not(feature = "http"))]
    journal: (),
}

async fn serve(mut config: Config, args: &RunArgs, telemetry: &Telemetry) -> Result<(), Failure> {
    // From here on a signal ends the process cleanly, also while it is still starting.
    let mut signals = super::signal::Signals::install();
    // systemd's notifications (nothing without NOTIFY_SOCKET).
    let mut notify = super::systemd::Notifier::from_env();
    let id = config
        .require_instance_id()
        .map_err(|e| Failure::Usage(e.to_string()))?
        .clone();
    let recorder = match &args.history {
        Some(path) => {
            let recorder = crate::history::HistoryRecorder::create(path, &id)
                .map_err(|e| Failure::Usage(format!("--history {}: {e}", path.display())))?;
            let roles: Vec<_> = config
                .roles
                .iter()
                .filter(|r| r.campaign)
                .flat_map(crate::config::RoleConfig::role_names)
                .collect();
            recorder.start(&roles);
            Some(recorder)
        }
        None => None,
    };
    let mut http = Http::bind(&mut config, args, telemetry).await?;
    let (progress, progress_rx) = tokio::sync::watch::channel(None);
    notify.starting(progress.subscribe());
    // Serves (and prints the URL) before connecting: probes answer while the start retries.
    http.serve(progress_rx, &config);
    for w in config.round_trip_warnings(None) {
        warn!(field = %w.field, "timing over the declared nats.round_trip: {}", w.message);
    }
    #[cfg(feature = "otel")]
    let meter = telemetry.meter();
    #[cfg(not(feature = "otel"))]
    let meter = opentelemetry::global::meter("nats-roles");
    let processes = crate::exec::supervisor::ProcessContext {
        instance: id.clone(),
        // The watchdogs append their children's runs to the same file, as this process.
        history: recorder
            .as_ref()
            .map(|r| (r.path().to_path_buf(), r.incarnation().to_owned())),
        manager: crate::exec::supervisor::ManagerSlot::default(),
        exits: None,
        prefix_output: true,
        not_inherited: &super::systemd::NOTIFY_VARIABLES,
        metrics: crate::exec::metrics::ExecMetrics::new(&meter, id.as_str(), &config.bucket.name),
        bucket: config.bucket.name.clone(),
        lock_dir: crate::exec::lock::dir(),
        one_shot: None,
    };
    // A signal while waiting for an earlier process's commands ends the process as one
    // while starting does (nothing written yet).
    let starting = async {
        super::earlier::await_earlier_children(&config, &id, processes.lock_dir.as_deref()).await;
        start(
            &config,
            &id,
            &processes,
            recorder.as_ref(),
            progress,
            telemetry,
        )
        .await
    };
    let started = tokio::select! {
        started = starting => started,
        () = signals.recv() => {
            // No key was written yet: nothing to release.
            info!("signal received while starting; exiting");
            notify.stopping(None, Duration::ZERO);
            http.stop().await;
            stop_recorder(recorder).await;
            notify.stopped(Ok(()));
            notify.finish().await;
            return Ok(());
        }
    };
    let Started {
        manager,
        client,
        journal,
    } = match started {
        Ok(started) => started,
        Err(e) => {
            notify.failed(&e.to_string());
            http.stop().await;
            stop_recorder(recorder).await;
            notify.finish().await;
            return Err(Failure::Runtime(e.to_string()));
        }
    };
    processes.manager.set(&manager);
    super::heap::spawn_trim();
    http.ready(&manager, journal);
    notify.running(&manager, &config);
    check_round_trip(&client, &config).await;
    signals.shutdown().await;
    info!("shutting down: releasing held roles");
    notify.stopping(Some(&manager), stop_bound(&config));
    http.drain();
    let result = manager.shutdown(config.shutdown.timeout).await;
    notify.stopped(result.as_ref().map_err(ToString::to_string).copied());
    // After the release, so that dashboards see the hand-over; SSE streams end here.
    http.stop().await;
    stop_recorder(recorder).await;
    notify.finish().await;
    result.map_err(|e| Failure::Runtime(e.to_string()))
}

/// Connects (retrying), builds the manager from `config` with the binary's role processes,
/// and starts it (retrying), reporting each step on `progress`. Retries until it works or
/// fails for a reason that retrying cannot change.
async fn start(
    config: &Config,
    id: &InstanceId,
    processes: &crate::exec::supervisor::ProcessContext,
    recorder: Option<&crate::history::HistoryRecorder>,
    progress: tokio::sync::watch::Sender<Option<crate::manager::StartProgress>>,
    telemetry: &Telemetry,
) -> Result<Started, crate::Error> {
    let retry = crate::StartRetry::until_started();
    let (client, errors) = crate::manager::startup::connect(
        &config.nats,
        &format!("nats-roles/{id}"),
        retry,
        &progress,
    )
    .await?;
    let mut builder = RoleManager::from_config(client.clone(), config, errors)?
        .start_retry(retry)
        .start_progress_to(progress);
    for role in &config.roles {
        if role.slots > 1 {
            if let Some(p) = crate::exec::slots::SlotCallbacks::for_role(role, processes) {
                builder.set_callbacks(&role.name, p);
            }
            continue;
        }
        if let Some(p) = crate::exec::supervisor::RoleProcesses::for_role(role, processes) {
            builder.set_callbacks(
                &role.name,
                crate::exec::supervisor::ProcessCallbacks::new(p),
            );
        }
    }
    for group in &config.groups {
        let (entry, context) = (group.clone(), processes.clone());
        builder.set_group_callbacks(group.name(), move |index| {
            match crate::exec::supervisor::RoleProcesses::for_member(&entry, index, &context) {
                Some(p) => std::sync::Arc::new(crate::exec::supervisor::ProcessCallbacks::new(p)),
                None => std::sync::Arc::new(crate::callbacks::NoCallbacks),
            }
        });
    }
    #[cfg(feature = "otel")]
    {
        builder = builder.meter(telemetry.meter());
    }
    #[cfg(not(feature = "otel"))]
    let _ = telemetry;
    if let Some(recorder) = recorder {
        builder = builder.history(recorder.clone());
    }
    // One line per transition on stdout (logs go to stderr), for people and scripts, written
    // by the task that makes the transition: a demotion's line is out before its release is
    // sent, so before any successor's `promoted` (the roles won during start-up are printed
    // too).
    builder = builder.on_event(print_event);
    // Subscribed before start: the roles won during start-up are in the dashboard's journal.
    #[cfg(feature = "http")]
    let journal = {
        let journal = crate::http::EventJournal::new();
        journal.follow(
            builder.events(),
            id.clone(),
            crate::inspect::TransitionTracker::default(),
        );
        journal
    };
    #[cfg(not(feature = "http"))]
    let journal = ();
    let manager = Arc::new(builder.start().await?);
    Ok(Started {
        manager,
        client,
        journal,
    })
}

/// Writes the history's last lines and joins its writer thread (off the async workers).
async fn stop_recorder(recorder: Option<crate::history::HistoryRecorder>) {
    if let Some(recorder) = recorder {
        let _ = tokio::task::spawn_blocking(move || recorder.stop()).await;
    }
}

/// Measures the round trip to the bucket's JetStream API (the best of three stream-info
/// requests: through leaf nodes and domains it crosses the WAN) and warns when a role's
/// timing cannot work over it (docs/operations.md, "Across sites").
async fn check_round_trip(client: &async_nats::Client, config: &Config) {
    let bucket = config.bucket_settings();
    let js = async_nats::jetstream::with_prefix(client.clone(), &bucket.jetstream_api_prefix());
    let stream = format!("KV_{}", bucket.name);
    let mut best: Option<Duration> = None;
    for _ in 0..3 {
        let t = tokio::time::Instant::now();
        if js.get_stream(&stream).await.is_ok() {
            let took = t.elapsed();
            best = Some(best.map_or(took, |b| b.min(took)));
        }
    }
    let Some(rtt) = best else {
        return;
    };
    info!(
        round_trip_ms = rtt.as_secs_f64() * 1e3,
        "round trip to the bucket"
    );
    if config
        .nats
        .round_trip
        .is_some_and(|declared| declared >= rtt)
    {
        return; // the declared round trip was checked already
    }
    for w in config.round_trip_warnings(Some(rtt)) {
        warn!(field = %w.field, round_trip_ms = rtt.as_secs_f64() * 1e3, "timing over the measured round trip: {}", w.message);
    }
}

/// One line on stdout, flushed (scripts read it as it comes).
fn print_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
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
            None if h.foreign => format!(
                "holder role={} holder=<foreign value> revision={}",
                h.role, h.revision
            ),
            None => format!("vacant role={}", h.role),
        },
        RoleEvent::DuplicateInstance { role } => format!("duplicate-instance role={role}"),
        RoleEvent::Failed { role, kind } => {
            let code = kind
                .server_code()
                .map(|c| format!(" code={}", c.0))
                .unwrap_or_default();
            format!(
                "failed role={role} error={}{code} class={} retrying",
                kind.as_str(),
                kind.class().as_str()
            )
        }
        RoleEvent::Recovered { role } => format!("recovered role={role}"),
    };
    print_line(&line);
}
