//! [`TimerQueue`]: the one timer of a role driver, shared by every role it runs. Each role
//! has at most one wake-up armed (the earliest of what its machine and its validation ask
//! for); re-arming leaves the old entry in the heap, and an entry that no longer matches its
//! role's armed time is skipped when it comes due (lazy removal). Pure: no I/O, no clock.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use tokio::time::Instant;

use super::role_input::RoleId;

/// The wake-ups of many roles, earliest first.
#[derive(Debug, Default)]
pub(crate) struct TimerQueue {
    heap: BinaryHeap<Reverse<(Instant, RoleId)>>,
    armed: HashMap<RoleId, Instant>,
}

impl TimerQueue {
    /// Arms `role`'s wake-up at `at` (`None`: no wake-up), replacing the one armed before.
    pub(crate) fn arm(&mut self, role: RoleId, at: Option<Instant>) {
        match at {
            Some(at) => {
                if self.armed.insert(role, at) != Some(at) {
                    self.heap.push(Reverse((at, role)));
                }
            }
            None => {
                self.armed.remove(&role);
            }
        }
        // Stale entries are removed when they come due; a queue whose roles re-arm later and
        // later (validation, retries) is rebuilt before it grows past a few entries per role.
        if self.heap.len() > 4 * self.armed.len() + 64 {
            self.heap = self
                .armed
                .iter()
                .map(|(r, at)| Reverse((*at, *r)))
                .collect();
        }
    }

    /// The earliest wake-up armed (a stale entry may make it early: [`TimerQueue::due`] then
    /// returns nothing and the next call here is later).
    pub(crate) fn next(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, role))) = self.heap.peek().copied() {
            if self.armed.get(&role) == Some(&at) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Takes the roles whose wake-up is due at `now` (disarmed: each is armed again after its
    /// step).
    pub(crate) fn due(&mut self, now: Instant) -> Vec<RoleId> {
        let mut due = Vec::new();
        while let Some(Reverse((at, role))) = self.heap.peek().copied() {
            if at > now {
                break;
            }
            self.heap.pop();
            if self.armed.get(&role) == Some(&at) {
                self.armed.remove(&role);
                due.push(role);
            }
        }
        due
    }

    /// Forgets `role` (it stopped).
    pub(crate) fn remove(&mut self, role: RoleId) {
        self.arm(role, None);
    }

    /// Entries in the heap, stale ones included (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn roles_come_due_in_order_of_their_latest_arming() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut q = TimerQueue::default();
        q.arm(1, Some(ms(30)));
        q.arm(2, Some(ms(10)));
        q.arm(3, Some(ms(20)));
        // Re-armed later: its first entry is stale.
        q.arm(2, Some(ms(40)));
        // Disarmed.
        q.arm(3, None);
        assert_eq!(q.next(), Some(ms(30)));
        assert!(q.due(ms(29)).is_empty());
        assert_eq!(q.due(ms(35)), vec![1]);
        assert_eq!(q.next(), Some(ms(40)));
        assert_eq!(q.due(ms(100)), vec![2]);
        assert_eq!(q.next(), None);
    }

    #[test]
    fn arming_the_same_time_twice_keeps_one_entry_and_a_due_role_is_disarmed() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        q.arm(7, Some(t0));
        q.arm(7, Some(t0));
        assert_eq!(q.len(), 1);
        assert_eq!(q.due(t0), vec![7]);
        // Armed again at the same time after its step: it comes due again.
        q.arm(7, Some(t0));
        assert_eq!(q.due(t0), vec![7]);
        q.remove(7);
        assert_eq!(q.next(), None);
    }

    #[test]
    fn a_role_rearmed_later_and_later_does_not_grow_the_heap_without_bound() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        for role in 0..10 {
            q.arm(role, Some(t0 + Duration::from_secs(role)));
        }
        for n in 0..10_000 {
            q.arm(3, Some(t0 + Duration::from_millis(100 + n)));
        }
        assert!(q.len() <= 4 * 10 + 64 + 1, "{} entries", q.len());
        let due = q.due(t0 + Duration::from_secs(100));
        assert_eq!(due.len(), 10);
        assert!(due.contains(&3));
    }
}
