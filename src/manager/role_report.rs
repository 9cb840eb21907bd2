//! The one reporter of a role's changes: what its driver decided or learned goes from here to
//! every place that shows it — the tap (histories, metrics), the log and trace spans, the
//! role's status watch and the manager's events — each in the order the guarantees need (a
//! term is in the status before the event announces it; a demotion is recorded before it is
//! delivered). The role runner only says what happened.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::events::RoleEvent;
use super::shared::Shared;
use super::status::RoleStatus;
use crate::core::{DemoteReason, FailureKind, KeyState};
use crate::names::RoleName;
use crate::status::RoleState;
use crate::store::ROLE_PREFIX;
use crate::tap::TapEvent;
use crate::token::FencingToken;

/// What one role's driver reports, and the little state reporting needs.
pub(crate) struct RoleReport {
    role: RoleName,
    shared: Arc<Shared>,
    /// The role's status: this reporter is its only writer.
    status: watch::Sender<RoleStatus>,
    /// When the current term was promoted (for the term's duration).
    promoted_at: Option<Instant>,
    /// The span of the current term (open from promotion to demotion); KV operations of the
    /// term are its children.
    term_span: Option<tracing::Span>,
    /// The state last reported to the tap and the log (the status may be ahead: promotions
    /// and demotions write it directly).
    reported: RoleState,
}

/// What the role's driver knows when it publishes the role's status after a step.
pub(crate) struct Snapshot<'a> {
    /// The machine's state.
    pub(crate) state: RoleState,
    /// The key's state as the machine knows it.
    pub(crate) observed: Option<&'a KeyState>,
    /// Whether the connection to NATS is up.
    pub(crate) connected: bool,
    /// The end of a cooldown after a release.
    pub(crate) cooldown_until: Option<Instant>,
    /// The machine's current term, if it holds one.
    pub(crate) term: Option<u64>,
}

impl RoleReport {
    /// The reporter of `role`, writing its status into `status`.
    pub(crate) fn new(
        role: RoleName,
        shared: Arc<Shared>,
        status: watch::Sender<RoleStatus>,
    ) -> Self {
        Self {
            role,
            shared,
            status,
            promoted_at: None,
            term_span: None,
            reported: RoleState::Init,
        }
    }

