//! The share stage of the plan: an exact balanced assignment of the roles with several
//! top-priority candidates, over zones, role costs, capacities and rollout versions.
//!
//! The assignment minimises, in this order (lexicographically):
//! 1. **overflow**: units and roles above each member's capacity (`capacity`, `max_roles`);
//! 2. **zone spread**: `Σ L_z²` over the zones' loads `L_z` (every zone counts the same, so
//!    roles spread across zones first);
//! 3. **member spread**: `Σ l_m² / w_m` over the members' loads `l_m` and weights `w_m`.
//!
//! A load is the sum of the costs (`roles[].weight`) of the roles a member holds, the roles
//! fixed to it by priority or pinning included. Each potential is convex, so an assignment is
//! optimal exactly when no *augmenting path* improves it: a chain `a → x1 → … → b` where each
//! member gives one role of the same cost to the next, which campaigns for it (the members in
//! between keep their load). The search starts from the current holders (then gives the
//! remaining roles, in name order, to the candidate whose potential grows least) and applies
//! improving paths until none is left. Every applied path lowers the potential, so the loop
//! ends; a carried-out plan is its own plan (nothing improves it); with equal weights and equal
//! role sets the spread is at most one role and only the excess moves.
//!
//! Hard limits: no path ends at a member without room (`capacity` / `max_roles`), and no role
//! moves onto a member whose version is older than the newest live version (`receives`);
//! such members keep what they hold. Paths through roles of different costs are not searched
//! (they would change the loads of the members in between), so with mixed costs the result is
//! optimal among single-cost chains.
//!
//! Deterministic: sources by overflow, then by load per weight, then by name; a role a member
//! likes least (rendezvous score) leaves first; roles it does not hold now move first (free).
//!
//! Exclusive classes (the slots of one role, protocol Q15): a member holds at most one role of
//! a class. No placement, path hop or home move puts a second one on it (a hop onto a member
//! holding one of the class is not searched, even if that member gives it away on the same
//! path); a class with more roles than members leaves the rest unassigned.

use std::cmp::Ordering;
use std::collections::{BTreeMap, VecDeque};

use super::hash::score;
use crate::names::{InstanceId, RoleName};

/// One eligible member as the assignment sees it.
#[derive(Debug, Clone)]
pub(super) struct Slot<'a> {
    pub id: &'a InstanceId,
    /// Weight (>= 1).
    pub weight: u64,
    /// Index of its zone (members without a zone share one).
    pub zone: usize,
    /// Units it may hold at most.
    pub capacity: Option<u64>,
    /// Roles it may hold at most.
    pub max_roles: Option<u64>,
    /// Whether roles may move onto it (its version is not older than the newest).
    pub receives: bool,
    /// Units and roles fixed to it (priority, pinned).
    pub fixed_units: u64,
    pub fixed_count: u64,
    /// The exclusive classes of the roles fixed to it.
    pub fixed_classes: Vec<usize>,
}

/// One role with several candidates.
#[derive(Debug, Clone)]
pub(super) struct Open<'a> {
    pub role: &'a RoleName,
    pub cost: u64,
    /// Indices into the slots, sorted.
    pub tied: Vec<usize>,
    /// The slot holding it now, if it is one of `tied`.
    pub holder: Option<usize>,
    /// The slot it is parked for (its holder holds it only because this member left), if
    /// that member is one of `tied` and not the holder.
    pub home: Option<usize>,
    /// Its exclusive class (the slots of one role: a member holds at most one of them).
    pub class: Option<usize>,
}

/// The loads of every slot and zone while the assignment is searched.
struct Loads {
    units: Vec<u64>,
    count: Vec<u64>,
    zone: Vec<u64>,
    /// Roles of each exclusive class per slot, where there is one.
    classes: BTreeMap<(usize, usize), u32>,
}

