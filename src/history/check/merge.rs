//! One clock for every record: node stamps mapped onto the harness clock (re-anchored at
//! each start, scaled back under `faketime`), merged and sorted.

use std::collections::{BTreeMap, BTreeSet};

use crate::history::event::{Event, Record, Source};

use super::report::Stats;
use super::{Checker, Ev, ms};
/// Linear map of a node's clock onto the harness clock (identity unless under `faketime`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Anchor {
    pub(super) rate: f64,
    pub(super) fake: u64,
    pub(super) real: u64,
}

impl Anchor {
    pub(super) const IDENTITY: Self = Self {
        rate: 1.0,
        fake: 0,
        real: 0,
    };

    pub(super) fn map(&self, raw: u64) -> u64 {
        if (self.rate - 1.0).abs() < f64::EPSILON {
            return raw;
        }
        let d = (raw as f64 - self.fake as f64) / self.rate;
        (self.real as f64 + d).max(0.0) as u64
    }
}

impl<'a> Checker<'a> {
    pub(super) fn new(records: &'a [Record]) -> Self {
        // Normalise node clocks: per process (node and incarnation), in its own order,
        // re-anchored at each start.
        let mut by_node: BTreeMap<(&str, Option<&str>), Vec<&Record>> = BTreeMap::new();
        let mut all = Vec::with_capacity(records.len());
        let mut trial = None;
        for r in records {
            match r.src {
                Source::Node => by_node
                    .entry((r.node.as_str(), r.inc.as_deref()))
                    .or_default()
                    .push(r),
                Source::Harness => {
                    if let (Event::Trial(t), None) = (&r.event, &trial) {
                        trial = Some((r.mono_ns, t.clone()));
                    }
                    all.push(Ev {
                        t: r.mono_ns,
                        rec: r,
                    });
                }
            }
        }
        let mut anchors_needed = false;
        for recs in by_node.values_mut() {
            recs.sort_by_key(|r| r.mono_ns);
            let mut anchor = Anchor::IDENTITY;
            for r in recs.iter() {
                if let Event::Start {
                    clock_rate,
                    real_mono_ns,
                    ..
                } = &r.event
                {
                    anchor = Anchor {
                        rate: if *clock_rate > 0.0 { *clock_rate } else { 1.0 },
                        fake: r.mono_ns,
                        real: real_mono_ns.unwrap_or(r.mono_ns),
                    };
                    anchors_needed |= (anchor.rate - 1.0).abs() > f64::EPSILON;
                }
                all.push(Ev {
                    t: anchor.map(r.mono_ns),
                    rec: r,
                });
            }
        }
        all.sort_by_key(|e| e.t);
        let t0 = trial
            .as_ref()
            .map_or_else(|| all.first().map_or(0, |e| e.t), |(t, _)| *t);
        let mut notes = Vec::new();
        if anchors_needed {
            notes.push(
                "some nodes ran with a scaled clock (faketime): their stamps were mapped to real time"
                    .to_string(),
            );
        }
        let faults = all
            .iter()
            .copied()
            .filter(|e| matches!(e.rec.event, Event::Fault { .. }))
            .collect();
        let mut stats = Stats {
            duration_ms: all.last().map_or(0.0, |e| ms(e.t, t0)),
            ..Stats::default()
        };
        let nodes: BTreeSet<&str> = by_node.keys().map(|(node, _)| *node).collect();
        stats.nodes = nodes.into_iter().map(ToString::to_string).collect();
        let roles: BTreeSet<&str> = all.iter().filter_map(|e| e.rec.role.as_deref()).collect();
        stats.roles = roles.into_iter().map(str::to_string).collect();
        Self {
            t0,
            trial: trial.map(|(_, t)| t),
            all,
            violations: Vec::new(),
            stats,
            notes,
            incomplete: BTreeSet::new(),
            lives: BTreeMap::new(),
            terms: Vec::new(),
            faults,
        }
    }
}
