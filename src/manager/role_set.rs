//! [`RoleSet`]: what adds and removes a manager's roles — their machines, drivers and sessions —
//! shared by the public API and the group task (protocol Q14: a group's count changes add and
//! remove its members while the manager runs).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::role_input::RoleInput;
use super::role_report::RoleReport;
use super::shared::{self, RoleSlot, Shared};
use super::spec::RoleSpec;
use super::status::RoleStatus;
use super::{role_driver, role_input, role_runner, session_link, session_task};
use crate::core::{Identity, RetryPolicy, RoleMachine};
use crate::error::Error;
use crate::names::RoleName;

/// The roles of one manager: adds them (each to the driver of its session class, starting the
/// class's session with its first role) and removes them.
pub(crate) struct RoleSet {
    pub(super) shared: Arc<Shared>,
    pub(super) cancel: CancellationToken,
    pub(super) retry: RetryPolicy,
    pub(super) priority: i32,
    pub(super) meta: BTreeMap<String, String>,
    pub(super) validation_interval: Option<Duration>,
    pub(super) seed: Mutex<u64>,
    /// One driver per session class running its roles (`None`: the observers'), started with
    /// the class's first role.
    pub(super) drivers: Mutex<HashMap<Option<u64>, role_driver::DriverHandle>>,
    /// The id of the next role added (ids are never reused).
    pub(super) next_role: std::sync::atomic::AtomicU64,
}

impl RoleSet {
    /// Adds a role ([`RoleManager::add_role`](super::RoleManager::add_role)).
    ///
    /// # Errors
    /// [`Error::InvalidTiming`] if the role's timing breaks a rule of [`Timing::validate`](crate::core::Timing::validate);
    /// [`Error::BucketMaxAge`] if the bucket has a `max_age` (and this instance campaigns for
    /// the role: protocol v2 role keys are written once per term); [`Error::RoleExists`] if the role is already
    /// managed; [`Error::RoleStopping`] while its [`RoleManager::remove_role`](super::RoleManager::remove_role) has not
    /// finished; [`Error::Stopped`] after shutdown.
    pub(crate) fn add_role(&self, spec: RoleSpec) -> Result<(), Error> {
        if self.cancel.is_cancelled() {
            return Err(Error::Stopped);
        }
        spec.validate()?;
        // In every TTL mode the server removes an entry `max_age` after it was written,
        // whatever its per-key TTL; a version 2 role key is written once per term, so any
        // `max_age` would expire a held role's key while its holder still acts (Q1). An
        // observer writes nothing and is not refused.
        let store = &self.shared.store;
        let max_age = store.max_age();
        if spec.campaign && !max_age.is_zero() {
            return Err(Error::BucketMaxAge {
                bucket: store.bucket().to_string(),
                max_age,
                role: spec.name,
            });
        }
        let mut roles = self.shared.managed.roles();
        if roles.contains_key(&spec.name) {
            return Err(Error::RoleExists(spec.name));
        }
        // Two runners of one role name on one session would act on each other's terms (the
        // stopping one hands over through the session what it takes for a value nobody acts on,
        // and the session clock follows terms by role name).
        if self.shared.managed.stopping().contains(&spec.name) {
            return Err(Error::RoleStopping(spec.name));
        }
        let seed = {
            let mut s = self
                .seed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            *s
        };
        let prepares = spec.callbacks.prepares();
        let identity = Identity {
            instance: self.shared.instance.clone(),
            incarnation: self.shared.incarnation,
            priority: spec.priority.unwrap_or(self.priority),
            meta: self.meta.clone(),
        };
        let mut machine = RoleMachine::new(
            identity,
            spec.timing,
            self.retry,
            spec.campaign,
            // Under the roles lock: the epoch of the bucket as it is now (P1), never the one
            // read at start-up if the bucket was recreated since.
            self.shared.bucket.epoch(),
            seed,
        );
        // P6: every revision this manager saw in the bucket (any key) is below any write the
        // new role makes there, so an acquire acknowledged at or below it was stored in a
        // recreated bucket this manager has not noticed yet: never promoted, epoch checked.
        machine.seed_high_water(self.shared.bucket.high_water());
        // A slot campaigns only with its role's permit, which its driver gives (Q15).
        machine.set_acquire_permit(spec.name.slot().is_none());
        let (status_tx, status_rx) = watch::channel(RoleStatus::new(
            spec.name.clone(),
            spec.campaign,
            self.shared.store.ttl_mode(),
        ));
        let (current_tx, current) = watch::channel(None);
        self.shared
            .reports
            .book()
            .note_timing(spec.timing.ttl, spec.timing.heartbeat);
        let (session, clock) = match spec.campaign.then(|| self.session_for(&spec.timing, seed)) {
            Some((view, clock)) => (Some(view), Some(clock)),
            None => (None, None),
        };
        let session_class = spec
            .campaign
            .then(|| u64::try_from(spec.timing.ttl.as_millis()).unwrap_or(u64::MAX));
        // Protocol Q6: no acquire before the bucket is a TTL + heartbeat old.
        let now = tokio::time::Instant::now();
        machine.handle_bucket_age(
            Some(self.shared.bucket.age(now)),
            self.shared.bucket.old_ttl(),
            now,
        );
        let id = self
            .next_role
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let setup = role_runner::RoleSetup {
            id,
            role: spec.name.clone(),
            machine,
            shared: self.shared.clone(),
            report: RoleReport::new(spec.name.clone(), self.shared.clone(), status_tx),
            callbacks: spec.callbacks,
            current: current_tx,
            operation_timeout: spec.timing.operation_timeout,
            validation_interval: self.validation_interval,
            clock: clock.clone(),
            session_class,
            done: done_tx,
        };
        let inbox = {
            let mut drivers = self
                .drivers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let driver = drivers.entry(session_class).or_insert_with(|| {
                let shared = self.shared.clone();
                let on_panic = Box::new(move || {
                    if let Some(class) = session_class {
                        shared.abandon_session(class);
                    }
                });
                role_driver::DriverHandle::spawn(
                    session,
                    clock.as_ref(),
                    self.cancel.clone(),
                    on_panic,
                )
            });
            // Added before the slot is published (under the `roles` lock): every input sent
            // to the role reaches the driver after the role.
            if !driver.add(setup) {
                return Err(Error::Stopped);
            }
            driver.inbox(id)
        };
        roles.insert(
            spec.name.clone(),
            RoleSlot {
                inbox: inbox.clone(),
                class: session_class,
                status: status_rx,
                current,
                task: role_input::RoleDone::new(done, inbox),
            },
        );
        drop(roles);
        if let Some(p) = &self.shared.placement {
            let priority = spec.priority.unwrap_or(self.priority);
            p.add_role(
                spec.name,
                priority,
                spec.takeover,
                spec.campaign,
                spec.cost,
                prepares,
            );
        }
        Ok(())
    }

