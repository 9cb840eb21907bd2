//! [`OneShot`]: how `nats-roles exec` and the supervisor of its one role agree on whether the
//! command runs. The command starts only if `exec` has not given up waiting (`--wait`,
//! `--no-wait`, a signal), and once it started `exec` cannot give up any more: either the
//! command ran or it never started, never a start that is stopped at once. Its end is
//! `exec`'s to act on (it stops the manager, which releases the role); the supervisor does not
//! release the role itself.

use tokio::sync::watch;

/// Where a one-shot command stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Not started, and `exec` still waits.
    Waiting,
    /// The supervisor started it (or is starting it) in this term.
    Claimed {
        /// The term it runs in.
        term: u64,
    },
    /// `exec` gave up: it never starts.
    GaveUp,
}

/// The shared stage of one `nats-roles exec` command (cheap to clone).
#[derive(Debug, Clone)]
pub(crate) struct OneShot(std::sync::Arc<watch::Sender<Stage>>);

impl Default for OneShot {
    fn default() -> Self {
        Self(std::sync::Arc::new(watch::Sender::new(Stage::Waiting)))
    }
}

impl OneShot {
    /// The supervisor, right before it starts the command in `term`: true when it may (from
    /// now on `exec` cannot give up), false when `exec` gave up.
    pub(crate) fn claim(&self, term: u64) -> bool {
        self.0.send_if_modified(|s| {
            if *s == Stage::Waiting {
                *s = Stage::Claimed { term };
                true
            } else {
                false
            }
        });
        matches!(*self.0.borrow(), Stage::Claimed { .. })
    }

    /// `exec` stops waiting: true when the command will never start, false when it was
    /// claimed first (it runs; wait for its end).
    pub(crate) fn give_up(&self) -> bool {
        self.0.send_if_modified(|s| {
            if *s == Stage::Waiting {
                *s = Stage::GaveUp;
                true
            } else {
                false
            }
        });
        *self.0.borrow() == Stage::GaveUp
    }

    /// The current stage.
    pub(crate) fn stage(&self) -> Stage {
        *self.0.borrow()
    }

    /// Follows the stage (wakes when the command is claimed).
    pub(crate) fn subscribe(&self) -> watch::Receiver<Stage> {
        self.0.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_claim_and_give_up_wins() {
        let claimed = OneShot::default();
        assert!(claimed.claim(4));
        assert!(!claimed.give_up(), "a claimed command runs");
        assert!(claimed.claim(4), "claiming again (same run) is allowed");
        assert_eq!(claimed.stage(), Stage::Claimed { term: 4 });

        let gave_up = OneShot::default();
        assert!(gave_up.give_up());
        assert!(!gave_up.claim(5), "no start after giving up");
        assert_eq!(gave_up.stage(), Stage::GaveUp);
    }
}
