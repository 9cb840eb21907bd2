//! What the machine sends next: the step after every input (a leader's release or stop, a
//! candidate's claim, hold-backs, the backstop), and the writes and reads it builds.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::{BACKSTOP_GRACE, Known, Pending, Phase, RoleMachine};
use crate::core::types::{Action, FailureKind, KeyState, WriteKind, WriteRequest};
use crate::value::{HolderValue, LeaseValue};

impl RoleMachine {
    /// Earliest time a follower may act on what it knows without news (P5 backstop).
    pub(super) fn backstop_at(&self) -> Option<Instant> {
        let k = self.known.as_ref()?;
        match &k.state {
            // A lease of another protocol version is never taken over by the backstop (Q10),
            // and a version 2 lease's key does not change while its term lasts: its vacancy
            // is decided from its session (Q5, the session book: `handle_holder_gone`).
            KeyState::Held {
                value: HolderValue::Newer { .. } | HolderValue::Lease(_),
                ..
            } => None,
            KeyState::Held { value, .. } => {
                // A foreign value, or a version 1 lease: a live v1 holder renews its key every
                // heartbeat, so one unchanged for the period on its TTL is not live (P5, Q10).
                let holder_ttl = match value {
                    HolderValue::Older { ttl_ms, .. } => Duration::from_millis(*ttl_ms),
                    other => other.lease().map_or(Duration::ZERO, LeaseValue::ttl),
                };
                Some(
                    k.seen_at
                        + self.timing.ttl.max(holder_ttl)
                        + self.timing.heartbeat
                        + BACKSTOP_GRACE,
                )
            }
            KeyState::Unknown { .. } => Some(k.seen_at + self.timing.heartbeat),
            _ => None,
        }
    }

    /// The role value of a term started on `session` with `nonce` (Q2).
    pub(super) fn value_with(&self, nonce: Uuid, session: Uuid) -> LeaseValue {
        LeaseValue {
            v: crate::value::VALUE_VERSION,
            holder: self.id.instance.clone(),
            incarnation: self.id.incarnation,
            session,
            session_key: self.session_key.clone(),
            nonce,
            term: None,
            priority: self.id.priority,
            ttl_ms: u64::try_from(self.timing.ttl.as_millis()).unwrap_or(u64::MAX),
            meta: self.id.meta.clone(),
            acquired_at: None,
            renewed_at: None,
        }
    }

    pub(super) fn op_id(&mut self) -> u64 {
        let op = self.next_op;
        self.next_op += 1;
        op
    }

    pub(super) fn send_write(
        &mut self,
        kind: WriteKind,
        expected: u64,
        value: Option<LeaseValue>,
        timeout: Duration,
    ) -> u64 {
        let op = self.op_id();
        self.actions.push_back(Action::Write(WriteRequest {
            op,
            kind,
            expected,
            value,
            timeout,
        }));
        op
    }

    pub(super) fn send_acquire(&mut self, expected: u64, now: Instant) {
        if !self.permit {
            // A slot whose sibling holds the permit (Q15, S7): it keeps following; the driver
            // steps it again when the permit is its own.
            return;
        }
        if let Some(until) = self.young_until {
            if now < until {
                // A young bucket (Q6): a holder of the bucket it replaced may still act.
                self.not_before = Some(until);
                return;
            }
            self.young_until = None;
        }
        let Some((session, acked)) = self.session else {
            // No live session: nothing to rest a term on. `handle_session` steps again.
            return;
        };
        if now >= acked + self.timing.local_lease() {
            // The session's last renewal known here is older than this role's local lease (the
            // session's loss is on its way, or the session's lease is longer than the role's):
            // a term on it could not be promoted. Wait for the next session update — which the
            // driver must deliver even while renewals wake no role (Q4).
            self.wants_renewal = true;
            return;
        }
        let nonce = Uuid::from_u64_pair(self.rng.next_u64(), self.rng.next_u64());
        let value = self.value_with(nonce, session);
        let timeout = self.timing.operation_timeout;
        let op = self.send_write(WriteKind::Acquire, expected, Some(value), timeout);
        self.pending = Some(Pending::Acquire {
            op,
            nonce,
            expected,
            session,
        });
        self.confirmed = None;
    }

    pub(super) fn send_release(&mut self, expected: u64, timeout: Duration) {
        let op = self.send_write(WriteKind::Release, expected, None, timeout);
        self.pending = Some(Pending::Release { op });
    }