    /// The role's status as last published.
    pub(crate) fn status(&self) -> watch::Ref<'_, RoleStatus> {
        self.status.borrow()
    }

    /// Reports `event` to the manager's tap sinks.
    pub(crate) fn tap(&self, event: TapEvent) {
        self.shared
            .tap
            .record(&self.shared.instance, &self.role, event);
    }

    /// A span for one KV operation: a child of the term's span while a term is open.
    pub(crate) fn kv_span(
        &self,
        op: &'static str,
        kind: &'static str,
        expected: u64,
    ) -> tracing::Span {
        let parent = self.term_span.as_ref().and_then(tracing::Span::id);
        tracing::debug_span!(
            parent: parent.or_else(|| tracing::Span::current().id()),
            "kv",
            op,
            kind,
            expected,
            outcome = tracing::field::Empty,
        )
    }

    /// A term started: log, term span and tap record — before the term is published or
    /// follows the session's renewals (the session task records each renewal of a held term,
    /// and the history must show the promotion first).
    pub(crate) fn promoted(
        &mut self,
        token: FencingToken,
        deadline: Instant,
        session: Option<uuid::Uuid>,
    ) {
        let term = token.term();
        info!(term, "promoted");
        self.promoted_at = Some(Instant::now());
        self.term_span = Some(tracing::info_span!(
            "term",
            role = %self.role,
            instance = %self.shared.instance,
            term,
            reason = tracing::field::Empty,
        ));
        self.tap(TapEvent::Promoted {
            token,
            deadline,
            session,
        });
    }

    /// The term recorded by [`RoleReport::promoted`] is now the current one: status, state
    /// change, event — in that order.
    pub(crate) fn leading(&mut self, token: FencingToken) {
        let term = token.term();
        let instance = self.shared.instance.clone();
        self.status.send_modify(|s| {
            // The term is in `current` before the status says LEADER.
            s.state = RoleState::Leader;
            s.last_transition = SystemTime::now();
            s.term = Some(term);
            s.token = Some(token);
            s.leader_id = Some(instance);
            s.held_since = Some(SystemTime::now());
            s.last_heartbeat = Some(SystemTime::now());
        });
        self.state_changed(RoleState::Leader, None, term);
        self.shared.emit(RoleEvent::Promoted {
            role: self.role.clone(),
            term,
        });
    }

    /// Where placement wants the role (shown in the status).
    pub(crate) fn preferred(&self, preferred: Option<crate::placement::Preferred>) {
        self.status.send_if_modified(|s| {
            let changed = s.preferred != preferred;
            s.preferred = preferred;
            changed
        });
    }

    /// The held term's deadline moved with a session renewal at `at`.
    pub(crate) fn renewed(&self, at: SystemTime) {
        self.status.send_modify(|s| s.last_heartbeat = Some(at));
    }

    /// The term held here stopped following renewals; the last one that moved its deadline
    /// was at `at` (the status keeps the newest).
    pub(crate) fn last_renewal(&self, at: SystemTime) {
        self.status.send_if_modified(|s| {
            let newer = s.last_heartbeat.is_none_or(|held| held < at);
            if newer {
                s.last_heartbeat = Some(at);
            }
            newer
        });
    }

    /// A demotion that is not carried out (the test-only negative controls): the term stays
    /// open for the application and the history; only its duration is forgotten.
    pub(crate) fn demotion_skipped(&mut self) {
        self.promoted_at = None;
    }

    /// A term ended for `reason` (its token already cancelled): tap, span, log, status,
    /// state change, event — before the demotion is delivered to the application.
    pub(crate) fn demoted(&mut self, token: FencingToken, reason: DemoteReason) {
        let held = self
            .promoted_at
            .take()
            .map_or(Duration::ZERO, |at| at.elapsed());
        self.tap(TapEvent::Demoted {
            token,
            reason,
            held,
        });
        if let Some(span) = self.term_span.take() {
            span.record("reason", reason.as_str());
        }
        let term = token.term();
        if matches!(reason, DemoteReason::Released(_)) {
            info!(term, %reason, "demoted");
        } else {
            warn!(term, %reason, "demoted");
        }
        self.status.send_modify(|s| {
            s.state = RoleState::Demoted;
            s.last_transition = SystemTime::now();
            s.token = None;
            s.held_since = None;
            s.last_demote_reason = Some(reason);
        });
        self.state_changed(RoleState::Demoted, Some(reason), term);
        self.shared.emit(RoleEvent::Demoted {
            role: self.role.clone(),
            term,
            reason,
        });
    }

    /// Another live process uses this instance's id (`other_incarnation`, if known).
    pub(crate) fn duplicate(&self, other_incarnation: Option<uuid::Uuid>) {
        if let Some(other_incarnation) = other_incarnation {
            error!(
                %other_incarnation,
                "another live process uses this instance id; instance ids must be unique"
            );
        }
        self.status.send_modify(|s| s.duplicate_instance = true);
        self.shared.emit(RoleEvent::DuplicateInstance {
            role: self.role.clone(),
        });
    }

    /// The role cannot campaign or renew: reported once per condition (tap, log, status,
    /// event).
    pub(crate) fn failed(&self, kind: FailureKind) {
        self.tap(TapEvent::Failed(kind));
        let text = self.shared.store.describe(kind);
        if kind.is_permanent() {
            error!(
                error = %text,
                class = kind.class().as_str(),
                "role cannot campaign or renew; retrying slowly until fixed"
            );
        } else {
            warn!(
                error = %text,
                class = kind.class().as_str(),
                "role cannot campaign or renew; retrying with backoff"
            );
        }
        self.status.send_modify(|s| {
            s.last_error = Some(text);
            s.failure = Some(kind);
        });
        self.shared.emit(RoleEvent::Failed {
            role: self.role.clone(),
            kind,
        });
    }

    /// The server answers normally again.
    pub(crate) fn recovered(&self) {
        self.tap(TapEvent::Recovered);
        info!("the server answers normally again");
        self.status.send_modify(|s| {
            s.last_error = None;
            s.failure = None;
        });
        self.shared.emit(RoleEvent::Recovered {
            role: self.role.clone(),
        });
    }

    /// The driver stopped for good.
    pub(crate) fn stopped(&self) {
        self.status.send_modify(|s| s.state = RoleState::Stopped);
    }

    /// After a step: the status follows the machine (state, connection, cooldown, the key's
    /// holder, a lease of another protocol version), and a change of state is reported.
    pub(crate) fn publish(&mut self, now: Snapshot<'_>) {
        let Snapshot {
            state,
            observed,
            connected,
            cooldown_until,
            term,
        } = now;
        let placement = self.shared.placement.as_deref();
        let role = &self.role;
        // Field by field (a step that changes nothing clones and allocates nothing: most
        // steps of a mass fail-over change a candidate's status little or not at all).
        self.status.send_if_modified(|s| {
            let mut changed = false;
            if (s.cooldown_until, s.state) != (cooldown_until, state) {
                s.state = state;
                s.cooldown_until = cooldown_until;
                changed = true;
                if let Some(p) = placement {
                    p.changed(); // placement publishes the roles this instance will not take
                }
            }
            changed |= set(&mut s.connected, connected);
            if let Some(obs) = observed {
                changed |= set(&mut s.revision, obs.revision());
                if state != RoleState::Leader {
                    changed |= show_holder(role, s, obs);
                }
            }
            changed
        });
        let reason = if self.reported == RoleState::Leader {
            self.status.borrow().last_demote_reason
        } else {
            None
        };
        let term = term.or_else(|| self.status.borrow().term);
        self.state_changed(state, reason, term);
    }

    /// Reports a change of state (tap event, span and log event), once per change.
    fn state_changed(
        &mut self,
        to: RoleState,
        reason: Option<DemoteReason>,
        term: impl Into<Option<u64>>,
    ) {
        let from = std::mem::replace(&mut self.reported, to);
        if from == to {
            return;
        }
        let reason = (from == RoleState::Leader).then_some(reason).flatten();
        let term = term.into();
        let why = reason.map_or("none", DemoteReason::as_str);
        let (role, instance, from_s, to_s) = (
            &self.role,
            &self.shared.instance,
            from.as_str(),
            to.as_str(),
        );
        // A span per transition for trace backends (closed at once: it marks the moment), and
        // the log event beside it, so that log lines do not repeat the fields.
        if is_term_transition(from, to) {
            drop(
                tracing::info_span!("transition", %role, %instance, from = from_s, to = to_s, term, reason = why),
            );
            info!(%role, %instance, from = from_s, to = to_s, term, reason = why, "transition");
        } else {
            // A role this instance does not hold going between waiting and contending: every
            // vacancy of every role makes each candidate log two (1,000 roles: 2,000 lines per
            // instance per mass fail-over), so they log at debug, and their span is a debug
            // span (an enabled span formats its fields when created: ≈ 5 % of a candidate's
            // CPU in a mass fail-over).
            drop(
                tracing::debug_span!("transition", %role, %instance, from = from_s, to = to_s, term, reason = why),
            );
            debug!(%role, %instance, from = from_s, to = to_s, term, reason = why, "transition");
        }
        self.tap(TapEvent::StateChanged { from, to, reason });
    }
}

