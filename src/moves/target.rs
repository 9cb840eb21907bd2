//! The target's answer to a move request (protocol Q13): accepted with its session, or the
//! first reason to refuse, decided from what the target knows of itself.

use uuid::Uuid;

use super::record::MoveRefusal;

/// What the target knows of itself when a request names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TargetFacts {
    /// It manages the role.
    pub configured: bool,
    /// It campaigns for it (not only observes).
    pub campaigns: bool,
    /// It is draining or stopping.
    pub draining: bool,
    /// It cools down for the role, or its campaign stopped on a failure.
    pub unavailable: bool,
    /// Placement says it is at its `capacity` (`Some(false)`) or `max_roles`
    /// (`Some(true)`); `None`: it has room.
    pub full: Option<bool>,
    /// Its live session of the role's TTL class.
    pub session: Option<Uuid>,
    /// It holds the role already.
    pub holds: bool,
}

/// Accepted (with the target's session) or the first reason to refuse, in the order of
/// docs/protocol.md Q13.
///
/// # Errors
/// The [`MoveRefusal`] that applies first.
pub(crate) fn answer(facts: &TargetFacts) -> Result<Uuid, MoveRefusal> {
    if !facts.configured {
        return Err(MoveRefusal::NotConfigured);
    }
    if !facts.campaigns {
        return Err(MoveRefusal::NotACandidate);
    }
    if facts.draining {
        return Err(MoveRefusal::Draining);
    }
    if facts.unavailable {
        return Err(MoveRefusal::Unavailable);
    }
    match facts.full {
        Some(true) => return Err(MoveRefusal::MaxRoles),
        Some(false) => return Err(MoveRefusal::AtCapacity),
        None => {}
    }
    if facts.holds {
        return Err(MoveRefusal::AlreadyHolder);
    }
    facts.session.ok_or(MoveRefusal::NoSession)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reason_that_holds_is_given() {
        let s = Uuid::new_v4();
        let ok = TargetFacts {
            configured: true,
            campaigns: true,
            session: Some(s),
            ..TargetFacts::default()
        };
        assert_eq!(answer(&ok), Ok(s));
        type Change = fn(&mut TargetFacts);
        let cases: [(Change, MoveRefusal); 8] = [
            (|f| f.configured = false, MoveRefusal::NotConfigured),
            (|f| f.campaigns = false, MoveRefusal::NotACandidate),
            (|f| f.draining = true, MoveRefusal::Draining),
            (|f| f.unavailable = true, MoveRefusal::Unavailable),
            (|f| f.full = Some(false), MoveRefusal::AtCapacity),
            (|f| f.full = Some(true), MoveRefusal::MaxRoles),
            (|f| f.holds = true, MoveRefusal::AlreadyHolder),
            (|f| f.session = None, MoveRefusal::NoSession),
        ];
        for (change, reason) in cases {
            let mut f = ok.clone();
            change(&mut f);
            assert_eq!(answer(&f), Err(reason));
        }
        // Not configured wins over everything else.
        let none = TargetFacts::default();
        assert_eq!(answer(&none), Err(MoveRefusal::NotConfigured));
    }
}
