//! How the manager, the watcher and role runners talk to a session task (a leaf: no driver
//! code): its inbox messages and the state it publishes.

use crate::core::{FailureKind, SessionKeyState, SessionUpdate};

/// Messages to a session task.
#[derive(Debug)]
pub(crate) enum SessionInput {
    /// The watcher saw the session key change.
    Observed(SessionKeyState),
    /// Nobody acts on the term at `revision` of `role`, whose value names session `uuid`: list
    /// it as released (protocol Q5 rule 5).
    ReleaseTerm {
        /// The session the value names.
        uuid: uuid::Uuid,
        /// The role.
        role: crate::names::RoleName,
        /// The revision of the role value.
        revision: u64,
    },
    /// The key of `role` moved to `revision` (a role this session lists released terms of).
    RoleMoved {
        /// The role.
        role: crate::names::RoleName,
        /// Its key's new revision.
        revision: u64,
    },
    /// End the session (every role of it was released) and stop.
    Stop,
    /// The role driver of this session's class failed (a panic): end its terms now and stop
    /// without ending the session — no renewal, no delete. Its key expires on the server, as
    /// after a crash of the process, so the roles move elsewhere (fail-stop) instead of
    /// staying held by a driver that no longer runs.
    Abandon,
    /// A liveness probe: answer it from the task's loop (`RoleManager::probe`).
    Probe(tokio::sync::oneshot::Sender<()>),
}

/// The state of a session as role runners see it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SessionView {
    /// The session's latest state; `None` before the first session started.
    pub(crate) update: Option<SessionUpdate>,
    /// Why session writes fail now (a server error code or a persistent failure): the roles of
    /// the session cannot campaign and report it.
    pub(crate) failure: Option<FailureKind>,
}

/// A renewal of a session as the session task acknowledged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Renewal {
    /// The session's uuid.
    pub(crate) uuid: uuid::Uuid,
    /// Send time of the acknowledged write.
    pub(crate) acked_sent_at: tokio::time::Instant,
    /// When its acknowledgement arrived.
    pub(crate) acked_at: tokio::time::Instant,
    /// The same moment on the wall clock (a role's `last_heartbeat`).
    pub(crate) wall: std::time::SystemTime,
}

/// A term resting on a session: the session task moves its deadline at every renewal.
#[derive(Debug)]
struct HeldTerm {
    session: uuid::Uuid,
    term: crate::leadership::Leadership,
    /// The role's local lease: the term's deadline is a renewal's send time plus it.
    local_lease: std::time::Duration,
    /// Wall-clock time of the last renewal that moved the term's deadline.
    renewed: Option<std::time::SystemTime>,
    /// Send time of that renewal: the term's deadline is it plus `local_lease` (every renewal
    /// since the promotion arrived in time, or the chain stopped there).
    sent: Option<tokio::time::Instant>,
}

