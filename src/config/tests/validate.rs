//! Tests of validation rules.

use super::*;
use crate::config::validate::check_server;

#[test]
fn placement_problems_name_their_field_and_line() {
    let found = yaml_problems(
        "placement:\n  weight: 0\n  move_budget: 0\n  move_interval: 0s\n  member_ttl: 1500ms\n",
    );
    let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "placement.weight",
            "placement.move_budget",
            "placement.move_interval",
            "placement.member_ttl"
        ],
        "{found:#?}"
    );
    assert_eq!(found[0].line, Some(2), "{found:#?}");
    let bad = one_problem("roles:\n  - name: a\n    takeover: sometimes\n");
    assert_eq!(
        (bad.field.as_str(), bad.line, bad.column),
        ("roles[0].takeover", Some(3), Some(15))
    );
    assert!(bad.message.contains("one of `voluntary`, `never`"), "{bad}");
}

#[test]
fn zone_capacity_version_and_role_weight_problems_name_their_field_and_line() {
    let found = yaml_problems(
        "instance:\n  zone: \"eu west\"\n  capacity: 0\n  max_roles: 0\n  version: one.two\n\
         roles:\n  - name: a\n    weight: 0\n  - name: b\n    weight: 1001\n",
    );
    let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "instance.zone",
            "instance.capacity",
            "instance.max_roles",
            "instance.version",
            "roles[0].weight",
            "roles[1].weight"
        ],
        "{found:#?}"
    );
    assert_eq!(found[0].line, Some(2), "{found:#?}");
    assert!(found[3].message.contains("not a version"), "{found:#?}");
    // meta.zone is the fallback and is checked as a zone.
    let meta = yaml_problems("instance:\n  meta:\n    zone: \"\"\n");
    assert_eq!(meta.len(), 1, "{meta:#?}");
    assert_eq!(meta[0].field, "instance.meta.zone");
    // Valid values pass.
    let ok = Config::from_yaml_str(
        "instance:\n  zone: eu-west-1a\n  capacity: 10\n  max_roles: 5\n  version: v1.4.2-rc.1\n\
         roles:\n  - name: a\n    weight: 3\n",
    )
    .expect("valid");
    assert_eq!(ok.roles[0].weight, 3);
    assert_eq!(ok.instance.effective_zone(), Some("eu-west-1a"));
    // A capacity that is not a number is a type error with its field and line.
    let bad = one_problem("instance:\n  capacity: lots\n");
    assert_eq!(
        (bad.field.as_str(), bad.line),
        ("instance.capacity", Some(2))
    );
    assert!(bad.message.contains("a whole number"), "{bad}");
}

#[test]
fn the_version_comes_from_the_environment_too() {
    let mut c = Config::default();
    let env = |name: &str| (name == crate::config::ENV_VERSION).then(|| "2.0.1".to_owned());
    c.apply_env(env).expect("valid");
    assert_eq!(c.instance.version.as_deref(), Some("2.0.1"));
    let bad = |name: &str| (name == crate::config::ENV_VERSION).then(|| "latest".to_owned());
    let e = Config::default().apply_env(bad).expect_err("not a version");
    assert!(e.to_string().contains("NATS_ROLES_VERSION"), "{e}");
}

// ----- timing rules (top level) -----
#[test]
fn ttl_must_be_at_least_one_second() {
    let c = with_timing(|t| {
        t.ttl = Duration::from_millis(900);
        t.heartbeat = Duration::from_millis(100);
        t.operation_timeout = Duration::from_millis(100);
        t.disconnect_grace = Duration::from_millis(100);
    });
    let p = only_problem(&c, "timing.ttl");
    assert!(p.message.contains("shorter than 1s"), "{p}");
}

#[test]
fn ttl_must_be_whole_seconds() {
    let c = with_timing(|t| t.ttl = Duration::from_millis(4500));
    let p = only_problem(&c, "timing.ttl");
    assert_eq!(
        p.message,
        "4s 500ms is not a whole number of seconds (NATS per-key TTLs are whole seconds)"
    );
}

#[test]
fn heartbeat_must_be_positive() {
    let c = with_timing(|t| {
        t.heartbeat = Duration::ZERO;
        t.campaign_jitter = Duration::ZERO;
    });
    only_problem(&c, "timing.heartbeat");
}

