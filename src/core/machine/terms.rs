//! How a term ends and what ends it: a release or a stop begun, the local deadline, a
//! newer entry observed (a loss), and a duplicate's lease noticed.

use tokio::time::Instant;
use uuid::Uuid;

use super::{AfterRelease, Known, Pending, Phase, Release, RoleMachine};
use crate::core::types::{Action, DemoteReason, KeyState, Notice, ReleaseReason, Term};
use crate::value::HolderValue;

impl RoleMachine {
    pub(super) fn begin_release(
        &mut self,
        reason: ReleaseReason,
        after: AfterRelease,
        now: Instant,
    ) {
        match &mut self.phase {
            Phase::Leader(l) => {
                if let Some(r) = &mut l.release {
                    // A stop during a release-with-cooldown turns into a stop.
                    if after == AfterRelease::Stop {
                        r.after = AfterRelease::Stop;
                    }
                    return;
                }
                l.release = Some(Release {
                    after,
                    drained: false,
                    verify: false,
                    handed: false,
                });
                let term = l.term.clone();
                self.actions.push_back(Action::Demote {
                    term,
                    reason: DemoteReason::Released(reason),
                    drain: true,
                });
            }
            Phase::Stopped | Phase::Stopping => {}
            Phase::Init | Phase::Observer => {
                if after == AfterRelease::Stop {
                    self.finish_stop();
                }
            }
            Phase::Candidate | Phase::Cooldown { .. } => match after {
                AfterRelease::Stop => {
                    self.phase = Phase::Stopping;
                    if self.pending.is_none()
                        && self.unknown_nonce.is_none()
                        && self.stop_cleanup.is_none()
                    {
                        self.finish_stop();
                    }
                }
                AfterRelease::Cooldown(d) => {
                    self.phase = Phase::Cooldown { until: now + d };
                }
            },
        }
    }

    pub(super) fn finish_stop(&mut self) {
        self.phase = Phase::Stopped;
        self.actions.push_back(Action::Stopped);
    }

    /// P4: demote at the local deadline, or after the disconnect grace.
    pub(super) fn check_deadline(&mut self, now: Instant) {
        let Phase::Leader(l) = &self.phase else {
            return;
        };
        let reason = if now >= l.term.deadline {
            DemoteReason::DeadlineExpired
        } else if l
            .disconnected_since
            .is_some_and(|d| now >= d + self.timing.disconnect_grace)
        {
            DemoteReason::Disconnected
        } else {
            return;
        };
        let term = l.term.clone();
        let released = l.release.is_some();
        self.leave_leadership(term, reason, released, now);
    }

    /// Ends a term without a release round trip.
    pub(super) fn leave_leadership(
        &mut self,
        term: Term,
        reason: DemoteReason,
        demoted: bool,
        now: Instant,
    ) {
        let after = match &self.phase {
            Phase::Leader(l) => l.release.as_ref().map(|r| r.after),
            _ => None,
        };
        if !demoted {
            self.actions.push_back(Action::Demote {
                term,
                reason,
                drain: false,
            });
        } else if reason.is_loss() {
            // Demoted for a release already, its work still draining: stop it at once now.
            self.actions
                .push_back(Action::LostDuringRelease { term, reason });
        }
        // A delete in flight belongs to the ended term; its outcome is ignored.
        if matches!(self.pending, Some(Pending::Release { .. })) {
            self.pending = None;
        }
        self.not_before = None;
        match after {
            Some(AfterRelease::Stop) => self.finish_stop(),
            Some(AfterRelease::Cooldown(d)) => self.phase = Phase::Cooldown { until: now + d },
            // An operator evicted us (CAS delete of our lease): stay away for one TTL so that
            // another instance takes the role instead of this one winning it straight back.
            None if reason == DemoteReason::Evicted => {
                self.phase = Phase::Cooldown {
                    until: now + self.timing.ttl,
                };
            }
            None => {
                self.phase = if self.campaign {
                    Phase::Candidate
                } else {
                    Phase::Observer
                }
            }
        }
    }

    /// Records an observation if it is newer than what is known; demotes on a visible loss.
    pub(super) fn observe(&mut self, state: KeyState, now: Instant, validation: bool) {
        let rev = state.revision();
        if self.known.as_ref().is_some_and(|k| rev <= k.rev()) {
            return;
        }
        self.known = Some(Known {
            state: state.clone(),
            seen_at: now,
        });
        self.first_seen_rev.get_or_insert(rev);
        self.note_resolved();
        self.notice_duplicate(&state);
        self.confirmed = None;
        self.high_water = self.high_water.max(rev);
        if matches!(self.pending, Some(Pending::Read { .. })) {
            self.observed_during_read = true;
        }
        if self.attempts.clear() {
            // New information ends a wait for the watcher (not a backoff after errors).
            self.not_before = None;
        }
        let Phase::Leader(l) = &mut self.phase else {
            return;
        };
        if rev <= l.rev {
            return;
        }
        let reason = match &state {
            KeyState::Held {
                value: HolderValue::Lease(v),
                ..
            } if v.nonce == l.term.nonce => {
                // Our own write, seen before (or instead of) its acknowledgement.
                l.rev = rev;
                return;
            }
            KeyState::Held { .. } => DemoteReason::Superseded,
            KeyState::Vacant { expired: true, .. } => DemoteReason::Expired,
            KeyState::Vacant { .. } => DemoteReason::Evicted,
            KeyState::Absent | KeyState::Unknown { .. } => return,
        };
        let reason = if validation {
            DemoteReason::ValidationFailed
        } else {
            reason
        };
        let (term, released) = (l.term.clone(), l.release.is_some());
        self.leave_leadership(term, reason, released, now);
    }

    /// A lease naming this instance but another process (another incarnation, not our live
    /// session), written after this process first looked at the key, is a live duplicate's
    /// (P5): reported once per incarnation, as soon as it is seen — whatever this machine is
    /// doing (an initial read in flight, no live session yet, leading). Only a notice: the
    /// value is then treated like any other holder's (its session decides when it is gone),
    /// and waiting to report it until a candidate step finds it would miss it whenever the
    /// session book declares the value gone first.
    pub(super) fn notice_duplicate(&mut self, state: &KeyState) {
        let KeyState::Held {
            value: HolderValue::Lease(v),
            revision,
        } = state
        else {
            return;
        };
        let ours = v.incarnation == self.id.incarnation
            || self.session.is_some_and(|(u, _)| u == v.session);
        let written_later = self.first_seen_rev.is_some_and(|first| *revision > first);
        if v.holder != self.id.instance || ours || !written_later {
            return;
        }
        self.report_duplicate(v.incarnation);
    }

    /// Reports the process `incarnation` as a duplicate of this instance, once.
    pub(super) fn report_duplicate(&mut self, incarnation: Uuid) {
        if !self.duplicates.contains(&incarnation) {
            self.duplicates.push(incarnation);
            self.actions
                .push_back(Action::Notice(Notice::DuplicateInstance {
                    other_incarnation: incarnation,
                }));
        }
    }
}
