//! The driver of every role of one session class (docs/layout.md, "One driver per session
//! class"): one task that multiplexes many [`RoleRunner`]s the way an endpoint drives its
//! connections. It owns one inbox for all of them, the I/O they started
//! ([`DriverIo`]: writes and reads, drains, start gates), one timer ([`TimerQueue`]) and the
//! session's view and renewals, and hands each event to the one role it belongs to. A role
//! costs no task, no channel and no timer of its own; a session change is one visit to each
//! role, a renewal wakes only the roles whose acquire waits for one.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::role_input::{RoleId, RoleInbox, RoleInput};
use super::role_runner::{Delivery, DriverIo, RoleRunner, RoleSetup};
use super::session_link::{SessionClock, SessionView};
use super::timer_queue::TimerQueue;
use crate::core::slot_permits::{SlotPermits, SlotView};
use crate::names::RoleName;

/// Inputs handled in one go before the driver looks at its other sources again (a mass
/// fail-over delivers one per role).
const INPUT_BATCH: usize = 256;

/// How the manager reaches a driver: it adds roles and sends them inputs.
#[derive(Debug)]
pub(crate) struct DriverHandle {
    adds: mpsc::UnboundedSender<Box<RoleSetup>>,
    inputs: mpsc::UnboundedSender<(RoleId, RoleInput)>,
}

impl DriverHandle {
    /// Starts the driver of one session class: `session` and `clock` are that session's
    /// (`None` for the observers' driver). It runs until `cancel` (the manager's end) or
    /// until it has no role left and its handle is dropped.
    ///
    /// A panic of the driver is fail-stop: `on_panic` runs (the manager abandons the class's
    /// session: its terms end at once, it expires and its roles move elsewhere, as after a
    /// crash) instead of leaving the roles held by a driver that no longer runs while the
    /// session renews their terms.
    pub(crate) fn spawn(
        session: Option<watch::Receiver<SessionView>>,
        clock: Option<&Arc<SessionClock>>,
        cancel: CancellationToken,
        on_panic: Box<dyn FnOnce() + Send>,
    ) -> Self {
        let (adds_tx, adds) = mpsc::unbounded_channel();
        let (inputs_tx, inputs) = mpsc::unbounded_channel();
        let driver = RoleDriver {
            runners: HashMap::new(),
            io: DriverIo::default(),
            timers: TimerQueue::default(),
            wanting: HashSet::new(),
            permits: SlotPermits::default(),
            adds,
            inputs,
            cancel,
        };
        let renewals = clock.map(|c| c.subscribe());
        tokio::spawn(async move {
            let run = std::panic::AssertUnwindSafe(driver.run(session, renewals));
            if run.catch_unwind().await.is_err() {
                tracing::error!(
                    "the role driver of a session class panicked (a bug: please report it): its \
                     roles are abandoned — their terms end now, the session expires on the \
                     server and other instances take the roles; restart this process to \
                     campaign for them again"
                );
                on_panic();
            }
        });
        Self {
            adds: adds_tx,
            inputs: inputs_tx,
        }
    }

    /// The inbox of role `id` of this driver.
    pub(crate) fn inbox(&self, id: RoleId) -> RoleInbox {
        RoleInbox::new(id, self.inputs.clone())
    }

    /// Adds a role (before anyone can send it an input: see [`RoleDriver::input`]). False if
    /// the driver has ended (the manager is stopping).
    pub(crate) fn add(&self, setup: RoleSetup) -> bool {
        self.adds.send(Box::new(setup)).is_ok()
    }
}

struct RoleDriver {
    /// Boxed: the map moves only pointers when it grows.
    runners: HashMap<RoleId, Box<RoleRunner>>,
    io: DriverIo,
    timers: TimerQueue,
    /// Roles whose acquire waits for a newer session renewal (only they are woken by one).
    wanting: HashSet<RoleId>,
    /// The slot permit of each role with slots (Q15, S7): decided after every step of a slot.
    permits: SlotPermits<RoleId>,
    adds: mpsc::UnboundedReceiver<Box<RoleSetup>>,
    inputs: mpsc::UnboundedReceiver<(RoleId, RoleInput)>,
    cancel: CancellationToken,
}