/// The status of a role this instance does not hold shows the key's holder (or none), and a
/// lease of another protocol version as the role's error until the key holds none.
fn show_holder(role: &RoleName, s: &mut RoleStatus, obs: &KeyState) -> bool {
    match obs {
        KeyState::Held { value, .. } => {
            let mut changed = false;
            if let Some(version) = value.other_protocol() {
                if s.incompatible_version != Some(version) {
                    s.incompatible_version = Some(version);
                    let text = format!(
                        "incompatible protocol v{version} in {ROLE_PREFIX}{role}: this instance \
                         speaks version {} and never takes it over (one protocol version per \
                         bucket; upgrade by a new bucket or stop-the-world: docs/protocol.md, \
                         Q10)",
                        crate::value::VALUE_VERSION
                    );
                    error!(%role, version, "{text}");
                    s.last_error = Some(text);
                    changed = true;
                }
            } else {
                changed |= clear_incompatible(s);
            }
            let lease = obs.lease();
            if s.leader_id.as_ref() != lease.map(|l| &l.holder) {
                s.leader_id = lease.map(|l| l.holder.clone());
                changed = true;
            }
            changed |= set(&mut s.term, lease.map(|l| l.term.unwrap_or(obs.revision())));
            changed |= set(&mut s.foreign_holder, lease.is_none());
            changed
        }
        KeyState::Vacant { .. } | KeyState::Absent => {
            let mut changed = clear_incompatible(s);
            changed |= set(&mut s.leader_id, None);
            changed |= set(&mut s.term, None);
            changed |= set(&mut s.foreign_holder, false);
            changed
        }
        KeyState::Unknown { .. } => false,
    }
}

/// Sets `field` to `value`; whether it changed.
fn set<T: PartialEq>(field: &mut T, value: T) -> bool {
    if *field == value {
        return false;
    }
    *field = value;
    true
}

/// The role's key no longer holds a lease of another protocol: its mismatch report is over.
fn clear_incompatible(s: &mut RoleStatus) -> bool {
    if s.incompatible_version.take().is_some() {
        s.last_error = None;
        return true;
    }
    false
}

/// Whether a change of state concerns a term of this instance (logged at info): one to or from
/// `LEADER` or `DEMOTED`, or the end (`STOPPED`). The others — `INIT`, `CANDIDATE` and
/// `FOLLOWER` among themselves — are a candidate waiting and contending (logged at debug).
fn is_term_transition(from: RoleState, to: RoleState) -> bool {
    [from, to].iter().any(|s| {
        matches!(
            s,
            RoleState::Leader | RoleState::Demoted | RoleState::Stopped
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transitions_of_terms_and_the_end_are_loud() {
        use RoleState::{Candidate, Demoted, Follower, Init, Leader, Stopped};
        for (from, to) in [
            (Init, Candidate),
            (Candidate, Follower),
            (Follower, Candidate),
        ] {
            assert!(!is_term_transition(from, to), "{from:?} -> {to:?}");
        }
        for (from, to) in [
            (Candidate, Leader),
            (Leader, Demoted),
            (Demoted, Follower),
            (Follower, Stopped),
        ] {
            assert!(is_term_transition(from, to), "{from:?} -> {to:?}");
        }
    }
}
