//! [`RoleProcesses`]: the callbacks of a role declared with `exec` or hooks in the binary's
//! configuration. On promotion: the `on_promote` hook, then the `exec` child (under its
//! watchdog, whose deadline follows every renewal); on demotion: the child is stopped and gone
//! before `on_demote` returns (so before a graceful release deletes the lease), then the
//! `on_demote` hook. The callbacks of a role run one at a time, in order (protocol P9), so the
//! hooks and children of consecutive terms never overlap.
//!
//! The child's supervisor reacts to the end of the term itself, not to the queued `on_demote`
//! (docs/protocol.md Q12): a **loss** ([`DemoteReason::is_loss`]: a successor may already be
//! promoted) `SIGKILL`s the group at once; any other end stops it gracefully (stop signal,
//! `SIGKILL` after `stop_timeout`, and always at the watchdog's deadline). A child is started
//! only under the term's start gate, which the demotion takes before it is recorded.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::child::{ChildSpec, Exit, HistoryTarget, Watched};
use crate::RoleManager;
use crate::callbacks::{BoxFuture, Demotion, PrepareError, PrepareFuture, RoleCallbacks};
use crate::config::{ExecConfig, HookConfig, OnExit, RoleConfig};
use crate::core::DemoteReason;
use crate::leadership::Leadership;
use crate::names::{InstanceId, RoleName};

/// Longest delay between restarts of a failing child (unless `restart_backoff` is longer).
const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(30);
/// A run at least this long resets the restart backoff.
const STABLE_RUN: Duration = Duration::from_secs(10);
/// Cooldown after a child could not be started (the role is released).
const START_FAILURE_COOLDOWN: Duration = Duration::from_secs(30);

/// The manager, once started: a child that exits asks it to release the role.
#[derive(Debug, Clone, Default)]
pub(crate) struct ManagerSlot(Arc<OnceLock<Weak<RoleManager>>>);

impl ManagerSlot {
    /// The manager is running.
    pub(crate) fn set(&self, manager: &Arc<RoleManager>) {
        let _ = self.0.set(Arc::downgrade(manager));
    }

    fn release(&self, role: &RoleName, cooldown: Duration) {
        match self.0.get().and_then(Weak::upgrade) {
            Some(m) => {
                if let Err(e) = m.release(role, cooldown) {
                    warn!(%role, error = %e, "cannot release the role");
                }
            }
            None => warn!(%role, "the manager is not running; cannot release the role"),
        }
    }
}

/// What is common to every process of this instance's roles.
#[derive(Debug, Clone)]
pub(crate) struct ProcessContext {
    /// This instance.
    pub(crate) instance: InstanceId,
    /// The election history the watchdogs append child runs to (`run --history`), with the
    /// recorder's incarnation (`inc` of the records).
    pub(crate) history: Option<(PathBuf, String)>,
    /// The manager (for releases).
    pub(crate) manager: ManagerSlot,
    /// Told how each `exec` child ended (`nats-roles exec` exits with its status).
    pub(crate) exits: Option<tokio::sync::mpsc::UnboundedSender<Exit>>,
    /// Whether children's output lines get the `[role]` prefix (not for `nats-roles exec`,
    /// whose output is the command's).
    pub(crate) prefix_output: bool,
    /// Environment variables of the manager its children do not inherit (`run`: systemd's
    /// `NOTIFY_SOCKET`, `WATCHDOG_USEC`, `WATCHDOG_PID`, which are its own).
    pub(crate) not_inherited: &'static [&'static str],
    /// Where runs are counted.
    pub(crate) metrics: super::metrics::ExecMetrics,
    /// The bucket (part of the role locks' names).
    pub(crate) bucket: String,
    /// The directory of the role locks (`super::lock::dir`); `None`: children start without
    /// one.
    pub(crate) lock_dir: Option<PathBuf>,
    /// `nats-roles exec`: its command starts only if `exec` has not given up waiting, and its
    /// end (or a failed start) is `exec`'s to act on — `exec` stops the manager, which
    /// releases the role; the supervisor then neither releases the role nor logs the end as
    /// a problem. `None` under `run`.
    pub(crate) one_shot: Option<super::one_shot::OneShot>,
}

impl ProcessContext {
    fn ended(&self, exit: &Exit) {
        if let Some(tx) = &self.exits {
            let _ = tx.send(exit.clone());
        }
    }
}

/// The callbacks of one role with `exec` and/or hooks.
pub(crate) struct RoleProcesses {
    role: RoleName,
    /// The group and index, for a member of a role group (protocol Q14).
    member: Option<(RoleName, u32)>,
    exec: Option<ExecConfig>,
    on_promote: Option<HookConfig>,
    on_demote: Option<HookConfig>,
    on_prepare: Option<HookConfig>,
    context: ProcessContext,
    /// The current term's child supervisor.
    running: Mutex<Option<Running>>,
}

