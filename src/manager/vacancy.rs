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

/// Open vacancies of roles this instance measures.
#[derive(Debug, Default)]
pub(crate) struct VacancyClock {
    open: Mutex<HashMap<RoleName, (Instant, VacancyCause)>>,
}

/// Longest vacancy measured; older open ones are dropped (nobody took the role).
const MAX_OPEN: Duration = Duration::from_secs(3600);

impl VacancyClock {
    /// This instance's release of `role` was acknowledged at `at`.
    pub(crate) fn released(&self, role: &RoleName, cause: VacancyCause, at: Instant) {
        if let Ok(mut open) = self.open.lock() {
            open.insert(role.clone(), (at, cause));
        }
    }

    /// The watcher saw `role`'s holder gone (session ended, expiry marker) at `at`; the
    /// earliest sighting counts.
    pub(crate) fn crashed(&self, role: &RoleName, at: Instant) {
        if let Ok(mut open) = self.open.lock() {
            open.entry(role.clone())
                .or_insert((at, VacancyCause::Crash));
        }
    }

    /// The watcher saw `holder` hold `role` at `at`: the vacancy this instance measures, if
    /// any, ends — a release of ours when someone else took it, a crash when we took it.
    pub(crate) fn held(
        &self,
        role: &RoleName,
        holder: &InstanceId,
        me: &InstanceId,
        at: Instant,
    ) -> Option<(VacancyCause, Duration)> {
        let mut open = self.open.lock().ok()?;
        let (since, cause) = open.remove(role)?;
        let mine = match cause {
            VacancyCause::Crash => holder == me,
            VacancyCause::HandOver | VacancyCause::Move => holder != me,
        };
        let took = at.saturating_duration_since(since);
        (mine && took <= MAX_OPEN).then_some((cause, took))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_vacancy_is_measured_by_one_instance() {
        let role = RoleName::new("r").expect("valid");
        let (a, b) = (
            InstanceId::new("a").expect("valid"),
            InstanceId::new("b").expect("valid"),
        );
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        // a released, b took it: a measures a move.
        let on_a = VacancyClock::default();
        on_a.released(&role, VacancyCause::Move, t0);
        assert_eq!(
            on_a.held(&role, &b, &a, t0 + 3 * ms),
            Some((VacancyCause::Move, 3 * ms))
        );
        // b saw a crash, b took it: b measures it; c (another observer) measures nothing.
        let on_b = VacancyClock::default();
        on_b.crashed(&role, t0);
        on_b.crashed(&role, t0 + ms);
        assert_eq!(
            on_b.held(&role, &b, &b, t0 + 5 * ms),
            Some((VacancyCause::Crash, 5 * ms))
        );
        let on_c = VacancyClock::default();
        on_c.crashed(&role, t0);
        assert_eq!(
            on_c.held(&role, &b, &InstanceId::new("c").expect("valid"), t0),
            None
        );
        // Nothing open: nothing measured.
        assert_eq!(on_c.held(&role, &b, &b, t0), None);
    }
}
