//! What the session sends next: the step after every input (start, renew, end, read), the
//! values it writes, its own deadline, and the backoff and failure reports of its writes.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::{
    Pending, Phase, SENT_REMEMBERED, SessionAction, SessionKeyState, SessionLoss, SessionMachine,
    SessionWrite, SessionWriteKind,
};
use crate::core::types::FailureKind;
use crate::value::{SessionValue, VALUE_VERSION};

impl SessionMachine {
    pub(super) fn starting(&mut self, known: Option<SessionKeyState>) -> Phase {
        Phase::Starting {
            known,
            uuid: self.new_uuid(),
            unknown_sent_at: None,
        }
    }

    pub(super) fn new_uuid(&mut self) -> Uuid {
        // Version-4 shaped, from the seeded RNG (deterministic in the simulation).
        uuid::Builder::from_random_bytes(
            (u128::from(self.rng.next_u64()) << 64 | u128::from(self.rng.next_u64())).to_le_bytes(),
        )
        .into_uuid()
    }

    pub(super) fn value(&self, uuid: Uuid) -> SessionValue {
        SessionValue {
            v: VALUE_VERSION,
            instance: self.instance.clone(),
            incarnation: self.incarnation,
            session: uuid,
            ttl_ms: u64::try_from(self.timing.ttl.as_millis()).unwrap_or(u64::MAX),
            heartbeat_ms: u64::try_from(self.timing.heartbeat.as_millis()).unwrap_or(u64::MAX),
            released: self.released.clone(),
        }
    }

    pub(super) fn check_deadline(&mut self, now: Instant) {
        if let Phase::Live(l) = &self.phase
            && now >= self.deadline(l)
        {
            self.lose(SessionLoss::DeadlineExpired, None, now);
        }
    }

    pub(super) fn step(&mut self, now: Instant) {
        self.check_deadline(now);
        if self.pending.is_none()
            && let Phase::Yielding { other, since } = &self.phase
            && now >= *since + self.yield_period(other)
        {
            // Unchanged for the backstop period: not a live session (Q4). Start ours over it
            // with a CAS on its revision (a refusal means it changed: yield on). The slow
            // re-read's wait does not hold this back.
            let known = other.clone();
            self.phase = Phase::Starting {
                known: Some(known),
                uuid: self.new_uuid(),
                unknown_sent_at: None,
            };
            self.not_before = None;
        }
        if self.pending.is_some() || self.not_before.is_some_and(|t| now < t) {
            return;
        }
        let timeout = self.timing.operation_timeout;
        match &self.phase {
            Phase::Starting { known: None, .. } => self.send_read(timeout),
            Phase::Starting {
                known: Some(state),
                uuid,
                ..
            } => {
                let (expected, uuid) = (state.revision(), *uuid);
                self.not_before = None;
                self.send(SessionWriteKind::Start, expected, Some(uuid), timeout, now);
            }
            Phase::Live(l) => {
                let remaining = self.deadline(l).saturating_duration_since(now);
                let timeout = timeout.min(remaining);
                if timeout.is_zero() {
                    return;
                }
                if l.reread {
                    self.send_read(timeout);
                } else if now >= l.next_renew {
                    let (rev, uuid) = (l.rev, l.uuid);
                    self.send(SessionWriteKind::Renew, rev, Some(uuid), timeout, now);
                }
            }
            // A slow re-read in case the watcher misses the other session's end.
            Phase::Yielding { .. } => self.send_read(timeout),
            Phase::Ending if self.ending_retry => {
                self.ending_retry = false;
                let rev = self.ending_rev.unwrap_or(self.high_water);
                self.send_end(rev, now);
            }
            Phase::Init | Phase::Ending | Phase::Stopped => {}
        }
    }

    pub(super) fn send(
        &mut self,
        kind: SessionWriteKind,
        expected: u64,
        uuid: Option<Uuid>,
        timeout: Duration,
        now: Instant,
    ) {
        let op = self.op_id();
        let session = uuid.unwrap_or_default();
        self.pending = Some(Pending::Write {
            op,
            kind,
            sent_at: now,
            uuid: session,
        });
        let value = uuid.map(|u| self.value(u));
        if let Some(v) = &value {
            if self
                .sent
                .back()
                .is_some_and(|last| last.session != v.session)
            {
                self.sent.clear();
            }
            if self.sent.back() != Some(v) {
                if self.sent.len() >= SENT_REMEMBERED {
                    self.sent.pop_front();
                }
                self.sent.push_back(v.clone());
            }
        }
        self.actions.push_back(SessionAction::Write(SessionWrite {
            op,
            kind,
            expected,
            value,
            timeout,
        }));
    }

    pub(super) fn send_end(&mut self, rev: u64, now: Instant) {
        self.phase = Phase::Ending;
        self.ending_rev = Some(rev);
        let timeout = self.timing.operation_timeout;
        self.send(SessionWriteKind::End, rev, None, timeout, now);
    }

    pub(super) fn send_read(&mut self, timeout: Duration) {
        let op = self.op_id();
        self.pending = Some(Pending::Read { op });
        self.actions.push_back(SessionAction::Read { op, timeout });
    }

    pub(super) fn finish(&mut self) {
        self.phase = Phase::Stopped;
        self.pending = None;
        self.actions.push_back(SessionAction::Stopped);
    }

    pub(super) fn op_id(&mut self) -> u64 {
        let op = self.next_op;
        self.next_op += 1;
        op
    }

    pub(super) fn back_off(&mut self, now: Instant) {
        self.not_before = Some(self.attempts.back_off(now, &mut self.rng));
    }

    pub(super) fn slow_retry(&mut self, now: Instant) {
        self.not_before = Some(self.attempts.slow_retry_at(now, &mut self.rng));
    }

    pub(super) fn report_failure(&mut self, kind: FailureKind) {
        if self.attempts.report(kind) {
            self.actions.push_back(SessionAction::Failed(kind));
        }
    }

    pub(super) fn recovered(&mut self) {
        if self.attempts.recover() {
            self.actions.push_back(SessionAction::Recovered);
        }
    }
}