struct Running {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl RoleProcesses {
    /// The callbacks for `role`, or `None` when it declares no process.
    pub(crate) fn for_role(role: &RoleConfig, context: &ProcessContext) -> Option<Self> {
        if role.exec.is_none()
            && role.on_promote.is_none()
            && role.on_demote.is_none()
            && role.on_prepare.is_none()
        {
            return None;
        }
        if role.exec.is_some() {
            context.metrics.declare(role.name.as_str());
        }
        Some(Self {
            role: role.name.clone(),
            member: None,
            exec: role.exec.clone(),
            on_promote: role.on_promote.clone(),
            on_demote: role.on_demote.clone(),
            on_prepare: role.on_prepare.clone(),
            context: context.clone(),
            running: Mutex::new(None),
        })
    }

    /// The callbacks of member `index` of the group `group` (its settings under the member's
    /// name), or `None` when the group declares no process. Its processes also get
    /// `NATS_ROLES_GROUP` and `NATS_ROLES_GROUP_INDEX`.
    pub(crate) fn for_member(
        group: &crate::config::GroupConfig,
        index: u32,
        context: &ProcessContext,
    ) -> Option<Self> {
        let role = group.member(index).ok()?;
        let mut processes = Self::for_role(&role, context)?;
        processes.member = Some((group.name().clone(), index));
        Some(processes)
    }

    /// `NATS_ROLES_GROUP` and `NATS_ROLES_GROUP_INDEX` of a group's member.
    fn member_env(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.member.iter().flat_map(|(group, index)| {
            [
                ("NATS_ROLES_GROUP".to_owned(), group.to_string()),
                ("NATS_ROLES_GROUP_INDEX".to_owned(), index.to_string()),
            ]
        })
    }

    /// The callbacks for slot `k` of `role` (a role with `slots`, protocol Q15), or `None`
    /// when it declares no process: its children, hooks, labels, history records and lock
    /// are the slot's (`<role>.<k>`); their environment names the role and the slot.
    pub(crate) fn for_slot(role: &RoleConfig, k: u32, context: &ProcessContext) -> Option<Self> {
        let slot = RoleName::for_slot(&role.name, k).ok()?;
        Self::for_role(
            &RoleConfig {
                name: slot,
                ..role.clone()
            },
            context,
        )
    }

    /// `NATS_ROLES_ROLE` (the base role of a slot) and, for a slot, `NATS_ROLES_SLOT`.
    fn role_vars(&self) -> Vec<(String, String)> {
        let mut vars = vec![("NATS_ROLES_ROLE".into(), self.role.base_role().to_string())];
        if let Some(k) = self.role.slot() {
            vars.push(("NATS_ROLES_SLOT".into(), k.to_string()));
        }
        vars
    }

    /// The environment of a term's processes.
    fn term_env(&self, l: &Leadership) -> Vec<(String, String)> {
        let left = l.deadline().saturating_duration_since(Instant::now());
        let deadline_ms = std::time::SystemTime::now()
            .checked_add(left)
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis());
        let mut env = self.role_vars();
        env.extend([
            (
                "NATS_ROLES_INSTANCE".into(),
                self.context.instance.to_string(),
            ),
            ("NATS_ROLES_TERM".into(), l.term().to_string()),
            ("NATS_ROLES_TOKEN".into(), l.token().expose()),
            ("NATS_ROLES_DEADLINE_MS".into(), deadline_ms.to_string()),
        ]);
        env.extend(self.member_env());
        env
    }

    fn role_env(&self) -> Vec<(String, String)> {
        let mut env = self.role_vars();
        env.push((
            "NATS_ROLES_INSTANCE".into(),
            self.context.instance.to_string(),
        ));
        env.extend(self.member_env());
        env
    }

    /// Runs a hook to its end (at most its timeout, and `deadline` when given).
    /// Runs one hook under a watchdog; returns how it ended unless it exited 0 (logged as
    /// `hook failed`).
    async fn run_hook(
        &self,
        event: &str,
        hook: &HookConfig,
        mut env: Vec<(String, String)>,
        deadline: Option<Instant>,
    ) -> Result<(), Exit> {
        env.push(("NATS_ROLES_EVENT".into(), event.into()));
        let limit = Instant::now() + hook.timeout;
        let deadline = Some(deadline.map_or(limit, |d| d.min(limit + super::child::KILL_LEAD)));
        let spec = ChildSpec {
            argv: hook.command.clone(),
            env,
            stop_signal: libc::SIGTERM,
            stop_timeout: Duration::ZERO,
            label: format!("[{} on_{event}]", self.role),
            history: None,
            lock: None,
            not_inherited: self.context.not_inherited,
        };
        let exit = match Watched::start(&spec, deadline).await {
            Ok(mut w) => w.wait().await,
            Err(exit) => exit,
        };
        match exit {
            Exit::Ended { code: 0, .. } => Ok(()),
            other => {
                warn!(role = %self.role, hook = event, outcome = %other, "hook failed");
                Err(other)
            }
        }
    }