    /// With placement, an instance is a member, and a member is live while its session is
    /// (protocol Q9): an instance that campaigns for no role starts a session of the member TTL
    /// class all the same (one renewal per heartbeat, what its heartbeated record cost before).
    pub(crate) fn ensure_member_session(&self, member_ttl: Duration) {
        if !self.shared.managed.sessions().is_empty() {
            return;
        }
        let timing = crate::core::Timing {
            ttl: member_ttl,
            heartbeat: member_ttl / 4,
            ..crate::core::Timing::default()
        };
        let seed = {
            let mut s = self
                .seed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *s = s.wrapping_add(1);
            *s
        };
        let _ = self.session_for(&timing, seed);
    }

    /// The view of this instance's session for roles of `timing`'s TTL class, starting the
    /// session (its task) with the first such role (protocol Q1: one session per TTL).
    fn session_for(
        &self,
        timing: &crate::core::Timing,
        seed: u64,
    ) -> (
        watch::Receiver<session_link::SessionView>,
        Arc<session_link::SessionClock>,
    ) {
        let ttl_ms = u64::try_from(timing.ttl.as_millis()).unwrap_or(u64::MAX);
        let mut sessions = self.shared.managed.sessions();
        if let Some(class) = sessions.get(&ttl_ms) {
            return (class.view.clone(), class.clock.clone());
        }
        let clock = Arc::new(session_link::SessionClock::new(timing.local_lease()));
        let key = crate::value::session_key(&self.shared.instance, ttl_ms);
        let machine = crate::core::SessionMachine::new(
            self.shared.instance.clone(),
            self.shared.incarnation,
            *timing,
            self.retry,
            seed ^ 0x5E55_1011,
        );
        let (inbox_tx, inbox_rx) = mpsc::unbounded_channel();
        let (view_tx, view_rx) = watch::channel(session_link::SessionView::default());
        let task = session_task::SessionTask {
            machine,
            key,
            ttl: timing.ttl,
            shared: self.shared.clone(),
            inbox: inbox_rx,
            view: view_tx,
            clock: clock.clone(),
            input_at: tokio::time::Instant::now(),
            start_timeout: timing.ttl,
            start_epoch: self.shared.bucket.epoch(),
            unannounced: None,
        };
        let handle = tokio::spawn(task.run());
        sessions.insert(
            ttl_ms,
            shared::SessionClass {
                inbox: inbox_tx,
                view: view_rx.clone(),
                clock: clock.clone(),
                task: handle,
            },
        );
        drop(sessions);
        self.shared.managed.class_added();
        (view_rx, clock)
    }

    /// Stops taking part in a role: releases it gracefully if held and waits until the demote
    /// callback returned.
    ///
    /// # Errors
    /// [`Error::UnknownRole`] if the role is not managed.
    pub(crate) async fn remove_role(&self, role: &RoleName) -> Result<(), Error> {
        let slot = {
            let mut roles = self.shared.managed.roles();
            let slot = roles
                .remove(role)
                .ok_or_else(|| Error::UnknownRole(role.clone()))?;
            // Under the `roles` lock: the watcher always finds the role in one set or the other.
            self.shared.managed.stopping().insert(role.clone());
            slot
        };
        if let Some(p) = &self.shared.placement {
            p.remove_role(role);
        }
        let _ = slot.inbox.send(RoleInput::Stop);
        // On a task of its own: a caller that stops waiting (a timeout dropping this future)
        // does not leave the name refused by `add_role` for good.
        let shared = self.shared.clone();
        let name = role.clone();
        let finished = tokio::spawn(async move {
            let _ = slot.task.await;
            shared.managed.stopping().remove(&name);
            shared.reports.vacancies.forget(&name);
        });
        let _ = finished.await;
        Ok(())
    }
}
