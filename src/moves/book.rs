//! [`MoveBook`]: the move records an instance knows (the watcher is its writer), and the
//! hold-back they ask for at a vacancy (protocol Q13).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use uuid::Uuid;

use super::record::{MOVE_PREFIX, MoveRecord, MoveState};
use crate::names::{InstanceId, RoleName};

/// What an accepted move asks of one candidate at the vacancy that ends the named term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldBack {
    /// This instance is the target: claim at once (no placement or herd hold-back).
    Claim,
    /// Another instance is the target: wait this long before claiming.
    Wait(Duration),
}

/// The valid move records of a bucket, by role, with their revisions.
#[derive(Debug, Default, Clone)]
pub(crate) struct MoveBook {
    records: BTreeMap<RoleName, (u64, MoveRecord)>,
}

impl MoveBook {
    /// A book that knows no record.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The watcher saw key `key` at `revision`, holding `record` (`None`: a delete, purge or
    /// expiry marker, or a value that is not a valid record of the key's role; the codec
    /// decides, `codec::control::move_record`). Returns the record now stored for the role
    /// and the role, or `None` when `key` is not a move key.
    pub fn observe(
        &mut self,
        key: &str,
        revision: u64,
        record: Option<MoveRecord>,
    ) -> Option<(RoleName, Option<MoveRecord>)> {
        let role = RoleName::new(key.strip_prefix(MOVE_PREFIX)?).ok()?;
        match &record {
            Some(r) => self.records.insert(role.clone(), (revision, r.clone())),
            None => self.records.remove(&role),
        };
        Some((role, record))
    }

    /// Forgets every record (the bucket was recreated).
    pub fn clear(&mut self) {
        self.records.clear();
    }

    /// The record of `role` and its revision.
    #[must_use]
    pub fn get(&self, role: &RoleName) -> Option<&(u64, MoveRecord)> {
        self.records.get(role)
    }

    /// The hold-back instance `me` applies at a vacancy of `role` that ends the term at
    /// revision `ended` (`None`: the vacancy follows no lease this instance knew). Only an
    /// `accepted` record naming exactly that term counts, and only while the target's session
    /// named in it is live (`session_live`); the grace is limited to the role's `ttl`.
    pub fn hold_back(
        &self,
        role: &RoleName,
        ended: Option<u64>,
        me: &InstanceId,
        ttl: Duration,
        session_live: impl Fn(&InstanceId, Uuid) -> bool,
    ) -> Option<HoldBack> {
        let (_, r) = self.records.get(role)?;
        let session = r.session?;
        if r.state != MoveState::Accepted || Some(r.term) != ended || !session_live(&r.to, session)
        {
            return None;
        }
        Some(if &r.to == me {
            HoldBack::Claim
        } else {
            HoldBack::Wait(r.grace(ttl))
        })
    }

    /// The roles placement keeps on `me` now: an accepted or done move names it the target
    /// (accepted: it is about to take the role and must not hand it straight back).
    #[must_use]
    pub fn kept_on(&self, me: &InstanceId) -> BTreeSet<RoleName> {
        self.records
            .values()
            .filter(|(_, r)| {
                &r.to == me
                    && (r.state == MoveState::Accepted
                        || (r.state == MoveState::Done && r.hold_ms > 0))
            })
            .map(|(_, r)| r.role.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moves::record::MOVE_VERSION;

    fn id(s: &str) -> InstanceId {
        InstanceId::new(s).unwrap()
    }

    fn accepted(session: Uuid) -> MoveRecord {
        MoveRecord {
            v: MOVE_VERSION,
            id: Uuid::nil(),
            role: RoleName::new("r").unwrap(),
            to: id("t"),
            from: id("h"),
            term: 7,
            state: MoveState::Accepted,
            session: Some(session),
            reason: None,
            grace_ms: 1500,
            hold_ms: 60_000,
            timeout_ms: 10_000,
            by: String::new(),
            at: String::new(),
        }
    }

    #[test]
    fn only_the_named_term_and_a_live_target_hold_anyone_back() {
        let s = Uuid::new_v4();
        let mut book = MoveBook::new();
        let role = RoleName::new("r").unwrap();
        book.observe("control.move.r", 9, Some(accepted(s)));
        let ttl = Duration::from_secs(3);
        let live = |i: &InstanceId, u: Uuid| i.as_str() == "t" && u == s;
        assert_eq!(
            book.hold_back(&role, Some(7), &id("t"), ttl, live),
            Some(HoldBack::Claim)
        );
        assert_eq!(
            book.hold_back(&role, Some(7), &id("x"), ttl, live),
            Some(HoldBack::Wait(Duration::from_millis(1500)))
        );
        // Another term, no term known, a dead target session: no hold-back.
        assert_eq!(book.hold_back(&role, Some(8), &id("x"), ttl, live), None);
        assert_eq!(book.hold_back(&role, None, &id("x"), ttl, live), None);
        assert_eq!(
            book.hold_back(&role, Some(7), &id("x"), ttl, |_, _| false),
            None
        );
        // The grace never exceeds the TTL.
        assert_eq!(
            book.hold_back(&role, Some(7), &id("x"), Duration::from_secs(1), live),
            Some(HoldBack::Wait(Duration::from_secs(1)))
        );
        // Kept on the target while accepted.
        assert_eq!(book.kept_on(&id("t")), [role.clone()].into());
        assert!(book.kept_on(&id("x")).is_empty());
        // A marker or a foreign value (no record) removes it.
        book.observe("control.move.r", 10, None);
        assert_eq!(book.hold_back(&role, Some(7), &id("x"), ttl, live), None);
        book.observe("control.move.r", 11, Some(accepted(s)));
        book.observe("control.move.r", 12, None);
        assert!(book.get(&role).is_none());
        // Not a move key.
        assert_eq!(book.observe("control.freeze", 13, None), None);
    }

    #[test]
    fn other_states_hold_nobody_back() {
        let s = Uuid::new_v4();
        let role = RoleName::new("r").unwrap();
        for state in [MoveState::Requested, MoveState::Refused, MoveState::Done] {
            let mut r = accepted(s);
            r.state = state;
            let mut book = MoveBook::new();
            book.observe("control.move.r", 9, Some(r));
            assert_eq!(
                book.hold_back(&role, Some(7), &id("x"), Duration::from_secs(3), |_, _| {
                    true
                }),
                None
            );
            assert_eq!(book.kept_on(&id("t")).is_empty(), state != MoveState::Done);
        }
    }
}
