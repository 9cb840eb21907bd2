//! The slot permit (protocol Q15, invariant S7): the slots of one role on one process share a
//! permit kept by their driver, and a slot's machine sends an acquire only while it has it.

use super::{Known, Pending, Phase, RoleMachine};
use crate::core::types::KeyState;
use crate::value::HolderValue;

impl RoleMachine {
    /// Gives (`true`) or takes away (`false`) this machine's permit to send acquires. A
    /// machine without it keeps following the role key (reads, observations, the backstop's
    /// reads) but sends no acquire, and a value naming its live session is handed over
    /// through the session instead of taken over. A permit given back does not step the
    /// machine: the driver wakes it (`handle_timeout`). Default: `true` (a role that is not a
    /// slot never loses it).
    ///
    /// The driver must never take the permit from a machine that
    /// [claims it](RoleMachine::claims_permit): the permit protects the other slots from
    /// this one, not this one's term.
    pub fn set_acquire_permit(&mut self, permit: bool) {
        self.permit = permit;
    }

    /// Whether this machine may send an acquire ([`RoleMachine::set_acquire_permit`]).
    #[must_use]
    pub fn acquire_permit(&self) -> bool {
        self.permit
    }

    /// Whether a placement or targeted-move hold-back delays this machine's claim of a
    /// vacancy (another instance is preferred for it): the driver gives the permit first to a
    /// slot this instance is not held back from.
    #[must_use]
    pub fn held_back(&self) -> bool {
        self.move_delay
            .map_or(!self.campaign_delay.is_zero(), |d| !d.is_zero())
    }

    /// Whether this machine claims the permit of its role's slots (Q15): while it holds a
    /// term (a release and its drain included), has an acquire in flight, or one whose
    /// outcome it has not resolved yet (including a won acquire sent before a stop, not yet
    /// deleted). While one slot claims it, no sibling may send an acquire: a process's terms
    /// on two slots of a role never overlap (S7).
    ///
    /// An acquire of unknown outcome is resolved once the key shows another writer's value:
    /// the write lost its compare-and-set, or won and was replaced without ever being acted
    /// on (a term starts only on an acknowledged acquire, P4). Resolved for good: a later
    /// vacancy (that writer's term ended, or its session is gone) does not bring it back.
    #[must_use]
    pub fn claims_permit(&self) -> bool {
        matches!(self.phase, Phase::Leader(_))
            || matches!(self.pending, Some(Pending::Acquire { .. }))
            || self.stop_cleanup.is_some()
            || self
                .unknown_nonce
                .is_some_and(|nonce| self.unknown_resolved != Some(nonce) && !self.replaced(nonce))
    }

    /// Records that the acquire of unknown outcome is resolved once the key shows another
    /// writer's value (whenever either becomes known: [`RoleMachine::claims_permit`]).
    pub(super) fn note_resolved(&mut self) {
        if let Some(nonce) = self.unknown_nonce.filter(|n| self.replaced(*n)) {
            self.unknown_resolved = Some(nonce);
        }
    }

    /// Whether the key shows a value other than the one our write with `nonce` would put.
    pub(super) fn replaced(&self, nonce: uuid::Uuid) -> bool {
        match &self.known {
            Some(Known {
                state: KeyState::Held { value, .. },
                ..
            }) => !matches!(value, HolderValue::Lease(v) if v.nonce == nonce),
            _ => false,
        }
    }
}
