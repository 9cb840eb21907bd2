//! What a role's machine asks for, carried out by its runner: writes and reads pushed into the
//! driver's I/O, terms handed to the application and ended, callbacks queued, the session's
//! state and renewals handed to the machine, the status published.

use std::sync::Arc;
use std::time::SystemTime;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{Instrument, debug, warn};

use super::{DriverIo, OpResult, RoleRunner, START_GATE_LIMIT};
use crate::callbacks::{CallbackCall, Demotion};
use crate::core::{Action, DemoteReason, Notice, WriteKind, WriteOutcome};
use crate::leadership::{Leadership, LiveTerm, TermShared};
use crate::manager::backend::LeaseWrite;
use crate::manager::role_report::Snapshot;
use crate::manager::session_link::SessionView;
use crate::tap::TapEvent;
use crate::value::now_rfc3339;

impl RoleRunner {
    pub(super) fn execute(&mut self, action: Action, io: &mut DriverIo) {
        let id = self.id;
        match action {
            Action::Write(req) => {
                let backend = self.shared.backend.clone();
                let key = self.key.clone();
                let acquired = &mut self.acquired;
                // Version 2: role keys carry no TTL (the session does, Q1).
                let ttl = None;
                let op = req.op;
                let payload = req.value.map(|mut v| {
                    let now = now_rfc3339();
                    if req.kind == WriteKind::Acquire {
                        v.acquired_at = Some(now.clone());
                        *acquired = Some((v.nonce, now.clone()));
                    } else if v.acquired_at.is_none()
                        && let Some((nonce, at)) = acquired.as_ref()
                        && *nonce == v.nonce
                    {
                        // P2: renewals repeat when the term began.
                        v.acquired_at = Some(at.clone());
                    }
                    v.renewed_at = Some(now);
                    v.to_bytes()
                });
                let kind = req.kind;
                debug!(?kind, expected = req.expected, "write");
                self.report.tap(TapEvent::WriteInvoked {
                    op,
                    kind,
                    expected: req.expected,
                });
                let span = self.report.kv_span("cas", kind.as_str(), req.expected);
                let seen_before = self.shared.bucket.high_water();
                let resets_before = self.resets;
                io.ops.push(Box::pin(
                    async move {
                        let sent = Instant::now();
                        let write = LeaseWrite {
                            kind,
                            expected: req.expected,
                            ttl,
                            payload: payload.unwrap_or_default(),
                        };
                        let outcome = backend.write(key, write, req.timeout).await;
                        tracing::Span::current().record("outcome", outcome_name(outcome));
                        (
                            id,
                            op,
                            OpResult::Write(
                                kind,
                                outcome,
                                sent.elapsed(),
                                seen_before,
                                resets_before,
                            ),
                        )
                    }
                    .instrument(span),
                ));
            }
            Action::Read { op, timeout } => {
                let store = self.shared.store.clone();
                let key = self.key.clone();
                let span = self.report.kv_span("read", "read", 0);
                io.ops.push(Box::pin(
                    async move { (id, op, OpResult::Read(store.read(&key, timeout).await)) }
                        .instrument(span),
                ));
            }
            Action::Promote { term, revision } => {
                let leadership = Leadership {
                    inner: Arc::new(TermShared::started(
                        self.role.clone(),
                        self.shared.instance.clone(),
                        term.token,
                        self.handed_deadline(term.deadline),
                        revision,
                        self.shared.store.clone(),
                        self.operation_timeout,
                        self.shared.tap.clone(),
                    )),
                };
                // Recorded before anything else can record about it (a renewal, below).
                self.report.promoted(
                    term.token,
                    term.deadline,
                    self.clock.as_ref().and(self.machine.held_session()),
                );
                self.current.send_replace(Some(leadership.clone()));
                // From now on the session's renewals move the term's deadline (Q4).
                if let (Some(clock), Some(session)) = (&self.clock, self.machine.held_session()) {
                    let backend = self.shared.backend.clone();
                    clock.hold(
                        &self.role,
                        session,
                        leadership.clone(),
                        self.machine.timing().local_lease(),
                        |d| backend.handed_deadline(d),
                    );
                }
                self.report.leading(term.token);
                // The term has started: a preparation still queued or running is abandoned, so
                // that `on_promote` (and an exec child) does not wait for it.
                if let Some(preparing) = self.preparing.take() {
                    preparing.cancel();
                }
                self.calls.send(CallbackCall::Promote(leadership));
            }
            Action::Renewed { term, revision } => {
                // The machine caught up with renewals the session task already handed to the
                // term (deadline, tap record) when they arrived (Q4, one deadline per
                // session); a term outside the clock (an observer's, a test backend's) gets
                // them here.
                let current = self
                    .current
                    .borrow()
                    .clone()
                    .or_else(|| self.draining.clone())
                    .filter(|l| l.token() == term.token);
                if let Some(l) = current {
                    if self.clock.is_none() {
                        // Recorded before the new deadline can be read (as `TermShared::extend`
                        // does for the clock's renewals).
                        self.report.tap(TapEvent::Renewed {
                            token: term.token,
                            deadline: term.deadline,
                            session: None,
                        });
                    }
                    let deadline = self.handed_deadline(term.deadline);
                    let moved = if let Ok(mut live) = l.inner.live.lock() {
                        let moved = deadline > live.deadline;
                        *live = LiveTerm {
                            deadline: deadline.max(live.deadline),
                            revision,
                        };
                        moved
                    } else {
                        false
                    };
                    if moved {
                        l.inner.live_changed.notify_waiters();
                    }
                }
                let renewed = self
                    .clock
                    .as_ref()
                    .and_then(|c| c.renewed(&self.role))
                    .unwrap_or_else(SystemTime::now);
                self.report.renewed(renewed);
            }
            Action::Demote {
                term,
                reason,
                drain: wait,
            } => {
                if !self.shared.backend.carries_out(reason) {
                    // The term stays open for the application and the history (only the
                    // test-only negative controls do not carry demotions out).
                    self.let_go();
                    self.current.send_replace(None);
                    self.report.demotion_skipped();
                    if wait {
                        self.drain_until(io, async {});
                    }
                    return;
                }
                let leadership = self.current.send_replace(None);
                // P9: end the term (token cancelled) before anyone hears of the demotion
                // (`end_term` did so already; the reason stays the first one stored).
                if let Some(l) = &leadership {
                    l.inner.end(reason);
                }
                // A term whose release does not drain follows no more renewals (before its
                // demotion is recorded: no renewal record after it); a draining one does,
                // until the drain ends.
                if !wait {
                    self.let_go();
                }
                if let Some(l) = &leadership {
                    let _ = l.inner.demotion_recorded.set(());
                }
                self.report.demoted(term.token, reason);
                if let Some(l) = leadership {
                    // P9: the token is cancelled before on_demote runs (above).
                    let demotion = Demotion {
                        leadership: l,
                        reason,
                    };
                    if self.role.slot().is_some() {
                        self.demote_slot(demotion, wait, io);
                    } else if wait {
                        self.draining = Some(demotion.leadership.clone());
                        let (tx, rx) = oneshot::channel();
                        self.calls.send(CallbackCall::Demote(demotion, Some(tx)));
                        let timeout = self.shared.drain_timeout;
                        self.drain_until(io, async move {
                            let _ = tokio::time::timeout(timeout, rx).await;
                        });
                    } else {
                        self.calls.send(CallbackCall::Demote(demotion, None));
                    }
                } else if wait {
                    self.drain_until(io, async {});
                }
            }
            Action::Failed(kind) => self.report.failed(kind),
            Action::Recovered => self.report.recovered(),
            Action::Notice(Notice::DuplicateInstance { other_incarnation }) => {
                self.report.duplicate(Some(other_incarnation));
            }
            Action::Notice(Notice::RevisionRegressed {
                revision,
                high_water,
            }) => {
                warn!(
                    revision,
                    high_water, "revisions went back: the bucket was recreated; checking its epoch"
                );
                self.shared.bucket.ask_check();
            }
            Action::LostDuringRelease { term, reason } => {
                warn!(
                    term = term.token.term(),
                    %reason,
                    "the role was lost while its release drained: its work is stopped at once"
                );
                if let Some(l) = self.draining.take() {
                    l.inner.lose(reason);
                }
            }
            Action::ReleaseTerm { revision, session } => {
                warn!(
                    revision,
                    "nobody here acts on the role value naming this instance's session (a \
                     release that did not go through, or a value another client wrote while \
                     this role cools down or cannot write role keys): handing it over through \
                     the session (protocol Q5 rule 5)"
                );
                self.shared
                    .release_term(self.session_class, session, &self.role, revision);
            }
            Action::Stopped => debug!("stopped"),
        }
    }

