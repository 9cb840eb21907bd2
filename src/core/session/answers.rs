//! The server's answers to what the session sent — a start's, a renewal's, an end's and a
//! read's outcome — and what they teach it: live, lost (and why), or a duplicate's value.

use tokio::time::Instant;
use uuid::Uuid;

use super::{
    Live, Pending, Phase, SessionAction, SessionKeyState, SessionLoss, SessionMachine, is_sent,
    loss_reason,
};
use crate::core::types::WriteOutcome;

impl SessionMachine {
    /// The session is over: report it and start a new one (unless stopping).
    pub(super) fn lose(
        &mut self,
        reason: SessionLoss,
        state: Option<SessionKeyState>,
        now: Instant,
    ) {
        let Phase::Live(l) = &self.phase else {
            return;
        };
        let uuid = l.uuid;
        self.actions.push_back(SessionAction::Lost { uuid, reason });
        // A new session has a new uuid: every value naming this one is vacant by rule 2.
        self.released.clear();
        self.sent.clear();
        if matches!(self.pending, Some(Pending::Write { .. })) {
            // A renewal of the lost session: its outcome no longer matters.
            self.pending = None;
        }
        self.not_before = None;
        self.phase = Phase::Starting {
            known: None,
            uuid: self.new_uuid(),
            unknown_sent_at: None,
        };
        if let Some(state) = state {
            self.learned(state, now);
        }
    }

    /// What a read or the watcher showed while starting.
    pub(super) fn learned(&mut self, state: SessionKeyState, now: Instant) {
        if let SessionKeyState::Value { value: Some(v), .. } = &state
            && v.instance == self.instance
            && v.incarnation != self.incarnation
            && self.wrote
        {
            // Written by another process with our instance id after we wrote: a live
            // duplicate. Do not fight over the key: wait until its session is gone.
            if !self.duplicates.contains(&v.incarnation) {
                self.duplicates.push(v.incarnation);
                self.actions.push_back(SessionAction::Duplicate {
                    other_incarnation: v.incarnation,
                });
            }
            let same = matches!(&self.phase, Phase::Yielding { other, .. }
                if other.revision() == state.revision());
            if !same {
                self.phase = Phase::Yielding {
                    other: state,
                    since: now,
                };
            }
            return;
        }
        if let Phase::Starting { known, .. } = &mut self.phase {
            *known = Some(state);
        }
    }

    pub(super) fn start_done(
        &mut self,
        uuid: Uuid,
        sent_at: Instant,
        outcome: WriteOutcome,
        now: Instant,
    ) {
        if matches!(self.phase, Phase::Ending) {
            match outcome {
                WriteOutcome::Ok { revision } => self.send_end(revision, now),
                _ => self.finish(),
            }
            return;
        }
        let Phase::Starting {
            known,
            unknown_sent_at,
            ..
        } = &mut self.phase
        else {
            return;
        };
        match outcome {
            WriteOutcome::Ok { revision } => {
                self.attempts.succeeded();
                self.wrote = true;
                self.high_water = self.high_water.max(revision);
                self.go_live(uuid, revision, sent_at, now);
            }
            WriteOutcome::Conflict | WriteOutcome::Retry => {
                // The key moved (an expiry marker, a duplicate's write): read it again.
                *known = None;
                if outcome == WriteOutcome::Retry {
                    self.back_off(now);
                }
            }
            WriteOutcome::Unknown => {
                // It may still commit: the read shows whether it did (our uuid).
                *known = None;
                *unknown_sent_at = Some(unknown_sent_at.map_or(sent_at, |t| t.min(sent_at)));
                self.back_off(now);
            }
            WriteOutcome::Failed(kind) => {
                self.report_failure(kind);
                if kind.is_permanent() {
                    self.slow_retry(now);
                } else {
                    self.back_off(now);
                }
            }
        }
    }

    pub(super) fn go_live(&mut self, uuid: Uuid, revision: u64, sent_at: Instant, now: Instant) {
        let live = Live {
            uuid,
            rev: revision,
            acked_sent_at: sent_at,
            next_renew: sent_at + self.timing.heartbeat,
            reread: false,
        };
        if now >= self.deadline(&live) {
            // Acknowledged only after its own deadline (the process was paused): start anew.
            self.phase = Phase::Starting {
                known: None,
                uuid: self.new_uuid(),
                unknown_sent_at: None,
            };
            return;
        }
        self.not_before = None;
        self.phase = Phase::Live(live);
        self.actions.push_back(SessionAction::Up {
            uuid,
            acked_sent_at: sent_at,
            revision,
        });
    }