    fn child_spec(&self, exec: &ExecConfig, l: &Leadership) -> ChildSpec {
        let mut env: Vec<(String, String)> = exec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        env.extend(self.term_env(l));
        let token = l.token();
        ChildSpec {
            argv: exec.command.clone(),
            env,
            not_inherited: self.context.not_inherited,
            stop_signal: exec.stop_signal.number(),
            stop_timeout: exec.stop_timeout,
            label: if self.context.prefix_output {
                format!("[{}]", self.role)
            } else {
                String::new()
            },
            history: self
                .context
                .history
                .as_ref()
                .map(|(path, inc)| HistoryTarget {
                    path: path.clone(),
                    node: self.context.instance.to_string(),
                    role: self.role.to_string(),
                    epoch: token.epoch(),
                    term: token.term(),
                    inc: Some(inc.clone()),
                }),
            lock: self.context.lock_dir.as_ref().map(|dir| {
                super::lock::path(
                    dir,
                    &self.context.bucket,
                    self.context.instance.as_str(),
                    self.role.as_str(),
                )
            }),
        }
    }
}

/// Supervises the child of one term until `stop` or the end of the term: starts it, moves its
/// deadline with every renewal, applies `on_exit`; at the end of the term kills it at once
/// (a loss) or stops it gracefully (anything else).
async fn supervise(
    p: Arc<RoleProcesses>,
    exec: ExecConfig,
    l: Leadership,
    stop: CancellationToken,
) {
    let role = &p.role;
    let mut backoff = exec.restart_backoff;
    let term_ended = l.cancellation_token();
    loop {
        let spec = p.child_spec(&exec, &l);
        let started = Instant::now();
        // The start gate: the demotion waits for a start in progress, and a start that had not
        // begun sees the term ended (Q12: no child starts after its term's demotion).
        let gate = l.inner.start_gate.lock().await;
        if stop.is_cancelled() || !l.is_valid() {
            return;
        }
        if let Some(one_shot) = &p.context.one_shot
            && !one_shot.claim(l.term())
        {
            info!(%role, term = l.term(), "not starting the command: exec gave up waiting");
            return;
        }
        let start = Watched::start(&spec, Some(l.deadline())).await;
        drop(gate);
        let mut child = match start {
            Ok(c) => c,
            Err(exit) if stop.is_cancelled() || !l.is_valid() || past_kill_deadline(&l) => {
                info!(%role, outcome = %exit, "the term ended before the role's command could start");
                return;
            }
            Err(exit) => {
                p.context.metrics.ended(role.as_str(), &exit, false);
                if p.context.one_shot.is_some() {
                    // `exec` reports it (in words of its command line) and stops the manager.
                    info!(%role, error = %exit, "cannot start the command");
                    p.context.ended(&exit);
                    return;
                }
                error!(%role, error = %exit, "cannot start the role's command; releasing the role");
                p.context.ended(&exit);
                p.context.manager.release(role, START_FAILURE_COOLDOWN);
                return;
            }
        };
        info!(%role, term = l.term(), pid = child.pid().unwrap_or(0), "role command started");
        p.context.metrics.started(role.as_str());
        let exit = loop {
            let changed = l.inner.live_changed.notified();
            child.set_deadline(l.deadline()).await;
            tokio::select! {
                exit = child.wait() => break exit,
                // The end of the term (or `on_demote`, which follows it): both ways by the
                // reason the term ended with.
                () = term_ended.cancelled() => {}
                () = stop.cancelled() => {}
                () = changed => continue,
            }
            let exit = end_with_term(&p, &mut child, &l, l.end_reason()).await;
            p.context.metrics.ended(role.as_str(), &exit, true);
            p.context.ended(&exit);
            return;
        };
        p.context.metrics.ended(role.as_str(), &exit, true);
        p.context.ended(&exit);
        if stop.is_cancelled() || !l.is_valid() {
            info!(%role, outcome = %exit, "role command ended with the term");
            return;
        }
        if p.context.one_shot.is_some() {
            // The normal end of `nats-roles exec`: it stops the manager, which releases the
            // role (a release here too would race that stop).
            info!(%role, outcome = %exit, "the command exited");
            return;
        }
        match exec.on_exit {
            OnExit::Restart => {
                if started.elapsed() >= STABLE_RUN {
                    backoff = exec.restart_backoff;
                }
                warn!(%role, outcome = %exit, restart_in = ?backoff, "role command exited; restarting it");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = stop.cancelled() => return,
                    () = l.cancelled() => return,
                }
                backoff = (backoff * 2).min(MAX_RESTART_BACKOFF.max(exec.restart_backoff));
                p.context.metrics.restarted(role.as_str());
            }
            OnExit::Release => {
                warn!(%role, outcome = %exit, "role command exited; releasing the role");
                p.context.manager.release(role, exec.restart_backoff);
                return;
            }
        }
    }
}

