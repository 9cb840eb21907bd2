//! Resource figures of processes (from /proc) and of nats-server (its `/varz`).

use std::time::{Duration, Instant};

/// CPU time (user + system) a process has used so far.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces: count fields after its closing ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = u64::try_from(ticks).ok().filter(|t| *t > 0)?;
    Some(Duration::from_micros((utime + stime) * 1_000_000 / ticks))
}

/// Share of one core each process used over `window`, and its RSS (MiB) at the end.
pub async fn cpu_and_rss(pids: &[u32], window: Duration) -> Vec<(f64, f64)> {
    let before: Vec<Option<Duration>> = pids.iter().map(|p| cpu_time(*p)).collect();
    let start = Instant::now();
    tokio::time::sleep(window).await;
    let wall = start.elapsed().as_secs_f64();
    pids.iter()
        .zip(before)
        .map(|(pid, b)| {
            let used = match (b, cpu_time(*pid)) {
                (Some(b), Some(a)) => a.saturating_sub(b).as_secs_f64(),
                _ => f64::NAN,
            };
            let rss = testkit::process::rss_kib(*pid).map_or(f64::NAN, |k| k as f64 / 1024.0);
            (100.0 * used / wall, rss)
        })
        .collect()
}

/// Messages in and out of a set of servers, from their monitoring endpoints.
pub async fn varz_msgs(servers: &[&testkit::NatsServer]) -> (u64, u64) {
    let mut total = (0, 0);
    for s in servers {
        let v = s.monitor_json("/varz").await;
        total.0 += v["in_msgs"].as_u64().unwrap_or(0);
        total.1 += v["out_msgs"].as_u64().unwrap_or(0);
    }
    total
}

/// The sum of a Prometheus counter over every series in `text`.
pub fn counter_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Nearest-rank percentile of sorted samples.
pub fn pct(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

/// Milliseconds with one decimal, or "—".
pub fn ms(d: Option<Duration>) -> String {
    d.map_or("—".to_owned(), |d| {
        format!("{:.1}", d.as_secs_f64() * 1000.0)
    })
}
