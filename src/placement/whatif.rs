//! What-if: the moves placement would make from a given bucket state (membership records and
//! holders), after some members drain, leave or join — the pure part of `nats-roles plan` and
//! `POST /api/plan/simulate`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::member::MemberRecord;
use super::plan::{Candidate, PreferredReason, plan};
use super::settings::valid_zone;
use crate::names::{InstanceId, RoleName};

/// A member that joins in the simulation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Joining {
    /// Its instance id.
    pub id: InstanceId,
    /// Its placement weight (1 to 1000). Default: 1.
    #[serde(default = "one")]
    pub weight: u32,
    /// Its zone. Default: none.
    #[serde(default)]
    pub zone: Option<String>,
}

fn one() -> u32 {
    1
}

impl Joining {
    /// Parses `ID[:WEIGHT[:ZONE]]` (the `--join` argument).
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = text.splitn(3, ':');
        let id = parts.next().unwrap_or_default();
        let id =
            InstanceId::new(id).map_err(|e| format!("{id:?} is not an instance id: it {e}"))?;
        let weight = match parts.next() {
            None | Some("") => 1,
            Some(w) => w
                .parse::<u32>()
                .ok()
                .filter(|w| (1..=1000).contains(w))
                .ok_or_else(|| format!("{w:?} is not a weight between 1 and 1000"))?,
        };
        let zone = parts.next().map(str::to_owned);
        let joining = Self { id, weight, zone };
        joining.check()?;
        Ok(joining)
    }

    fn check(&self) -> Result<(), String> {
        if !(1..=1000).contains(&self.weight) {
            return Err(format!(
                "weight {} of {} is not between 1 and 1000",
                self.weight, self.id
            ));
        }
        if let Some(z) = &self.zone
            && !valid_zone(z)
        {
            return Err(format!(
                "{z:?} is not a zone name: 1 to 64 letters, digits, '-', '_' or '.'"
            ));
        }
        Ok(())
    }
}

/// The changes to simulate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WhatIf {
    /// Members that start draining.
    pub drain: Vec<InstanceId>,
    /// Members that leave (their roles become vacant).
    pub leave: Vec<InstanceId>,
    /// Members that join; each campaigns for every role some member campaigns for, at the
    /// highest priority any member gives it (configured like the others).
    pub join: Vec<Joining>,
}

impl WhatIf {
    /// Most changes one simulation takes.
    pub const MAX_CHANGES: usize = 256;

    /// Checks the changes against the members present.
    ///
    /// # Errors
    /// A message naming the first problem: too many changes, an unknown member to drain or
    /// leave, a joining id that is already a member, a bad weight or zone.
    pub fn check(&self, members: &[MemberRecord]) -> Result<(), String> {
        if self.drain.len() + self.leave.len() + self.join.len() > Self::MAX_CHANGES {
            return Err(format!(
                "at most {} changes per simulation",
                Self::MAX_CHANGES
            ));
        }
        let present: BTreeSet<&InstanceId> = members.iter().map(|m| &m.instance).collect();
        for id in self.drain.iter().chain(&self.leave) {
            if !present.contains(id) {
                return Err(format!("{id} is not a live member"));
            }
        }
        let mut joining = BTreeSet::new();
        for j in &self.join {
            j.check()?;
            if present.contains(&j.id) || !joining.insert(&j.id) {
                return Err(format!("{} is already a member", j.id));
            }
        }
        Ok(())
    }
}

/// One move the plan would make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    /// The role.
    pub role: RoleName,
    /// Its holder now (`None`: vacant, or its holder left).
    pub from: Option<InstanceId>,
    /// Where the plan wants it.
    pub to: InstanceId,
    /// Why.
    pub reason: PreferredReason,
}

/// One zone of the simulated members and how many roles the plan gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ZoneShare {
    /// The zone (`None`: the members without a zone, which count as one zone of their own).
    pub zone: Option<String>,
    /// Its members after the changes.
    pub members: Vec<InstanceId>,
    /// The roles the plan prefers its members for.
    pub roles: usize,
}

/// The outcome of a simulation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Simulation {
    /// Moves of held roles (hand-overs), by role name.
    pub moves: Vec<Move>,
    /// Vacant roles (now, or whose holder left) and where they would go.
    pub fills: Vec<Move>,
    /// Roles that would have no preferred holder: those no remaining member campaigns for
    /// (listed in [`Simulation::unheld`] too) and those no eligible candidate has room for.
    pub unplaced: Vec<RoleName>,
    /// Roles no member campaigns for after the changes (e.g. every member leaves): nobody
    /// would hold them.
    pub unheld: Vec<RoleName>,
    /// The zones after the changes, with the roles the plan gives each, when there is more
    /// than one (members without a zone count as one zone): the plan spreads roles over zones
    /// first, so these decided the shares. Empty with a single zone.
    pub zones: Vec<ZoneShare>,
    /// Moves the plan makes already without the changes (placement has not converged).
    pub pending: usize,
}