impl RoleDriver {
    async fn run(
        mut self,
        mut session: Option<watch::Receiver<SessionView>>,
        mut renewals: Option<watch::Receiver<u64>>,
    ) {
        // Far enough never to fire: the sleep is only polled while a wake-up is armed.
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        let sleep = tokio::time::sleep_until(far);
        tokio::pin!(sleep);
        let mut sleeping_until: Option<Instant> = None;
        let (mut adds_open, mut inputs_open) = (true, true);
        loop {
            if !adds_open && !inputs_open && self.runners.is_empty() {
                return;
            }
            let next = self.timers.next();
            if next != sleeping_until {
                sleep.as_mut().reset(next.unwrap_or(far));
                sleeping_until = next;
            }
            let wants_renewal = !self.wanting.is_empty();
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return,
                setup = self.adds.recv(), if adds_open => match setup {
                    Some(setup) => self.add(*setup, session.as_ref()),
                    None => adds_open = false,
                },
                Some((id, op, result)) = self.io.ops.next(), if !self.io.ops.is_empty() => {
                    self.deliver(id, Delivery::Op(op, result));
                }
                Some(id) = self.io.gates.next(), if !self.io.gates.is_empty() => {
                    let view = current(session.as_ref());
                    if let Some(runner) = self.runners.get_mut(&id) {
                        runner.gate_opened(view, &mut self.io);
                    }
                    self.settled(id);
                }
                changed = async {
                    match session.as_mut() {
                        Some(s) => s.changed().await.is_ok(),
                        None => std::future::pending().await,
                    }
                } => {
                    match session.as_mut().filter(|_| changed) {
                        Some(s) => {
                            let view = *s.borrow_and_update();
                            self.visit_all(|runner, io| runner.session_changed(Some(view), io));
                        }
                        // The session task ended (shutdown): nothing more will come.
                        None => session = None,
                    }
                }
                changed = async {
                    match renewals.as_mut() {
                        Some(r) => r.changed().await.is_ok(),
                        None => std::future::pending().await,
                    }
                }, if wants_renewal => {
                    if changed {
                        let wanting: Vec<RoleId> = self.wanting.iter().copied().collect();
                        for id in wanting {
                            if let Some(runner) = self.runners.get_mut(&id) {
                                runner.session_changed(None, &mut self.io);
                            }
                            self.settled(id);
                        }
                    } else {
                        renewals = None;
                        self.wanting.clear();
                    }
                }
                Some((id, n, role)) = self.io.demoted.next(), if !self.io.demoted.is_empty() => {
                    match self.runners.get_mut(&id) {
                        Some(runner) => {
                            runner.demote_ended(n);
                            self.settled(id);
                        }
                        // Stopped meanwhile: it leaves its group now.
                        None => {
                            self.permits.remove(id, &role);
                            self.decide_permits(&role);
                        }
                    }
                }
                Some((id, n)) = self.io.drains.next(), if !self.io.drains.is_empty() => {
                    self.deliver(id, Delivery::Drained(n));
                }
                input = self.inputs.recv(), if inputs_open => match input {
                    Some((id, input)) => {
                        self.input(id, input, session.as_ref()).await;
                        for _ in 1..INPUT_BATCH {
                            let Ok((id, input)) = self.inputs.try_recv() else {
                                break;
                            };
                            self.input(id, input, session.as_ref()).await;
                        }
                    }
                    None => inputs_open = false,
                },
                () = &mut sleep, if sleeping_until.is_some() => {
                    sleeping_until = None;
                    for id in self.timers.due(Instant::now()) {
                        if let Some(runner) = self.runners.get_mut(&id) {
                            runner.wake(&mut self.io);
                        }
                        self.settled(id);
                    }
                }
            }
        }
    }

    /// A new role: started with the session's current state.
    fn add(&mut self, setup: RoleSetup, session: Option<&watch::Receiver<SessionView>>) {
        let id = setup.id;
        // A slot's machine starts without the permit (the manager built it so): it joins its
        // role's group first, and `settled` decides the group's permits.
        let score = setup.role.slot().map_or(0, |k| {
            crate::placement::hash::score(setup.shared.instance.as_str(), &k.to_string())
        });
        self.permits.add(id, &setup.role, score);
        let runner = RoleRunner::start(setup, current(session), &mut self.io);
        self.runners.insert(id, Box::new(runner));
        self.settled(id);
    }

    /// One input of the inbox. The manager adds a role before anyone can send it an input,
    /// but on another channel: an input for a role not known yet takes the adds first.
    async fn input(
        &mut self,
        id: RoleId,
        input: RoleInput,
        session: Option<&watch::Receiver<SessionView>>,
    ) {
        match input {
            RoleInput::Probe(reply) => {
                // Test seam of the liveness probe (`negative-controls` only): the driver is
                // stuck, as one stuck in an await that never completes would be.
                #[cfg(feature = "negative-controls")]
                super::negative::panic_if_asked(self.runners.get(&id).map(|r| r.role().as_str()));
                #[cfg(feature = "negative-controls")]
                if super::negative::wedged() {
                    tokio::select! {
                        () = super::negative::wedge() => {}
                        () = self.cancel.cancelled() => return,
                    }
                }
                let _ = reply.send(());
            }
            RoleInput::Abort => {
                // Dropped with everything it holds; whoever waits for it is told (its `done`
                // sender is gone).
                self.timers.remove(id);
                self.wanting.remove(&id);
                if let Some(runner) = self.runners.remove(&id) {
                    // An aborted slot stays in its group, claiming the permit for good: its
                    // term is not released and may last until it expires (Q15, S7).
                    let role = runner.role().clone();
                    self.permits.abandon(id);
                    self.decide_permits(&role);
                }
            }
            input => {
                if !self.runners.contains_key(&id) {
                    while let Ok(setup) = self.adds.try_recv() {
                        self.add(*setup, session);
                    }
                }
                self.deliver(id, Delivery::Input(input));
            }
        }
    }

    /// Hands `delivery` to its role (nothing if the role has stopped).
    fn deliver(&mut self, id: RoleId, delivery: Delivery) {
        if let Some(runner) = self.runners.get_mut(&id) {
            runner.deliver(delivery, &mut self.io);
        }
        self.settled(id);
    }

    /// Runs `visit` on every role, then settles each.
    fn visit_all(&mut self, mut visit: impl FnMut(&mut RoleRunner, &mut DriverIo)) {
        let ids: Vec<RoleId> = self.runners.keys().copied().collect();
        for id in ids {
            if let Some(runner) = self.runners.get_mut(&id) {
                visit(runner, &mut self.io);
            }
            self.settled(id);
        }
    }

    /// After a step of role `id`: a stopped role is finished; the others' wake-up and
    /// interest in renewals follow what their machine wants now.
    fn settled(&mut self, id: RoleId) {
        let Some(runner) = self.runners.get(&id) else {
            return;
        };
        // Only a slot's name is copied (no cost for the other roles).
        let slot = runner.role().slot().map(|_| runner.role().clone());
        if runner.is_stopped() {
            self.timers.remove(id);
            self.wanting.remove(&id);
            let demoting = runner.demoting();
            if let Some(runner) = self.runners.remove(&id) {
                runner.finish();
            }
            // A slot whose `on_demote` still runs claims until it returned (`io.demoted`).
            if let Some(role) = slot.filter(|_| !demoting) {
                self.permits.remove(id, &role);
                self.decide_permits(&role);
            }
            return;
        }
        self.timers.arm(id, runner.wake_at());
        if runner.wants_renewal() {
            self.wanting.insert(id);
        } else {
            self.wanting.remove(&id);
        }
        if let Some(role) = slot {
            self.decide_permits(&role);
        }
    }

    /// The slot permit of `role`'s slots (nothing for a role that is not a slot), decided
    /// after each step of one of them and before any other role steps (Q15, S7): every step
    /// of every role ends in [`RoleDriver::settled`], and the driver steps one role at a
    /// time. A slot that sent an acquire in that step claims the permit, and its siblings
    /// lose theirs here, before they can step; a slot given the permit is woken on its own
    /// (a step of its own, then this decision again).
    fn decide_permits(&mut self, role: &RoleName) {
        let runners = &self.runners;
        let decision = self.permits.decide(role, |id| {
            // A slot without a runner was aborted (see `RoleInput::Abort`): it claims.
            runners.get(&id).map_or(SlotView::Claims, |r| r.slot_view())
        });
        for (id, permit) in decision {
            if let Some(runner) = self.runners.get_mut(&id)
                && runner.set_permit(permit)
            {
                self.timers.arm(id, Some(Instant::now()));
            }
        }
    }
}

/// The session's state now (`None` for observers, and after the session task ended).
fn current(session: Option<&watch::Receiver<SessionView>>) -> Option<SessionView> {
    session.map(|s| *s.borrow())
}