#[test]
fn three_heartbeats_must_fit_in_ttl() {
    let c = with_timing(|t| t.heartbeat = Duration::from_millis(1001));
    let p = only_problem(&c, "timing.heartbeat");
    assert!(p.message.contains("at least 3 heartbeats"), "{p}");
    let ok = with_timing(|t| t.heartbeat = Duration::from_secs(1));
    assert_eq!(fields(&ok), Vec::<String>::new());
}

#[test]
fn deadline_margin_range() {
    for bad in [0.0, 0.5, -0.1, 1.0, f64::NAN, f64::INFINITY] {
        let c = with_timing(|t| t.deadline_margin = bad);
        only_problem(&c, "timing.deadline_margin");
    }
    for good in [0.01, 0.25, 0.49] {
        let c = with_timing(|t| t.deadline_margin = good);
        assert_eq!(fields(&c), Vec::<String>::new(), "margin {good}");
    }
}

#[test]
fn operation_timeout_rules() {
    let c = with_timing(|t| t.operation_timeout = Duration::ZERO);
    only_problem(&c, "timing.operation_timeout");
    // local lease: 3s × 0.9 = 2.7s
    let c = with_timing(|t| t.operation_timeout = Duration::from_millis(2700));
    let p = only_problem(&c, "timing.operation_timeout");
    assert!(p.message.contains("2s 700ms"), "{p}");
    let c = with_timing(|t| t.operation_timeout = Duration::from_millis(2699));
    assert_eq!(fields(&c), Vec::<String>::new());
}

#[test]
fn disconnect_grace_at_most_ttl() {
    let c = with_timing(|t| t.disconnect_grace = Duration::from_millis(3001));
    only_problem(&c, "timing.disconnect_grace");
    let c = with_timing(|t| t.disconnect_grace = Duration::from_secs(3));
    assert_eq!(fields(&c), Vec::<String>::new());
}

#[test]
fn campaign_jitter_below_heartbeat() {
    let c = with_timing(|t| t.campaign_jitter = Duration::from_millis(750));
    only_problem(&c, "timing.campaign_jitter");
}

// ----- timing rules (per role) -----
#[test]
fn role_ttl_override_is_named() {
    let c = with_role(|r| r.timing.ttl = Some(Duration::from_millis(1500)));
    let found = problems(&c);
    let p = found
        .iter()
        .find(|p| p.message.contains("whole number"))
        .unwrap();
    assert_eq!(p.field, "roles[1].ttl");
    assert!(
        p.message
            .starts_with("1s 500ms is not a whole number of seconds"),
        "{p}"
    );
    assert!(p.message.contains("role \"scheduler\""), "{p}");
    // 1.5s ttl also breaks heartbeat (inherited 750ms) and disconnect_grace
    // (inherited 2s); the inherited operation_timeout 1s < 1.35s is fine.
    assert_eq!(
        fields(&c),
        ["roles[1].ttl", "roles[1].ttl", "roles[1].ttl"],
        "{found:#?}"
    );
}

#[test]
fn role_override_blamed_for_inherited_value() {
    // ttl override 2s makes the inherited heartbeat (750ms) too long.
    let c = with_role(|r| r.timing.ttl = Some(Duration::from_secs(2)));
    let found = problems(&c);
    let heartbeat = found
        .iter()
        .find(|p| p.message.contains("heartbeats"))
        .unwrap();
    assert_eq!(heartbeat.field, "roles[1].ttl");
    assert!(
        heartbeat
            .message
            .starts_with("heartbeat 750ms is too long for ttl 2s"),
        "{heartbeat}"
    );
    assert!(
        heartbeat
            .message
            .contains("heartbeat 750ms inherited from timing.heartbeat"),
        "{heartbeat}"
    );
    assert_eq!(fields(&c), ["roles[1].ttl"]);
}