/// Whether the watchdog's kill deadline of the term has passed (it refuses to start a child
/// then).
fn past_kill_deadline(l: &Leadership) -> bool {
    Instant::now() + super::child::KILL_LEAD >= l.deadline()
}

/// The term ended while the child runs: a loss `SIGKILL`s its group at once (a successor may
/// already be promoted: `killed` is `loss:<reason>`), any other end stops it gracefully.
/// Returns when the group is gone.
async fn end_with_term(
    p: &RoleProcesses,
    child: &mut Watched,
    term: &Leadership,
    reason: Option<DemoteReason>,
) -> Exit {
    let role = &p.role;
    match reason {
        Some(r) if r.is_loss() => {
            child.kill(&format!("loss:{}", r.as_str())).await;
            let exit = child.wait().await;
            warn!(%role, reason = r.as_str(), outcome = %exit, "role lost: its command was killed at once (a successor may already hold the role)");
            exit
        }
        _ => {
            child.stop().await;
            // A release drains gracefully while its session is renewed (the kill deadline
            // follows it), unless the term is lost meanwhile (its session ended, another writer
            // took the key): then a successor may be promoted, and what is left of the group is
            // killed at once (Q12).
            let lost = loop {
                let changed = term.inner.live_changed.notified();
                child.set_deadline(term.deadline()).await;
                tokio::select! {
                    exit = child.wait() => {
                        info!(%role, reason = reason.map_or("none", DemoteReason::as_str), outcome = %exit, "role command stopped");
                        return exit;
                    }
                    lost = term.inner.lost() => break lost,
                    () = changed => {}
                }
            };
            child.kill(&format!("loss:{}", lost.as_str())).await;
            let exit = child.wait().await;
            warn!(%role, reason = lost.as_str(), outcome = %exit, "role lost while its command stopped: killed at once (a successor may already hold the role)");
            exit
        }
    }
}

/// [`RoleProcesses`] as the role's callbacks (shared with the supervising tasks).
pub(crate) struct ProcessCallbacks(Arc<RoleProcesses>);

impl ProcessCallbacks {
    /// The callbacks of `procs`.
    pub(crate) fn new(procs: RoleProcesses) -> Self {
        Self(Arc::new(procs))
    }
}

impl RoleCallbacks for ProcessCallbacks {
    fn on_promote(&self, l: Leadership) -> BoxFuture<'_> {
        Box::pin(async move {
            let p = &self.0;
            if let Some(hook) = &p.on_promote {
                // A failing hook changes nothing else (docs/exec.md): logged by `run_hook`.
                let _ = p
                    .run_hook("promote", hook, p.term_env(&l), Some(l.deadline()))
                    .await;
            }
            let Some(exec) = p.exec.clone() else {
                return;
            };
            let stop = CancellationToken::new();
            let task = tokio::spawn(supervise(self.0.clone(), exec, l, stop.clone()));
            if let Ok(mut running) = p.running.lock() {
                *running = Some(Running { stop, task });
            }
        })
    }

    fn on_demote(&self, d: Demotion) -> BoxFuture<'_> {
        Box::pin(async move {
            let p = &self.0;
            let running = p.running.lock().ok().and_then(|mut r| r.take());
            if let Some(r) = running {
                r.stop.cancel();
                let _ = r.task.await;
            }
            if let Some(hook) = &p.on_demote {
                let mut env = p.term_env(&d.leadership);
                env.retain(|(k, _)| k != "NATS_ROLES_DEADLINE_MS");
                env.push(("NATS_ROLES_REASON".into(), d.reason.as_str().to_owned()));
                let _ = p.run_hook("demote", hook, env, None).await;
            }
        })
    }

    fn prepares(&self) -> bool {
        self.0.on_prepare.is_some()
    }

    /// The `on_prepare` hook: ready when it exits 0; any other end (a non-zero status, a
    /// signal, its own `timeout`, a command that cannot start) is a failed preparation.
    fn on_prepare(&self, role: RoleName) -> PrepareFuture<'_> {
        let _ = role;
        Box::pin(async move {
            let p = &self.0;
            match &p.on_prepare {
                Some(hook) => p
                    .run_hook("prepare", hook, p.role_env(), None)
                    .await
                    .map_err(|exit| PrepareError::new(format!("on_prepare hook: {exit}"))),
                None => Ok(()),
            }
        })
    }
}
