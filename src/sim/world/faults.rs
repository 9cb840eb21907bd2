//! Faults: crashes, restarts, pauses, disconnects, releases, stops, hold-backs, evictions,
//! foreign values, refused role writes, deposed leaders. They hit a whole process (instance):
//! every role it runs and its session. A bucket reset hits everyone (`bucket`).

use std::time::Duration;

use crate::sim::clock::{MS, SEC};
use crate::sim::kv::{EntryKind, KvWrite};
use crate::sim::scenario::{Fault, FaultKind, Target};
use crate::sim::trace::{MoveApplied, Rec};
use crate::value::{LeaseValue, SessionValue, VALUE_VERSION};

use super::{Ev, ForeignRole, Input, SInput, Sim};

impl Sim {
    pub(super) fn fault(&mut self, f: usize) {
        let f = self.sc.faults[f];
        if let FaultKind::ResetBucket { fresh } = f.kind {
            return self.reset_bucket(fresh);
        }
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
                let end = inst.paused_until;
                self.faults.push((end, format!("end of pause {name}")));
            }
            FaultKind::Disconnect { ttl_pct } => {
                if inst.disconnected_until.is_none() {
                    let up = self.now + ttl * ttl_pct / 100;
                    inst.disconnected_until = Some(up);
                    self.push(self.now, Ev::Inst(i, SInput::Connection(false)));
                    self.push(up, Ev::Inst(i, SInput::Connection(true)));
                    self.faults.push((up, format!("end of disconnect {name}")));
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
            FaultKind::ForeignSession => {
                let until = self.now + 3 * ttl;
                self.foreign_sessions.push((i, until));
                self.try_foreign_sessions();
            }
            FaultKind::ForeignRole { own_incarnation } => {
                let until = self.now + 3 * ttl;
                self.foreign_roles.push(ForeignRole {
                    inst: i,
                    own_incarnation,
                    until,
                });
                self.try_foreign_roles();
            }
            FaultKind::DenyRoleWrites { ms } => self.deny_role_writes(i, ms),
            FaultKind::RefusedRelease {
                deny_ms,
                cooldown_ms,
            } => {
                self.deny_role_writes(i, deny_ms);
                let cooldown = Duration::from_millis(cooldown_ms);
                self.send_to_nodes(i, &Input::Release(cooldown));
            }
            FaultKind::DeposedLeader { ttl_pct } => {
                if inst.deposed.is_none() {
                    let end = self.now + ttl * ttl_pct / 100;
                    inst.deposed = Some((self.now, end));
                    self.push(end, Ev::Inst(i, SInput::Undeposed));
                    self.faults
                        .push((end, format!("end of deposed leader {name}")));
                }
            }
            FaultKind::Move { to, grace_ms } => self.start_move(i, to, grace_ms),
            FaultKind::CrashWithSuccessors => self.crash_with_successors(i),
            FaultKind::ForeignMember { delete } => self.foreign_member(i, delete),
            FaultKind::ResetBucket { .. } => {}
        }
    }

    /// A targeted move of role 0 from instance `i` (its holder) to the `to`-th other live
    /// instance (protocol Q13): the target accepted at once (its record reaches every process
    /// before the holder's delete, as the stream orders them); the holder releases gracefully
    /// and holds back like the others from the moment it starts.
    fn start_move(&mut self, i: usize, to: u64, grace_ms: u64) {
        let from = self.insts[i].nodes[0];
        let Some(term) = self.nodes[from].machine.term().map(|t| t.token.term()) else {
            return; // not the acting holder (its term is releasing or over)
        };
        let others: Vec<usize> = (0..self.insts.len())
            .filter(|&j| {
                let inst = &self.insts[j];
                j != i && inst.started && !inst.crashed && !inst.stopping
            })
            .collect();
        let Some(&t) = others.get(usize::try_from(to).unwrap_or(0) % others.len().max(1)) else {
            return;
        };
        let target = self.insts[t].nodes[0];
        if !self.nodes[target].trace.campaign {
            return; // the target refuses: it only observes the role
        }
        let grace = Duration::from_millis(grace_ms).min(self.timing.ttl);
        self.moves.push(MoveApplied {
            at: self.now,
            role: 0,
            from,
            to: target,
            term,
            grace,
        });
        self.nodes[from].last_held = Some(term);
        self.rank_for_vacancy(from);
        self.push(self.now, Ev::Node(from, Input::MoveRelease));
    }

