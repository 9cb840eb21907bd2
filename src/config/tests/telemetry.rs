//! Tests of the `telemetry` section.

use crate::config::{Config, LogFormat, OtlpProtocol};

#[test]
fn defaults_and_full_section() {
    let c = Config::from_yaml_str("").expect("empty");
    assert_eq!(c.telemetry.log_format, LogFormat::Text);
    assert!(c.telemetry.otlp.is_none());
    let c = Config::from_yaml_str(
        "telemetry:\n  log_format: json\n  otlp:\n    endpoint: http://127.0.0.1:4318/\n    \
         protocol: http/json\n    export_interval: 2s\n    headers:\n      \
         authorization: Bearer s3cret\n",
    )
    .expect("valid");
    assert_eq!(c.telemetry.log_format, LogFormat::Json);
    let o = c.telemetry.otlp.expect("otlp");
    assert_eq!(o.protocol(), OtlpProtocol::HttpJson);
    assert_eq!(o.metrics_url(), "http://127.0.0.1:4318/v1/metrics");
    assert_eq!(
        o.signal_url("/v1/traces"),
        "http://127.0.0.1:4318/v1/traces"
    );
    assert!(o.metrics && o.traces);
    let debug = format!("{o:?}");
    assert!(!debug.contains("s3cret"), "{debug}");
    assert!(debug.contains("authorization"), "{debug}");
}

#[test]
fn role_metrics_words_lists_and_typos() {
    use crate::config::RoleSeries;
    use crate::names::RoleName;
    let read = |yaml: &str| Config::from_yaml_str(yaml).map(|c| c.telemetry.role_metrics);
    let ok = |yaml: &str| read(yaml).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok(""), RoleSeries::Auto);
    assert_eq!(ok("telemetry:\n  role_metrics: none\n"), RoleSeries::None);
    assert_eq!(ok("telemetry:\n  role_metrics: all\n"), RoleSeries::All);
    assert_eq!(
        ok("telemetry:\n  role_metrics: \"auto\"\n"),
        RoleSeries::Auto
    );
    let names = |names: &[&str]| {
        names
            .iter()
            .map(|n| RoleName::new(*n).expect("valid"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ok("telemetry:\n  role_metrics: [a, b]\n"),
        RoleSeries::Only(names(&["a", "b"]))
    );
    assert_eq!(
        ok("telemetry:\n  role_metrics:\n    - scheduler\n"),
        RoleSeries::Only(names(&["scheduler"]))
    );
    // A typo'd word: the field, its line, what is expected, and the nearest word.
    let err = read("telemetry:\n  log_format: json\n  role_metrics: nonne\n").expect_err("typo");
    let problems = err.problems();
    assert_eq!(problems.len(), 1, "{err}");
    let p = &problems[0];
    assert_eq!(p.field, "telemetry.role_metrics", "{err}");
    assert_eq!(p.line, Some(3), "{err}");
    for part in [
        "`auto`, `all`, `none`",
        "a list of role names",
        "did you mean `none`?",
    ] {
        assert!(p.message.contains(part), "{part}: {err}");
    }
    // A list with a name that is not a role name, and a mapping.
    let err = read("telemetry:\n  role_metrics: [a, \"b.c\"]\n").expect_err("bad name");
    assert_eq!(
        err.problems()[0].field,
        "telemetry.role_metrics[1]",
        "{err}"
    );
    let err = read("telemetry:\n  role_metrics: {a: 1}\n").expect_err("mapping");
    assert!(err.to_string().contains("a list of role names"), "{err}");
    // A misspelt field name is suggested too.
    let err = read("telemetry:\n  role_metric: all\n").expect_err("field");
    assert!(
        err.to_string().contains("did you mean `role_metrics`?"),
        "{err}"
    );
}

#[test]
fn problems_have_fields_and_locations() {
    let err = Config::from_yaml_str(
        "telemetry:\n  otlp:\n    endpoint: https://collector:4318\n    metrics: false\n    \
         traces: false\n    timeout: 0s\n    headers:\n      \"bad name\": x\n",
    )
    .expect_err("invalid");
    let fields: Vec<_> = err.problems().iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "telemetry.otlp.endpoint",
            "telemetry.otlp",
            "telemetry.otlp.timeout",
            "telemetry.otlp.headers.bad name",
        ],
        "{err}"
    );
    let endpoint = &err.problems()[0];
    assert_eq!(endpoint.line, Some(3), "{err}");
    assert!(endpoint.message.contains("http://"), "{err}");
    for bad in [
        "http://",
        "http://host:port",
        "http://a b:1",
        "http://h:99999",
    ] {
        let yaml = format!("telemetry:\n  otlp:\n    endpoint: \"{bad}\"\n");
        assert!(Config::from_yaml_str(&yaml).is_err(), "{bad} accepted");
    }
    for good in [
        "http://collector:4318",
        "http://[::1]:4318/otlp",
        "http://10.0.0.1",
    ] {
        let yaml = format!("telemetry:\n  otlp:\n    endpoint: \"{good}\"\n");
        assert!(Config::from_yaml_str(&yaml).is_ok(), "{good} refused");
    }
    let err = Config::from_yaml_str("telemetry:\n  log_format: xml\n").expect_err("xml");
    assert!(err.to_string().contains("line 2"), "{err}");
}