/// The shared deadline of one session (docs/protocol.md Q4, "one deadline per session"): the
/// session task publishes each acknowledged renewal here and moves the deadline of every term
/// registered on it in the same step, so that a renewal wakes no role runner. Role tasks read
/// the latest renewal when they wake for something else.
#[derive(Debug)]
pub(crate) struct SessionClock {
    /// The session's local lease (its own deadline after a write's send time).
    local_lease: std::time::Duration,
    inner: std::sync::Mutex<ClockState>,
    /// Counts renewals: a role runner whose acquire waits for a newer renewal than it has
    /// (`RoleMachine::wants_session_renewal`) waits for a change (nobody else is woken).
    renewals: tokio::sync::watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct ClockState {
    renewal: Option<Renewal>,
    terms: std::collections::HashMap<crate::names::RoleName, HeldTerm>,
}

impl SessionClock {
    /// The clock of a session whose own deadline is a write's send time plus `local_lease`.
    pub(crate) fn new(local_lease: std::time::Duration) -> Self {
        Self {
            local_lease,
            inner: std::sync::Mutex::default(),
            renewals: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Follows the renewals (see `renewals`).
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.renewals.subscribe()
    }

    /// The latest acknowledged write of the session (its start or a renewal), of whichever
    /// session of the class it was.
    pub(crate) fn latest(&self) -> Option<Renewal> {
        self.state().renewal
    }

    /// Whether the session's latest renewal of `session` was not applied to `role`'s held term
    /// (it arrived after the term's deadline): the term's deadline no longer follows the
    /// session's, and the role needs its own timer for it.
    pub(crate) fn term_behind(&self, role: &crate::names::RoleName) -> bool {
        let state = self.state();
        match (state.renewal, state.terms.get(role)) {
            (Some(latest), Some(held)) if latest.uuid == held.session => {
                held.sent.is_none_or(|sent| sent < latest.acked_sent_at)
            }
            _ => false,
        }
    }

    /// Whether the session ends no later than a term of local lease `term_lease` resting on
    /// it: then the session's loss (delivered to the role runners) ends the term in time, and
    /// the role needs no timer of its own for the term's deadline.
    pub(crate) fn ends_terms_of(&self, term_lease: std::time::Duration) -> bool {
        self.local_lease <= term_lease
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ClockState> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `term` of `role` rests on `session` from now on (its promotion); `local_lease` is the
    /// role's.
    pub(crate) fn hold(
        &self,
        role: &crate::names::RoleName,
        session: uuid::Uuid,
        term: crate::leadership::Leadership,
        local_lease: std::time::Duration,
        hand: impl Fn(tokio::time::Instant) -> tokio::time::Instant,
    ) {
        let mut state = self.state();
        let mut held = HeldTerm {
            session,
            term,
            local_lease,
            renewed: None,
            sent: None,
        };
        // A renewal published between the role runner's last look at the clock and now belongs
        // to the new term too, if it arrived before the term's deadline.
        // It is recorded like any renewal (`TermShared::extend`): the promotion's record holds
        // the deadline before it, and the term's work is handed the moved one.
        if let Some(latest) = state.renewal.filter(|r| r.uuid == session) {
            let deadline = latest.acked_sent_at + local_lease;
            if held
                .term
                .inner
                .extend(latest.acked_at, deadline, hand(deadline), session)
                .is_some()
            {
                held.renewed = Some(latest.wall);
            }
            if held.term.inner.deadline_now() > latest.acked_at {
                held.sent = Some(latest.acked_sent_at);
            }
        }
        state.terms.insert(role.clone(), held);
    }

    /// The term of `role` no longer follows renewals (it ended and is not draining). Returns
    /// the wall-clock time of the last renewal that moved its deadline.
    pub(crate) fn let_go(&self, role: &crate::names::RoleName) -> Option<std::time::SystemTime> {
        self.state().terms.remove(role).and_then(|t| t.renewed)
    }

    /// Wall-clock time of the last renewal that moved the deadline of `role`'s term.
    pub(crate) fn renewed(&self, role: &crate::names::RoleName) -> Option<std::time::SystemTime> {
        self.state().terms.get(role).and_then(|t| t.renewed)
    }

    /// What a role runner hands its machine when it wakes: the latest renewal, and the send time
    /// of the last renewal applied in time to `role`'s held term.
    pub(crate) fn sync(
        &self,
        role: &crate::names::RoleName,
    ) -> Option<(Renewal, Option<tokio::time::Instant>)> {
        let state = self.state();
        let latest = state.renewal?;
        Some((latest, state.terms.get(role).and_then(|t| t.sent)))
    }

    /// The session is abandoned (its role driver failed, fail-stop): every term resting on it
    /// ends now ([`DemoteReason::Abandoned`](crate::core::DemoteReason::Abandoned)) — the
    /// work's cancellation, then the start gate (a start under way completes first or sees
    /// the term ended, Q12), then the demotion's record, unless the runner recorded it
    /// already (a term draining a graceful release) — and no renewal moves a deadline
    /// again. Returns the terms whose demotion it recorded (role and term), for the manager's
    /// events.
    pub(crate) async fn abandon(&self) -> Vec<(crate::names::RoleName, u64)> {
        let terms: Vec<_> = self.state().terms.drain().map(|(_, t)| t.term).collect();
        let reason = crate::core::DemoteReason::Abandoned;
        let mut recorded = Vec::new();
        for term in terms {
            let shared = &term.inner;
            shared.end(reason);
            let _gate = shared.start_gate.lock().await;
            if shared.demotion_recorded.set(()).is_err() {
                continue;
            }
            shared.tap.record(
                &shared.instance,
                &shared.role,
                crate::tap::TapEvent::Demoted {
                    token: shared.token,
                    reason,
                    held: shared.started_at.elapsed(),
                },
            );
            recorded.push((shared.role.clone(), shared.token.term()));
        }
        recorded
    }

    /// A renewal was acknowledged: published for the role runners, and every term of that
    /// session whose deadline had not passed when it arrived gets its new deadline (`hand`
    /// turns a term's deadline into the one handed to the application) and its renewal record
    /// (the tap's, by `TermShared::extend`), under the clock's lock, so that a term let go is
    /// never reported renewed after it was let go.
    pub(crate) fn renewed_session(
        &self,
        renewal: Renewal,
        hand: impl Fn(tokio::time::Instant) -> tokio::time::Instant,
    ) {
        let mut state = self.state();
        state.renewal = Some(renewal);
        self.renewals.send_modify(|n| *n = n.wrapping_add(1));
        for held in state.terms.values_mut() {
            if held.session != renewal.uuid {
                continue;
            }
            let deadline = renewal.acked_sent_at + held.local_lease;
            if held
                .term
                .inner
                .extend(renewal.acked_at, deadline, hand(deadline), renewal.uuid)
                .is_some()
            {
                held.renewed = Some(renewal.wall);
                held.sent = Some(renewal.acked_sent_at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex, OnceLock};
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Renewal, SessionClock};
    use crate::core::{FailureKind, KeyState, WriteOutcome};
    use crate::leadership::{Leadership, TermBackend, TermShared};
    use crate::names::{InstanceId, RoleName};
    use crate::tap::{Tap, TapEvent, TapSink};
    use crate::token::FencingToken;

    const LEASE: Duration = Duration::from_millis(1800);

    /// A term's store that is never reached here.
    #[derive(Debug)]
    struct NoStore;

    impl TermBackend for NoStore {
        fn read<'a>(
            &'a self,
            _key: &'a str,
            _timeout: Duration,
        ) -> futures_util::future::BoxFuture<'a, Result<KeyState, FailureKind>> {
            Box::pin(async { Err(FailureKind::Unavailable) })
        }

        fn fenced_put<'a>(
            &'a self,
            _data_key: &'a str,
            _fence_key: &'a str,
            _fence_revision: u64,
            _payload: bytes::Bytes,
            _timeout: Duration,
        ) -> futures_util::future::BoxFuture<'a, WriteOutcome> {
            Box::pin(async { WriteOutcome::Unknown })
        }
    }