#[test]
fn role_timing_rules_each_name_the_override() {
    type Case = (fn(&mut RoleConfig), &'static str);
    let cases: Vec<Case> = vec![
        (
            |r| r.timing.heartbeat = Some(Duration::ZERO),
            "roles[1].heartbeat",
        ),
        (
            |r| r.timing.heartbeat = Some(Duration::from_secs(2)),
            "roles[1].heartbeat",
        ),
        (
            |r| r.timing.deadline_margin = Some(0.5),
            "roles[1].deadline_margin",
        ),
        (
            |r| r.timing.operation_timeout = Some(Duration::ZERO),
            "roles[1].operation_timeout",
        ),
        (
            |r| r.timing.operation_timeout = Some(Duration::from_secs(3)),
            "roles[1].operation_timeout",
        ),
        (
            |r| r.timing.disconnect_grace = Some(Duration::from_secs(4)),
            "roles[1].disconnect_grace",
        ),
        (
            |r| r.timing.campaign_jitter = Some(Duration::from_secs(1)),
            "roles[1].campaign_jitter",
        ),
        // the margin makes the inherited operation_timeout (1s) too long: 3s × 0.6 = 1.8s is fine,
        // but with ttl 1s: 1s × 0.9 = 900ms < 1s.
        (
            |r| {
                r.timing.ttl = Some(Duration::from_secs(1));
                r.timing.heartbeat = Some(Duration::from_millis(300));
                r.timing.disconnect_grace = Some(Duration::from_secs(1));
            },
            "roles[1].ttl",
        ),
    ];
    for (f, field) in cases {
        let c = with_role(f);
        let p = only_problem(&c, field);
        assert!(p.message.contains("(role \"scheduler\""), "{p}");
    }
}

#[test]
fn inherited_problems_are_reported_once() {
    let mut c = with_role(|_| {});
    c.timing.heartbeat = Duration::from_secs(2);
    c.timing.campaign_jitter = Duration::from_millis(1);
    // Both roles inherit the bad heartbeat: reported only for `timing`.
    assert_eq!(fields(&c), ["timing.heartbeat"]);
    // A role fixing it by override is fine; one breaking it differently is named.
    c.roles[0].timing.ttl = Some(Duration::from_secs(6));
    c.roles[1].timing.ttl = Some(Duration::from_secs(5));
    assert_eq!(fields(&c), ["timing.heartbeat", "roles[1].ttl"]);
}

// ----- other sections -----
#[test]
fn bucket_rules() {
    for bad in ["", "a.b", "a b", "rolés", "a*"] {
        let mut c = Config::default();
        c.bucket.name = bad.to_owned();
        only_problem(&c, "bucket.name");
    }
    for replicas in [0, 6] {
        let mut c = Config::default();
        c.bucket.replicas = replicas;
        only_problem(&c, "bucket.replicas");
    }
    let mut c = Config::default();
    c.bucket.name = "KV_roles-2".into();
    c.bucket.replicas = 5;
    assert_eq!(fields(&c), Vec::<String>::new());
}

#[test]
fn server_urls() {
    for good in [
        "nats://a:4222",
        "NATS://a",
        "tls://a.example.com:4443",
        "ws://a/path",
        "wss://user:pw@a:443",
        "10.0.0.1:4222",
        "[::1]:4222",
        "nats://[::1]:4222",
        "nats://token@a",
    ] {
        assert_eq!(check_server(good), Ok(()), "{good}");
    }
    for bad in [
        "",
        "http://a:80",
        "nats://",
        "nats://:4222",
        "localhost",
        "a:99999",
        "a:0",
        "a:port",
        "nats://a b",
        "[::1",
        "nats://[::1]x",
    ] {
        assert!(check_server(bad).is_err(), "{bad}");
    }
    let mut c = Config::default();
    c.nats.servers = vec!["nats://ok:4222".into(), "http://bad".into()];
    let p = only_problem(&c, "nats.servers[1]");
    assert!(p.message.contains("http"), "{p}");
    c.nats.servers.clear();
    only_problem(&c, "nats.servers");
}

#[test]
fn user_and_password_go_together() {
    let mut c = Config::default();
    c.nats.user = Some("u".into());
    only_problem(&c, "nats.user");
    let mut c = Config::default();
    c.nats.password = Some("p".into());
    only_problem(&c, "nats.password");
    c.nats.user = Some("u".into());
    assert_eq!(fields(&c), Vec::<String>::new());
}

#[test]
fn at_most_one_auth_method() {
    let mut c = Config::default();
    c.nats.creds_file = Some("a.creds".into());
    c.nats.token = Some("t".into());
    let p = only_problem(&c, "nats");
    assert!(p.message.contains("creds_file, token"), "{p}");
    assert!(!p.message.contains("\"t\""));
    c.nats.token = None;
    c.nats.nkey_seed_file = Some("seed".into());
    only_problem(&c, "nats");
    c.nats.nkey_seed_file = None;
    c.nats.user = Some("u".into());
    c.nats.password = Some("p".into());
    only_problem(&c, "nats");
}

#[test]
fn tls_cert_and_key_go_together() {
    let mut c = Config::default();
    c.nats.tls.cert_file = Some("c.pem".into());
    only_problem(&c, "nats.tls.cert_file");
    let mut c = Config::default();
    c.nats.tls.key_file = Some("k.pem".into());
    only_problem(&c, "nats.tls.key_file");
}

#[test]
fn duplicate_role_names_name_both_indices() {
    let c = Config {
        roles: vec![role("a"), role("b"), role("a"), role("a")],
        ..Config::default()
    };
    let found = problems(&c);
    assert_eq!(
        found.iter().map(|p| p.field.as_str()).collect::<Vec<_>>(),
        ["roles[2].name", "roles[3].name"]
    );
    assert!(
        found[0].message.contains("roles[0] and roles[2]"),
        "{}",
        found[0]
    );
    assert!(
        found[1].message.contains("roles[0] and roles[3]"),
        "{}",
        found[1]
    );
}

#[test]
fn retry_rules() {
    let mut c = Config::default();
    c.retry.initial = Duration::ZERO;
    only_problem(&c, "retry.initial_backoff");
    let mut c = Config::default();
    c.retry.max = Duration::from_millis(49);
    only_problem(&c, "retry.max_backoff");
    let mut c = Config::default();
    c.retry.persistent_interval = Duration::from_millis(99);
    only_problem(&c, "retry.persistent_interval");
    for bad in [0.99, f64::NAN, f64::INFINITY] {
        let mut c = Config::default();
        c.retry.multiplier = bad;
        only_problem(&c, "retry.multiplier");
    }
    for bad in [-0.01, 1.01, f64::NAN] {
        let mut c = Config::default();
        c.retry.jitter = bad;
        only_problem(&c, "retry.jitter");
    }
    let mut c = Config::default();
    c.retry.multiplier = 1.0;
    c.retry.jitter = 0.0;
    c.retry.max = c.retry.initial;
    assert_eq!(fields(&c), Vec::<String>::new());
    c.retry.jitter = 1.0;
    assert_eq!(fields(&c), Vec::<String>::new());
}

#[test]
fn health_rules() {
    let mut c = Config::default();
    c.health.command = Some(Vec::new());
    only_problem(&c, "health.command");
    c.health.command = Some(vec![String::new(), "x".into()]);
    only_problem(&c, "health.command[0]");
    c.health.command = Some(vec!["true".into()]);
    assert_eq!(fields(&c), Vec::<String>::new());

    let mut c = Config::default();
    c.health.policy.timeout = Duration::from_millis(1001);
    only_problem(&c, "health.timeout");
    let mut c = Config::default();
    c.health.policy.timeout = Duration::ZERO;
    only_problem(&c, "health.timeout");
    let mut c = Config::default();
    c.health.policy.interval = Duration::ZERO;
    c.health.policy.timeout = Duration::ZERO;
    assert_eq!(fields(&c), ["health.interval", "health.timeout"]);
    let mut c = Config::default();
    c.health.policy.failure_threshold = 0;
    only_problem(&c, "health.failure_threshold");
}

#[test]
fn shutdown_and_fencing_rules() {
    let mut c = Config::default();
    c.shutdown.drain_timeout = Duration::from_secs(11);
    only_problem(&c, "shutdown.drain_timeout");
    let mut c = Config::default();
    c.fencing.validation_interval = Some(Duration::ZERO);
    only_problem(&c, "fencing.validation_interval");
    c.fencing.validation_interval = Some(Duration::from_millis(1));
    assert_eq!(fields(&c), Vec::<String>::new());
}

#[test]
fn instance_meta_limits() {
    let mut c = Config::default();
    c.instance.meta = (0..33).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    only_problem(&c, "instance.meta");
    let mut c = Config::default();
    c.instance.meta.insert("k".repeat(257), "v".into());
    let p = only_problem(&c, "instance.meta");
    assert!(p.message.contains("257 bytes"), "{p}");
    let mut c = Config::default();
    c.instance.meta.insert("host".into(), "v".repeat(257));
    only_problem(&c, "instance.meta.host");
    let mut c = Config::default();
    c.instance.meta = (0..32)
        .map(|i| (format!("k{i}"), "v".repeat(256)))
        .collect();
    c.instance.meta.insert("k".repeat(256), "v".into());
    c.instance.meta.remove("k0");
    assert_eq!(fields(&c), Vec::<String>::new());
}

#[test]
fn instance_id_is_optional_until_required() {
    let mut c = Config::default();
    assert!(c.validate().is_ok());
    let err = c.require_instance_id().unwrap_err();
    assert_eq!(err.problems()[0].field, "instance.id");
    assert!(err.to_string().contains(ENV_INSTANCE_ID));
    c.instance.id = Some(InstanceId::new("node-a").unwrap());
    assert_eq!(c.require_instance_id().unwrap().as_str(), "node-a");
}

#[test]
fn durations_have_upper_bounds_reported_with_their_location() {
    // What the server cannot honour (nats-server overflows at ~240 years) is refused with
    // the place it was written, never a panic or an overflow.
    let problems = yaml_problems("timing:\n  ttl: 1000000000y\n");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].field, "timing.ttl");
    assert_eq!((problems[0].line, problems[0].column), (Some(2), Some(8)));
    assert!(
        problems[0]
            .message
            .contains("is longer than the maximum 1h"),
        "{}",
        problems[0]
    );
    let problems =
        yaml_problems("roles:\n  - name: a\n    ttl: 3601s\n    heartbeat: 1000000000y\n");
    let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        fields_of(&problems),
        ["roles[0].ttl", "roles[0].heartbeat"],
        "{shown:#?}"
    );
    assert_eq!(problems[0].line, Some(3), "{shown:#?}");
    assert_eq!(problems[1].line, Some(4), "{shown:#?}");
    // The maximum itself is accepted.
    let c = with_timing(|t| t.ttl = Timing::MAX_TTL);
    assert_eq!(fields(&c), Vec::<String>::new());

    // Every other duration: at most MAX_DURATION, each named with its line.
    let keys = [
        ("nats", "ping_interval"),
        ("nats", "connect_timeout"),
        ("nats", "request_timeout"),
        ("retry", "initial_backoff"),
        ("retry", "max_backoff"),
        ("retry", "persistent_interval"),
        ("health", "interval"),
        ("health", "cooldown"),
        ("fencing", "validation_interval"),
        ("shutdown", "timeout"),
        ("placement", "stability_window"),
        ("placement", "leave_delay"),
        ("placement", "claim_grace"),
        ("placement", "cooldown"),
        ("placement", "move_interval"),
        ("placement", "member_ttl"),
    ];
    for (value, accepted) in [("1h", true), ("3601s", false), ("1000000000y", false)] {
        for (section, key) in keys {
            let mut yaml = format!("{section}:\n  {key}: {value}\n");
            if key == "initial_backoff" {
                // max_backoff must not be shorter.
                yaml.push_str(&format!("  max_backoff: {value}\n"));
            }
            let result = Config::from_yaml_str(&yaml);
            if accepted {
                assert!(result.is_ok(), "{yaml}: {result:?}");
                continue;
            }
            let problems = yaml_problems(&yaml);
            let field = format!("{section}.{key}");
            let p = problems
                .iter()
                .find(|p| p.field == field)
                .unwrap_or_else(|| panic!("{yaml}: {problems:#?}"));
            assert_eq!(p.line, Some(2), "{p}");
            assert!(
                p.message.contains("at most 1h") || p.message.contains("maximum 1h"),
                "{p}"
            );
        }
    }
    // Bounded through other rules: health.timeout ≤ interval, drain ≤ shutdown timeout.
    let problems = yaml_problems("health:\n  timeout: 2h\nshutdown:\n  drain_timeout: 2h\n");
    assert_eq!(
        fields_of(&problems),
        ["health.timeout", "shutdown.drain_timeout"]
    );
    let problems = yaml_problems(
        "telemetry:\n  otlp:\n    endpoint: http://127.0.0.1:4318\n    export_interval: 2h\n    timeout: 1000000000y\n",
    );
    assert_eq!(
        fields_of(&problems),
        ["telemetry.otlp.export_interval", "telemetry.otlp.timeout"]
    );
    assert_eq!(problems[1].line, Some(5));
}

