//! systemd's notification protocol for `nats-roles run` (`Type=notify`; docs/deploy.md):
//! `STATUS=` while it starts and whenever its one-line summary changes, `READY=1` once it is
//! ready, `WATCHDOG=1` while the manager answers its liveness probes, `STOPPING=1` and
//! `EXTEND_TIMEOUT_USEC=` while a shutdown still hands roles over. Nothing at all — no task, no
//! probe, no datagram — without `NOTIFY_SOCKET`. The datagrams are sent by the `sd-notify`
//! crate, in order, from one task.

mod link;
mod status_line;
mod watchdog;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::config::Config;
use crate::manager::StartProgress;
use crate::names::RoleName;
use crate::status::RoleState;
use crate::{RoleHandle, RoleManager};
use link::{Link, State};
use status_line::{RoleLine, Snapshot};

/// How often the summary is recomputed besides every transition (for what has no event: the
/// connection, the freeze, draining, health).
const STATUS_POLL: Duration = Duration::from_millis(500);

/// While a shutdown hands roles over: how often `EXTEND_TIMEOUT_USEC` is sent, and by how much
/// each one extends systemd's stop timeout from the moment it arrives.
const EXTEND_EVERY: Duration = Duration::from_secs(1);
const EXTEND_BY: Duration = Duration::from_secs(5);

/// How long the last datagrams may take to go out when `run` exits (within the second
/// `run`'s stop bound allows for it).
const FLUSH_TIMEOUT: Duration = Duration::from_millis(500);

