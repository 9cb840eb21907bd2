//! What the driver asks the controller after every input: whether re-plans are due on a timer
//! ([`Controller::busy`]), and which member records are stale enough to delete
//! ([`Controller::stale_records`]).

use std::time::Duration;

use tokio::time::Instant;

use super::Controller;
use crate::names::InstanceId;
use crate::placement::freeze::Frozen;

impl Controller {
    /// Whether re-plans are due on a timer now (placement is event-driven otherwise, protocol
    /// Q9): a move in flight, vacancies or receivers being waited for, membership that time
    /// alone changes, roles held here that the last plan gives elsewhere (the move budget,
    /// a cooldown or a freeze holds them back), roles being prepared, roles this instance
    /// will not take now (a cooldown ends with time).
    #[must_use]
    pub fn busy(&self) -> bool {
        self.in_flight.is_some()
            || !self.vacant_since.is_empty()
            || !self.awaiting.is_empty()
            || !self.preparing.is_empty()
            // A cooldown or an eviction's wait ends with time (the record then says so).
            || !self.unavailable.is_empty()
            || self.moves_left
            || matches!(self.frozen, Some(Frozen::Storm { .. }))
            || self.membership.settling()
    }

    /// Records of members whose sessions are gone for the leave delay, a stability window and
    /// `grace` (protocol Q9): `(instance, revision)`, for the driver to delete by CAS. Deleting
    /// is housekeeping: `grace` keeps a session that is only being started again (a loss, a
    /// restart) from costing its member a record rewrite.
    #[must_use]
    pub fn stale_records(&self, now: Instant, grace: Duration) -> Vec<(InstanceId, u64)> {
        self.membership
            .stale_records(now, self.settings.config.stability_window + grace)
            .into_iter()
            .filter(|(id, _)| id != &self.settings.instance)
            .collect()
    }
}
