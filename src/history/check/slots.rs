//! S7: a process never acts on two slots of one role at once (protocol Q15): its acting
//! intervals (S4's) on two slots `<role>.<j>`, `<role>.<k>` do not overlap.

use std::collections::BTreeMap;

use super::report::Invariant;
use super::{Checker, MS, TermRec};
use crate::names::RoleName;

impl Checker<'_> {
    /// S7 over every process's terms on slots.
    pub(super) fn slots_pass(&mut self) {
        // (node, incarnation, base role) -> that process's terms on the role's slots.
        let mut by_process: BTreeMap<(String, Option<String>, String), Vec<TermRec>> =
            BTreeMap::new();
        for t in &self.terms {
            let Some(base) = RoleName::from_key_name(t.role.as_str())
                .ok()
                .filter(|r| r.slot().is_some())
                .map(|r| r.base_role().to_string())
            else {
                continue;
            };
            by_process
                .entry((t.node.clone(), t.inc.clone(), base))
                .or_default()
                .push(t.clone());
        }
        let mut found = Vec::new();
        for ((_, _, base), mut terms) in by_process {
            terms.sort_by_key(|t| t.promote_t);
            for (i, a) in terms.iter().enumerate() {
                for b in &terms[i + 1..] {
                    if a.role == b.role || b.promote_t >= a.act_end.min(b.act_end) {
                        continue;
                    }
                    let end = a.act_end.min(b.act_end);
                    found.push((base.clone(), a.clone(), b.clone(), end));
                }
            }
        }
        for (base, a, b, end) in found {
            let msg = format!(
                "{} acted on {} (term {}) and {} (term {}) at once for {:.3} ms: two slots of \
                 role {base} in one process",
                a.node,
                a.role,
                a.token.1,
                b.role,
                b.token.1,
                (end - b.promote_t) as f64 / MS
            );
            self.violate(
                Invariant::S7,
                Some(&b.role),
                vec![a.node.clone()],
                vec![a.token.1, b.token.1],
                b.promote_t,
                Some(end),
                msg,
            );
        }
    }
}
