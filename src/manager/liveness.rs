//! Liveness ([`RoleManager::probe`]): every long-lived task of the manager — the bucket
//! watcher, the reaper, each session task and each role runner — answers a probe from its own
//! loop, so an answer proves that the task is alive, is polled, and is not stuck in synchronous
//! code or in a wait without a bound. `nats-roles run` sends systemd's `WATCHDOG=1` only after
//! such an answer (docs/deploy.md).

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::RoleManager;
use super::probe::Reply;
use super::role_input::RoleInput;
use super::session_link::SessionInput;
use crate::error::Error;

impl RoleManager {
    /// Liveness: asks every long-lived task of the manager — the bucket watcher, the reaper,
    /// each session task and the role driver of each session class (once per role, so that an
    /// unresponsive driver names its roles) — to answer from its own loop, and waits at most
    /// `within` for all answers. `Ok` proves that they are alive and their loops turn (they are
    /// polled, not stuck in synchronous code or in a wait without a bound); it says nothing
    /// about NATS (a manager that is disconnected answers). A demotion waiting for its work to
    /// start (the start gate of `exec` roles, up to 5 s) waits beside the driver's loop, not in
    /// it; still probe with `within` of several seconds on a loaded machine.
    ///
    /// `nats-roles run` sends systemd's `WATCHDOG=1` only after an answer (docs/deploy.md);
    /// an application can use it the same way for its own watchdog or liveness probe.
    ///
    /// # Errors
    /// [`Error::Unresponsive`] naming the tasks that did not answer in time (or whose task
    /// ended); [`Error::Stopped`] after [`RoleManager::shutdown`].
    pub async fn probe(&self, within: Duration) -> Result<(), Error> {
        if self.cancel.is_cancelled() {
            return Err(Error::Stopped);
        }
        let deadline = Instant::now() + within;
        let mut waiting: Vec<(String, oneshot::Receiver<()>)> = Vec::new();
        let mut silent: Vec<String> = Vec::new();
        let mut ask = |name: String, send: &dyn Fn(Reply) -> bool| {
            let (tx, rx) = oneshot::channel();
            if send(tx) {
                waiting.push((name, rx));
            } else {
                silent.push(format!("{name} (its task ended)"));
            }
        };
        ask("the bucket watcher".to_owned(), &|tx| {
            self.probes.watcher.send(tx).is_ok()
        });
        ask("the reaper".to_owned(), &|tx| {
            self.probes.reaper.send(tx).is_ok()
        });
        {
            let sessions = self.shared.managed.sessions();
            let mut classes: Vec<_> = sessions.iter().collect();
            classes.sort_by_key(|(class, _)| **class);
            for (class, session) in classes {
                ask(format!("the session of TTL {class} ms"), &|tx| {
                    session.inbox.send(SessionInput::Probe(tx)).is_ok()
                });
            }
        }
        {
            let roles = self.shared.managed.roles();
            let mut slots: Vec<_> = roles.iter().collect();
            slots.sort_by(|a, b| a.0.cmp(b.0));
            for (role, slot) in slots {
                ask(format!("role {role}"), &|tx| {
                    slot.inbox.send(RoleInput::Probe(tx)).is_ok()
                });
            }
        }
        for (name, rx) in waiting {
            match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => silent.push(format!("{name} (its task ended)")),
                Err(_) => silent.push(name),
            }
        }
        if silent.is_empty() {
            Ok(())
        } else {
            Err(Error::Unresponsive {
                within,
                tasks: silent,
            })
        }
    }
}
