//! What the group benchmark computes from the holder changes its observer saw: per-instance
//! counts of a group's members, the spread, moves (holder changes of members that had a
//! holder), the fewest moves an even spread needs, vacancies per move, percentile rows.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::observe::Change;
use crate::sample::{ms, pct};

/// The group's name in the bench's configuration.
pub const GROUP: &str = "shard";

/// The index of member `role` of [`GROUP`] (`shard-17` → 17).
pub fn member_index(role: &str) -> Option<usize> {
    role.strip_prefix(GROUP)?.strip_prefix('-')?.parse().ok()
}

/// Members below `count` held by each of `live` (zero for a live instance holding none).
pub fn counts(
    holders: &BTreeMap<String, String>,
    live: &[String],
    count: usize,
) -> BTreeMap<String, usize> {
    let mut per: BTreeMap<String, usize> = live.iter().map(|id| (id.clone(), 0)).collect();
    for (role, holder) in holders {
        if member_index(role).is_some_and(|i| i < count)
            && let Some(n) = per.get_mut(holder)
        {
            *n += 1;
        }
    }
    per
}

/// Whether every member below `count` is held by one of `live`, none at or above it is held,
/// and the live instances' counts differ by at most one (each within ±1 of the fair share).
pub fn balanced(holders: &BTreeMap<String, String>, live: &[String], count: usize) -> bool {
    let per = counts(holders, live, count);
    let held_by_live: usize = per.values().sum();
    let above = holders
        .keys()
        .filter(|r| member_index(r).is_some_and(|i| i >= count))
        .count();
    held_by_live == count && above == 0 && spread(&per).is_some_and(|(lo, hi)| hi - lo <= 1)
}

/// The fewest and the most members an instance holds.
pub fn spread(per: &BTreeMap<String, usize>) -> Option<(usize, usize)> {
    Some((*per.values().min()?, *per.values().max()?))
}

/// `min / max` of [`spread`], or "—".
pub fn spread_text(per: &BTreeMap<String, usize>) -> String {
    spread(per).map_or("—".to_owned(), |(lo, hi)| format!("{lo} / {hi}"))
}

/// The fewest holder changes that bring `held` (members per instance that keep existing, one
/// entry per live instance, zero for a new one) to an even spread of `total` members over
/// those instances: the instances holding most get the ⌈total/k⌉ shares, and every member
/// above an instance's share must move.
pub fn minimum_moves(held: &BTreeMap<String, usize>, total: usize) -> usize {
    let k = held.len();
    if k == 0 {
        return 0;
    }
    let (q, extra) = (total / k, total % k);
    let mut v: Vec<usize> = held.values().copied().collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v.iter()
        .enumerate()
        .map(|(i, h)| h.saturating_sub(q + usize::from(i < extra)))
        .sum()
}

/// One move: a member that had a holder got another one.
#[derive(Debug, Clone)]
pub struct Move {
    pub role: String,
    /// How long the member had no holder before (from the change that left it vacant).
    pub vacancy: Option<Duration>,
}

/// The moves in `changes` (in the order seen) of members whose holders were `before` when the
/// changes began: a member with a holder that is later held by another instance. A member
/// vacated and taken again by the same instance, or first held (a new member), is no move.
pub fn moves(before: &BTreeMap<String, String>, changes: &[Change]) -> Vec<Move> {
    let mut last: BTreeMap<&str, (Option<&str>, Option<Instant>)> = before
        .iter()
        .map(|(r, h)| (r.as_str(), (Some(h.as_str()), None)))
        .collect();
    let mut out = Vec::new();
    for c in changes {
        let entry = last.entry(c.role.as_str()).or_insert((None, None));
        match c.holder.as_deref() {
            None => {
                if entry.1.is_none() {
                    entry.1 = Some(c.at);
                }
            }
            Some(h) => {
                if entry.0.is_some_and(|old| old != h) {
                    out.push(Move {
                        role: c.role.clone(),
                        vacancy: entry.1.map(|v| c.at.duration_since(v)),
                    });
                }
                *entry = (Some(h), None);
            }
        }
    }
    out
}

/// Moves per member (members without a move are not listed).
pub fn per_member(moves: &[Move]) -> BTreeMap<String, usize> {
    let mut per = BTreeMap::new();
    for m in moves {
        *per.entry(m.role.clone()).or_default() += 1;
    }
    per
}

/// How many of `members` moved 0, 1, 2, … times: `{moves: members}`.
pub fn histogram(per: &BTreeMap<String, usize>, members: usize) -> BTreeMap<usize, usize> {
    let mut hist: BTreeMap<usize, usize> = BTreeMap::new();
    for n in per.values() {
        *hist.entry(*n).or_default() += 1;
    }
    let moved: usize = hist.values().sum();
    if members > moved {
        *hist.entry(0).or_default() += members - moved;
    }
    hist
}

/// The nearest-rank percentile of `values` (any order).
pub fn pct_usize(values: &[usize], p: f64) -> Option<usize> {
    let mut v = values.to_vec();
    v.sort_unstable();
    if v.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    Some(v[rank.min(v.len()) - 1])
}

/// `p50 / p99 / max` ms of the vacancies of `moves`.
pub fn vacancy_text(moves: &[Move]) -> String {
    let mut v: Vec<Duration> = moves.iter().filter_map(|m| m.vacancy).collect();
    v.sort();
    format!(
        "{} / {} / {} ({} of {} moves vacant first)",
        ms(pct(&v, 50.0)),
        ms(pct(&v, 99.0)),
        ms(v.last().copied()),
        v.len(),
        moves.len()
    )
}

/// A row `| what | n | p50 | p99 | max | within limit | missing |` of per-member delays.
pub fn latency_row(what: &str, samples: &[Option<Duration>], limit: Duration) -> String {
    let missing = samples.iter().filter(|s| s.is_none()).count();
    let mut got: Vec<Duration> = samples.iter().flatten().copied().collect();
    got.sort();
    let within = got.iter().filter(|d| **d <= limit).count();
    format!(
        "| {what} | {} | {} | {} | {} | {within} | {missing} |",
        got.len(),
        ms(pct(&got, 50.0)),
        ms(pct(&got, 99.0)),
        ms(got.last().copied())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    #[test]
    fn a_ninth_instance_needs_its_share() {
        let mut held: BTreeMap<String, usize> = (0..8).map(|i| (format!("n{i}"), 32)).collect();
        held.insert("new".into(), 0);
        assert_eq!(minimum_moves(&held, 256), 28);
        assert_eq!(minimum_moves(&map(&[("a", 3), ("b", 1)]), 4), 1);
        assert_eq!(minimum_moves(&map(&[("a", 28), ("b", 29)]), 114), 0);
    }

    #[test]
    fn moves_count_changes_of_holder_only() {
        let t = Instant::now();
        let c = |role: &str, holder: Option<&str>, ms: u64| Change {
            at: t + Duration::from_millis(ms),
            role: role.into(),
            holder: holder.map(str::to_owned),
        };
        let before: BTreeMap<String, String> = [("shard-0".to_owned(), "a".to_owned())].into();
        let changes = [
            c("shard-0", None, 10),
            c("shard-0", Some("a"), 12), // the same holder again: no move
            c("shard-0", None, 20),
            c("shard-0", Some("b"), 25), // a move, vacant 5 ms
            c("shard-1", Some("b"), 30), // a new member: no move
            c("shard-1", Some("c"), 40), // a move without a vacancy seen
        ];
        let m = moves(&before, &changes);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].vacancy, Some(Duration::from_millis(5)));
        assert_eq!(m[1].vacancy, None);
    }
}
