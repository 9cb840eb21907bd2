//! The election's invariants, one ID each, as `docs/reliability.md` defines them. Both
//! checkers name what they flag with these IDs: the history checker ([`crate::history::check`],
//! on recorded histories of real processes) and the pure core's simulation (`src/sim/`,
//! on the state machines' actions; S1 and L3 do not apply there, S7 only to its runs with
//! slots). L2 (fail-over figures) is reported as figures, never as a violation, so it has no
//! variant.

use serde::Serialize;

/// An invariant of `docs/reliability.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[non_exhaustive]
pub enum Invariant {
    /// Accepted fenced writes never go back in token order.
    S1,
    /// Promote tokens strictly increase per role; no token promoted twice.
    S2,
    /// One holder per revision: a stored lease revision belongs to one node's term.
    S3,
    /// Acting intervals of different nodes do not overlap.
    S4,
    /// A holder acts only inside an open term, before its local deadline.
    S5,
    /// Per node and role: (promote … demote)*, matching tokens, closed at a clean stop.
    S6,
    /// A process never acts on two slots of one role at once (protocol Q15).
    S7,
    /// A role with a live candidate gets a holder within the bound (and, in the simulation,
    /// what progress needs locally: a timer whenever one is due).
    L1,
    /// No demotion in the steady-state window.
    L3,
}

impl Invariant {
    /// Every invariant that can be violated, in document order.
    pub const ALL: [Self; 9] = [
        Self::S1,
        Self::S2,
        Self::S3,
        Self::S4,
        Self::S5,
        Self::S6,
        Self::S7,
        Self::L1,
        Self::L3,
    ];
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::Invariant;

    /// Every ID is defined in `docs/reliability.md` (as a bold list entry), and the document
    /// defines no other: one name per invariant in the code and the document.
    #[test]
    fn ids_match_the_reliability_document() {
        let doc = include_str!("../../docs/reliability.md");
        let defined: Vec<&str> = doc
            .lines()
            .filter_map(|l| l.strip_prefix("* **"))
            .filter_map(|l| l.split_once("**").map(|(id, _)| id))
            .collect();
        let mut ids: Vec<String> = Invariant::ALL.iter().map(ToString::to_string).collect();
        ids.push("L2".into()); // figures, never a violation
        ids.sort();
        let mut documented: Vec<String> = defined.iter().map(|s| (*s).to_owned()).collect();
        documented.sort();
        assert_eq!(ids, documented);
    }
}
