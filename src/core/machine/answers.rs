//! The server's answers to what the machine sent: an acquire's, a release's and a read's
//! outcome, and the backoff and failure reports they lead to.

use tokio::time::Instant;
use uuid::Uuid;

use super::{Known, Leading, Phase, RoleMachine};
use crate::core::types::{
    Action, DemoteReason, FailureKind, KeyState, Notice, ReleaseReason, Term, WriteOutcome,
};
use crate::token::FencingToken;
use crate::value::HolderValue;

impl RoleMachine {
    pub(super) fn acquire_done(
        &mut self,
        nonce: Uuid,
        session: Uuid,
        expected: u64,
        outcome: WriteOutcome,
        now: Instant,
    ) {
        if !matches!(self.phase, Phase::Candidate) {
            // A stop or release came while the acquire was in flight: never promote; give a
            // won lease back at once, and find out about an unknown one.
            match outcome {
                WriteOutcome::Ok { revision } => self.stop_cleanup = Some(revision),
                WriteOutcome::Unknown => self.unknown_nonce = Some(nonce),
                _ => {}
            }
            return;
        }
        match outcome {
            WriteOutcome::Ok { revision } if self.is_stale_ack(revision, nonce) => {
                // A newer revision was already seen: either our term was superseded before
                // its acknowledgement arrived, or the bucket was recreated and revisions
                // restarted. Either way a term from this write would carry a token smaller
                // than one already issued: never promote it. What we know (the newer entry)
                // stays; the driver checks the bucket's epoch (a reset re-enables us).
                self.attempts.succeeded();
                self.unknown_nonce = None;
                self.actions
                    .push_back(Action::Notice(Notice::RevisionRegressed {
                        revision,
                        high_water: self.high_water,
                    }));
            }
            WriteOutcome::Ok { revision }
                if self.session.is_none_or(|(u, acked)| {
                    u != session || now >= acked + self.timing.local_lease()
                }) =>
            {
                // The session the acquire names ended (or its deadline passed: the process
                // was paused) before the acknowledgement arrived: the term ended before it
                // began (Q6, late acquire). Promoting it would hand the application a dead
                // term after newer terms may have been promoted elsewhere (P6 order). Treat
                // the put as our own late write instead (P5): re-acquire over it if it is
                // still the key's last entry.
                self.attempts.succeeded();
                self.unknown_nonce = None;
                self.adopted_or_wrote = true;
                let value = HolderValue::Lease(Box::new(self.value_with(nonce, session)));
                self.observe(KeyState::Held { revision, value }, now, false);
            }
            WriteOutcome::Ok { revision } => {
                self.high_water = self.high_water.max(revision);
                self.attempts.succeeded();
                self.unknown_nonce = None;
                self.adopted_or_wrote = true;
                let acked = self.session.map_or(now, |(_, acked)| acked);
                let deadline = acked + self.timing.local_lease();
                let term = Term {
                    token: FencingToken::new(self.epoch, revision, nonce),
                    nonce,
                    deadline,
                };
                let state = KeyState::Held {
                    revision,
                    value: HolderValue::Lease(Box::new(self.value_with(nonce, session))),
                };
                self.known = Some(Known {
                    state,
                    seen_at: now,
                });
                self.not_before = None;
                self.phase = Phase::Leader(Box::new(Leading {
                    term: term.clone(),
                    rev: revision,
                    session,
                    disconnected_since: None,
                    release: None,
                }));
                self.actions.push_back(Action::Promote { term, revision });
            }
            WriteOutcome::Conflict | WriteOutcome::Retry => {
                // Somebody else won (or a replicated stream raced us): learn the new state
                // from the watcher; read if it stays silent for a heartbeat. An entry newer
                // than the one the CAS expected (the watcher showed it meanwhile) already
                // explains the conflict: keep it, so that the backstop counts from its first
                // sighting (P5).
                self.attempts.succeeded();
                if self.known.as_ref().is_none_or(|k| k.rev() <= expected) {
                    self.mark_stale(now);
                }
            }
            WriteOutcome::Unknown => {
                self.unknown_nonce = Some(nonce);
                // Another writer's value may already be known (delivered before the outcome).
                self.note_resolved();
                self.mark_stale(now);
                self.back_off(now);
            }
            WriteOutcome::Failed(kind) if kind.is_permanent() => self.stall(kind, now),
            WriteOutcome::Failed(kind) => {
                self.report_failure(kind);
                self.back_off(now);
            }
        }
    }

