//! [`Reports`]: the session book and the vacancy clock — the two pieces of shared state
//! several tasks write, each reporting what it saw; the type decides what a report changes.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::core::{SessionBook, Verdict};
use crate::manager::vacancy::VacancyClock;

/// What several tasks report to. Each is a type with its own rules that combines the reports
/// whoever sends them (the lock only orders them), because each task sees a different part of
/// the same facts first:
///
/// - the session book (protocol Q5): the watcher hands it every session key and role value it
///   delivers (and resets it with a new bucket), the backstop its reaps and leader reads
///   (Q5 rule 4), the role runners the role values their own reads return (and ask it for
///   verdicts and herd ranks, Q7), the manager each new role's timing;
/// - the vacancy clock (`role_vacancy_seconds`): the watcher reports what it sees of each role
///   (and the backstop, through the watcher's `holders_gone`), a role runner its own release's
///   acknowledgement and the vacancies its reads find, the manager a removed role.
pub(crate) struct Reports {
    /// Every session in the bucket and the roles resting on them (protocol Q5).
    book: Mutex<SessionBook>,
    /// Open vacancies this instance measures (`role_vacancy_seconds`).
    pub(crate) vacancies: VacancyClock,
    /// Rung by whoever reports something to the book that may change whom this instance
    /// follows (a member record, a role holder not followed: protocol Q8); the follower
    /// alone waits for it and re-reads [`SessionBook::wanted`].
    pub(crate) follow: tokio::sync::Notify,
}

impl Reports {
    /// The reports of instance `me`, whose book follows only what protocol Q8 says.
    pub(crate) fn new(me: crate::names::InstanceId) -> Self {
        Self {
            book: Mutex::new(
                SessionBook::new(crate::core::Timing::MIN_TTL, crate::core::Timing::MAX_TTL)
                    .following(me),
            ),
            vacancies: VacancyClock::default(),
            follow: tokio::sync::Notify::new(),
        }
    }

    /// The session book.
    pub(crate) fn book(&self) -> MutexGuard<'_, SessionBook> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reports a role value (or its absence: `holder` `None`) to the book and returns its
    /// verdict (Q5). Rings the follower when the value names a session this instance does not
    /// follow, or names nobody: whom to follow may change (Q8 rule 3, an orphan).
    pub(crate) fn role(
        &self,
        role: &crate::names::RoleName,
        holder: Option<(&str, uuid::Uuid, crate::names::InstanceId)>,
        revision: u64,
        now: tokio::time::Instant,
    ) -> Verdict {
        let (verdict, followed) = {
            let mut book = self.book();
            let followed = holder
                .as_ref()
                .is_some_and(|(key, _, _)| book.follows_key(key));
            (book.role(role, holder, revision, now), followed)
        };
        if !followed {
            self.follow.notify_one();
        }
        verdict
    }
}
