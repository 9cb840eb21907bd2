//! Liveness: L1 (a holder within the bound), L2 (fail-over figures), L3 (no demotion in the
//! steady window), and the vacancy figures.

use std::collections::BTreeSet;

use crate::history::event::{Event, OpKind, Phase};

use super::report::{Failover, Invariant, Vacancy};
use super::{Checker, DEFAULT_EXPIRY_SLACK_MS, DEFAULT_L1_EXTRA_MS, MS};
impl<'a> Checker<'a> {
    /// Whether `node` could campaign for `role` at `t` (alive, not paused).
    pub(super) fn eligible(&self, node: &str, role: &str, t: u64) -> bool {
        let alive = self.lives.get(node).is_some_and(|ls| {
            ls.iter().any(|l| {
                l.start <= t
                    && t < l.end
                    && (l.roles.iter().any(|r| r == role)
                        || (l.roles.is_empty() && l.joined.get(role).is_some_and(|j| *j <= t)))
            })
        });
        alive && !self.paused(node, t)
    }

    pub(super) fn paused(&self, node: &str, t: u64) -> bool {
        let mut paused = false;
        for e in &self.faults {
            if e.t > t {
                break;
            }
            if let Event::Fault { what, target, .. } = &e.rec.event
                && target == node
            {
                match what.as_str() {
                    "sigstop" => paused = true,
                    "sigcont" => paused = false,
                    _ => {}
                }
            }
        }
        paused
    }

    /// L1, L2, L3 and the vacancy figures.
    pub(super) fn liveness_pass(&mut self) {
        let ttl = self.ttl_ns();
        let end_of_history = self.all.last().map_or(self.t0, |e| e.t);
        self.stats.faults = self
            .faults
            .iter()
            .filter(|e| {
                matches!(
                    &e.rec.event,
                    Event::Fault {
                        phase: Phase::Start,
                        ..
                    }
                )
            })
            .count() as u64;
        let heal = self.faults.last().map(|e| e.t);
        let bound = self.trial.as_ref().map(|t| {
            t.l1_bound_ms
                .unwrap_or(t.ttl_ms.saturating_add(DEFAULT_L1_EXTRA_MS))
                .saturating_mul(1_000_000)
        });
        let expiry_slack = self
            .trial
            .as_ref()
            .and_then(|t| t.expiry_slack_ms)
            .unwrap_or(DEFAULT_EXPIRY_SLACK_MS)
            .saturating_mul(1_000_000);
        let nodes: Vec<String> = self.lives.keys().cloned().collect();
        for role in self.stats.roles.clone() {
            let terms = self.role_terms(&role);
            let events = self.role_events(&role);
            // Send times of every acquire of the role (sorted: `events` is in time order).
            let acquires: Vec<u64> = events
                .iter()
                .filter(|e| {
                    matches!(
                        e.rec.event,
                        Event::Invoke {
                            kind: OpKind::Acquire,
                            ..
                        }
                    )
                })
                .map(|e| e.t)
                .collect();
            // Vacancies between terms (and before the first one).
            let mut prev_end = self.t0;
            let mut covered = self.t0;
            for term in &terms {
                if term.promote_t > covered {
                    let attempts = (acquires.partition_point(|&t| t <= term.promote_t)
                        - acquires.partition_point(|&t| t < prev_end))
                        as u64;
                    self.stats.vacancies.push(Vacancy {
                        role: role.clone(),
                        duration_ms: (term.promote_t - covered) as f64 / MS,
                        acquire_attempts: attempts,
                    });
                    if let Some(bound) = bound {
                        self.l1_gap(&role, &nodes, covered, term.promote_t, heal, bound);
                    }
                }
                prev_end = term.act_end;
                covered = covered.max(term.act_end);
            }
            if let Some(bound) = bound {
                self.l1_gap(&role, &nodes, covered, end_of_history, heal, bound);
            }
            // L2: fail-overs after faults that hit the holder.
            for f in self.faults.clone() {
                let Event::Fault {
                    what,
                    target,
                    phase: Phase::Start,
                } = &f.rec.event
                else {
                    continue;
                };
                if what == "sigcont" || what == "heal" {
                    continue;
                }
                let Some(holder) = terms
                    .iter()
                    .find(|t| t.promote_t <= f.t && f.t <= t.act_end)
                else {
                    continue;
                };
                let server_wide = !self.lives.contains_key(target.as_str());
                if !server_wide && holder.node != *target {
                    continue;
                }
                // A holder whose term outlived the fault by more than a TTL rode it out: no
                // fail-over to measure.
                let grace = ttl.unwrap_or(2_000_000_000);
                if holder.act_end > self.fault_end(f.t, target).saturating_add(grace) {
                    self.stats.ridden_out += 1;
                    continue;
                }
                let next = terms.iter().find(|t| t.promote_t > f.t);
                let after_expiry = match (what.as_str(), next, ttl) {
                    ("sigkill", Some(n), Some(ttl)) => self
                        .lease_end(&holder.node, &role, f.t, ttl)
                        .map(|lease_end| (n.promote_t as f64 - lease_end as f64) / MS),
                    _ => None,
                };
                self.stats.failovers.push(Failover {
                    role: role.clone(),
                    fault: what.clone(),
                    target: target.clone(),
                    holder: holder.node.clone(),
                    start_ms: self.ms(f.t),
                    duration_ms: next.map(|n| (n.promote_t - f.t) as f64 / MS),
                    next_holder: next.map(|n| n.node.clone()),
                    after_expiry_ms: after_expiry,
                });
                if let (Some(late), Some(n)) = (after_expiry, next)
                    && late > expiry_slack as f64 / MS
                {
                    self.violate(
                        Invariant::L1,
                        Some(&role),
                        vec![holder.node.clone(), n.node.clone()],
                        vec![holder.token.1, n.token.1],
                        f.t,
                        Some(n.promote_t),
                        format!(
                            "after {} was killed, {} took over {late:.1} ms after the lease ran out (bound {} ms): the key did not expire",
                            holder.node,
                            n.node,
                            expiry_slack / 1_000_000
                        ),
                    );
                }
            }
            // L3: no demotion in the steady window.
            if let Some((from, to)) = self
                .trial
                .as_ref()
                .and_then(|t| t.steady_from_ns.zip(t.steady_to_ns))
            {
                let demotes: Vec<(String, u64, u64)> = events
                    .iter()
                    .filter(|e| e.t >= from && e.t <= to)
                    .filter_map(|e| match &e.rec.event {
                        Event::Demote { term, .. } => Some((e.rec.node.clone(), *term, e.t)),
                        _ => None,
                    })
                    .collect();
                for (node, term, t) in demotes {
                    self.violate(
                        Invariant::L3,
                        Some(&role),
                        vec![node.clone()],
                        vec![term],
                        t,
                        None,
                        format!("{node} demoted term {term} inside the steady-state window"),
                    );
                }
            }
        }
        if bound.is_none() {
            self.notes
                .push("no trial line: L1 not checked (no bound)".to_string());
        }
    }