    pub(super) fn release_done(&mut self, outcome: WriteOutcome, now: Instant) {
        let Phase::Leader(l) = &mut self.phase else {
            // The clean-up delete of an acquire won after a stop.
            match outcome {
                WriteOutcome::Unknown | WriteOutcome::Retry => self.back_off(now),
                _ => self.stop_cleanup = None,
            }
            return;
        };
        if matches!(outcome, WriteOutcome::Unknown | WriteOutcome::Failed(_))
            && let Some(r) = &mut l.release
            && !r.handed
        {
            // The delete did not go through (refused: a permission revoked at run time, full
            // storage…; or unknown): the value still names our live session, so nobody else
            // could take the role. The work is drained (the release began with it): hand the
            // term over through the session (Q4, Q5 rule 5) and keep retrying the delete.
            r.handed = true;
            let (revision, session) = (l.rev, l.session);
            self.actions
                .push_back(Action::ReleaseTerm { revision, session });
            self.handed_over = Some(revision);
        }
        let term = l.term.clone();
        match outcome {
            WriteOutcome::Ok { revision } => {
                let state = KeyState::Vacant {
                    revision,
                    expired: false,
                };
                self.known = Some(Known {
                    state,
                    seen_at: now,
                });
                // Our own delete: the end of a release, not a loss.
                let reason = DemoteReason::Released(ReleaseReason::Requested);
                self.leave_leadership(term, reason, true, now);
            }
            WriteOutcome::Conflict => {
                // P8: the conflict may be our own renewal that committed late (its outcome was
                // unknown): re-read at once. Still ours -> delete on the revision read (the
                // hand-over stays immediate); anything else -> we lost, and never delete.
                if let Some(r) = &mut l.release {
                    r.verify = true;
                }
            }
            WriteOutcome::Retry | WriteOutcome::Unknown => {
                if let Some(r) = &mut l.release {
                    r.verify = true;
                }
                self.back_off(now);
            }
            WriteOutcome::Failed(kind) if kind.is_permanent() => {
                self.report_failure(kind);
                self.leave_leadership(term, DemoteReason::Failed(kind), true, now);
            }
            WriteOutcome::Failed(kind) => {
                // Full storage, lost quorum...: retry until the deadline like an unknown
                // outcome (the delete may succeed once the condition heals).
                if let Some(r) = &mut l.release {
                    r.verify = true;
                }
                self.report_failure(kind);
                self.back_off(now);
            }
        }
    }

    pub(super) fn read_done(&mut self, state: KeyState, now: Instant) {
        match &mut self.phase {
            Phase::Leader(l) => {
                let rev = state.revision();
                match &state {
                    KeyState::Held {
                        value: HolderValue::Lease(v),
                        revision,
                    } if v.nonce == l.term.nonce => {
                        // Still our term: continue on the revision read (our own late write).
                        l.rev = l.rev.max(*revision);
                        if let Some(r) = &mut l.release {
                            r.verify = false;
                        }
                        self.not_before = None;
                    }
                    _ if rev < l.rev => {
                        // Reads go to the stream leader (P3), which never shows an older
                        // revision of a key than one it acknowledged: the key is gone or below
                        // our revision only in a recreated bucket (or after an operator purged
                        // it). The term is over: demote at once and have the epoch checked.
                        let (term, released) = (l.term.clone(), l.release.is_some());
                        let high_water = self.high_water;
                        self.leave_leadership(term, DemoteReason::BucketReset, released, now);
                        self.actions
                            .push_back(Action::Notice(Notice::RevisionRegressed {
                                revision: rev,
                                high_water,
                            }));
                    }
                    _ => {
                        self.observe(state, now, false);
                        if let Phase::Leader(l) = &self.phase {
                            let (term, released) = (l.term.clone(), l.release.is_some());
                            self.leave_leadership(term, DemoteReason::Superseded, released, now);
                        }
                    }
                }
            }
            Phase::Stopping | Phase::Cooldown { .. } => {
                // The only read while stopping or cooling down: is the acquire of unknown
                // outcome ours? (If so it is deleted at once.)
                if matches!(self.phase, Phase::Cooldown { .. }) {
                    self.observe(state.clone(), now, false);
                }
                if let KeyState::Held {
                    value: HolderValue::Lease(v),
                    revision,
                } = &state
                    && Some(v.nonce) == self.unknown_nonce
                {
                    self.stop_cleanup = Some(*revision);
                }
                self.unknown_nonce = None;
            }
            _ => {
                let known_rev = self.known.as_ref().map(Known::rev);
                match known_rev {
                    Some(k) if state.revision() == k => {
                        // Unchanged since first seen: keep `seen_at` (the backstop counts from
                        // the first sighting) and let step() act on the confirmation.
                        if let (Some(known), KeyState::Held { .. }) = (&mut self.known, &state) {
                            if matches!(known.state, KeyState::Unknown { .. }) {
                                known.state = state;
                                known.seen_at = now;
                            } else {
                                self.confirmed = Some(k);
                            }
                        } else if let Some(known) = &mut self.known {
                            known.state = state;
                        }
                    }
                    // The watcher showed an entry after this read was sent: "absent" may just
                    // predate it. Keep the newer entry.
                    Some(_) if state == KeyState::Absent && self.observed_during_read => {}
                    Some(_) if state == KeyState::Absent => {
                        // The key is gone without a marker we saw (a stream purge, a recreated
                        // bucket, max_age expiry without limit markers): a vacancy once it stayed
                        // absent for a TTL + heartbeat (a holder may still act on a term it won
                        // there); the acquire CAS on revision 0 decides whether it really is one.
                        self.known = Some(Known {
                            state,
                            seen_at: now,
                        });
                        self.confirmed = None;
                    }
                    Some(k) if state.revision() < k => {
                        // Older than what we know (a lagging replica): ask again a heartbeat
                        // later (a watcher event ends the wait sooner), not at once.
                        self.not_before = Some(now + self.timing.heartbeat);
                        return;
                    }
                    _ => self.observe(state, now, false),
                }
                self.not_before = None;
            }
        }
    }

