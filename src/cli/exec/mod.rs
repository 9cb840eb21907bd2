//! `nats-roles exec --role NAME -- cmd args…`: campaign for one role, run the command while
//! holding it (under a watchdog, like an `exec` role of `run`), release the role when it
//! exits and exit with its status — `etcdctl lock` / `consul lock` / `flock`, with the child
//! killed before the role can pass to another holder (docs/exec.md). `--no-wait` and
//! `--wait` give up waiting for a role another holds (`wait.rs`).

mod wait;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::info;

use super::conn::ConnArgs;
use super::outcome::{EXIT_RUNTIME, Failure};
use crate::config::{
    Config, ConfigError, ConfigProblem, ExecConfig, OnExit, RoleConfig, StopSignal, check_program,
};
use crate::exec::child::Exit;
use crate::exec::one_shot::{OneShot, Stage};
use crate::exec::supervisor::{ManagerSlot, ProcessCallbacks, ProcessContext, RoleProcesses};
use crate::{InstanceId, RoleEvent, RoleManager, RoleName};
use wait::{EXIT_NOT_ACQUIRED, Verdict, Wait};

/// The exit statuses, for `--help` and the man page (docs/exec.md has the same table).
const EXIT_STATUS_HELP: &str = "Exit status:
  N        the command's own status (it ran and exited with N)
  128+N    the command was ended by signal N (e.g. 143: SIGTERM)
  75       the role was not acquired: held by another under --no-wait, or --wait expired
           (the command never ran; --conflict-exit-code changes it)
  78       the role's --slots N disagrees with the count the bucket records for it
           (control.slots.<role>, written by the role's first instance), or that record
           is damaged; the command never ran
  126      the command cannot be run (not a file, not executable); it never ran
  127      the command was not found (not in PATH, no such file); it never ran
  1        the role was lost while the command ran (it was stopped), or a runtime failure
           (connection, bucket, permission)
  2        bad usage or configuration";

/// The exit status when the role's slot count disagrees with the bucket's slot count record
/// or that record is not valid (protocol Q15): `EX_CONFIG` of sysexits.h.
const EXIT_SLOT_COUNT: u8 = 78;

/// A failure of the manager's start: a slot count the bucket refuses exits
/// [`EXIT_SLOT_COUNT`], anything else is a runtime failure.
fn start_failure(e: crate::Error) -> Failure {
    match e {
        crate::Error::SlotCountConflict { .. } | crate::Error::SlotCountRecordInvalid { .. } => {
            Failure::Exit(EXIT_SLOT_COUNT, e.to_string())
        }
        e => Failure::Runtime(e.to_string()),
    }
}

/// Whether the watchdog's `killed` reason says the term ended under the command (its kill
/// deadline passed, or the role was lost: `loss:<reason>`), not a stop this process asked for.
fn lost_kill(killed: &str) -> bool {
    killed == "deadline" || killed.starts_with("loss:")
}

/// `nats-roles exec`.
#[derive(clap::Args, Debug)]
#[command(after_help = EXIT_STATUS_HELP)]
#[command(mut_arg("timeout", |a| a.long("request-timeout")))]
pub(crate) struct ExecArgs {
    /// The role to hold while the command runs.
    #[arg(long)]
    role: String,
    /// Wait at most this long for the role (30s, 5m, …; from the start of the campaign), then
    /// exit with the conflict exit code (75) without running the command [default: wait as
    /// long as it takes]. `--timeout` is the same (as `consul lock -timeout`); the connection
    /// and request timeout is `--request-timeout` here.
    #[arg(long, short = 'w', visible_alias = "timeout", value_name = "DURATION", value_parser = positive_duration, conflicts_with = "no_wait")]
    wait: Option<Duration>,
    /// Do not wait: if another process holds the role, exit at once with the conflict exit
    /// code (75) without running the command (a vacant role is still contended for once).
    #[arg(long, short = 'n')]
    no_wait: bool,
    /// A counted semaphore: the role has N slots (2 to 64, protocol Q15) and the command
    /// runs while this process holds any one of them, so at most N commands run at once
    /// across every `exec` (and `run`) of the role with the same slots. --no-wait gives up
    /// when every slot is held by another process [default: 1, one holder].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::config::MAX_SLOTS)))]
    slots: Option<u32>,
    /// The exit status when the role was not acquired (--no-wait, --wait).
    #[arg(long, value_name = "N", default_value_t = EXIT_NOT_ACQUIRED, value_parser = clap::value_parser!(u8).range(1..))]
    conflict_exit_code: u8,
    #[command(flatten)]
    conn: ConnArgs,
    /// This instance's id [default: instance.id of --config, NATS_ROLES_INSTANCE_ID, or
    /// exec-<host>-<pid>].
    #[arg(long)]
    instance_id: Option<String>,
    /// Create the bucket if it does not exist.
    #[arg(long)]
    auto_create: bool,
    /// The lease TTL, whole seconds (fail-over time if this process dies) [default: timing.ttl
    /// of --config, or 3s]; the heartbeat and timeouts are shortened to fit it.
    #[arg(long, value_parser = humantime::parse_duration)]
    ttl: Option<Duration>,
    /// The signal Ctrl-C, SIGTERM or a lost role sends the command first.
    #[arg(long, default_value = "SIGTERM", value_parser = StopSignal::parse)]
    stop_signal: StopSignal,
    /// How long the command may take to exit after the stop signal before its process group
    /// is killed (shorter than shutdown.drain_timeout, 5s by default).
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    stop_timeout: Duration,
    /// Record the election history (and the command's run) as JSON lines to FILE.
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// A `--wait` value: a positive duration.
fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(d) if d.is_zero() => Err("must be positive (--no-wait gives up at once)".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `nats-roles exec`; exits as [`EXIT_STATUS_HELP`] says.
pub(crate) fn run(args: ExecArgs) -> ExitCode {
    // A command that cannot start is refused before the role is contended for, as a shell
    // would refuse it (126, 127).
    if let Some(problem) = args.command.first().and_then(|p| check_program(p)) {
        eprintln!("nats-roles: cannot run the command: {}", problem.message());
        return ExitCode::from(problem.exit_code());
    }
    let config = match config(&args) {
        Ok(c) => c,
        Err(f) => return f.report(),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(super::color::stderr_ansi())
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return Failure::Runtime(format!("cannot start the runtime: {e}")).report(),
    };
    match runtime.block_on(hold_and_run(config, &args)) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(EXIT_RUNTIME)),
        Err(f) => f.report(),
    }
}

/// The configuration: `--config` (or defaults) with the flags, one role running the command.
fn config(args: &ExecArgs) -> Result<Config, Failure> {
    let mut config = args.conn.config()?;
    let role = RoleName::new(args.role.as_str())
        .map_err(|e| Failure::Usage(format!("--role {:?}: {e}", args.role)))?;
    if let Some(id) = &args.instance_id {
        config.instance.id = Some(
            InstanceId::new(id.as_str())
                .map_err(|e| Failure::Usage(format!("--instance-id {id:?}: {e}")))?,
        );
    } else if config.instance.id.is_none() {
        // For NATS_ROLES_INSTANCE_ID; `exec` exports no telemetry, so the OTEL_* variables
        // (which may be set for other programs) are not read.
        config
            .apply_env(|name| {
                if name.starts_with("OTEL_") {
                    None
                } else {
                    std::env::var(name).ok()
                }
            })
            .map_err(|e| Failure::Usage(format!("environment: {e}")))?;
    }
    if config.instance.id.is_none() {
        let id = format!("exec-{}-{}", hostname(), std::process::id());
        config.instance.id = InstanceId::new(id.as_str()).ok();
    }
    if let Some(ttl) = args.ttl {
        // The other timing values follow a shorter TTL (the file's, or the defaults, may be
        // too long for it); validation still reports a TTL that breaks a rule itself.
        let t = &mut config.timing;
        t.ttl = ttl;
        t.heartbeat = t.heartbeat.min(ttl / 4);
        t.operation_timeout = t.operation_timeout.min(ttl / 3);
        t.disconnect_grace = t.disconnect_grace.min(ttl);
        t.campaign_jitter = t.campaign_jitter.min(t.heartbeat / 2);
    }
    config.bucket.auto_create |= args.auto_create;
    // The file's entry for the role keeps its timing and priority; its processes do not run.
    let mut entry = config
        .roles
        .iter()
        .find(|r| r.name == role)
        .cloned()
        .unwrap_or_else(|| RoleConfig::new(role));
    entry.campaign = true;
    if let Some(slots) = args.slots {
        entry.slots = slots;
    }
    entry.on_promote = None;
    entry.on_demote = None;
    entry.on_prepare = None;
    entry.exec = Some(ExecConfig {
        command: args.command.clone(),
        env: Default::default(),
        stop_signal: args.stop_signal,
        stop_timeout: args.stop_timeout,
        on_exit: OnExit::Release,
        restart_backoff: Duration::from_secs(1),
    });
    config.roles = vec![entry];
    config.validate().map_err(|e| Failure::Usage(in_flags(e)))?;
    Ok(config)
}

/// A validation error in the words of `exec`'s command line: the fields of the role `exec`
/// builds are named by the flags that set them.
fn in_flags(error: ConfigError) -> String {
    let ConfigError::Invalid(problems) = error else {
        return error.to_string();
    };
    let flags = [
        ("roles[0].exec.stop_timeout", "--stop-timeout"),
        ("roles[0].exec.stop_signal", "--stop-signal"),
        ("roles[0].exec.command", "the command"),
        ("roles[0].name", "--role"),
        ("roles[0].slots", "--slots"),
    ];
    let problems = problems
        .into_iter()
        .map(
            |p| match flags.iter().find(|(f, _)| p.field.starts_with(f)) {
                Some((_, flag)) => ConfigProblem {
                    field: (*flag).to_owned(),
                    ..p
                },
                None => p,
            },
        )
        .collect();
    ConfigError::Invalid(problems).to_string()
}

/// The host's name (for the default instance id).
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes to the valid buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "host".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    let name: String = String::from_utf8_lossy(&buf[..end])
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() { "host".into() } else { name }
}

