//! A timeline of a checked history: one self-contained HTML page (inline SVG, no external
//! assets) with per-role swim lanes of terms per node, faults marked and violations
//! highlighted. Written for failed trials.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::check::Report;

const LANE: f64 = 22.0;
const LEFT: f64 = 150.0;
const WIDTH: f64 = 1400.0;
const COLORS: [&str; 8] = [
    "#4e79a7", "#59a14f", "#f28e2b", "#76b7b2", "#edc948", "#b07aa1", "#9c755f", "#bab0ac",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Renders `report` as an HTML page.
#[must_use]
pub fn render_html(report: &Report) -> String {
    let end_ms = report
        .terms
        .iter()
        .map(|t| t.end_ms)
        .chain(report.faults.iter().map(|f| f.end_ms.unwrap_or(f.start_ms)))
        .chain(
            report
                .violations
                .iter()
                .map(|v| v.until_ms.unwrap_or(v.at_ms)),
        )
        .fold(report.stats.duration_ms, f64::max)
        .max(1.0);
    let scale = (WIDTH - LEFT - 20.0) / end_ms;
    let x = |ms: f64| LEFT + ms.max(0.0) * scale;
    let nodes: Vec<&str> = report.stats.nodes.iter().map(String::as_str).collect();
    let color = |node: &str| {
        let i = nodes.iter().position(|n| *n == node).unwrap_or(0);
        COLORS[i % COLORS.len()]
    };
    let mut html = String::new();
    let title = report.trial.as_ref().map_or_else(
        || "history".to_string(),
        |t| format!("trial {} seed {}", t.kind, t.seed),
    );
    let _ = write!(
        html,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title><style>\
         body{{font-family:sans-serif;margin:16px}} pre{{background:#f6f6f6;padding:8px;overflow:auto}}\
         .bad{{color:#b00}} text{{font-size:11px}}</style></head><body><h1>{}</h1><p class=\"{}\">{}</p>",
        esc(&title),
        esc(&title),
        if report.is_clean() { "" } else { "bad" },
        if report.is_clean() {
            "clean: no violations".to_string()
        } else {
            format!("{} violation(s)", report.violations.len())
        }
    );
    for role in &report.stats.roles {
        let lanes: BTreeSet<&str> = report
            .terms
            .iter()
            .filter(|t| t.role == *role)
            .map(|t| t.node.as_str())
            .chain(nodes.iter().copied())
            .collect();
        let lanes: Vec<&str> = lanes.into_iter().collect();
        let height = LANE * (lanes.len() as f64 + 1.0) + 10.0;
        let _ = write!(
            html,
            "<h2>role {}</h2><svg width=\"{WIDTH}\" height=\"{height}\" xmlns=\"http://www.w3.org/2000/svg\">",
            esc(role)
        );
        // Time axis: a tick per second.
        let mut s = 0.0;
        while s <= end_ms {
            let _ = write!(
                html,
                "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"0\" y2=\"{1:.1}\" stroke=\"#eee\"/><text x=\"{0:.1}\" y=\"{2:.1}\">{3:.0}s</text>",
                x(s),
                height - 12.0,
                height - 2.0,
                s / 1000.0
            );
            s += 1000.0;
        }
        for f in &report.faults {
            let (a, b) = (x(f.start_ms), f.end_ms.map_or(x(f.start_ms) + 2.0, x));
            let _ = write!(
                html,
                "<rect x=\"{a:.1}\" y=\"0\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#e15759\" opacity=\"0.25\"><title>{} {} {:.1}..{} ms</title></rect>",
                (b - a).max(2.0),
                height - 12.0,
                esc(&f.what),
                esc(&f.target),
                f.start_ms,
                f.end_ms
                    .map_or_else(|| "-".to_string(), |e| format!("{e:.1}"))
            );
            let _ = write!(
                html,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#b00\">{} {}</text>",
                a + 2.0,
                height - 14.0,
                esc(&f.what),
                esc(&f.target)
            );
        }
        for (i, node) in lanes.iter().enumerate() {
            let y = LANE * i as f64 + 4.0;
            let _ = write!(
                html,
                "<text x=\"4\" y=\"{:.1}\">{}</text>",
                y + 14.0,
                esc(node)
            );
            for t in report
                .terms
                .iter()
                .filter(|t| t.role == *role && t.node == *node)
            {
                let (a, b) = (x(t.start_ms), x(t.end_ms));
                let _ = write!(
                    html,
                    "<rect x=\"{a:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{} term {} {:.1}..{:.1} ms</title></rect>",
                    (b - a).max(1.0),
                    LANE - 6.0,
                    color(node),
                    esc(node),
                    t.term,
                    t.start_ms,
                    t.end_ms
                );
                if b - a > 30.0 {
                    let _ = write!(
                        html,
                        "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#fff\">{}</text>",
                        a + 3.0,
                        y + 12.0,
                        t.term
                    );
                }
            }
        }
        for v in report
            .violations
            .iter()
            .filter(|v| v.role.as_deref() == Some(role.as_str()))
        {
            let (a, b) = (x(v.at_ms), v.until_ms.map_or(x(v.at_ms) + 3.0, x));
            let _ = write!(
                html,
                "<rect x=\"{a:.1}\" y=\"0\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#b00\" stroke-width=\"3\"><title>{}: {}</title></rect>",
                (b - a).max(3.0),
                height - 12.0,
                v.invariant,
                esc(&v.message)
            );
        }
        html.push_str("</svg>");
    }
    html.push_str("<h2>report</h2><pre>");
    html.push_str(&esc(&report.render_text()));
    html.push_str("</pre></body></html>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::render_html;
    use crate::history::check::{Invariant, check};
    use crate::history::event::{Event, OpKind, OpResult, Record, TrialInfo};

    /// Mono ns of `ms` milliseconds after the trial's start.
    fn at(ms: u64) -> u64 {
        1_000_000_000_000 + ms * 1_000_000
    }

    #[test]
    fn reports_render_as_html_with_the_violation() {
        // n1 acquires term 2 with a deadline at 910 ms and acts at 1200 ms: S5.
        let role = Some("r");
        let records = [
            Record::harness(
                at(0),
                None,
                Event::Trial(TrialInfo {
                    seed: 1,
                    kind: "test".into(),
                    ttl_ms: 1000,
                    margin: 0.1,
                    clock: 1.0,
                    ..TrialInfo::default()
                }),
            ),
            Record::node(
                at(0),
                "n1",
                None,
                Event::Start {
                    roles: vec!["r".into()],
                    clock_rate: 1.0,
                    real_mono_ns: None,
                },
            ),
            Record::node(
                at(9),
                "n1",
                role,
                Event::Invoke {
                    op: 1,
                    kind: OpKind::Acquire,
                    expected: 1,
                },
            ),
            Record::node(
                at(10),
                "n1",
                role,
                Event::Complete {
                    op: 1,
                    kind: OpKind::Acquire,
                    result: OpResult::Ok,
                    revision: Some(2),
                    error: None,
                    elapsed_us: None,
                },
            ),
            Record::node(
                at(10),
                "n1",
                role,
                Event::Promote {
                    epoch: 7,
                    term: 2,
                    deadline_ns: at(910),
                },
            ),
            Record::node(
                at(1200),
                "n1",
                role,
                Event::Act {
                    epoch: 7,
                    term: 2,
                    write_id: 99,
                },
            ),
        ];
        let r = check(&records);
        assert!(r.has(Invariant::S5), "{}", r.render_text());
        let html = render_html(&r);
        assert!(html.contains("<svg") && html.contains("role r") && html.contains("S5"));
        assert!(!html.contains("src=\"http"), "no external assets");
    }
}
