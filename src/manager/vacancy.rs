//! [`VacancyClock`]: how long each role stays without a holder, by cause, measured once per
//! vacancy across the deployment — the releasing instance measures its own hand-overs and
//! placement moves (from its delete's acknowledgement to the next holder's put seen by its
//! watcher), the instance that takes a role over after a crash measures that vacancy (from the
//! moment its watcher saw the holder gone to its own put). Reported as
//! `nats_roles_role_vacancy_seconds{cause}`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::names::{InstanceId, RoleName};

/// Why a role became vacant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VacancyCause {
    /// The holder's session or lease ran out (crash, partition).
    Crash,
    /// The holder released it (stop, release, health, eviction of itself).
    HandOver,
    /// Placement moved it (a voluntary release).
    Move,
}

impl VacancyCause {
    /// The metric label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Crash => "crash",
            Self::HandOver => "hand_over",
            Self::Move => "move",
        }
    }
}

/// Open vacancies of roles this instance measures, and what its watcher last saw of each
/// role — the role runner hears of its own delete's acknowledgement on its own task, so the
/// watcher may see the next holder first (a loaded machine); the revisions put the two in
/// order.
#[derive(Debug, Default)]
pub(crate) struct VacancyClock {
    roles: Mutex<HashMap<RoleName, Sightings>>,
}

/// One role's open vacancy and the watcher's last sightings of it.
#[derive(Debug, Default)]
struct Sightings {
    /// A vacancy this instance measures: since when, and why.
    open: Option<(Instant, VacancyCause)>,
    /// The last delete the watcher saw: its revision and when.
    deleted: Option<(u64, Instant)>,
    /// The last holder the watcher saw: the revision, who and when.
    held: Option<(u64, InstanceId, Instant)>,
}

/// Longest vacancy measured; older open ones are dropped (nobody took the role).
const MAX_OPEN: Duration = Duration::from_secs(3600);

impl VacancyClock {
    /// This instance's release of `role` was stored at `revision`; its acknowledgement arrived
    /// at `at`. The vacancy starts at the earlier of `at` and the watcher's sighting of that
    /// delete; when the watcher already saw a later holder, it ends at once.
    pub(crate) fn released(
        &self,
        role: &RoleName,
        cause: VacancyCause,
        revision: u64,
        at: Instant,
        me: &InstanceId,
    ) -> Option<(VacancyCause, Duration)> {
        let mut roles = self.roles.lock().ok()?;
        let s = roles.entry(role.clone()).or_default();
        let start = match s.deleted {
            Some((r, seen)) if r == revision => seen.min(at),
            _ => at,
        };
        match &s.held {
            Some((r, holder, seen)) if *r > revision => {
                s.open = None;
                let took = seen.saturating_duration_since(start);
                (holder != me && took <= MAX_OPEN).then_some((cause, took))
            }
            _ => {
                s.open = Some((start, cause));
                None
            }
        }
    }

    /// The watcher saw `role` deleted at `revision` (not an expiry: a holder's delete).
    pub(crate) fn deleted(&self, role: &RoleName, revision: u64, at: Instant) {
        if let Ok(mut roles) = self.roles.lock() {
            roles.entry(role.clone()).or_default().deleted = Some((revision, at));
        }
    }

    /// The watcher saw `role`'s holder gone (session ended, expiry marker) at `at`; the
    /// earliest sighting counts.
    pub(crate) fn crashed(&self, role: &RoleName, at: Instant) {
        if let Ok(mut roles) = self.roles.lock() {
            roles
                .entry(role.clone())
                .or_default()
                .open
                .get_or_insert((at, VacancyCause::Crash));
        }
    }

