//! Per role: one holder at a time — S2 (promote tokens strictly increase), S3 (one holder
//! per revision), S4 (acting intervals of different processes do not overlap).

use std::collections::HashMap;

use crate::history::event::{Event, OpKind, OpResult, Source};

use super::report::Invariant;
use super::{Checker, Ev, MS, TermRec};
impl<'a> Checker<'a> {
    /// S1–S4 per role.
    pub(super) fn per_role_pass(&mut self) {
        let roles = self.stats.roles.clone();
        let epsilon = self
            .trial
            .as_ref()
            .and_then(|t| t.epsilon_ms)
            .unwrap_or(0)
            .saturating_mul(1_000_000);
        for role in roles {
            self.s1(&role);
            self.s2(&role);
            self.s3(&role);
            self.s4(&role, epsilon);
        }
    }

    pub(super) fn role_events(&self, role: &str) -> Vec<Ev<'a>> {
        self.all
            .iter()
            .copied()
            .filter(|e| e.rec.src == Source::Node && e.rec.role.as_deref() == Some(role))
            .collect()
    }

    pub(super) fn s2(&mut self, role: &str) {
        let promotes: Vec<((u64, u64), String, u64)> = self
            .role_events(role)
            .iter()
            .filter_map(|e| match &e.rec.event {
                Event::Promote { epoch, term, .. } => {
                    Some(((*epoch, *term), e.rec.node.clone(), e.t))
                }
                _ => None,
            })
            .collect();
        let mut found = Vec::new();
        let mut seen: HashMap<(u64, u64), String> = HashMap::new();
        let mut last: Option<((u64, u64), String)> = None;
        for (token, node, t) in promotes {
            if let Some(other) = seen.get(&token) {
                found.push((
                    vec![other.clone(), node.clone()],
                    vec![token.1],
                    t,
                    format!("term {} promoted by {other} and again by {node}", token.1),
                ));
            } else if let Some((lt, ln)) = &last
                && token <= *lt
            {
                found.push((
                    vec![ln.clone(), node.clone()],
                    vec![lt.1, token.1],
                    t,
                    format!(
                        "{node} promoted term {} after {ln} had promoted term {} (epoch {} vs {})",
                        token.1, lt.1, token.0, lt.0
                    ),
                ));
            }
            seen.entry(token).or_insert_with(|| node.clone());
            if last.as_ref().is_none_or(|(lt, _)| token > *lt) {
                last = Some((token, node));
            }
        }
        for (nodes, terms, t, msg) in found {
            self.violate(Invariant::S2, Some(role), nodes, terms, t, None, msg);
        }
    }

    pub(super) fn s3(&mut self, role: &str) {
        let mut owner: HashMap<u64, String> = HashMap::new();
        let mut found = Vec::new();
        // The epoch each node promoted a term (= revision) in: one revision number stored in
        // two buckets (a recreated one restarts revisions, P1) is not a double write.
        let epochs: HashMap<(String, u64), u64> = self
            .role_events(role)
            .into_iter()
            .filter_map(|e| match &e.rec.event {
                Event::Promote { epoch, term, .. } => Some(((e.rec.node.clone(), *term), *epoch)),
                _ => None,
            })
            .collect();
        let same_bucket = |a: &str, b: &str, rev: u64| match (
            epochs.get(&(a.to_string(), rev)),
            epochs.get(&(b.to_string(), rev)),
        ) {
            (Some(x), Some(y)) => x == y,
            _ => true,
        };
        for e in self.role_events(role) {
            if let Event::Complete {
                kind: OpKind::Acquire | OpKind::Renew,
                result: OpResult::Ok,
                revision: Some(rev),
                ..
            } = &e.rec.event
            {
                match owner.get(rev) {
                    Some(o) if *o != e.rec.node && same_bucket(o, &e.rec.node, *rev) => {
                        found.push((vec![o.clone(), e.rec.node.clone()], *rev, e.t))
                    }
                    Some(o) if *o != e.rec.node => {
                        // Another bucket: the later writer owns the number from now on.
                        owner.insert(*rev, e.rec.node.clone());
                    }
                    Some(_) => {}
                    None => {
                        owner.insert(*rev, e.rec.node.clone());
                    }
                }
            }
        }
        for (nodes, rev, t) in found {
            let msg = format!(
                "revision {rev} reported stored by both {} and {}",
                nodes[0], nodes[1]
            );
            self.violate(Invariant::S3, Some(role), nodes, vec![rev], t, None, msg);
        }
    }

    pub(super) fn role_terms(&self, role: &str) -> Vec<TermRec> {
        let mut v: Vec<TermRec> = self
            .terms
            .iter()
            .filter(|t| t.role == role)
            .cloned()
            .collect();
        v.sort_by_key(|t| t.promote_t);
        v
    }

    pub(super) fn s4(&mut self, role: &str, epsilon: u64) {
        let terms = self.role_terms(role);
        let mut found = Vec::new();
        for (i, a) in terms.iter().enumerate() {
            for b in &terms[i + 1..] {
                if b.promote_t >= a.act_end {
                    continue;
                }
                // One process's consecutive terms (S6 judges those); two processes with one
                // node name (a restart beside a live predecessor) are judged like two nodes.
                if a.node == b.node && a.inc == b.inc {
                    continue;
                }
                let end = a.act_end.min(b.act_end);
                if end > b.promote_t && end - b.promote_t > epsilon {
                    found.push((a.clone(), b.clone(), end));
                }
            }
        }
        for (a, b, end) in found {
            // Two processes of one node name are told apart by their incarnations.
            let who = |t: &TermRec| match (&t.inc, a.node == b.node) {
                (Some(inc), true) => format!("{} (process {inc}, term {})", t.node, t.token.1),
                _ => format!("{} (term {})", t.node, t.token.1),
            };
            let msg = format!(
                "{} and {} both acted for {:.3} ms",
                who(&a),
                who(&b),
                (end - b.promote_t) as f64 / MS
            );
            self.violate(
                Invariant::S4,
                Some(role),
                vec![a.node, b.node],
                vec![a.token.1, b.token.1],
                b.promote_t,
                Some(end),
                msg,
            );
        }
    }
}