    /// The renewals recorded (their deadlines), each with the term's deadline a reader could
    /// read at that moment (`None`: none could, the term was locked).
    #[derive(Debug, Default)]
    struct Renewals {
        term: OnceLock<Leadership>,
        seen: Mutex<Vec<(Instant, Option<Instant>)>>,
    }

    impl TapSink for Renewals {
        fn record(&self, _instance: &InstanceId, _role: &RoleName, event: &TapEvent, _at: Instant) {
            if let TapEvent::Renewed { deadline, .. } = event {
                let readable = self
                    .term
                    .get()
                    .and_then(|t| t.inner.live.try_lock().ok().map(|live| live.deadline));
                self.seen.lock().expect("lock").push((*deadline, readable));
            }
        }
    }

    fn role() -> RoleName {
        RoleName::new("worker").expect("valid")
    }

    /// A term of `worker` valid until `deadline`, its renewals recorded to the returned sink.
    fn term(deadline: Instant) -> (Leadership, Arc<Renewals>) {
        let sink = Arc::new(Renewals::default());
        let term = Leadership {
            inner: Arc::new(TermShared::started(
                role(),
                InstanceId::new("node-a").expect("valid"),
                FencingToken::new(1, 7, uuid::Uuid::new_v4()),
                deadline,
                7,
                Arc::new(NoStore),
                Duration::from_secs(1),
                Tap::new(vec![sink.clone()]),
            )),
        };
        sink.term.set(term.clone()).expect("set once");
        (term, sink)
    }

