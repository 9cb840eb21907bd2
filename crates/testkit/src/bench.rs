//! Helpers of the benchmark examples that read election histories (`exec_bench`,
//! `sites_bench`): the last record of a kind, bounded polling, a percentile table row.

use std::path::Path;
use std::time::Duration;

/// The last record `ev` of the history file `file`: (its `mono_ns`, the record).
pub fn last_record(file: &Path, ev: &str) -> Option<(u64, serde_json::Value)> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["ev"] == ev)
        .map(|v| (v["mono_ns"].as_u64().unwrap_or(0), v))
}

/// Polls `f` every 5 ms until it returns `Some`; panics with `what` after `limit`.
pub async fn until<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(tokio::time::Instant::now() < end, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A Markdown row `| name | n | min | p50 | p90 | p99 | max |` of `samples` (nearest rank),
/// with `decimals` digits.
pub fn percentile_row(name: &str, samples: &[f64], decimals: usize) -> String {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1)) - 1;
        v.get(i).copied().unwrap_or(f64::NAN)
    };
    let cells = [
        v.first().copied().unwrap_or(f64::NAN),
        pick(0.5),
        pick(0.9),
        pick(0.99),
        v.last().copied().unwrap_or(f64::NAN),
    ]
    .map(|x| format!("{x:.decimals$}"));
    format!("| {name} | {} | {} |", v.len(), cells.join(" | "))
}
