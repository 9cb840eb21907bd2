//! Faults: crashes, restarts, pauses, disconnects, releases, stops, hold-backs.

use std::time::Duration;

use crate::core::sim::clock::{MS, SEC};
use crate::core::sim::kv::EntryKind;
use crate::core::sim::scenario::{Fault, FaultKind, Target};
use crate::core::sim::trace::Rec;

use super::{Ev, Input, Sim};

impl Sim {
    pub(super) fn fault(&mut self, i: usize) {
        let f = self.sc.faults[i];
        let Some(n) = self.target(f) else {
            return;
        };
        let ttl = self.sc.timing.ttl_s * SEC;
        let name = self.nodes[n].trace.name.clone();
        self.faults.push((self.now, format!("{:?} {name}", f.kind)));
        let node = &mut self.nodes[n];
        match f.kind {
            FaultKind::Crash => self.crash(n),
            FaultKind::Reboot { downtime_ms } => {
                self.crash(n);
                self.push(self.now + downtime_ms * MS, Ev::Respawn(n));
            }
            FaultKind::Restart => self.respawn(n),
            FaultKind::Pause { ttl_pct } => {
                node.paused_until = node.paused_until.max(self.now + ttl * ttl_pct / 100);
            }
            FaultKind::Disconnect { ttl_pct } => {
                if node.disconnected_until.is_none() {
                    let up = self.now + ttl * ttl_pct / 100;
                    node.disconnected_until = Some(up);
                    self.push(self.now, Ev::Node(n, Input::Connection(false)));
                    self.push(up, Ev::Node(n, Input::Connection(true)));
                }
            }
            FaultKind::Release { cooldown_ms } => {
                let cooldown = Duration::from_millis(cooldown_ms);
                self.push(self.now, Ev::Node(n, Input::Release(cooldown)));
            }
            FaultKind::Stop => self.push(self.now, Ev::Node(n, Input::Stop)),
            FaultKind::CampaignDelay { delay_ms } => {
                let delay = Duration::from_millis(delay_ms);
                self.push(self.now, Ev::Node(n, Input::CampaignDelay(delay)));
            }
        }
    }

    pub(super) fn crash(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        node.crashed = true;
        node.timer = None;
        node.leading = None;
        node.trace.recs.push(Rec::Crash { g: self.now });
    }

    /// Starts a crashed node's instance again, once.
    pub(super) fn respawn(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        if node.crashed && !node.restarted {
            node.restarted = true;
            let (slot, campaign) = (node.slot, node.trace.campaign);
            let at = self.now + self.rng.hop();
            self.spawn(slot, campaign, at);
        }
    }

    /// Resolves a fault's target to a node that can take it.
    pub(super) fn target(&self, f: Fault) -> Option<usize> {
        let len = self.nodes.len();
        let dead = |i: usize| self.nodes[i].crashed && !self.nodes[i].restarted;
        let n = match (f.kind, f.target) {
            (FaultKind::Restart, Target::Leader) => return (0..len).rev().find(|&i| dead(i)),
            (FaultKind::Restart, Target::Node(i)) => return Some(i % len).filter(|&i| dead(i)),
            (_, Target::Leader) => self.leader()?,
            (_, Target::Node(i)) => i % len,
        };
        let node = &self.nodes[n];
        let immune = self.sc.immune && node.slot == self.sc.nodes - 1;
        (node.started && !node.crashed && !immune).then_some(n)
    }

    /// The acting holder; else the live writer of the key's current put.
    pub(super) fn leader(&self) -> Option<usize> {
        let acting = self
            .nodes
            .iter()
            .position(|n| !n.crashed && n.leading.is_some_and(|d| n.clock.global(d) > self.now));
        acting.or_else(|| {
            let last = self.kv.log.last()?;
            let (n, _) = last
                .writer
                .filter(|_| matches!(last.kind, EntryKind::Put(_)))?;
            (!self.nodes[n].crashed).then_some(n)
        })
    }
}