/// The moves placement would make from `members` and `holders` after `changes`.
#[must_use]
pub fn simulate(
    members: &[MemberRecord],
    holders: &BTreeMap<RoleName, InstanceId>,
    changes: &WhatIf,
) -> Simulation {
    let before: Vec<Candidate> = members.iter().map(Candidate::from).collect();
    let pending = moves_of(&plan(&before, holders), holders, &before).0.len();
    let mut after: Vec<Candidate> = before
        .iter()
        .filter(|c| !changes.leave.contains(&c.id))
        .cloned()
        .collect();
    for c in &mut after {
        if changes.drain.contains(&c.id) {
            c.draining = true;
        }
    }
    let mut roles: BTreeMap<RoleName, i32> = BTreeMap::new();
    for c in &before {
        for (r, p) in &c.roles {
            let e = roles.entry(r.clone()).or_insert(*p);
            *e = (*e).max(*p);
        }
    }
    let costs: BTreeMap<RoleName, u32> = before
        .iter()
        .flat_map(|c| c.costs.iter().map(|(r, k)| (r.clone(), *k)))
        .collect();
    for j in &changes.join {
        let mut c = Candidate::from(&MemberRecord {
            v: super::MEMBER_VERSION,
            instance: j.id.clone(),
            incarnation: uuid::Uuid::nil(),
            weight: j.weight,
            priority: 0,
            roles: roles.clone(),
            pinned: BTreeSet::new(),
            unavailable: BTreeSet::new(),
            draining: false,
            healthy: true,
            http: None,
            started_at: None,
            zone: j.zone.clone(),
            capacity: None,
            max_roles: None,
            version: None,
            costs: costs.clone(),
            settings: None,
            parked: BTreeMap::new(),
            prepares: BTreeSet::new(),
            prepared: BTreeSet::new(),
            prepare_failed: BTreeSet::new(),
            frozen: false,
            heartbeat_ms: 0,
            sessions: BTreeMap::new(),
            placement: true,
            groups: BTreeMap::new(),
        });
        c.weight = j.weight;
        after.push(c);
    }
    let held: BTreeMap<RoleName, InstanceId> = holders
        .iter()
        .filter(|(_, h)| !changes.leave.contains(h))
        .map(|(r, h)| (r.clone(), h.clone()))
        .collect();
    let p = plan(&after, &held);
    let (moves, fills) = moves_of(&p, holders, &after);
    let campaigned: BTreeSet<&RoleName> = after.iter().flat_map(|c| c.roles.keys()).collect();
    let all: BTreeSet<&RoleName> = roles.keys().chain(holders.keys()).collect();
    let unplaced = all
        .iter()
        .filter(|r| !p.preferred.contains_key(**r))
        .map(|r| (*r).clone())
        .collect();
    let unheld = all
        .iter()
        .filter(|r| !campaigned.contains(**r))
        .map(|r| (*r).clone())
        .collect();
    Simulation {
        moves,
        fills,
        unplaced,
        unheld,
        zones: zone_shares(&after, &p),
        pending,
    }
}

/// The zones of `members` with the roles `p` gives each, when there are several.
fn zone_shares(members: &[Candidate], p: &super::plan::Plan) -> Vec<ZoneShare> {
    let mut zones: BTreeMap<Option<&str>, ZoneShare> = BTreeMap::new();
    for c in members {
        zones
            .entry(c.zone.as_deref())
            .or_insert_with(|| ZoneShare {
                zone: c.zone.clone(),
                members: Vec::new(),
                roles: 0,
            })
            .members
            .push(c.id.clone());
    }
    if zones.len() < 2 {
        return Vec::new();
    }
    let zone_of: BTreeMap<&InstanceId, Option<&str>> =
        members.iter().map(|c| (&c.id, c.zone.as_deref())).collect();
    for pref in p.preferred.values() {
        if let Some(z) = zone_of.get(&pref.instance)
            && let Some(share) = zones.get_mut(z)
        {
            share.roles += 1;
        }
    }
    zones
        .into_values()
        .map(|mut z| {
            z.members.sort();
            z
        })
        .collect()
}