    /// Queues `input` for every role node of instance `i`, now.
    fn send_to_nodes(&mut self, i: usize, input: &Input) {
        for n in self.insts[i].nodes.clone() {
            self.push(self.now, Ev::Node(n, input.clone()));
        }
    }

    /// Instance `i`'s writes of role keys are refused for `ms`.
    fn deny_role_writes(&mut self, i: usize, ms: u64) {
        let end = self.now + ms * MS;
        let inst = &mut self.insts[i];
        inst.deny_role_until = inst.deny_role_until.max(end);
        let name = format!("node-{}/{i}", inst.slot);
        self.faults
            .push((end, format!("end of denied role writes {name}")));
    }

    /// Foreign session writes waiting for their instance's session key to hold no live
    /// session (a marker or no entry: its session expired or ended): each writes a session
    /// value of the instance's id with another incarnation there, by CAS on that revision, no
    /// TTL, never renewed (a restored backup, a buggy tool). Written over a live session it
    /// would be a second process with that id (Q6: flagged by design). Given up after their
    /// time.
    pub(super) fn try_foreign_sessions(&mut self) {
        let now = self.now;
        let pending = std::mem::take(&mut self.foreign_sessions);
        for (i, until) in pending {
            if now >= until {
                continue;
            }
            let key = self.session_key_of(self.insts[i].slot);
            if self.kv.last(key).is_none_or(|e| e.kind.is_marker()) {
                self.foreign_session(i, key);
            } else {
                self.foreign_sessions.push((i, until));
            }
        }
    }

    /// Another client writes a session value of instance `i`'s id with another incarnation into
    /// its session key `key` (CAS on its last revision), no TTL.
    fn foreign_session(&mut self, i: usize, key: usize) {
        let id = self.insts[i].id.clone();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let value = SessionValue {
            v: VALUE_VERSION,
            instance: id,
            incarnation: self.rng.uuid(),
            session: self.rng.uuid(),
            ttl_ms: ms(self.timing.ttl),
            heartbeat_ms: ms(self.timing.heartbeat),
            released: Vec::new(),
        };
        let expected = Some(self.kv.last_rev(key));
        self.count("foreign_session_written");
        self.foreign_write(KvWrite {
            key,
            expected,
            kind: EntryKind::Session(Box::new(value)),
            ttl: None,
            renew: false,
            writer: None,
        });
    }

    /// Foreign role writes waiting for a vacancy: each writes a role value naming its
    /// instance's live session into a vacant role key (a marker or no entry), by CAS on that
    /// revision, at once. Given up after their time or with their instance's process.
    pub(super) fn try_foreign_roles(&mut self) {
        let now = self.now;
        let pending = std::mem::take(&mut self.foreign_roles);
        for f in pending {
            let inst = &self.insts[f.inst];
            if now >= f.until || inst.crashed {
                continue;
            }
            let vacant =
                (0..self.roles.len()).find(|&r| self.kv.last(r).is_none_or(|e| e.kind.is_marker()));
            // A session whose value is in its key now (in this bucket: after a reset, a paused
            // process still believes in its session of the old one).
            let in_key = inst.live.filter(|u| {
                let key = self.session_key_of(inst.slot);
                self.kv
                    .last(key)
                    .is_some_and(|e| matches!(&e.kind, EntryKind::Session(v) if v.session == *u))
            });
            let (Some(session), Some(role)) = (in_key, vacant) else {
                self.foreign_roles.push(f);
                continue;
            };
            let incarnation = if f.own_incarnation {
                inst.incarnation
            } else {
                self.rng.uuid()
            };
            let value = LeaseValue {
                v: VALUE_VERSION,
                holder: inst.id.clone(),
                incarnation,
                session,
                session_key: self.session_keys[inst.slot].clone(),
                nonce: self.rng.uuid(),
                term: None,
                priority: 0,
                ttl_ms: u64::try_from(self.timing.ttl.as_millis()).unwrap_or(u64::MAX),
                meta: std::collections::BTreeMap::new(),
                acquired_at: None,
                renewed_at: None,
            };
            let expected = Some(self.kv.last_rev(role));
            self.count(match (inst.campaign, f.own_incarnation) {
                (false, _) => "foreign_role_observer",
                (true, true) => "foreign_role_own_incarnation",
                (true, false) => "foreign_role_other_incarnation",
            });
            self.foreign_write(KvWrite {
                key: role,
                expected,
                kind: EntryKind::Put(Box::new(value)),
                ttl: None,
                renew: false,
                writer: None,
            });
        }
    }

