//! S1: accepted fenced writes of a role never go back in token order.

use crate::history::event::Event;

use super::Checker;
use super::report::Invariant;
impl<'a> Checker<'a> {
    pub(super) fn s1(&mut self, role: &str) {
        /// (epoch, revision, token, node, time) of an accepted fenced write.
        type Write<'n> = (u64, u64, (u64, u64), &'n str, u64);
        let mut writes: Vec<Write<'_>> = self
            .role_events(role)
            .iter()
            .filter_map(|e| match &e.rec.event {
                Event::FencedWrite {
                    epoch,
                    term,
                    accepted: true,
                    revision: Some(rev),
                    ..
                } => Some((*epoch, *rev, (*epoch, *term), e.rec.node.as_str(), e.t)),
                _ => None,
            })
            .collect();
        writes.sort_by_key(|w| (w.0, w.1));
        let mut best: Option<((u64, u64), &str, u64)> = None;
        let mut found = Vec::new();
        for (_, rev, token, node, t) in writes {
            if let Some((bt, bn, brev)) = best
                && token < bt
            {
                found.push((
                        vec![bn.to_string(), node.to_string()],
                        vec![bt.1, token.1],
                        t,
                        format!(
                            "fenced write of term {} by {node} stored at revision {rev}, after term {} by {bn} was stored at revision {brev}",
                            token.1, bt.1
                        ),
                    ));
                continue;
            }
            best = Some((token, node, rev));
        }
        for (nodes, terms, t, msg) in found {
            self.violate(Invariant::S1, Some(role), nodes, terms, t, None, msg);
        }
    }
}