    pub(super) fn send_read(&mut self, timeout: Duration) {
        self.observed_during_read = false;
        let op = self.op_id();
        self.pending = Some(Pending::Read { op });
        self.actions.push_back(Action::Read { op, timeout });
    }

    /// Decides the next operation from the current state (called after every input).
    pub(super) fn step(&mut self, now: Instant) {
        self.check_deadline(now);
        self.hand_over_unserved_value();
        if self.pending.is_some() || self.not_before.is_some_and(|t| now < t) {
            return;
        }
        match &self.phase {
            Phase::Leader(_) => self.step_leader(now),
            Phase::Candidate => self.step_candidate(now),
            Phase::Cooldown { until } => {
                let until = *until;
                if !self.clean_up_stray_acquire() && now >= until {
                    self.phase = Phase::Candidate;
                    self.step_candidate(now);
                }
            }
            Phase::Stopping => {
                if !self.clean_up_stray_acquire() {
                    self.finish_stop();
                }
            }
            Phase::Init | Phase::Observer | Phase::Stopped => {}
        }
    }

    /// A role value naming this instance's live session at a revision that is not our term,
    /// which this machine will not take over now — it cools down after a release, or cannot
    /// write the role key (a permanent failure is reported) — is handed over through the
    /// session (Q4, Q5 rule 5): nobody acts on it, and every candidate then finds the role
    /// vacant instead of waiting for the cooldown or the slow retry. Once per revision, and
    /// never while an acquire of ours is in flight or of unknown outcome (the value may be its
    /// put, seen before the acknowledgement: it may still become our term).
    pub(super) fn hand_over_unserved_value(&mut self) {
        let Some((session, _)) = self.session else {
            return;
        };
        if matches!(self.pending, Some(Pending::Acquire { .. })) {
            return;
        }
        let unserved = match &self.phase {
            Phase::Cooldown { .. } => true,
            // A slot without the permit (Q15) does not take it over either.
            Phase::Candidate => {
                !self.permit
                    || self
                        .attempts
                        .reported()
                        .is_some_and(FailureKind::is_permanent)
            }
            _ => false,
        };
        let Some(Known {
            state:
                KeyState::Held {
                    revision,
                    value: HolderValue::Lease(v),
                },
            ..
        }) = &self.known
        else {
            return;
        };
        if !unserved
            || v.session != session
            || self.unknown_nonce == Some(v.nonce)
            || self.handed_over == Some(*revision)
        {
            return;
        }
        let revision = *revision;
        self.handed_over = Some(revision);
        self.actions
            .push_back(Action::ReleaseTerm { revision, session });
    }

    /// An acquire that was in flight when a release or stop began must not leave a lease no
    /// one serves: delete it if it won, find out by a read if its outcome is unknown. True
    /// while such work was sent.
    pub(super) fn clean_up_stray_acquire(&mut self) -> bool {
        let timeout = self.timing.operation_timeout;
        if let Some(rev) = self.stop_cleanup {
            self.send_release(rev, timeout);
            true
        } else if self.unknown_nonce.is_some() {
            self.send_read(timeout);
            true
        } else {
            false
        }
    }

    pub(super) fn step_leader(&mut self, now: Instant) {
        let Phase::Leader(l) = &self.phase else {
            return;
        };
        let remaining = l.term.deadline.saturating_duration_since(now);
        let timeout = self.timing.operation_timeout.min(remaining);
        if timeout.is_zero() {
            return;
        }
        // Version 2: the role key is not renewed (the session is); it is written again only
        // to end the term (Q4).
        if l.release.as_ref().is_some_and(|r| r.verify) {
            self.send_read(timeout);
        } else if l.release.as_ref().is_some_and(|r| r.drained) {
            let rev = l.rev;
            self.send_release(rev, timeout);
        }
    }