    /// Whether an acquire acknowledged at `revision` cannot start a term: a newer revision was
    /// seen already, or the same revision holding something other than this write (revisions
    /// restarted in a recreated bucket).
    pub(super) fn is_stale_ack(&self, revision: u64, nonce: Uuid) -> bool {
        if revision > self.high_water {
            return false;
        }
        let seen_as_ours = self.known.as_ref().is_some_and(|k| {
            k.rev() == revision && k.state.lease().is_some_and(|v| v.nonce == nonce)
        });
        revision < self.high_water || !seen_as_ours
    }

    /// The vacancy we saw is gone (someone won, or our own write may commit): wait for the
    /// watcher, or re-read after a heartbeat.
    pub(super) fn mark_stale(&mut self, now: Instant) {
        if let Some(k) = &mut self.known {
            k.state = KeyState::Unknown { revision: k.rev() };
            k.seen_at = now;
        }
    }

    pub(super) fn back_off(&mut self, now: Instant) {
        self.not_before = Some(self.attempts.back_off(now, &mut self.rng));
        if matches!(self.phase, Phase::Candidate) && self.attempts.gave_up() {
            // `retry.max_attempts` bounds the fast retries only: from now on the role retries
            // at the slow cadence until an attempt succeeds (never stopped for good).
            self.report_failure(FailureKind::GaveUp);
            self.slow_retry(now);
        }
    }

    /// A persistent failure (P3): a holder that cannot write cannot keep its term, so it
    /// demotes at once; the failure is reported and the role retries at the slow cadence.
    pub(super) fn stall(&mut self, kind: FailureKind, now: Instant) {
        if let Phase::Leader(l) = &self.phase {
            let (term, released) = (l.term.clone(), l.release.is_some());
            self.leave_leadership(term, DemoteReason::Failed(kind), released, now);
        }
        self.report_failure(kind);
        self.attempts.failed_persistently();
        self.slow_retry(now);
    }

    pub(super) fn slow_retry(&mut self, now: Instant) {
        self.not_before = Some(self.attempts.slow_retry_at(now, &mut self.rng));
    }

    /// Reports a failure that keeps the role from campaigning or renewing: persistent ones and
    /// every refusal with a server error code (full storage, lost quorum...). Connection-level
    /// trouble is reported by the connection state instead. Once per condition.
    pub(super) fn report_failure(&mut self, kind: FailureKind) {
        if self.attempts.report(kind) {
            self.actions.push_back(Action::Failed(kind));
        }
    }

    /// The server answered normally: a reported failure is over.
    pub(super) fn recovered(&mut self) {
        if self.attempts.recover() {
            self.actions.push_back(Action::Recovered);
        }
    }
}