impl Loads {
    /// Whether role `o` may be placed on slot `b` as far as its class goes: `b` holds no
    /// other role of it.
    fn allows(&self, o: &Open<'_>, b: usize, at_now: Option<usize>) -> bool {
        let Some(c) = o.class else {
            return true;
        };
        let own = u32::from(at_now == Some(b));
        self.classes.get(&(b, c)).copied().unwrap_or(0) <= own
    }
}

/// Change of the three potentials by a move; smaller is better, negative improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Delta {
    overflow: i64,
    zone: i128,
    /// Member potential change as a fraction `num / den` (den > 0).
    num: i128,
    den: i128,
}

impl Delta {
    fn cmp_to(&self, other: &Self) -> Ordering {
        self.overflow
            .cmp(&other.overflow)
            .then(self.zone.cmp(&other.zone))
            .then((self.num * other.den).cmp(&(other.num * self.den)))
    }

    fn improves(&self) -> bool {
        self.overflow < 0
            || (self.overflow == 0 && (self.zone < 0 || (self.zone == 0 && self.num < 0)))
    }
}

/// Assigns every open role to one of its tied slots (or to none: no candidate has room).
pub(super) fn assign(slots: &[Slot<'_>], open: &[Open<'_>]) -> Vec<Option<usize>> {
    let zones = slots.iter().map(|s| s.zone + 1).max().unwrap_or(0);
    let mut loads = Loads {
        units: slots.iter().map(|s| s.fixed_units).collect(),
        count: slots.iter().map(|s| s.fixed_count).collect(),
        zone: vec![0; zones],
        classes: BTreeMap::new(),
    };
    for (i, s) in slots.iter().enumerate() {
        loads.zone[s.zone] += s.fixed_units;
        for &c in &s.fixed_classes {
            *loads.classes.entry((i, c)).or_default() += 1;
        }
    }
    let mut at: Vec<Option<usize>> = vec![None; open.len()];
    // Current holders keep their roles to start with (overflow moves them later), one of each
    // exclusive class.
    for (i, o) in open.iter().enumerate() {
        if let Some(h) = o.holder
            && loads.allows(o, h, None)
        {
            place(&mut loads, slots, &mut at, i, h, o);
        }
    }
    // The rest: where the potential grows least; members that receive and have room first.
    for (i, o) in open.iter().enumerate() {
        if at[i].is_some() {
            continue;
        }
        let best = o
            .tied
            .iter()
            .copied()
            .filter(|&b| room(&loads, slots, b, o.cost) && loads.allows(o, b, None))
            .min_by(|&x, &y| {
                slots[y]
                    .receives
                    .cmp(&slots[x].receives)
                    .then_with(|| {
                        growth(&loads, slots, x, o.cost).cmp_to(&growth(&loads, slots, y, o.cost))
                    })
                    .then_with(|| {
                        score(o.role.as_str(), slots[y].id.as_str())
                            .cmp(&score(o.role.as_str(), slots[x].id.as_str()))
                    })
            });
        if let Some(b) = best {
            place(&mut loads, slots, &mut at, i, b, o);
        }
    }
    place_class_leftovers(slots, open, &mut loads, &mut at);
    // Improve along augmenting paths until nothing improves.
    let mut guard = 0usize;
    let limit = 4 * open.len() * slots.len().max(1) + 16;
    let mut scores = Scores::new(open.len());
    let mut held = Held::new(slots, open, &at, &mut scores);
    let mut costs: Vec<u64> = open.iter().map(|o| o.cost).collect();
    costs.sort_unstable();
    costs.dedup();
    while let Some(path) = best_path(slots, open, &loads, &at, &held, &costs, &mut scores) {
        for (role, to) in path {
            let from = at[role].unwrap_or(to);
            unplace(&mut loads, slots, from, &open[role]);
            place(&mut loads, slots, &mut at, role, to, &open[role]);
            held.moved(slots, open, role, from, to, &mut scores);
        }
        guard += 1;
        if guard > limit {
            // Unreachable: every path lowers a bounded potential. A guard all the same.
            break;
        }
    }
    send_home(slots, open, &mut loads, &mut at);
    canonical_free(slots, open, &loads, &mut at);
    at
}