    /// Crashes instance `i` and the running processes of its successors, ranked by the member
    /// records in the bucket now (Q8 rule 2).
    fn crash_with_successors(&mut self, i: usize) {
        let h = self.insts[i].id.clone();
        let mut presence = crate::core::presence::Presence::new(h.clone());
        for slot in 0..self.session_keys.len() {
            let key = self.member_key_of(slot);
            if let Some(e) = self.kv.last(key)
                && let EntryKind::Member(rec) = &e.kind
            {
                let record = crate::core::PresentRecord {
                    revision: e.rev,
                    sessions: rec.sessions.clone(),
                };
                presence.record(super::instance_id(slot), record);
            }
        }
        let successors: Vec<_> = presence
            .ranking(&h)
            .into_iter()
            .take(crate::core::presence::SUCCESSORS)
            .collect();
        self.crash(i);
        for j in 0..self.insts.len() {
            let inst = &self.insts[j];
            if inst.started && !inst.crashed && successors.contains(&inst.id) {
                let name = format!("node-{}/{j}", inst.slot);
                self.faults
                    .push((self.now, format!("Crash (a successor) {name}")));
                self.crash(j);
            }
        }
    }

    /// Another client deletes instance `i`'s member record, or writes one of its id with
    /// another incarnation and a session that never existed (no TTL, no CAS).
    fn foreign_member(&mut self, i: usize, delete: bool) {
        let key = self.member_key_of(self.insts[i].slot);
        if delete {
            self.count("foreign_member_delete");
            let gap = self.gap();
            let rev = self.kv.evict(key, self.now, gap);
            return self.stored(key, rev, None);
        }
        let ttl_ms = u64::try_from(self.timing.ttl.as_millis()).unwrap_or(u64::MAX);
        let rec = crate::sim::kv::MemberRec {
            instance: self.insts[i].id.clone(),
            incarnation: self.rng.uuid(),
            sessions: std::collections::BTreeMap::from([(ttl_ms, self.rng.uuid())]),
        };
        self.count("foreign_member_write");
        self.foreign_write(KvWrite {
            key,
            expected: None,
            kind: EntryKind::Member(Box::new(rec)),
            ttl: None,
            renew: false,
            writer: None,
        });
    }

    pub(super) fn crash(&mut self, i: usize) {
        let inst = &mut self.insts[i];
        inst.crashed = true;
        inst.timer = None;
        inst.live = None;
        inst.renewal = None;
        for n in inst.nodes.clone() {
            let node = &mut self.nodes[n];
            node.timer = None;
            node.leading = None;
            node.app_deadline = None;
            node.synced = (None, None);
            node.term_sent = None;
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
        let up = |i: usize| self.insts[i].started && !self.insts[i].crashed;
        let i = match (f.kind, f.target) {
            (FaultKind::Restart, Target::Leader) => return (0..len).rev().find(|&i| dead(i)),
            (FaultKind::Restart, Target::Node(i) | Target::Follower(i)) => {
                return Some(i % len).filter(|&i| dead(i));
            }
            (_, Target::Leader) => self.leader()?,
            (_, Target::Node(i)) => i % len,
            (_, Target::Follower(k)) => {
                let leader = self.leader();
                let followers: Vec<usize> =
                    (0..len).filter(|&i| up(i) && Some(i) != leader).collect();
                *followers.get(k % followers.len().max(1))?
            }
        };
        let inst = &self.insts[i];
        let immune = self.sc.immune && inst.slot == self.sc.nodes - 1;
        (up(i) && !immune).then_some(i)
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
            let last = self.kv.last(0)?;
            let (n, _) = last
                .writer
                .filter(|_| matches!(last.kind, EntryKind::Put(_)))?;
            let i = self.nodes[n].inst;
            (!self.insts[i].crashed).then_some(i)
        })
    }
}
