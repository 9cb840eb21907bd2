//! Statistics of the samples, the Markdown report and the CSV export.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use crate::trial::Mode;
use crate::{Sample, Series};

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[derive(Debug, Clone, Copy)]
struct Stats {
    n: usize,
    min: f64,
    p50: f64,
    p95: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

/// Nearest-rank percentiles (with 50 samples p99 is the largest value).
fn stats(values: &[f64]) -> Option<Stats> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        let r = (p / 100.0 * v.len() as f64).ceil() as usize;
        v[r.clamp(1, v.len()) - 1]
    };
    Some(Stats {
        n: v.len(),
        min: v[0],
        p50: rank(50.0),
        p95: rank(95.0),
        p99: rank(99.0),
        max: v[v.len() - 1],
        mean: v.iter().sum::<f64>() / v.len() as f64,
    })
}

fn fmt_ms(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

pub(crate) fn report(series: &[Series]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### Fail-over latency (ms), signal -> candidate's `promoted` line read\n"
    );
    let _ = writeln!(
        out,
        "| series | n | min | p50 | mean | p95 | p99 | max | target (p99) | met |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for s in series {
        let totals: Vec<f64> = s.samples.iter().map(|x| ms(x.total)).collect();
        let label = s.label();
        match stats(&totals) {
            Some(st) => {
                let target = ms(s.mode.target(s.ttl));
                let met = if st.p99 <= target { "yes" } else { "**no**" };
                let _ = writeln!(
                    out,
                    "| {label} | {} | {} | {} | {} | {} | {} | {} | <= {} | {met} |",
                    st.n,
                    fmt_ms(st.min),
                    fmt_ms(st.p50),
                    fmt_ms(st.mean),
                    fmt_ms(st.p95),
                    fmt_ms(st.p99),
                    fmt_ms(st.max),
                    fmt_ms(target),
                );
            }
            None => {
                let _ = writeln!(out, "| {label} | 0 | - | - | - | - | - | - | - | - |");
            }
        }
    }

    let _ = writeln!(
        out,
        "\n### Where the time goes (ms, p50 / p99 over the trials)\n"
    );
    let _ = writeln!(out, "| series | phase | p50 | p99 | max |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    for s in series {
        let label = s.label();
        let mut phase = |name: &str, values: Vec<f64>| {
            if let Some(st) = stats(&values) {
                let _ = writeln!(
                    out,
                    "| {label} | {name} | {} | {} | {} |",
                    fmt_ms(st.p50),
                    fmt_ms(st.p99),
                    fmt_ms(st.max)
                );
            }
        };
        let pick = |f: &dyn Fn(&Sample) -> Option<f64>| {
            s.samples.iter().filter_map(f).collect::<Vec<f64>>()
        };
        match s.mode {
            Mode::Handover => {
                phase(
                    "signal -> holder's `demoted` line read",
                    pick(&|x| x.demoted_line.map(ms)),
                );
                phase("signal -> delete marker seen", pick(&|x| x.marker.map(ms)));
                phase(
                    "delete marker seen -> new term's put seen",
                    pick(&|x| Some(ms(x.new_put?.checked_sub(x.marker?)?))),
                );
                phase(
                    "new put seen -> candidate's `promoted` line read",
                    pick(&|x| Some(ms(x.total) - ms(x.new_put?))),
                );
            }
            Mode::Crash => {
                let ttl = ms(s.ttl);
                phase(
                    "time since last renewal at the kill",
                    pick(&|x| Some(ms(x.since_renew))),
                );
                phase(
                    "total − (TTL − since last renewal) = detection (largest over the roles)",
                    pick(&|x| x.detection),
                );
                phase(
                    "expiry marker seen − (last renewal seen + TTL)",
                    pick(&|x| Some(ms(x.marker?) - (ttl - ms(x.since_renew)))),
                );
                phase(
                    "expiry marker seen -> new term's put seen",
                    pick(&|x| Some(ms(x.new_put?) - ms(x.marker?))),
                );
                phase(
                    "new put seen -> candidate's `promoted` line read",
                    pick(&|x| Some(ms(x.total) - ms(x.new_put?))),
                );
            }
        }
    }
    let _ = writeln!(out);
    for s in series {
        let clean = s.samples.iter().filter(|x| x.clean_exit).count();
        let _ = write!(
            out,
            "- {}: {} trials in {:.0} s",
            s.label(),
            s.samples.len(),
            s.wall.as_secs_f64()
        );
        if s.mode == Mode::Crash {
            let _ = write!(
                out,
                ", {} of {} takeovers on the old lease (follower backstop) rather than on an \
                 expiry marker",
                s.backstop_takeovers, s.takeovers
            );
        }
        if s.flaps > 0 {
            let _ = write!(
                out,
                ", the new holder was demoted again right after its promotion in {} trial(s)",
                s.flaps
            );
        }
        if s.mode == Mode::Handover {
            let _ = write!(
                out,
                ", holder exited 0 in {clean}/{} trials",
                s.samples.len()
            );
        }
        if s.missing_holder_lines > 0 {
            let _ = write!(
                out,
                ", {} candidate(s) never printed their `holder` line (start-up event race)",
                s.missing_holder_lines
            );
        }
        if s.errors.is_empty() {
            let _ = writeln!(out, ", no errors");
        } else {
            let _ = writeln!(out, ", errors: {:?}", s.errors);
        }
    }
    out
}

pub(crate) fn write_csv(path: &Path, series: &[Series]) -> std::io::Result<()> {
    let mut out = String::from(
        "mode,ttl_s,roles,total_ms,since_renew_ms,detection_ms,demoted_line_ms,marker_ms,new_put_ms,clean_exit\n",
    );
    let opt = |d: Option<Duration>| d.map(|d| format!("{:.3}", ms(d))).unwrap_or_default();
    for s in series {
        for x in &s.samples {
            let _ = writeln!(
                out,
                "{},{},{},{:.3},{:.3},{},{},{},{},{}",
                s.mode.short(),
                s.ttl.as_secs(),
                s.roles,
                ms(x.total),
                ms(x.since_renew),
                x.detection.map(|d| format!("{d:.3}")).unwrap_or_default(),
                opt(x.demoted_line),
                opt(x.marker),
                opt(x.new_put),
                x.clean_exit
            );
        }
    }
    std::fs::write(path, out)
}