    /// When the fault on `target` that started at `start` ended: its `end` event (or a
    /// `heal`), else its start (an instantaneous fault such as SIGKILL).
    pub(super) fn fault_end(&self, start: u64, target: &str) -> u64 {
        self.faults
            .iter()
            .find_map(|e| match &e.rec.event {
                Event::Fault {
                    what,
                    target: t,
                    phase: Phase::End,
                } if e.t >= start && (t == target || what == "heal") => Some(e.t),
                _ => None,
            })
            .unwrap_or(start)
    }

    /// When the server can expire what `node`'s term of `role` rests on, as of `t`: the send
    /// time of its last acquire/renew write of the role key before `t` plus the TTL as the
    /// server applies it (whole seconds, rounded up). In protocol v2 the role key is not
    /// renewed (no renew write of it is recorded): the session is, and each acknowledged
    /// session renewal shows as a `renew` event of the role, so the last of those counts
    /// instead (its send was a little earlier, so this errs late, towards fewer L1 reports).
    pub(super) fn lease_end(&self, node: &str, role: &str, t: u64, ttl: u64) -> Option<u64> {
        let sec = 1_000_000_000;
        let server_ttl = ttl.div_ceil(sec) * sec;
        let events = || {
            self.all.iter().filter(move |e| {
                e.t <= t && e.rec.node == node && e.rec.role.as_deref() == Some(role)
            })
        };
        let renews_role_key = events().any(|e| {
            matches!(
                e.rec.event,
                Event::Invoke {
                    kind: OpKind::Renew,
                    ..
                }
            )
        });
        events()
            .filter(|e| match &e.rec.event {
                Event::Invoke {
                    kind: OpKind::Acquire | OpKind::Renew,
                    ..
                } => true,
                Event::Renew { .. } => !renews_role_key,
                _ => false,
            })
            .map(|e| e.t + server_ttl)
            .max()
    }

    /// L1 for one stretch `[from, to)` without a holder: the time in it after the last fault
    /// during which an eligible candidate was alive must stay within `bound`.
    pub(super) fn l1_gap(
        &mut self,
        role: &str,
        nodes: &[String],
        from: u64,
        to: u64,
        heal: Option<u64>,
        bound: u64,
    ) {
        let start = heal.map_or(from, |h| from.max(h));
        if to <= start {
            return;
        }
        // Sample eligibility at change points (lifetimes, pauses) inside the gap.
        let mut points: BTreeSet<u64> = BTreeSet::new();
        points.insert(start);
        points.insert(to);
        for ls in self.lives.values() {
            for l in ls {
                for p in [l.start, l.end] {
                    if p > start && p < to {
                        points.insert(p);
                    }
                }
            }
        }
        for f in &self.faults {
            if f.t > start && f.t < to {
                points.insert(f.t);
            }
        }
        let points: Vec<u64> = points.into_iter().collect();
        let mut vacant_with_candidate = 0u64;
        let mut first = None;
        for w in points.windows(2) {
            let (a, b) = (w[0], w[1]);
            if nodes.iter().any(|n| self.eligible(n, role, a)) {
                vacant_with_candidate += b - a;
                first.get_or_insert(a);
            }
        }
        if vacant_with_candidate > bound {
            let at = first.unwrap_or(start);
            self.violate(
                Invariant::L1,
                Some(role),
                Vec::new(),
                Vec::new(),
                at,
                Some(to),
                format!(
                    "no holder for {:.1} ms while a candidate was alive (bound {} ms)",
                    vacant_with_candidate as f64 / MS,
                    bound / 1_000_000
                ),
            );
        }
    }
}