    /// The watcher saw `holder` hold `role` at `revision` at `at`: the vacancy this instance
    /// measures, if any, ends — a release of ours when someone else took it, a crash when we
    /// took it.
    pub(crate) fn held(
        &self,
        role: &RoleName,
        holder: &InstanceId,
        revision: u64,
        me: &InstanceId,
        at: Instant,
    ) -> Option<(VacancyCause, Duration)> {
        let mut roles = self.roles.lock().ok()?;
        let s = roles.entry(role.clone()).or_default();
        s.held = Some((revision, holder.clone(), at));
        let (since, cause) = s.open.take()?;
        let mine = match cause {
            VacancyCause::Crash => holder == me,
            VacancyCause::HandOver | VacancyCause::Move => holder != me,
        };
        let took = at.saturating_duration_since(since);
        (mine && took <= MAX_OPEN).then_some((cause, took))
    }

    /// `role` left this instance's configuration: forget it.
    pub(crate) fn forget(&self, role: &RoleName) {
        if let Ok(mut roles) = self.roles.lock() {
            roles.remove(role);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (RoleName, InstanceId, InstanceId) {
        (
            RoleName::new("r").expect("valid"),
            InstanceId::new("a").expect("valid"),
            InstanceId::new("b").expect("valid"),
        )
    }

    #[test]
    fn each_vacancy_is_measured_by_one_instance() {
        let (role, a, b) = ids();
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        // a released (delete at revision 10), b took it (revision 11): a measures a move.
        let on_a = VacancyClock::default();
        assert_eq!(on_a.released(&role, VacancyCause::Move, 10, t0, &a), None);
        assert_eq!(
            on_a.held(&role, &b, 11, &a, t0 + 3 * ms),
            Some((VacancyCause::Move, 3 * ms))
        );
        // b saw a crash, b took it: b measures it; c (another observer) measures nothing.
        let on_b = VacancyClock::default();
        on_b.crashed(&role, t0);
        on_b.crashed(&role, t0 + ms);
        assert_eq!(
            on_b.held(&role, &b, 12, &b, t0 + 5 * ms),
            Some((VacancyCause::Crash, 5 * ms))
        );
        let c = InstanceId::new("c").expect("valid");
        let on_c = VacancyClock::default();
        on_c.crashed(&role, t0);
        assert_eq!(on_c.held(&role, &b, 12, &c, t0), None);
        // Nothing open: nothing measured.
        assert_eq!(on_c.held(&role, &b, 13, &b, t0), None);
    }

    #[test]
    fn a_release_acknowledged_after_the_next_holder_was_seen_is_still_measured() {
        let (role, a, b) = ids();
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let on_a = VacancyClock::default();
        // An earlier term of a (revision 9) was seen; then the watcher sees a's delete
        // (revision 10) and b's put (revision 11) before a's role runner hears the delete's
        // acknowledgement.
        assert_eq!(on_a.held(&role, &a, 9, &a, t0), None);
        on_a.deleted(&role, 10, t0 + ms);
        assert_eq!(on_a.held(&role, &b, 11, &a, t0 + 4 * ms), None);
        assert_eq!(
            on_a.released(&role, VacancyCause::Move, 10, t0 + 9 * ms, &a),
            Some((VacancyCause::Move, 3 * ms))
        );
        // Nothing stays open for the next holder change.
        assert_eq!(on_a.held(&role, &a, 12, &a, t0 + 20 * ms), None);
        // The acknowledgement first, the watcher's sighting of the delete after: the earlier
        // time starts the vacancy.
        assert_eq!(
            on_a.released(&role, VacancyCause::HandOver, 13, t0 + 30 * ms, &a),
            None
        );
        on_a.deleted(&role, 13, t0 + 31 * ms);
        assert_eq!(
            on_a.held(&role, &b, 14, &a, t0 + 32 * ms),
            Some((VacancyCause::HandOver, 2 * ms))
        );
        // a took its own role back after releasing it: not a vacancy a measures as a move.
        assert_eq!(on_a.held(&role, &a, 16, &a, t0 + 40 * ms), None);
        assert_eq!(
            on_a.released(&role, VacancyCause::Move, 15, t0 + 41 * ms, &a),
            None
        );
        assert_eq!(on_a.held(&role, &b, 17, &a, t0 + 50 * ms), None);
    }
}
