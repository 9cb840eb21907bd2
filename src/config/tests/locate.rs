//! Tests of source locations of problems.

use super::*;

// ----- reporting -----
#[test]
fn all_problems_are_reported_together_with_locations() {
    let text = "\
bucket:
  name: bad.name
  replicas: 9
timing:
  heartbeat: 2s
roles:
  - name: a
  - name: b
    ttl: 2500ms
  - name: a
shutdown:
  drain_timeout: 1m
";
    let found = yaml_problems(text);
    let got: Vec<(&str, Option<usize>, Option<usize>)> = found
        .iter()
        .map(|p| (p.field.as_str(), p.line, p.column))
        .collect();
    assert_eq!(
        got,
        [
            ("bucket.name", Some(2), Some(9)),
            ("bucket.replicas", Some(3), Some(13)),
            // ttl is not written in the file: points at the heartbeat, which is
            ("timing.heartbeat", Some(5), Some(14)),
            ("roles[1].ttl", Some(9), Some(10)),
            ("roles[1].ttl", Some(9), Some(10)),
            ("roles[2].name", Some(10), Some(11)),
            ("shutdown.drain_timeout", Some(12), Some(18)),
        ],
        "{found:#?}"
    );
    let err = Config::from_yaml_str(text).unwrap_err();
    let display = err.to_string();
    let lines: Vec<&str> = display.lines().collect();
    assert_eq!(lines.len(), 1 + found.len(), "{display}");
    assert_eq!(lines[0], "invalid configuration (7 problems):");
    assert!(lines[1].starts_with("  bucket.name: bucket name \"bad.name\" contains '.'"));
    assert!(lines[1].ends_with("(line 2, column 9)"), "{}", lines[1]);
}

#[test]
fn problems_without_a_written_value_point_at_the_section_or_nothing() {
    // disconnect_grace (default 2s) is not written: the location of the
    // related ttl is used.
    let found =
        yaml_problems("timing:\n  ttl: 1s\n  heartbeat: 300ms\n  operation_timeout: 500ms\n");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(
        (found[0].field.as_str(), found[0].line),
        ("timing.disconnect_grace", Some(2))
    );
    // Nothing related written: the enclosing section.
    let found = yaml_problems("nats:\n  servers: []\n  name: x\n");
    assert_eq!(
        (found[0].field.as_str(), found[0].line, found[0].column),
        ("nats.servers", Some(2), Some(12))
    );
    let found = yaml_problems("nats:\n  user: u\n  token: t\n");
    assert_eq!(
        found
            .iter()
            .map(|p| (p.field.as_str(), p.line))
            .collect::<Vec<_>>(),
        [("nats.user", Some(2)), ("nats", Some(2))]
    );
    // validate() alone has no source, hence no locations.
    let mut c = Config::default();
    c.bucket.replicas = 0;
    assert_eq!(problems(&c)[0].line, None);
}

#[test]
fn locations_follow_anchors_and_flow_style() {
    let text = "\
x-common: &slow {ttl: 2s}
roles:
  - {name: a, ttl: 2s}
";
    // unknown top-level keys are still rejected, anchors or not
    let unknown = &yaml_problems(text)[0];
    assert_eq!(
        (unknown.field.as_str(), unknown.line),
        ("x-common", Some(1))
    );
    let text = "roles:\n  - {name: a, ttl: 2s}\n  - &r {name: b}\n";
    let found = yaml_problems(text);
    assert_eq!(
        (found[0].field.as_str(), found[0].line, found[0].column),
        ("roles[0].ttl", Some(2), Some(20))
    );
}