/// Why the wait for the command ended.
enum Ending {
    /// The role was not acquired (`--no-wait`, `--wait`): the command never ran.
    NotAcquired(String),
    /// The command ended while the role was held.
    Exited(Exit),
    /// Ctrl-C or SIGTERM.
    Interrupted,
    /// The role was lost while the command ran (it was stopped).
    Lost(String),
}

async fn hold_and_run(config: Config, args: &ExecArgs) -> Result<i32, Failure> {
    let runtime = |e: crate::Error| Failure::Runtime(e.to_string());
    let id = config
        .require_instance_id()
        .map_err(|e| Failure::Usage(e.to_string()))?
        .clone();
    let Some(role) = config.roles.first().cloned() else {
        return Err(Failure::Usage("no role".into()));
    };
    let (client, errors) = crate::connect(&config.nats, &format!("nats-roles-exec/{id}"))
        .await
        .map_err(runtime)?;
    let mut builder = RoleManager::from_config(client, &config, errors).map_err(runtime)?;
    let recorder = match &args.history {
        Some(path) => {
            let recorder = crate::history::HistoryRecorder::create(path, &id)
                .map_err(|e| Failure::Usage(format!("--history {}: {e}", path.display())))?;
            recorder.start(&role.role_names());
            builder = builder.history(recorder.clone());
            Some(recorder)
        }
        None => None,
    };
    let (exits_tx, mut exits) = mpsc::unbounded_channel();
    let one_shot = OneShot::default();
    let context = ProcessContext {
        instance: id.clone(),
        history: recorder
            .as_ref()
            .map(|r| (r.path().to_path_buf(), r.incarnation().to_owned())),
        manager: ManagerSlot::default(),
        exits: Some(exits_tx),
        prefix_output: false,
        // A unit whose `ExecStart` is `nats-roles exec -- CMD` notifies through CMD itself.
        not_inherited: &[],
        // No metrics endpoint: the global meter records nothing unless a provider is set.
        metrics: crate::exec::metrics::ExecMetrics::new(
            &opentelemetry::global::meter("nats-roles"),
            id.as_str(),
            &config.bucket.name,
        ),
        bucket: config.bucket.name.clone(),
        lock_dir: crate::exec::lock::dir(),
        one_shot: Some(one_shot.clone()),
    };
    if role.slots > 1 {
        if let Some(p) = crate::exec::slots::SlotCallbacks::for_role(&role, &context) {
            builder.set_callbacks(&role.name, p);
        }
    } else if let Some(p) = RoleProcesses::for_role(&role, &context) {
        builder.set_callbacks(&role.name, ProcessCallbacks::new(p));
    }
    let mut events = builder.events();
    let mut wait =
        Wait::new(role.name.clone(), id.clone(), args.no_wait, args.wait).with_slots(role.slots);
    let mut stage = one_shot.subscribe();
    let manager = std::sync::Arc::new(builder.start().await.map_err(start_failure)?);
    context.manager.set(&manager);
    info!(role = %role.name, instance = %id, "campaigning");
    let mut status = wait::status_of(&manager, &role.name, role.slots, &id);
    let deadline = wait.deadline();
    let signal = super::signal::wait_signal();
    tokio::pin!(signal);
    let ending = loop {
        let waiting = one_shot.stage() == Stage::Waiting;
        tokio::select! {
            exit = exits.recv() => match exit {
                // Killed for the term's end (at its deadline, or at a loss): the role was lost
                // while the command ran, whichever of the exit and the demotion comes first (a
                // stopped manager finds both waiting).
                Some(Exit::Ended { killed: Some(k), .. }) if lost_kill(&k) => {
                    break Ending::Lost(format!("killed: {k}"));
                }
                Some(exit) => break Ending::Exited(exit),
                None => break Ending::Lost("the role's processes ended".into()),
            },
            () = &mut signal => {
                // No start during the shutdown that follows.
                one_shot.give_up();
                break Ending::Interrupted;
            }
            Ok(()) = stage.changed() => {
                if let Stage::Claimed { term } = *stage.borrow_and_update()
                    && let Some(line) = wait.got(term)
                {
                    eprintln!("nats-roles: {line}");
                }
            }
            changed = async {
                match status.as_mut() {
                    Some(rx) => rx.changed().await,
                    None => std::future::pending().await,
                }
            }, if waiting => {
                let Some(rx) = status.as_mut().filter(|_| changed.is_ok()) else {
                    status = None;
                    continue;
                };
                let current = rx.borrow_and_update().clone();
                match wait.observe(&current) {
                    (Some(line), _) => eprintln!("nats-roles: {line}"),
                    (None, Verdict::GiveUp(message)) if one_shot.give_up() => {
                        break Ending::NotAcquired(message);
                    }
                    (None, _) => {}
                }
            }
            () = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            }, if waiting => {
                if one_shot.give_up() {
                    break Ending::NotAcquired(wait.timed_out());
                }
            }
            event = events.recv() => match event {
                Ok(RoleEvent::Demoted { reason, .. })
                    if !matches!(reason, crate::DemoteReason::Released(_))
                        && one_shot.stage() != Stage::Waiting =>
                {
                    break Ending::Lost(reason.to_string());
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    break Ending::Lost("the manager stopped".into());
                }
            },
        }
    };
    // Stops the command if it still runs (a graceful stop), then releases the role.
    let shutdown = manager.shutdown(config.shutdown.timeout).await;
    if let Some(recorder) = recorder {
        let _ = tokio::task::spawn_blocking(move || recorder.stop()).await;
    }
    shutdown.map_err(runtime)?;
    match ending {
        Ending::NotAcquired(message) => {
            eprintln!("nats-roles: {message}");
            Ok(i32::from(args.conflict_exit_code))
        }
        Ending::Exited(Exit::Failed(msg)) => {
            // Checked before the campaign; it changed since (or the watchdog failed).
            match args.command.first().and_then(|p| check_program(p)) {
                Some(problem) => {
                    eprintln!("nats-roles: cannot run the command: {}", problem.message());
                    Ok(i32::from(problem.exit_code()))
                }
                None => {
                    eprintln!("nats-roles: cannot start the command: {msg}");
                    Ok(i32::from(EXIT_RUNTIME))
                }
            }
        }
        Ending::Exited(exit) => Ok(exit.code()),
        Ending::Interrupted => {
            // The command's own status when it ran (it was stopped by the shutdown).
            Ok(exits.try_recv().map_or(130, |e| e.code()))
        }
        Ending::Lost(reason) => {
            eprintln!(
                "nats-roles: lost role {} while the command ran ({reason}); the command was stopped",
                role.name
            );
            Ok(i32::from(EXIT_RUNTIME))
        }
    }
}
