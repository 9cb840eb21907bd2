//! The schema walk (`config::schema`, `config::check`) against the typed parse it stands in
//! front of: the same field names, and the same verdict on every field for a matrix of values.

use super::*;
use crate::config::check::check;
use crate::config::inline::fields;
use crate::config::schema::{self, Field};
use crate::config::tree;
use crate::config::yaml::parse_options;

fn names(section: &[Field]) -> Vec<&'static str> {
    let mut names: Vec<&str> = section.iter().map(|f| f.name).collect();
    names.sort_unstable();
    names
}

fn sorted(parts: &[&[&'static str]]) -> Vec<&'static str> {
    let mut names = parts.concat();
    names.sort_unstable();
    names
}

#[test]
fn the_schema_names_exactly_the_fields_serde_reads() {
    use crate::config::inline::MainPart;
    let cases: [(&str, &[Field], Vec<&str>); 18] = [
        (
            "config",
            schema::CONFIG,
            sorted(&[fields(Config::deserialize)]),
        ),
        (
            "nats",
            schema::NATS,
            sorted(&[fields(NatsConfig::deserialize)]),
        ),
        (
            "tls",
            schema::TLS,
            sorted(&[fields(TlsConfig::deserialize)]),
        ),
        (
            "bucket",
            schema::BUCKET,
            sorted(&[fields(BucketSettings::deserialize)]),
        ),
        (
            "instance",
            schema::INSTANCE,
            sorted(&[fields(InstanceConfig::deserialize)]),
        ),
        (
            "timing",
            schema::TIMING,
            sorted(&[fields(Timing::deserialize)]),
        ),
        (
            "retry",
            schema::RETRY,
            sorted(&[fields(RetryPolicy::deserialize)]),
        ),
        (
            "health",
            schema::HEALTH,
            sorted(&[&["command"], fields(HealthPolicy::deserialize)]),
        ),
        (
            "fencing",
            schema::FENCING,
            sorted(&[fields(FencingConfig::deserialize)]),
        ),
        (
            "shutdown",
            schema::SHUTDOWN,
            sorted(&[fields(ShutdownConfig::deserialize)]),
        ),
        (
            "http",
            schema::HTTP,
            sorted(&[fields(HttpConfig::deserialize)]),
        ),
        (
            "telemetry",
            schema::TELEMETRY,
            sorted(&[fields(TelemetryConfig::deserialize)]),
        ),
        (
            "otlp",
            schema::OTLP,
            sorted(&[fields(OtlpConfig::deserialize)]),
        ),
        (
            "placement",
            schema::PLACEMENT,
            sorted(&[fields(PlacementSettings::deserialize)]),
        ),
        (
            "role",
            schema::ROLE,
            sorted(&[
                fields(<RoleConfig as MainPart>::from),
                fields(TimingOverrides::deserialize),
            ]),
        ),
        (
            "group",
            schema::GROUP,
            sorted(&[
                &["count"][..],
                fields(<RoleConfig as MainPart>::from),
                fields(TimingOverrides::deserialize),
            ]),
        ),
        (
            "exec",
            schema::EXEC,
            sorted(&[fields(ExecConfig::deserialize)]),
        ),
        (
            "hook",
            schema::HOOK,
            sorted(&[fields(HookConfig::deserialize)]),
        ),
    ];
    for (what, section, serde_names) in cases {
        assert!(!serde_names.is_empty(), "{what}: no fields probed");
        assert_eq!(names(section), serde_names, "{what}");
    }
}

/// Values of every kind and spelling a file may hold. Not here: tagged scalars such as
/// `!!str 3` in a number field, which the walk takes for `3` and the typed parse refuses
/// (then the parser's error is reported, with its line and column).
const VALUES: &[&str] = &[
    "3s",
    "\"3s\"",
    "1m 30s",
    "0s",
    "3",
    "\"3\"",
    "'7'",
    "-1",
    "0",
    "1",
    "1000",
    "4294967296",
    "99999999999999999999999",
    "+5",
    "0x10",
    "0o7",
    "1_000",
    "1.5",
    "\"0.5\"",
    "3.0",
    "1e3",
    ".nan",
    ".inf",
    "true",
    "false",
    "\"true\"",
    "True",
    "TRUE",
    "yes",
    "no",
    "on",
    "~",
    "null",
    "\"\"",
    "''",
    "[]",
    "[a]",
    "[sh, -c, x]",
    "[1, 2]",
    "[[a]]",
    "{}",
    "{a: b}",
    "{a: 1}",
    "{a: [b]}",
    "{a: ~}",
    "x",
    "a b",
    "text",
    "json",
    "http/json",
    "voluntary",
    "auto",
    "all",
    "none",
    "nonne",
    "[scheduler, shard-7]",
    "never",
    "release",
    "restart",
    "SIGTERM",
    "term",
    "SIGSEGV",
    "nats://a:4222",
    "nats://a, nats://b",
    "node-a",
    "node/a",
    "scheduler",
    "- a",
    "\"0x10\"",
    "\"1_000\"",
    "\"+5\"",
    "\" 3\"",
    "\".nan\"",
    "\"1e3\"",
    "\"false\"",
    "\"-2\"",
    "\"1.10\"",
    "1.10",
    "-0",
    "00",
    "1e400",
];

/// Files putting `value` in `field` of `section`, written where that section lives.
fn placements(section: &str, field: &str, value: &str) -> String {
    let v = if value.starts_with("- ") {
        format!("\n{}", value)
    } else {
        format!(" {value}")
    };
    match section {
        "config" => format!("{field}:{}\n", v.replace('\n', "\n  ")),
        "tls" => format!(
            "nats:\n  tls:\n    {field}:{}\n",
            v.replace('\n', "\n      ")
        ),
        "otlp" => format!(
            "telemetry:\n  otlp:\n    endpoint: http://c:4318\n    {field}:{}\n",
            v.replace('\n', "\n      ")
        ),
        "role" => format!(
            "roles:\n  - name: r\n    {field}:{}\n",
            v.replace('\n', "\n      ")
        ),
        "group" if field == "count" => format!(
            "groups:\n  - name: g\n    {field}:{}\n",
            v.replace('\n', "\n      ")
        ),
        "group" => format!(
            "groups:\n  - name: g\n    count: 2\n    {field}:{}\n",
            v.replace('\n', "\n      ")
        ),
        "exec" | "hook" => {
            let command = if field == "command" {
                ""
            } else {
                "      command: [sh]\n"
            };
            let key = if section == "exec" {
                "exec"
            } else {
                "on_promote"
            };
            format!(
                "roles:\n  - name: r\n    {key}:\n{command}      {field}:{}\n",
                v.replace('\n', "\n        ")
            )
        }
        top => format!("{top}:\n  {field}:{}\n", v.replace('\n', "\n    ")),
    }
}

#[test]
fn the_walk_and_the_typed_parse_agree_on_every_field_and_value() {
    let sections: [(&str, &[Field]); 18] = [
        ("config", schema::CONFIG),
        ("nats", schema::NATS),
        ("tls", schema::TLS),
        ("bucket", schema::BUCKET),
        ("instance", schema::INSTANCE),
        ("timing", schema::TIMING),
        ("retry", schema::RETRY),
        ("health", schema::HEALTH),
        ("fencing", schema::FENCING),
        ("shutdown", schema::SHUTDOWN),
        ("http", schema::HTTP),
        ("telemetry", schema::TELEMETRY),
        ("otlp", schema::OTLP),
        ("placement", schema::PLACEMENT),
        ("role", schema::ROLE),
        ("group", schema::GROUP),
        ("exec", schema::EXEC),
        ("hook", schema::HOOK),
    ];
    let mut disagreements = Vec::new();
    let mut checked = 0;
    for (section, fields) in sections {
        for field in fields {
            for value in VALUES {
                let text = placements(section, field.name, value);
                let Ok(tree) = tree::parse(&text) else {
                    continue;
                };
                let walk = check(&tree);
                let typed = serde_saphyr::from_str_with_options::<Config>(&text, parse_options());
                checked += 1;
                // Where both accept the file, the values the rules are checked on in the
                // presence of other problems are the values the typed parse reads.
                if let (Ok(config), Some(fitting)) = (&typed, &walk.fitting)
                    && !value.contains("nan")
                    && !value.contains("inf")
                {
                    let from_walk = serde_json::from_value::<Config>(fitting.clone());
                    if from_walk.as_ref().ok() != Some(config) {
                        disagreements.push(format!(
                            "{section}.{} = {value}: the walk's values read as {from_walk:?}",
                            field.name
                        ));
                    }
                }
                if walk.problems.is_empty() != typed.is_ok() {
                    disagreements.push(format!(
                        "{section}.{} = {value}: walk {:?}, typed {:?}",
                        field.name,
                        walk.problems
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>(),
                        typed.err().map(|e| e.to_string())
                    ));
                }
            }
        }
    }
    assert!(checked > 5_000, "{checked}");
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}
