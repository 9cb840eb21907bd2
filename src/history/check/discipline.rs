//! Per process (a node's records of one incarnation, `inc`; a node name without incarnations
//! stands for one process at a time): lifetimes, lease discipline (S5: acts only inside an open
//! term, before its deadline; S6: `(promote … demote)*` with matching tokens) and the terms
//! with their acting intervals.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::history::event::{Event, Source};

use super::merge::Anchor;
use super::report::Invariant;
use super::{Checker, Ev, Life, MS, TermRec};
/// The process a lifetime belongs to.
pub(super) struct Proc<'p> {
    node: &'p str,
    inc: Option<&'p str>,
    /// Whether its discipline is judged (S5, S6): not when it dropped events.
    judge: bool,
}

impl<'a> Checker<'a> {
    /// Per process: lifetimes, S5 and S6, and the terms with their acting intervals.
    pub(super) fn nodes_pass(&mut self) {
        let mut per_proc: BTreeMap<(String, Option<String>), Vec<Ev<'a>>> = BTreeMap::new();
        // Every process's starts, per node name.
        let mut starts: BTreeMap<String, Vec<(u64, Option<String>)>> = BTreeMap::new();
        for e in &self.all {
            if e.rec.src == Source::Node {
                per_proc
                    .entry((e.rec.node.clone(), e.rec.inc.clone()))
                    .or_default()
                    .push(*e);
                if matches!(e.rec.event, Event::Start { .. }) {
                    starts
                        .entry(e.rec.node.clone())
                        .or_default()
                        .push((e.t, e.rec.inc.clone()));
                }
            }
        }
        for ((node, inc), evs) in per_proc {
            let dropped = evs
                .iter()
                .any(|e| matches!(e.rec.event, Event::Dropped { .. }));
            if dropped {
                self.incomplete.insert(node.clone());
            }
            // Split into lifetimes at each start.
            let mut lives: Vec<(usize, usize)> = Vec::new();
            let mut begin = 0;
            for (i, e) in evs.iter().enumerate() {
                if matches!(e.rec.event, Event::Start { .. }) && i > begin {
                    lives.push((begin, i));
                    begin = i;
                }
            }
            lives.push((begin, evs.len()));
            let proc = Proc {
                node: &node,
                inc: inc.as_deref(),
                judge: !dropped,
            };
            let mut out = Vec::new();
            for (li, &(a, b)) in lives.iter().enumerate() {
                let seg = &evs[a..b];
                // The next start of this process, or of another process with this node name
                // after this lifetime's last record (a restart: this one is gone by then; a
                // process that still records after another's start is alive beside it).
                // A child's records are written by its watchdog, another process, possibly
                // after the manager's death (a start recorded late on a loaded machine, a kill
                // because the manager was gone): they do not show the manager alive beside a
                // restart that started meanwhile. The child's own acting is judged by its
                // interval (`child_start` to `child_stop`), whoever wrote it.
                let posthumous = |e: &&Ev<'_>| {
                    matches!(
                        &e.rec.event,
                        Event::ChildStart { .. } | Event::ChildStop { .. }
                    )
                };
                let last = seg
                    .iter()
                    .rev()
                    .find(|e| !posthumous(e))
                    .or(seg.last())
                    .map_or(0, |e| e.t);
                let next_own = lives.get(li + 1).map_or(u64::MAX, |&(na, _)| evs[na].t);
                let next_other = starts.get(&node).and_then(|v| {
                    v.iter()
                        .find(|(t, i)| *t > last && *i != inc)
                        .map(|(t, _)| *t)
                });
                let next_start = next_other.map_or(next_own, |o| o.min(next_own));
                out.push(self.life(&proc, seg, next_start));
            }
            let all = self.lives.entry(node.clone()).or_default();
            all.extend(out);
            all.sort_by_key(|l| l.start);
        }
    }

    /// Walks one lifetime of a process.
    pub(super) fn life(&mut self, proc: &Proc<'_>, seg: &[Ev<'a>], next_start: u64) -> Life {
        let node = proc.node;
        let inc = proc.inc.map(str::to_owned);
        let first = seg.first().map_or(0, |e| e.t);
        let last = seg.last().map_or(0, |e| e.t);
        let clean = seg.iter().any(|e| matches!(e.rec.event, Event::Stop));
        let killed = if clean {
            None
        } else {
            self.kill_time(node, last, next_start)
        };
        let end = killed.unwrap_or(last).max(last);
        // Until when a term still open here may have been acted on: the stop, the kill, or —
        // when the process's fate is unknown (its last events may be lost) — the term's
        // deadline, bounded by the next start of the node.
        let act_limit = match (clean, killed) {
            (true, _) => last,
            (false, Some(k)) => k.max(last),
            (false, None) => next_start,
        };
        let roles = match seg.first().map(|e| &e.rec.event) {
            Some(Event::Start { roles, .. }) => roles.clone(),
            _ => Vec::new(),
        };
        let judge = proc.judge;
        // Anchor of this lifetime, to map deadlines (node clock) like the stamps.
        let anchor = match seg.first().map(|e| (e.rec.mono_ns, &e.rec.event)) {
            Some((
                fake,
                Event::Start {
                    clock_rate,
                    real_mono_ns,
                    ..
                },
            )) => Anchor {
                rate: if *clock_rate > 0.0 { *clock_rate } else { 1.0 },
                fake,
                real: real_mono_ns.unwrap_or(fake),
            },
            _ => Anchor::IDENTITY,
        };
        struct Open {
            token: (u64, u64),
            promote_t: u64,
            /// Deadline in the node's own clock.
            deadline_raw: u64,
            /// Set once the deadline passed without a renewal.
            lapsed_at: Option<u64>,
        }
        let mut open: HashMap<String, Open> = HashMap::new();
        let mut closed: HashMap<String, (u64, u64)> = HashMap::new();
        let mut promoted: BTreeSet<(String, (u64, u64))> = BTreeSet::new();
        // The last deadline of each term (node clock), renewals while draining included: an
        // `exec` child must be gone by it.
        let mut last_deadline: HashMap<(String, (u64, u64)), u64> = HashMap::new();
        // `exec` children running: (role, pid) -> (token, start).
        let mut children: HashMap<(String, u32), ((u64, u64), u64)> = HashMap::new();
        // Ends of children's runs: (role, token, end).
        let mut child_ends: Vec<(String, (u64, u64), u64)> = Vec::new();
        for e in seg {
            let Some(role) = e.rec.role.clone() else {
                continue;
            };
            let raw = e.rec.mono_ns;
            // A deadline that passed before this event ends acting there.
            if let Some(o) = open.get_mut(&role)
                && o.lapsed_at.is_none()
                && raw >= o.deadline_raw
            {
                o.lapsed_at = Some(anchor.map(o.deadline_raw));
            }
            match &e.rec.event {
                Event::Promote {
                    epoch,
                    term,
                    deadline_ns,
                } => {
                    self.stats.promotes += 1;
                    let token = (*epoch, *term);
                    last_deadline.insert((role.clone(), token), *deadline_ns);
                    if let Some(prev) = open.remove(&role) {
                        let end = prev.lapsed_at.unwrap_or(e.t).min(e.t);
                        self.terms.push(TermRec {
                            node: node.to_string(),
                            inc: inc.clone(),
                            role: role.clone(),
                            token: prev.token,
                            promote_t: prev.promote_t,
                            act_end: end,
                        });
                        if judge {
                            self.violate(
                                Invariant::S6,
                                Some(&role),
                                vec![node.to_string()],
                                vec![prev.token.1, *term],
                                e.t,
                                None,
                                format!(
                                    "{node} promoted term {term} while term {} was never demoted",
                                    prev.token.1
                                ),
                            );
                        }
                    }
                    promoted.insert((role.clone(), token));
                    open.insert(
                        role,
                        Open {
                            token,
                            promote_t: e.t,
                            deadline_raw: *deadline_ns,
                            lapsed_at: None,
                        },
                    );
                }
                Event::Renew {
                    epoch,
                    term,
                    deadline_ns,
                } => {
                    let token = (*epoch, *term);
                    if let Some(d) = last_deadline.get_mut(&(role.clone(), token)) {
                        *d = (*d).max(*deadline_ns);
                    }
                    match open.get_mut(&role) {
                        Some(o) if o.token == token && o.lapsed_at.is_none() => {
                            o.deadline_raw = o.deadline_raw.max(*deadline_ns);
                        }
                        Some(o) if o.token == token => {}
                        // Renewals continue while a released term drains.
                        _ if closed.get(&role) == Some(&token) => {}
                        _ if judge => self.violate_by(
                            Invariant::S6,
                            &role,
                            node,
                            *term,
                            e.t,
                            format!("{node} renewed term {term}, which it does not hold"),
                        ),
                        _ => {}
                    }
                }
                Event::Demote {
                    epoch,
                    term,
                    reason,
                    ..
                } => {
                    self.stats.demotes += 1;
                    let token = (*epoch, *term);
                    match open.remove(&role) {
                        Some(o) if o.token == token => {
                            self.terms.push(TermRec {
                                node: node.to_string(),
                                inc: inc.clone(),
                                role: role.clone(),
                                token,
                                promote_t: o.promote_t,
                                act_end: o.lapsed_at.unwrap_or(e.t).min(e.t),
                            });
                            closed.insert(role, token);
                        }
                        other => {
                            if let Some(o) = other {
                                open.insert(role.clone(), o);
                            }
                            if judge {
                                self.violate_by(
                                    Invariant::S6,
                                    &role,
                                    node,
                                    *term,
                                    e.t,
                                    format!(
                                        "{node} demoted term {term} ({reason}), which it does not hold"
                                    ),
                                );
                            }
                        }
                    }
                }
                Event::Act {
                    epoch,
                    term,
                    write_id,
                } => {
                    self.stats.acts += 1;
                    if !judge {
                        continue;
                    }
                    let token = (*epoch, *term);
                    let problem = match open.get(&role) {
                        Some(o) if o.token == token && raw < o.deadline_raw => None,
                        Some(o) if o.token == token => Some(format!(
                            "{node} acted (write {write_id}) in term {term} {:.3} ms after its deadline",
                            (raw - o.deadline_raw) as f64 / MS
                        )),
                        _ => Some(format!(
                            "{node} acted (write {write_id}) in term {term}, which it does not hold"
                        )),
                    };
                    if let Some(msg) = problem {
                        self.violate_by(Invariant::S5, &role, node, *term, e.t, msg);
                    }
                }
                Event::ChildStart { epoch, term, pid } => {
                    self.stats.child_runs += 1;
                    let token = (*epoch, *term);
                    children.insert((role.clone(), *pid), (token, e.t));
                    let problem = match open.get(&role) {
                        Some(o) if o.token == token && raw < o.deadline_raw => None,
                        Some(o) if o.token == token => Some(format!(
                            "{node} started its command (pid {pid}) in term {term} {:.3} ms after its deadline",
                            (raw - o.deadline_raw) as f64 / MS
                        )),
                        _ => Some(format!(
                            "{node} started its command (pid {pid}) in term {term}, which it does not hold"
                        )),
                    };
                    if let (Some(msg), true) = (problem, judge) {
                        self.violate_by(Invariant::S5, &role, node, *term, e.t, msg);
                    }
                }
                Event::ChildStop {
                    epoch,
                    term,
                    pid,
                    kill_deadline_ns,
                    ..
                } => {
                    let token = (*epoch, *term);
                    children.remove(&(role.clone(), *pid));
                    child_ends.push((role.clone(), token, e.t));
                    let deadline = last_deadline.get(&(role.clone(), token)).copied();
                    if let (Some(d), true) = (deadline, judge)
                        && raw > d
                    {
                        self.violate_by(
                            Invariant::S5,
                            &role,
                            node,
                            *term,
                            e.t,
                            format!(
                                "{node}'s command (pid {pid}) of term {term} ran {:.3} ms past the term's deadline{}",
                                (raw - d) as f64 / MS,
                                held_kill_deadline(*kill_deadline_ns, d)
                            ),
                        );
                    }
                }
                Event::FencedWrite {
                    epoch,
                    term,
                    accepted,
                    unknown,
                    ..
                } => {
                    if *accepted {
                        self.stats.fenced_accepted += 1;
                    } else if *unknown {
                        self.stats.fenced_unknown += 1;
                    } else {
                        self.stats.fenced_refused += 1;
                    }
                    if judge && !promoted.contains(&(role.clone(), (*epoch, *term))) {
                        self.violate_by(
                            Invariant::S6,
                            &role,
                            node,
                            *term,
                            e.t,
                            format!("{node} wrote fenced data in term {term}, never promoted"),
                        );
                    }
                }
                _ => {}
            }
        }
        // Terms still open at the end of the lifetime.
        let mut rest: Vec<(String, Open)> = open.into_iter().collect();
        rest.sort_by(|a, b| a.0.cmp(&b.0));
        for (role, o) in rest {
            let lapse = o.lapsed_at.unwrap_or_else(|| anchor.map(o.deadline_raw));
            self.terms.push(TermRec {
                node: node.to_string(),
                inc: inc.clone(),
                role: role.clone(),
                token: o.token,
                promote_t: o.promote_t,
                act_end: lapse.min(act_limit),
            });
            if clean && judge {
                self.violate(
                    Invariant::S6,
                    Some(&role),
                    vec![node.to_string()],
                    vec![o.token.1],
                    end,
                    None,
                    format!("{node} stopped cleanly with term {} still open", o.token.1),
                );
            }
        }
        // Children with no stop record: running until the end of the history.
        let history_end = self.all.last().map_or(end, |e| e.t);
        let mut unstopped: Vec<_> = children.into_iter().collect();
        unstopped.sort_by_key(|((_, pid), (_, t))| (*t, *pid));
        for ((role, pid), (token, _)) in unstopped {
            child_ends.push((role.clone(), token, history_end));
            if judge && (clean || killed.is_some()) {
                self.violate(
                    Invariant::S5,
                    Some(&role),
                    vec![node.to_string()],
                    vec![token.1],
                    end,
                    None,
                    format!(
                        "{node}'s command (pid {pid}) of term {} has no stop record: it may still run",
                        token.1
                    ),
                );
            }
        }
        // A term acts until its child is gone too (S4 judges the child's run with the term's).
        for (role, token, child_end) in child_ends {
            if let Some(t) = self
                .terms
                .iter_mut()
                .rev()
                .find(|t| t.node == node && t.inc == inc && t.role == role && t.token == token)
            {
                t.act_end = t.act_end.max(child_end);
            }
        }
        // A process that did not list its roles takes part in a role from its first record of
        // it (a role added at run time is not wanted before it was added).
        let mut joined: BTreeMap<String, u64> = BTreeMap::new();
        if roles.is_empty() {
            for e in seg {
                if let Some(r) = &e.rec.role {
                    joined.entry(r.clone()).or_insert(e.t);
                }
            }
        }
        Life {
            start: first,
            end,
            roles,
            joined,
        }
    }
}

/// What a late `child_stop` says of the kill deadline its watchdog held, next to the term's
/// last deadline `d` in the history (both `CLOCK_MONOTONIC` of the host without `faketime`):
/// a watchdog late to kill holds `d` minus its lead; one told a later deadline than the
/// history records holds more.
fn held_kill_deadline(held: Option<u64>, d: u64) -> String {
    match held {
        None => String::new(),
        Some(k) if k >= d => format!(
            " (its watchdog held the kill deadline {:.3} ms after it)",
            (k - d) as f64 / MS
        ),
        Some(k) => format!(
            " (its watchdog held the kill deadline {:.3} ms before it)",
            (d - k) as f64 / MS
        ),
    }
}