    fn renewal(uuid: uuid::Uuid, sent: Instant) -> Renewal {
        Renewal {
            uuid,
            acked_sent_at: sent,
            acked_at: sent + Duration::from_millis(1),
            wall: std::time::SystemTime::now(),
        }
    }

    /// The flaky S5 verdict of `exec::a_stopped_manager_s_child_is_killed_before_the_other_
    /// instance_is_promoted`: a renewal published between the role runner's last look at the
    /// clock and the promotion moved the new term's deadline when the term was held, with no
    /// `renew` record — the history kept the promotion's deadline, the child's watchdog got
    /// the later one, and a manager stopped before the next renewal left a child killed "ran
    /// 452 ms past the term's deadline" (one heartbeat less the watchdog's lead). Every move
    /// of a held term's deadline is recorded, this one too.
    #[test]
    fn a_renewal_a_term_picks_up_as_it_is_held_is_recorded() {
        let clock = SessionClock::new(LEASE);
        let session = uuid::Uuid::new_v4();
        let now = Instant::now();
        // The machine promoted on the renewal before (its deadline), the clock has a newer one.
        let before = now - Duration::from_millis(500);
        clock.renewed_session(renewal(session, now), |d| d);
        let (term, sink) = term(before + LEASE);
        clock.hold(&role(), session, term.clone(), LEASE, |d| d);
        assert_eq!(term.deadline(), now + LEASE, "the renewal moved the term");
        let recorded: Vec<Instant> = sink
            .seen
            .lock()
            .expect("lock")
            .iter()
            .map(|s| s.0)
            .collect();
        assert_eq!(
            recorded,
            vec![now + LEASE],
            "the deadline handed to the term is in the history"
        );
    }

    /// A renewal's record comes before anyone can read the deadline it moves (an `exec`
    /// child's supervisor hands it to the watchdog): a process stopped between the two leaves
    /// the record in its history, never a later deadline than the history's.
    #[test]
    fn a_renewal_is_recorded_before_its_deadline_can_be_read() {
        let clock = SessionClock::new(LEASE);
        let session = uuid::Uuid::new_v4();
        let now = Instant::now();
        let (term, sink) = term(now + LEASE);
        clock.hold(&role(), session, term.clone(), LEASE, |d| d);
        let next = now + Duration::from_millis(500);
        clock.renewed_session(renewal(session, next), |d| d);
        assert_eq!(term.deadline(), next + LEASE);
        let seen = sink.seen.lock().expect("lock").clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let (recorded, readable) = seen[0];
        assert_eq!(recorded, next + LEASE);
        assert!(
            readable.is_none_or(|d| d < recorded),
            "the new deadline could be read before its record: {readable:?}"
        );
    }

    /// A renewal that arrived after the term's deadline moves nothing and records nothing (a
    /// lapsed term is never extended, Q4).
    #[test]
    fn a_renewal_after_the_deadline_moves_and_records_nothing() {
        let clock = SessionClock::new(LEASE);
        let session = uuid::Uuid::new_v4();
        let now = Instant::now();
        let (term, sink) = term(now);
        clock.hold(&role(), session, term.clone(), LEASE, |d| d);
        clock.renewed_session(renewal(session, now), |d| d);
        assert_eq!(term.deadline(), now);
        assert!(sink.seen.lock().expect("lock").is_empty());
    }
}