/// The environment variables of the protocol, which `run`'s child processes (`exec` roles,
/// hooks, the health command) do not inherit: they are this process's, not theirs.
pub(crate) const NOTIFY_VARIABLES: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// The notifications of one `run` ([`Notifier::from_env`]); every method does nothing when
/// `NOTIFY_SOCKET` is not set.
pub(crate) struct Notifier {
    /// `None` without `NOTIFY_SOCKET`.
    link: Option<Link>,
    /// The sending task.
    sender: Option<JoinHandle<()>>,
    /// The period of `WATCHDOG=1` (half of `WATCHDOG_USEC`), when systemd watches this process
    /// (`WATCHDOG_PID` unset or this process).
    watchdog: Option<Duration>,
    /// The tasks of the current phase (starting, running, stopping).
    phase: Vec<JoinHandle<()>>,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`; without `NOTIFY_SOCKET` (or
    /// with an empty one) the notifier is off and never sends anything.
    pub(crate) fn from_env() -> Self {
        let socket = std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty());
        let Some(socket) = socket else {
            return Self {
                link: None,
                sender: None,
                watchdog: None,
                phase: Vec::new(),
            };
        };
        let watchdog_usec = sd_notify::watchdog_enabled().filter(|d| !d.is_zero());
        let watchdog = watchdog_usec.map(|d| d / 2);
        info!(
            socket = %socket.to_string_lossy(),
            watchdog_ms = watchdog.map(|p| p.as_millis()),
            "systemd notifications on: READY, STATUS, STOPPING{}",
            if watchdog.is_some() { ", WATCHDOG" } else { "" }
        );
        if let Some(usec) = watchdog_usec.filter(|d| *d < 2 * watchdog::SLOWEST_ANSWER) {
            warn!(
                watchdog_sec = usec.as_secs_f64(),
                "WatchdogSec is short: a busy manager task may take up to {:?} to answer its \
                 liveness probe; use WatchdogSec of at least {:?} (docs/deploy.md)",
                watchdog::SLOWEST_ANSWER,
                2 * watchdog::SLOWEST_ANSWER
            );
        }
        let (link, sender) = Link::open();
        Self {
            link: Some(link),
            sender: Some(sender),
            watchdog,
            phase: Vec::new(),
        }
    }

    fn end_phase(&mut self) {
        for task in self.phase.drain(..) {
            task.abort();
        }
    }

    /// The start-up: `STATUS=starting: …` with each step and each failed attempt
    /// (`starting: cannot connect to NATS: … (attempt 3), retrying in 400ms`).
    pub(crate) fn starting(&mut self, mut progress: watch::Receiver<Option<StartProgress>>) {
        let Some(link) = self.link.clone() else {
            return;
        };
        self.end_phase();
        self.phase.push(tokio::spawn(async move {
            let mut first = true;
            loop {
                let now = progress.borrow_and_update().clone();
                match now {
                    Some(p) => link.status(&format!("starting: {p}")),
                    // Before the first step; afterwards `None` means the start-up is done.
                    None if first => link.status("starting"),
                    None => {}
                }
                first = false;
                if progress.changed().await.is_err() {
                    return;
                }
            }
        }));
    }

    /// The manager has started: `READY=1` once it is ready (see [`Snapshot::ready`]), the
    /// summary whenever it changes, and the watchdog's pings.
    pub(crate) fn running(&mut self, manager: &Arc<RoleManager>, config: &Config) {
        let Some(link) = self.link.clone() else {
            return;
        };
        self.end_phase();
        // The roles, and the members of the groups at the counts the manager started on.
        let members = |campaign: Option<bool>| -> Vec<RoleName> {
            config
                .groups
                .iter()
                .filter(|g| campaign.is_none_or(|c| g.role.campaign == c))
                .flat_map(|g| {
                    let count = manager
                        .group(g.name())
                        .map_or(g.count, |h| h.current().count);
                    (0..count).filter_map(|i| crate::groups::member_name(g.name(), i).ok())
                })
                .collect()
        };
        // A role with slots takes part as its slots (`<role>.<k>`, protocol Q15).
        let configured: BTreeSet<RoleName> = config
            .roles
            .iter()
            .flat_map(crate::config::RoleConfig::role_names)
            .chain(members(None))
            .collect();
        let observers: BTreeSet<RoleName> = config
            .roles
            .iter()
            .filter(|r| !r.campaign)
            .flat_map(crate::config::RoleConfig::role_names)
            .chain(members(Some(false)))
            .collect();
        self.phase.push(tokio::spawn(follow(
            manager.clone(),
            configured,
            observers,
            link.clone(),
        )));
        if let Some(period) = self.watchdog {
            self.phase
                .push(tokio::spawn(watchdog::run(manager.clone(), period, link)));
        }
    }

    /// A signal: `STOPPING=1` at once, then, while roles are still held or being released,
    /// `EXTEND_TIMEOUT_USEC` every second (never past `bound` from now, the longest `run` can
    /// take to exit) and the summary (`stopping: handing over 2 roles`).
    pub(crate) fn stopping(&mut self, manager: Option<&RoleManager>, bound: Duration) {
        let Some(link) = self.link.clone() else {
            return;
        };
        self.end_phase();
        let handles: Vec<RoleHandle> = manager
            .map(|m| m.roles().iter().filter_map(|r| m.role(r)).collect())
            .unwrap_or_default();
        let until = Instant::now() + bound;
        let releasing = count_releasing(&handles);
        link.status_with(vec![State::Stopping], &stopping_line(releasing));
        if releasing == 0 {
            return;
        }
        self.phase.push(tokio::spawn(async move {
            loop {
                let releasing = count_releasing(&handles);
                let left = until.saturating_duration_since(Instant::now());
                if releasing == 0 || left.is_zero() {
                    link.status(&stopping_line(releasing));
                    return;
                }
                link.status_with(
                    vec![State::ExtendTimeout(EXTEND_BY.min(left))],
                    &stopping_line(releasing),
                );
                tokio::time::sleep(EXTEND_EVERY).await;
            }
        }));
    }

    /// The end: `STATUS=` says how it went (`stopped: every role released`, or the error).
    pub(crate) fn stopped(&mut self, outcome: Result<(), String>) {
        let Some(link) = self.link.clone() else {
            return;
        };
        self.end_phase();
        match outcome {
            Ok(()) => link.status("stopped: every role released"),
            Err(e) => link.status(&format!("stopped: {e}")),
        }
    }

    /// `run` fails: `STATUS=failed: …` (systemd logs the exit status itself).
    pub(crate) fn failed(&mut self, message: &str) {
        let Some(link) = self.link.clone() else {
            return;
        };
        self.end_phase();
        link.status(&format!("failed: {message}"));
    }

    /// Sends what is still queued (bounded) and stops.
    pub(crate) async fn finish(mut self) {
        self.end_phase();
        drop(self.link.take());
        if let Some(sender) = self.sender.take() {
            let _ = tokio::time::timeout(FLUSH_TIMEOUT, sender).await;
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.end_phase();
    }
}

/// `stopping: handing over 2 roles` / `stopping: every role released`.
fn stopping_line(releasing: usize) -> String {
    match releasing {
        0 => "stopping: every role released".to_owned(),
        1 => "stopping: handing over 1 role".to_owned(),
        n => format!("stopping: handing over {n} roles"),
    }
}

/// Roles this instance still holds or is releasing (its `exec` children stopping, the lease
/// delete in flight).
fn count_releasing(handles: &[RoleHandle]) -> usize {
    handles
        .iter()
        .filter(|h| matches!(h.status().state, RoleState::Leader | RoleState::Demoted))
        .count()
}

/// Keeps systemd's `STATUS=` up to date and sends `READY=1` once.
async fn follow(
    manager: Arc<RoleManager>,
    configured: BTreeSet<RoleName>,
    observers: BTreeSet<RoleName>,
    link: Link,
) {
    let mut events = manager.events();
    let mut events_open = true;
    let mut ready = false;
    // The watcher's first replay has no event of its own: wake for it.
    let caught_up = manager.caught_up();
    let mut caught_up = std::pin::pin!(caught_up);
    let mut replayed = false;
    loop {
        let snapshot = snapshot(&manager, &observers);
        let line = snapshot.line();
        if !ready && snapshot.ready(&configured) {
            ready = true;
            info!(status = %line, "ready: READY=1 sent to systemd");
            link.status_with(vec![State::Ready], &line);
        } else {
            link.status(&line);
        }
        tokio::select! {
            event = events.recv(), if events_open => {
                if matches!(event, Err(broadcast::error::RecvError::Closed)) {
                    events_open = false;
                }
            }
            () = &mut caught_up, if !replayed => replayed = true,
            () = tokio::time::sleep(STATUS_POLL) => {}
        }
    }
}

/// The manager's state now.
fn snapshot(manager: &RoleManager, observers: &BTreeSet<RoleName>) -> Snapshot {
    let roles = manager
        .statuses()
        .into_iter()
        .map(|s| RoleLine {
            campaign: !observers.contains(&s.role),
            state: s.state,
            error: s.last_error,
            duplicate: s.duplicate_instance,
            role: s.role,
        })
        .collect();
    Snapshot {
        roles,
        connected: manager.is_connected(),
        caught_up: manager.is_caught_up(),
        frozen: manager.frozen(),
        draining: manager.is_draining(),
        unhealthy: manager.health().is_some_and(|h| !h.healthy),
    }
}