/// Places the roles of exclusive classes the greedy pass left out because each of their
/// candidates holds another role of the class: along an alternating path (the candidate's role
/// of the class moves on to one of its own candidates, and so on, to a member without one that
/// has room), as in bipartite matching. With nested candidate sets (the slots of a role, by
/// priority tiers) every slot is placed while there are members for them.
fn place_class_leftovers(
    slots: &[Slot<'_>],
    open: &[Open<'_>],
    loads: &mut Loads,
    at: &mut [Option<usize>],
) {
    for u in 0..open.len() {
        let Some(class) = open[u].class else {
            continue;
        };
        if at[u].is_some() {
            continue;
        }
        // The role of the class each slot holds (at most one, or the first).
        let mut holds: BTreeMap<usize, usize> = BTreeMap::new();
        for (r, a) in at.iter().enumerate() {
            if let (Some(a), Some(c)) = (*a, open[r].class)
                && c == class
            {
                holds.entry(a).or_insert(r);
            }
        }
        // Breadth first over members: parent[m] = (previous member or none, role that moves
        // to m).
        let mut parent: BTreeMap<usize, (Option<usize>, usize)> = BTreeMap::new();
        let mut queue: VecDeque<usize> = VecDeque::new();
        for &t in &open[u].tied {
            if slots[t].receives && !parent.contains_key(&t) {
                parent.insert(t, (None, u));
                queue.push_back(t);
            }
        }
        let mut end = None;
        while let Some(m) = queue.pop_front() {
            let (_, role) = parent[&m];
            match holds.get(&m) {
                None if room(loads, slots, m, open[role].cost) => {
                    end = Some(m);
                    break;
                }
                None => {}
                Some(&v) => {
                    for &t in &open[v].tied {
                        if slots[t].receives && !parent.contains_key(&t) {
                            parent.insert(t, (Some(m), v));
                            queue.push_back(t);
                        }
                    }
                }
            }
        }
        // Carry the path out from its end: each role leaves its member before the next
        // arrives there.
        let mut cur = end;
        while let Some(m) = cur {
            let (prev, role) = parent[&m];
            if let Some(from) = at[role] {
                unplace(loads, slots, from, &open[role]);
            }
            place(loads, slots, at, role, m, &open[role]);
            cur = prev;
        }
    }
}

/// Sends parked roles home where that costs nothing: a role parked for a member (its holder
/// took it over when that member left) moves back to it when the move leaves every potential
/// as it is (the holder has exactly one role more than the home member, in the same zone or
/// between equally loaded zones). Without it, a member that left holding one role above its
/// even share comes back to the share rounded the other way, and the role it does not get
/// back moves a third time when its stand-in restarts in turn (issue 28: rolling restarts).
/// Each move takes one role home for good, so the loop ends.
fn send_home(slots: &[Slot<'_>], open: &[Open<'_>], loads: &mut Loads, at: &mut [Option<usize>]) {
    loop {
        let mut moved = false;
        for (i, o) in open.iter().enumerate() {
            let (Some(home), Some(from)) = (o.home, at[i]) else {
                continue;
            };
            if home == from
                || !slots[home].receives
                || !room(loads, slots, home, o.cost)
                || !loads.allows(o, home, Some(from))
            {
                continue;
            }
            let d = shift(loads, slots, from, home, o.cost);
            if d.overflow == 0 && d.zone == 0 && d.num == 0 {
                unplace(loads, slots, from, o);
                place(loads, slots, at, i, home, o);
                moved = true;
            }
        }
        if !moved {
            return;
        }
    }
}

/// Reassigns the *free* roles (no tied member holds them now: vacant, or held by a member
/// leaving) among the slots the optimisation gave them, keeping every slot's number of free
/// roles per cost: in role name order, each to its home (a role its leaving holder had parked
/// for a member goes back to that member: it moves twice in a rolling restart, not three
/// times), else to its highest rendezvous score among its candidates with such a place left. Loads, potentials and real moves stay the same; the
/// choice no longer depends on the order in which earlier vacancies were filled, so a plan
/// computed while a hand-over is half done gives the remaining roles the same targets as the
/// plan computed before it (what `nats-roles plan` predicts). Left as it was if the matching
/// gets stuck (restricted candidate sets).
fn canonical_free(slots: &[Slot<'_>], open: &[Open<'_>], loads: &Loads, at: &mut [Option<usize>]) {
    let free: Vec<usize> = (0..open.len())
        .filter(|&i| open[i].holder.is_none() && at[i].is_some())
        .collect();
    // The exclusive classes each slot holds without the free roles; the free ones are added
    // as they are chosen.
    let mut classes = loads.classes.clone();
    for &i in &free {
        if let (Some(c), Some(s)) = (open[i].class, at[i])
            && let Some(n) = classes.get_mut(&(s, c))
        {
            *n = n.saturating_sub(1);
        }
    }
    let mut places: BTreeMap<(usize, u64), usize> = BTreeMap::new();
    for &i in &free {
        if let Some(s) = at[i] {
            *places.entry((s, open[i].cost)).or_default() += 1;
        }
    }
    let mut chosen: Vec<(usize, usize)> = Vec::with_capacity(free.len());
    for &i in &free {
        let o = &open[i];
        let best = o
            .tied
            .iter()
            .copied()
            .filter(|&t| places.get(&(t, o.cost)).is_some_and(|n| *n > 0))
            .filter(|&t| {
                o.class
                    .is_none_or(|c| classes.get(&(t, c)).is_none_or(|n| *n == 0))
            })
            .max_by_key(|&t| {
                (
                    o.home == Some(t),
                    score(o.role.as_str(), slots[t].id.as_str()),
                )
            });
        let Some(t) = best else {
            return;
        };
        if let Some(n) = places.get_mut(&(t, o.cost)) {
            *n -= 1;
        }
        if let Some(c) = o.class {
            *classes.entry((t, c)).or_default() += 1;
        }
        chosen.push((i, t));
    }
    for (i, t) in chosen {
        at[i] = Some(t);
    }
}

fn place(
    loads: &mut Loads,
    slots: &[Slot<'_>],
    at: &mut [Option<usize>],
    role: usize,
    to: usize,
    o: &Open<'_>,
) {
    loads.units[to] += o.cost;
    loads.count[to] += 1;
    loads.zone[slots[to].zone] += o.cost;
    if let Some(c) = o.class {
        *loads.classes.entry((to, c)).or_default() += 1;
    }
    at[role] = Some(to);
}

fn unplace(loads: &mut Loads, slots: &[Slot<'_>], from: usize, o: &Open<'_>) {
    let cost = o.cost;
    loads.units[from] = loads.units[from].saturating_sub(cost);
    loads.count[from] = loads.count[from].saturating_sub(1);
    let z = slots[from].zone;
    loads.zone[z] = loads.zone[z].saturating_sub(cost);
    if let Some(c) = o.class
        && let Some(n) = loads.classes.get_mut(&(from, c))
    {
        *n = n.saturating_sub(1);
    }
}

/// Whether `b` can take one more role of `cost` without going over its limits.
fn room(loads: &Loads, slots: &[Slot<'_>], b: usize, cost: u64) -> bool {
    slots[b].capacity.is_none_or(|c| loads.units[b] + cost <= c)
        && slots[b].max_roles.is_none_or(|m| loads.count[b] < m)
}

fn overflow(loads: &Loads, slots: &[Slot<'_>], m: usize) -> i64 {
    let units = slots[m]
        .capacity
        .map_or(0, |c| loads.units[m].saturating_sub(c));
    let count = slots[m]
        .max_roles
        .map_or(0, |c| loads.count[m].saturating_sub(c));
    i64::try_from(units + count).unwrap_or(i64::MAX)
}

/// The potential growth of giving `b` one more role of `cost` (no giver).
fn growth(loads: &Loads, slots: &[Slot<'_>], b: usize, cost: u64) -> Delta {
    let c = i128::from(cost);
    let lz = i128::from(loads.zone[slots[b].zone]);
    let lb = i128::from(loads.units[b]);
    Delta {
        overflow: 0,
        zone: 2 * c * lz + c * c,
        num: 2 * c * lb + c * c,
        den: i128::from(slots[b].weight.max(1)),
    }
}

/// The potential change of moving `cost` units from `a` to `b` (members in between unchanged).
fn shift(loads: &Loads, slots: &[Slot<'_>], a: usize, b: usize, cost: u64) -> Delta {
    let c = i128::from(cost);
    let before = overflow(loads, slots, a);
    let units_after = slots[a].capacity.map_or(0, |cap| {
        loads.units[a].saturating_sub(cost).saturating_sub(cap)
    });
    let count_after = slots[a]
        .max_roles
        .map_or(0, |m| loads.count[a].saturating_sub(1).saturating_sub(m));
    let after = i64::try_from(units_after + count_after).unwrap_or(i64::MAX);
    let (za, zb) = (slots[a].zone, slots[b].zone);
    let zone = if za == zb {
        0
    } else {
        2 * c * (i128::from(loads.zone[zb]) - i128::from(loads.zone[za]) + c)
    };
    let (wa, wb) = (
        i128::from(slots[a].weight.max(1)),
        i128::from(slots[b].weight.max(1)),
    );
    let (la, lb) = (i128::from(loads.units[a]), i128::from(loads.units[b]));
    Delta {
        overflow: after - before,
        zone,
        num: (c * c - 2 * c * la) * wb + (c * c + 2 * c * lb) * wa,
        den: wa * wb,
    }
}

/// The rendezvous score of each role for the slot it was last asked for (the slot that holds
/// it in the assignment, nearly always): [`best_path`] orders every slot's roles by it at every
/// improvement step, and hashing them again each time made a plan that moves hundreds of roles
/// quadratic in hashes (issue 27: 460 ms for 1,000 roles held by one of 10 members).
struct Scores(Vec<Option<(usize, u64)>>);

impl Scores {
    fn new(roles: usize) -> Self {
        Self(vec![None; roles])
    }

    /// `score(role r, slot s)`.
    fn get(&mut self, slots: &[Slot<'_>], open: &[Open<'_>], r: usize, s: usize) -> u64 {
        match self.0[r] {
            Some((slot, v)) if slot == s => v,
            _ => {
                let v = score(open[r].role.as_str(), slots[s].id.as_str());
                self.0[r] = Some((s, v));
                v
            }
        }
    }
}

/// The roles each slot holds in the assignment, least liked first, roles it does not hold now
/// (free to move) before those it does: kept sorted as roles move, one at a time, instead of
/// sorted again at every improvement step.
struct Held(Vec<Vec<usize>>, Vec<usize>);

impl Held {
    fn new(
        slots: &[Slot<'_>],
        open: &[Open<'_>],
        at: &[Option<usize>],
        scores: &mut Scores,
    ) -> Self {
        let mut held: Vec<Vec<usize>> = vec![Vec::new(); slots.len()];
        for (i, a) in at.iter().enumerate() {
            if let Some(a) = a {
                held[*a].push(i);
            }
        }
        for (s, roles) in held.iter_mut().enumerate() {
            roles.sort_by_cached_key(|&r| Self::key(slots, open, r, s, scores));
        }
        let homes = held
            .iter()
            .map(|roles| roles.iter().filter(|&&r| open[r].home.is_some()).count())
            .collect();
        Self(held, homes)
    }

    fn key(
        slots: &[Slot<'_>],
        open: &[Open<'_>],
        r: usize,
        s: usize,
        scores: &mut Scores,
    ) -> (bool, u64, usize) {
        (open[r].holder == Some(s), scores.get(slots, open, r, s), r)
    }

    /// Role `r` moved from slot `from` to slot `to`.
    fn moved(
        &mut self,
        slots: &[Slot<'_>],
        open: &[Open<'_>],
        r: usize,
        from: usize,
        to: usize,
        scores: &mut Scores,
    ) {
        if let Some(i) = self.0[from].iter().position(|&x| x == r) {
            self.0[from].remove(i);
            if open[r].home.is_some() {
                self.1[from] -= 1;
            }
        }
        if open[r].home.is_some() {
            self.1[to] += 1;
        }
        let key = Self::key(slots, open, r, to, scores);
        let list = &self.0[to];
        // The keys of a slot's roles are its own scores, cached for every role it holds.
        let (mut lo, mut hi) = (0, list.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if Self::key(slots, open, list[mid], to, scores) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.0[to].insert(lo, r);
    }
}

/// A candidate path: its potential change, whether it sends a role home, real moves,
/// length, and hops.
type Candidate = (Delta, bool, usize, usize, Vec<(usize, usize)>);

/// The best improving path from the first source that has one: `(role, new slot)` hops.
fn best_path(
    slots: &[Slot<'_>],
    open: &[Open<'_>],
    loads: &Loads,
    at: &[Option<usize>],
    held: &Held,
    costs: &[u64],
    scores: &mut Scores,
) -> Option<Vec<(usize, usize)>> {
    let homes = &held.1;
    let held = &held.0;
    let mut sources: Vec<usize> = (0..slots.len()).filter(|&s| !held[s].is_empty()).collect();
    sources.sort_by(|&x, &y| {
        overflow(loads, slots, y)
            .cmp(&overflow(loads, slots, x))
            .then_with(|| {
                // Load per weight, highest first.
                (u128::from(loads.units[y]) * u128::from(slots[x].weight.max(1)))
                    .cmp(&(u128::from(loads.units[x]) * u128::from(slots[y].weight.max(1))))
            })
            .then_with(|| slots[x].id.cmp(slots[y].id))
    });
    // The best path over every source: largest improvement, then a role going home (a
    // restarted member gets back what was parked for it), then fewest real moves, then the
    // shortest; ties by source order.
    let mut best: Option<Candidate> = None;
    for a in sources {
        for &cost in costs {
            if !held[a].iter().any(|&r| open[r].cost == cost) {
                continue;
            }
            for (b, mut path) in reachable(slots, open, (held, loads), a, cost) {
                if !room(loads, slots, b, cost) {
                    continue;
                }
                let d = shift(loads, slots, a, b, cost);
                if !d.improves() {
                    continue;
                }
                prefer_for_receiver(
                    slots,
                    open,
                    (held, homes, at, loads),
                    &mut path,
                    cost,
                    scores,
                );
                let home = path.last().is_some_and(|&(r, to)| open[r].home == Some(to));
                let real = path
                    .iter()
                    .filter(|(r, _)| open[*r].holder.is_some_and(|h| Some(h) == at[*r]))
                    .count();
                let better = best.as_ref().is_none_or(|(bd, bhome, breal, blen, _)| {
                    d.cmp_to(bd)
                        .then(bhome.cmp(&home))
                        .then(real.cmp(breal))
                        .then(path.len().cmp(blen))
                        == Ordering::Less
                });
                if better {
                    best = Some((d, home, real, path.len(), path));
                }
            }
        }
    }
    best.map(|(_, _, _, _, path)| path)
}

/// What [`prefer_for_receiver`] looks at: each slot's roles, how many of them go home, where
/// each role is, and the loads.
type Search<'s> = (
    &'s [Vec<usize>],
    &'s [usize],
    &'s [Option<usize>],
    &'s Loads,
);

/// Chooses the role of the last hop: among the roles of that cost the giver holds and the
/// receiver campaigns for (not already on the path), one parked for the receiver first (a
/// member that comes back gets its own roles back), then one the giver does not hold now
/// (free), then the giver's lowest rendezvous score — which does not depend on the receiver,
/// so the roles chosen to leave a member stay the same while the moves are carried out one by
/// one (a receiver-dependent choice flips as the receivers' loads change, and a role already
/// released would be planned back).
fn prefer_for_receiver(
    slots: &[Slot<'_>],
    open: &[Open<'_>],
    (held, homes, at, loads): Search<'_>,
    path: &mut [(usize, usize)],
    cost: u64,
    scores: &mut Scores,
) {
    let n = path.len();
    let Some(&(current, to)) = path.last() else {
        return;
    };
    let giver = if n >= 2 {
        path[n - 2].1
    } else {
        // The source: whoever holds `current` in the assignment.
        match at[current] {
            Some(g) => g,
            None => return,
        }
    };
    let on_path: Vec<usize> = path.iter().map(|(r, _)| *r).collect();
    let eligible = |r: usize| {
        open[r].cost == cost
            && open[r].tied.contains(&to)
            && (r == current || !on_path.contains(&r))
            && loads.allows(&open[r], to, Some(giver))
    };
    if homes[giver] == 0 {
        // No role of the giver goes home anywhere: the choice is the first of its roles in
        // their order (free ones first, then the lowest score), the last of equal keys as
        // below — found without looking at every role.
        let mut found: Option<(usize, (bool, u64))> = None;
        for &r in &held[giver] {
            if !eligible(r) {
                continue;
            }
            let key = (
                open[r].holder == Some(giver),
                scores.get(slots, open, r, giver),
            );
            match found {
                Some((_, k)) if k != key => break,
                _ => found = Some((r, key)),
            }
        }
        if let Some((r, _)) = found {
            path[n - 1].0 = r;
        }
        return;
    }
    let best = held[giver]
        .iter()
        .copied()
        .filter(|&r| eligible(r))
        .max_by_key(|&r| {
            (
                open[r].home == Some(to),
                open[r].holder != Some(giver),
                std::cmp::Reverse(scores.get(slots, open, r, giver)),
            )
        });
    if let Some(r) = best {
        path[n - 1].0 = r;
    }
}

/// Every slot reachable from `a` by shifting roles of `cost`, with the shortest path to it
/// (breadth first; slots by index, i.e. by id).
fn reachable(
    slots: &[Slot<'_>],
    open: &[Open<'_>],
    (held, loads): (&[Vec<usize>], &Loads),
    a: usize,
    cost: u64,
) -> Vec<(usize, Vec<(usize, usize)>)> {
    let mut parent: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut queue = VecDeque::from([a]);
    let mut found = Vec::new();
    // Once every slot that can receive was reached, no role can add a path.
    let targets = (0..slots.len())
        .filter(|&y| y != a && slots[y].receives)
        .count();
    while let Some(x) = queue.pop_front() {
        for &r in held[x].iter().filter(|&&r| open[r].cost == cost) {
            if parent.len() == targets {
                return found;
            }
            for &y in &open[r].tied {
                if y == a
                    || parent.contains_key(&y)
                    || !slots[y].receives
                    || !loads.allows(&open[r], y, Some(x))
                {
                    continue;
                }
                parent.insert(y, (x, r));
                queue.push_back(y);
                let mut path = Vec::new();
                let mut cur = y;
                while let Some(&(from, role)) = parent.get(&cur) {
                    path.push((role, cur));
                    if from == a {
                        break;
                    }
                    cur = from;
                }
                path.reverse();
                found.push((y, path));
            }
        }
    }
    found
}