    pub(super) fn renew_done(
        &mut self,
        uuid: Uuid,
        sent_at: Instant,
        outcome: WriteOutcome,
        now: Instant,
    ) {
        if matches!(self.phase, Phase::Ending) {
            match (outcome, self.ending_rev.take()) {
                (WriteOutcome::Ok { revision }, _) => self.send_end(revision, now),
                (_, Some(rev)) => self.send_end(rev, now),
                (_, None) => self.finish(),
            }
            return;
        }
        let heartbeat = self.timing.heartbeat;
        let Phase::Live(l) = &mut self.phase else {
            return;
        };
        if l.uuid != uuid {
            return;
        }
        match outcome {
            WriteOutcome::Ok { revision } => {
                self.attempts.succeeded();
                self.high_water = self.high_water.max(revision);
                l.rev = l.rev.max(revision);
                l.acked_sent_at = l.acked_sent_at.max(sent_at);
                l.next_renew = sent_at + heartbeat;
                self.not_before = None;
                let (acked_sent_at, revision) = (l.acked_sent_at, l.rev);
                self.actions.push_back(SessionAction::Renewed {
                    uuid,
                    acked_sent_at,
                    revision,
                });
            }
            WriteOutcome::Conflict | WriteOutcome::Retry | WriteOutcome::Unknown => {
                // Re-read: our own late write is continued, anything else is a loss.
                l.reread = true;
                if outcome != WriteOutcome::Conflict {
                    self.back_off(now);
                }
            }
            WriteOutcome::Failed(kind) => {
                // Retried until the deadline (which ends the session); a persistent refusal
                // too: the roles stop at the deadline, and the session comes back when the
                // refusal is fixed.
                self.report_failure(kind);
                self.back_off(now);
            }
        }
    }

    pub(super) fn end_done(&mut self, outcome: WriteOutcome, now: Instant) {
        match outcome {
            WriteOutcome::Retry | WriteOutcome::Unknown if self.attempts.failures() < 3 => {
                // Try again shortly: a session left behind only delays the others by its TTL.
                self.back_off(now);
                self.ending_retry = true;
            }
            _ => self.finish(),
        }
    }

    pub(super) fn read_done(&mut self, state: SessionKeyState, now: Instant) {
        let rev = state.revision();
        self.high_water = self.high_water.max(rev);
        match &mut self.phase {
            Phase::Live(l) => {
                l.reread = false;
                if state.uuid() == Some(l.uuid) && rev >= l.rev && is_sent(&self.sent, &state) {
                    // Still our session (our own late write): continue on the revision read.
                    l.rev = rev;
                    l.next_renew = l.next_renew.min(now);
                    self.not_before = None;
                } else if rev < l.rev {
                    // The stream leader never shows an older revision than one it
                    // acknowledged: the bucket was recreated (or the key purged). Revisions
                    // restart there: so does the high-water mark (or the watcher's entries of
                    // the new bucket would be ignored as old).
                    self.high_water = rev;
                    self.lose(SessionLoss::BucketReset, Some(state), now);
                } else {
                    let reason = loss_reason(&state);
                    self.lose(reason, Some(state), now);
                }
            }
            Phase::Starting {
                uuid,
                unknown_sent_at,
                ..
            } => {
                let (uuid, unknown) = (*uuid, *unknown_sent_at);
                if let (Some(sent_at), Some(seen)) = (unknown, state.uuid())
                    && seen == uuid
                {
                    // Our start committed after all.
                    self.wrote = true;
                    self.go_live(uuid, rev, sent_at, now);
                    return;
                }
                let fresh = self.new_uuid();
                if let Phase::Starting {
                    unknown_sent_at,
                    uuid,
                    ..
                } = &mut self.phase
                    && unknown_sent_at.take().is_some()
                {
                    // Not (yet) stored: the unknown start may still commit late, so the next
                    // start carries a new uuid (see `handle_observed`).
                    *uuid = fresh;
                }
                self.learned(state, now);
                match self.phase {
                    Phase::Starting { .. } => self.not_before = None,
                    // Just read: the next re-read only at the slow cadence.
                    Phase::Yielding { .. } => self.slow_retry(now),
                    _ => {}
                }
            }
            Phase::Yielding { .. } => {
                let previous = std::mem::replace(
                    &mut self.phase,
                    Phase::Starting {
                        known: None,
                        uuid: Uuid::nil(),
                        unknown_sent_at: None,
                    },
                );
                let fresh = self.new_uuid();
                if let Phase::Starting { uuid, .. } = &mut self.phase {
                    *uuid = fresh;
                }
                // Keep counting from the first sighting when the read shows the same value.
                if let Phase::Yielding { other, since } = previous
                    && other.revision() == state.revision()
                {
                    self.phase = Phase::Yielding { other, since };
                    self.slow_retry(now);
                    return;
                }
                self.learned(state, now);
                if matches!(self.phase, Phase::Yielding { .. }) {
                    self.slow_retry(now);
                }
            }
            Phase::Init | Phase::Ending | Phase::Stopped => {}
        }
    }
}