/// Hand-overs (a live holder loses the role) and fills (no live holder) of a plan.
fn moves_of(
    p: &super::plan::Plan,
    holders: &BTreeMap<RoleName, InstanceId>,
    live: &[Candidate],
) -> (Vec<Move>, Vec<Move>) {
    let present: BTreeSet<&InstanceId> = live.iter().map(|c| &c.id).collect();
    let mut moves = Vec::new();
    let mut fills = Vec::new();
    for (role, pref) in &p.preferred {
        let from = holders.get(role);
        if from == Some(&pref.instance) {
            continue;
        }
        let m = Move {
            role: role.clone(),
            from: from.cloned(),
            to: pref.instance.clone(),
            reason: pref.reason,
        };
        if from.is_some_and(|h| present.contains(h)) {
            moves.push(m);
        } else {
            fills.push(m);
        }
    }
    (moves, fills)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::member::test_record;

    fn id(s: &str) -> InstanceId {
        InstanceId::new(s).expect("valid")
    }

    fn role(i: usize) -> RoleName {
        RoleName::new(format!("r{i}")).expect("valid")
    }

    #[test]
    fn draining_joining_and_leaving_move_what_the_plan_says() {
        let roles: Vec<(String, i32)> = (0..6).map(|i| (format!("r{i}"), 0)).collect();
        let roles: Vec<(&str, i32)> = roles.iter().map(|(r, p)| (r.as_str(), *p)).collect();
        let members = vec![test_record("a", &roles, 250), test_record("b", &roles, 250)];
        let holders: BTreeMap<RoleName, InstanceId> = (0..6)
            .map(|i| (role(i), id(if i < 3 { "a" } else { "b" })))
            .collect();
        let none = simulate(&members, &holders, &WhatIf::default());
        assert_eq!(
            (none.moves.len(), none.fills.len(), none.pending),
            (0, 0, 0)
        );
        let drain = simulate(
            &members,
            &holders,
            &WhatIf {
                drain: vec![id("a")],
                ..WhatIf::default()
            },
        );
        assert_eq!(drain.moves.len(), 3);
        assert!(
            drain
                .moves
                .iter()
                .all(|m| m.to == id("b") && m.reason == PreferredReason::Draining)
        );
        let join = simulate(
            &members,
            &holders,
            &WhatIf {
                join: vec![Joining::parse("c:1").expect("valid")],
                ..WhatIf::default()
            },
        );
        assert_eq!(join.moves.len(), 2, "{join:?}");
        assert!(join.moves.iter().all(|m| m.to == id("c")));
        let leave = simulate(
            &members,
            &holders,
            &WhatIf {
                leave: vec![id("b")],
                ..WhatIf::default()
            },
        );
        assert_eq!((leave.moves.len(), leave.fills.len()), (0, 3));
    }

    #[test]
    fn zones_are_reported_and_leaving_everyone_leaves_every_role_unheld() {
        let roles: Vec<(String, i32)> = (0..6).map(|i| (format!("r{i}"), 0)).collect();
        let roles: Vec<(&str, i32)> = roles.iter().map(|(r, p)| (r.as_str(), *p)).collect();
        let mut a = test_record("a", &roles, 250);
        a.zone = Some("z1".into());
        let mut b = test_record("b", &roles, 250);
        b.zone = Some("z1".into());
        let members = vec![a, b];
        let holders: BTreeMap<RoleName, InstanceId> = (0..6)
            .map(|i| (role(i), id(if i < 3 { "a" } else { "b" })))
            .collect();
        assert!(
            simulate(&members, &holders, &WhatIf::default())
                .zones
                .is_empty()
        );
        let join = simulate(
            &members,
            &holders,
            &WhatIf {
                join: vec![Joining::parse("d").expect("valid")],
                ..WhatIf::default()
            },
        );
        assert_eq!(join.zones.len(), 2, "{join:?}");
        assert_eq!(join.zones[0].zone, None);
        assert_eq!(join.zones[0].members, vec![id("d")]);
        assert_eq!(join.zones[0].roles, 3, "{join:?}");
        assert_eq!(join.zones[1].roles, 3, "{join:?}");
        let gone = simulate(
            &members,
            &holders,
            &WhatIf {
                leave: vec![id("a"), id("b")],
                ..WhatIf::default()
            },
        );
        assert_eq!(gone.unheld.len(), 6, "{gone:?}");
        assert_eq!(gone.unplaced.len(), 6, "{gone:?}");
        assert!(gone.moves.is_empty() && gone.fills.is_empty());
    }

    #[test]
    fn bad_changes_are_refused_with_a_reason() {
        let members = vec![test_record("a", &[("r", 0)], 250)];
        for bad in ["", "x:0", "x:1001", "x:two", "x:1:bad zone", "bad id!"] {
            assert!(Joining::parse(bad).is_err(), "{bad:?}");
        }
        let unknown = WhatIf {
            drain: vec![id("zz")],
            ..WhatIf::default()
        };
        assert!(unknown.check(&members).expect_err("unknown").contains("zz"));
        let twice = WhatIf {
            join: vec![Joining::parse("a").expect("valid")],
            ..WhatIf::default()
        };
        assert!(twice.check(&members).is_err());
    }
}