    pub(super) fn step_candidate(&mut self, now: Instant) {
        let timeout = self.timing.operation_timeout;
        let Some(k) = self.known.clone() else {
            // Nothing known yet: learn the key's revision first (P3: a read only supplies the
            // expected revision of the next CAS).
            self.send_read(timeout);
            return;
        };
        match &k.state {
            KeyState::Absent | KeyState::Vacant { .. } => {
                // A key with no entry at all (never written — or every entry of the stream
                // removed without a marker: a stream purge, a bucket recreated under the same
                // epoch) says nothing about a holder that may still act on a term it won
                // there: acquire only once it was absent for a TTL + heartbeat (Q5 rule 1, Q6).
                // A marker is a fact: no such wait.
                let absent = if self.absent_hold && matches!(k.state, KeyState::Absent) {
                    self.timing.ttl + self.timing.heartbeat
                } else {
                    Duration::ZERO
                };
                // Placement hold-back: another live instance is preferred; let it acquire
                // first and contend only if it does not within the delay.
                // The plan's target does not wait for the herd: the others hold back anyway.
                let herd = if self.campaign_first {
                    Duration::ZERO
                } else {
                    self.herd_delay
                };
                let mut delay = self
                    .move_delay
                    .unwrap_or_else(|| self.campaign_delay.max(herd));
                // Held back by placement for another member at a key with no entry (a new group
                // member, a fleet's first start): that member's wait for the absent key counts
                // from its own first read, which can come well after this one's when many keys
                // are added at once (issue 28: 256 new members, reads up to seconds apart), so
                // the claim grace alone let the quickest readers take the slow readers'
                // members. Wait that long once more; the target still claims first.
                if self.move_delay.is_none() && !self.campaign_delay.is_zero() {
                    delay += absent;
                }
                // The hold-back counts from when the role could first be taken (after the
                // absent key's wait and a young bucket's): otherwise it would have passed
                // during those waits, and at their end every candidate would claim at once,
                // the first one to start taking nearly every role of a new bucket (issue 27).
                let open = (k.seen_at + absent).max(self.young_until.unwrap_or(k.seen_at));
                let hold = open + delay;
                if now < hold {
                    // The jitter is added here: when `not_before` passes, the acquire goes
                    // out at once, and held-back candidates must not all fire together.
                    let jitter = self.rng.below(self.timing.campaign_jitter);
                    self.not_before = Some(hold + jitter);
                    return;
                }
                // Vacancy: contend after a small random delay (P5). `not_before` already
                // passed if it was set, so a set value means the jitter has been waited.
                if self.not_before.take().is_some() {
                    self.send_acquire(k.rev(), now);
                } else {
                    let jitter = self.rng.below(self.timing.campaign_jitter);
                    if jitter.is_zero() {
                        self.send_acquire(k.rev(), now);
                    } else {
                        self.not_before = Some(now + jitter);
                    }
                }
            }
            KeyState::Unknown { .. } => {
                if self.backstop_at().is_some_and(|b| now >= b) {
                    self.send_read(timeout);
                }
            }
            KeyState::Held { value, revision } => {
                let revision = *revision;
                if self.backstop_at().is_none() {
                    // Nothing to time (a v2 lease: the session book reports when its holder is
                    // gone; or ours, waiting for a session): a passed backoff must not stay
                    // due (a busy loop).
                    self.not_before = None;
                }
                if self.session.is_none() {
                    // Nothing can be acquired without a session (Q4): decide about adoption
                    // and duplicates once it is live (`handle_session` steps again).
                    return;
                }
                if let HolderValue::Lease(v) = value
                    && v.holder == self.id.instance
                {
                    let our_session = self.session.is_some_and(|(u, _)| u == v.session);
                    if v.incarnation == self.id.incarnation || our_session {
                        // Our own write (a late acquire, or a term we demoted from while the
                        // key stayed ours) — or a value somebody else wrote naming our live
                        // session, on which nobody acts (Q4): take it over with a CAS,
                        // starting a new term. Never a duplicate: a predecessor's or a
                        // duplicate's value names its own session, not ours.
                        self.send_acquire(revision, now);
                        return;
                    }
                    if !self.adopted_or_wrote
                        && self.first_seen_rev.is_some_and(|first| revision <= first)
                    {
                        // Restart adoption (P5), once per role and process, and only of a
                        // lease that was already there when this process first looked: one
                        // written later is a live duplicate's. Without a live session nothing
                        // is sent yet: the adoption waits for it (not a duplicate).
                        self.send_acquire(revision, now);
                        self.adopted_or_wrote = self.pending.is_some();
                        return;
                    }
                    // (Already reported when observed, unless it was seen before this
                    // process's own write or adoption.)
                    let other = v.incarnation;
                    self.report_duplicate(other);
                }
                if self.backstop_at().is_some_and(|b| now >= b) {
                    if self.confirmed == Some(revision) {
                        // Unchanged for longer than any lease: take over on that revision.
                        self.send_acquire(revision, now);
                    } else {
                        self.send_read(timeout);
                    }
                }
            }
        }
    }
}