#[test]
fn non_finite_numbers_are_reported_with_their_location() {
    for (yaml, field, line, column) in [
        (
            "timing:\n  deadline_margin: .nan\n",
            "timing.deadline_margin",
            2,
            20,
        ),
        (
            "timing:\n  deadline_margin: .inf\n",
            "timing.deadline_margin",
            2,
            20,
        ),
        (
            "timing:\n  deadline_margin: -.inf\n",
            "timing.deadline_margin",
            2,
            20,
        ),
        ("retry:\n  multiplier: .inf\n", "retry.multiplier", 2, 15),
        ("retry:\n  jitter: .NaN\n", "retry.jitter", 2, 11),
        (
            "roles:\n  - name: a\n    deadline_margin: .nan\n",
            "roles[0].deadline_margin",
            3,
            22,
        ),
    ] {
        let problems = yaml_problems(yaml);
        assert_eq!(problems.len(), 1, "{yaml}: {problems:#?}");
        let p = &problems[0];
        assert_eq!(p.field, field, "{p}");
        assert_eq!(
            (p.line, p.column),
            (Some(line), Some(column)),
            "{yaml}: {p}"
        );
    }
}

/// Server URLs are parsed as the client parses them (`async_nats::ServerAddr`): a URL the
/// client would refuse at connect time (a forbidden character in the host) is a problem of its
/// field, with its line and column, in YAML and in `NATS_URL`.
#[test]
fn server_urls_are_parsed_as_the_client_parses_them() {
    for bad in ["nats://a|b:4222", "a^b:4222", "tls://a<b"] {
        assert!(
            bad.parse::<async_nats::ServerAddr>().is_err(),
            "{bad} parses"
        );
        let why = check_server(bad).expect_err(bad);
        assert!(why.starts_with(&format!("server {bad:?} ")), "{why}");
    }
    let mut c = Config::default();
    c.nats.servers = vec!["nats://ok:4222".into(), "nats://a|b:4222".into()];
    let p = only_problem(&c, "nats.servers[1]");
    assert!(p.message.contains("not a valid server URL"), "{p}");

    let found = yaml_problems("nats:\n  servers:\n    - nats://ok:4222\n    - nats://a|b:4222\n");
    let at: Vec<_> = found
        .iter()
        .map(|p| (p.field.as_str(), p.line, p.column))
        .collect();
    assert_eq!(at, [("nats.servers[1]", Some(4), Some(7))], "{found:#?}");

    let mut c = Config::default();
    let err = c
        .apply_env(|name| (name == ENV_NATS_URL).then(|| "nats://ok, a|b:4222".to_owned()))
        .unwrap_err();
    let fields: Vec<_> = err.problems().iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, [ENV_NATS_URL], "{err}");
    assert_eq!(c.nats.servers, Config::default().nats.servers);
}

/// `roles[].slots` (protocol Q15): 1 (the default) or 2 to 64; every other number is refused
/// with its field and line, and a value that is not a number is a type error.
#[test]
fn role_slots_are_one_or_two_to_sixty_four() {
    let ok =
        Config::from_yaml_str("roles:\n  - name: a\n  - name: b\n    slots: 64\n").expect("valid");
    assert_eq!((ok.roles[0].slots, ok.roles[1].slots), (1, 64));
    let found = yaml_problems(
        "roles:\n  - name: a\n    slots: 0\n  - name: b\n    slots: 65\n  - name: c\n    slots: 2\n",
    );
    let shown: Vec<(&str, Option<usize>)> =
        found.iter().map(|p| (p.field.as_str(), p.line)).collect();
    assert_eq!(
        shown,
        [("roles[0].slots", Some(3)), ("roles[1].slots", Some(5))],
        "{found:#?}"
    );
    assert!(found[0].message.contains("2 to 64 slots"), "{found:#?}");
    let bad = one_problem("roles:\n  - name: a\n    slots: many\n");
    assert_eq!(bad.field, "roles[0].slots", "{bad:#?}");
}
