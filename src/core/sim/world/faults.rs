//! Faults: crashes, restarts, pauses, disconnects, releases, stops, hold-backs, evictions. They
//! hit a whole process (instance): every role it runs and its session.

use std::time::Duration;

use crate::core::sim::clock::{MS, SEC};
use crate::core::sim::kv::EntryKind;
use crate::core::sim::scenario::{Fault, FaultKind, Target};
use crate::core::sim::trace::Rec;

use super::{Ev, Input, SInput, Sim};

impl Sim {
    pub(super) fn fault(&mut self, f: usize) {
        let f = self.sc.faults[f];
        let Some(i) = self.target(f) else {
            return;
        };
        let ttl = self.sc.timing.ttl_s * SEC;
        let name = format!("node-{}/{i}", self.insts[i].slot);
        self.faults.push((self.now, format!("{:?} {name}", f.kind)));
        let inst = &mut self.insts[i];
        match f.kind {
            FaultKind::Crash => self.crash(i),
            FaultKind::Reboot { downtime_ms } => {
                self.crash(i);
                self.push(self.now + downtime_ms * MS, Ev::Respawn(i));
            }
            FaultKind::Restart => self.respawn(i),
            FaultKind::Pause { ttl_pct } => {
                inst.paused_until = inst.paused_until.max(self.now + ttl * ttl_pct / 100);
            }
            FaultKind::Disconnect { ttl_pct } => {
                if inst.disconnected_until.is_none() {
                    let up = self.now + ttl * ttl_pct / 100;
                    inst.disconnected_until = Some(up);
                    self.push(self.now, Ev::Inst(i, SInput::Connection(false)));
                    self.push(up, Ev::Inst(i, SInput::Connection(true)));
                }
            }
            FaultKind::Release { cooldown_ms } => {
                let cooldown = Duration::from_millis(cooldown_ms);
                self.send_to_nodes(i, &Input::Release(cooldown));
            }
            FaultKind::Stop => {
                inst.stopping = true;
                self.send_to_nodes(i, &Input::Stop);
            }
            FaultKind::CampaignDelay { delay_ms } => {
                let delay = Duration::from_millis(delay_ms);
                self.send_to_nodes(i, &Input::CampaignDelay(delay));
            }
            FaultKind::EvictSession => {
                let slot = inst.slot;
                let key = self.session_key_of(slot);
                let gap = self.gap();
                let rev = self.kv.evict(key, self.now, gap);
                self.stored(key, rev, Some(i));
            }
        }
    }

    /// Queues `input` for every role node of instance `i`, now.
    fn send_to_nodes(&mut self, i: usize, input: &Input) {
        for n in self.insts[i].nodes.clone() {
            self.push(self.now, Ev::Node(n, input.clone()));
        }
    }

    pub(super) fn crash(&mut self, i: usize) {
        let inst = &mut self.insts[i];
        inst.crashed = true;
        inst.timer = None;
        for n in inst.nodes.clone() {
            let node = &mut self.nodes[n];
            node.timer = None;
            node.leading = None;
            node.trace.recs.push(Rec::Crash { g: self.now });
        }
    }

    /// Starts a crashed instance's process again, once.
    pub(super) fn respawn(&mut self, i: usize) {
        let inst = &mut self.insts[i];
        if inst.crashed && !inst.restarted {
            inst.restarted = true;
            let (slot, campaign) = (inst.slot, inst.campaign);
            let at = self.now + self.rng.hop();
            self.spawn(slot, campaign, at);
        }
    }

    /// Resolves a fault's target to an instance that can take it.
    pub(super) fn target(&self, f: Fault) -> Option<usize> {
        let len = self.insts.len();
        let dead = |i: usize| self.insts[i].crashed && !self.insts[i].restarted;
        let i = match (f.kind, f.target) {
            (FaultKind::Restart, Target::Leader) => return (0..len).rev().find(|&i| dead(i)),
            (FaultKind::Restart, Target::Node(i)) => return Some(i % len).filter(|&i| dead(i)),
            (_, Target::Leader) => self.leader()?,
            (_, Target::Node(i)) => i % len,
        };
        let inst = &self.insts[i];
        let immune = self.sc.immune && inst.slot == self.sc.nodes - 1;
        (inst.started && !inst.crashed && !immune).then_some(i)
    }

    /// The instance acting for role 0; else the live writer of role 0's current put.
    pub(super) fn leader(&self) -> Option<usize> {
        let acting = self.nodes.iter().find(|n| {
            let inst = &self.insts[n.inst];
            n.role == 0
                && !inst.crashed
                && n.leading.is_some_and(|d| inst.clock.global(d) > self.now)
        });
        acting.map(|n| n.inst).or_else(|| {
            let last = self.kv.logs[0].last()?;
            let (n, _) = last
                .writer
                .filter(|_| matches!(last.kind, EntryKind::Put(_)))?;
            let i = self.nodes[n].inst;
            (!self.insts[i].crashed).then_some(i)
        })
    }
}