    /// Hands the machine the session's latest renewal from the clock, as of its arrival
    /// (Q4, one deadline per session), before any other input at `now`.
    pub(super) fn sync_session(&mut self, now: Instant) {
        let Some((renewal, term_sent)) = self.clock.as_ref().and_then(|c| c.sync(&self.role))
        else {
            return;
        };
        let synced = (Some(renewal.acked_sent_at), term_sent);
        if self.synced == synced {
            return;
        }
        self.synced = synced;
        self.machine
            .handle_session_renewed(renewal.uuid, renewal.acked_sent_at, term_sent, now);
    }

    /// The term held here no longer follows the session's renewals; the status keeps the
    /// time of the last one that moved its deadline.
    pub(super) fn let_go(&mut self) {
        let Some(renewed) = self.clock.as_ref().and_then(|c| c.let_go(&self.role)) else {
            return;
        };
        self.report.last_renewal(renewed);
    }

    /// Before a demotion is recorded or announced: ends the current term (its reason stored,
    /// its token cancelled, so that its work reacts at once: an `exec` child is killed on a
    /// loss). Returns the wait until no start of its work is in progress (the term's start
    /// gate) if one is, so that a child start either precedes the demotion or sees the term
    /// ended (Q12).
    pub(super) fn end_term(&self, reason: DemoteReason) -> Option<BoxFuture<'static, ()>> {
        if !self.shared.backend.carries_out(reason) {
            return None;
        }
        let l = self.current.borrow().clone()?;
        l.inner.end(reason);
        if l.inner.start_gate.try_lock().is_ok() {
            return None;
        }
        // A start holds the gate for one process spawn and its report; the bound only keeps
        // a hung spawn from holding the role (the watchdog's deadline still holds).
        Some(Box::pin(async move {
            let _ = tokio::time::timeout(START_GATE_LIMIT, l.inner.start_gate.lock()).await;
        }))
    }

    /// A slot's demotion (Q15): as any role's, and the slot claims its role's permit until
    /// `on_demote` returned (`demoting`), so that no sibling's term begins while this term's
    /// work (an `exec` child killed at a loss) may still act.
    fn demote_slot(&mut self, demotion: Demotion, wait: bool, io: &mut DriverIo) {
        use futures_util::FutureExt;
        let (tx, rx) = oneshot::channel();
        let returned = rx.shared();
        if wait {
            self.draining = Some(demotion.leadership.clone());
        }
        self.calls.send(CallbackCall::Demote(demotion, Some(tx)));
        if wait {
            let timeout = self.shared.drain_timeout;
            let drained = returned.clone();
            self.drain_until(io, async move {
                let _ = tokio::time::timeout(timeout, drained).await;
            });
        }
        let n = self.demoting.map_or(1, |d| d + 1);
        self.demoting = Some(n);
        let (id, role) = (self.id, self.role.clone());
        io.demoted.push(Box::pin(async move {
            // An error: the callbacks were dropped (the role was aborted).
            let _ = returned.await;
            (id, n, role)
        }));
    }

    /// The machine waits for a drain (a graceful release's demote callback): `until` ends it.
    pub(super) fn drain_until(
        &mut self,
        io: &mut DriverIo,
        until: impl Future<Output = ()> + Send + 'static,
    ) {
        self.drains_started += 1;
        let n = self.drains_started;
        self.drain = Some(n);
        let id = self.id;
        io.drains.push(Box::pin(async move {
            until.await;
            (id, n)
        }));
    }

    /// Hands the machine the session's state if it changed since it was handed last; a
    /// failure of the session's writes (or the end of one) is reported as the role's, since
    /// the role cannot campaign without it.
    pub(super) fn apply_view(&mut self, view: SessionView) {
        if self.view == Some(view) {
            return;
        }
        self.view = Some(view);
        if let Some(update) = view.update {
            self.machine.handle_session(update, Instant::now());
        }
        if view.failure == self.session_failure {
            return;
        }
        self.session_failure = view.failure;
        match view.failure {
            Some(kind) => self.report.failed(kind),
            None => self.report.recovered(),
        }
    }

    pub(super) fn publish_status(&mut self) {
        let snapshot = Snapshot {
            state: self.machine.state(),
            observed: self.machine.observed(),
            connected: *self.shared.connected.borrow(),
            cooldown_until: self.machine.cooldown_until(),
            term: self.machine.term().map(|t| t.token.term()),
        };
        self.report.publish(snapshot);
    }
}

/// The outcome of a write as a span field.
fn outcome_name(outcome: WriteOutcome) -> &'static str {
    match outcome {
        WriteOutcome::Ok { .. } => "ok",
        WriteOutcome::Conflict => "conflict",
        WriteOutcome::Retry => "retry",
        WriteOutcome::Unknown => "unknown",
        WriteOutcome::Failed(_) => "failed",
    }
}
