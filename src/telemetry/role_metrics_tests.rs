//! The library's metrics ([`RoleMetrics`]) as the Prometheus exporter shows them.

use std::collections::BTreeMap;
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use tokio::time::Instant;
use uuid::Uuid;

use crate::core::{DemoteReason, FailureKind, ReleaseReason, WriteKind, WriteOutcome};
use crate::metrics::{ERROR_TYPES, PerRole, RoleMetrics, RoleSeries};
use crate::names::{InstanceId, RoleName};
use crate::status::RoleState;
use crate::tap::{FencedRefusal, SessionEvent, TapEvent, TapSink, WatcherEvent};
use crate::telemetry::PrometheusReader;
use crate::token::FencingToken;

fn setup() -> (SdkMeterProvider, PrometheusReader, RoleMetrics, InstanceId) {
    setup_with(PerRole::All)
}

fn setup_with(per_role: PerRole) -> (SdkMeterProvider, PrometheusReader, RoleMetrics, InstanceId) {
    let reader = PrometheusReader::new();
    let provider = SdkMeterProvider::builder()
        .with_reader(reader.clone())
        .build();
    let instance = InstanceId::new("node-a").expect("valid");
    let metrics = RoleMetrics::new(&provider.meter("test"), &instance, "roles", per_role);
    (provider, reader, metrics, instance)
}

/// The value of the one sample line starting with `series` (name and labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_term_moves_gauges_counters_and_histograms() {
    let (_provider, reader, m, i) = setup();
    let r = RoleName::new("scheduler").expect("valid");
    let now = Instant::now();
    let token = FencingToken::new(7, 42, Uuid::from_u128(0xC0FFEE));
    let labels = r#"{bucket="roles",instance_id="node-a",role="scheduler"}"#;
    let change = |from, to, reason| TapEvent::StateChanged { from, to, reason };
    m.record(
        &i,
        &r,
        &change(RoleState::Init, RoleState::Candidate, None),
        now,
    );
    m.record(
        &i,
        &r,
        &TapEvent::WriteCompleted {
            op: 1,
            kind: WriteKind::Acquire,
            outcome: WriteOutcome::Ok { revision: 42 },
            elapsed: Duration::from_micros(800),
        },
        now,
    );
    m.record(
        &i,
        &r,
        &TapEvent::Promoted {
            token,
            deadline: now,
        },
        now,
    );
    m.record(
        &i,
        &r,
        &change(RoleState::Candidate, RoleState::Leader, None),
        now,
    );
    for (outcome, elapsed) in [
        (WriteOutcome::Ok { revision: 43 }, 2),
        (WriteOutcome::Unknown, 1_000),
        (WriteOutcome::Failed(FailureKind::Unavailable), 3),
    ] {
        m.record(
            &i,
            &r,
            &TapEvent::WriteCompleted {
                op: 2,
                kind: WriteKind::Renew,
                outcome,
                elapsed: Duration::from_millis(elapsed),
            },
            now,
        );
    }
    m.record(
        &i,
        &r,
        &TapEvent::FencedWrite {
            token,
            key: "data.scheduler.x".into(),
            stored: Err(FencedRefusal::Fenced),
        },
        now,
    );
    let text = reader.render().expect("render");
    let s = |series: &str| sample(&text, series);
    assert_eq!(
        s(&format!("nats_roles_election_is_leader{labels}")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        s(r#"nats_roles_roles_held{bucket="roles",instance_id="node-a"}"#),
        Some(1.0),
        "{text}"
    );
    assert!(
        s(&format!(
            "nats_roles_election_seconds_since_last_renewal{labels}"
        ))
        .is_some_and(|v| v >= 0.0),
        "{text}"
    );
    assert_eq!(
        s(
            r#"nats_roles_election_acquire_attempts_total{bucket="roles",instance_id="node-a",role="scheduler",status="won"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        s(
            r#"nats_roles_election_heartbeat_duration_seconds_count{bucket="roles",instance_id="node-a",role="scheduler",status="unknown"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        s(
            r#"nats_roles_election_heartbeat_duration_seconds_bucket{bucket="roles",instance_id="node-a",role="scheduler",status="ok",le="0.0025"}"#
        ),
        Some(1.0),
        "{text}"
    );
    for error_type in ["timeout", "unavailable"] {
        assert_eq!(
            s(&format!(
                r#"nats_roles_election_failures_total{{bucket="roles",error_type="{error_type}",instance_id="node-a",role="scheduler"}}"#
            )),
            Some(1.0),
            "{text}"
        );
    }
    assert_eq!(
        s(&format!(
            "nats_roles_election_token_validation_failures_total{labels}"
        )),
        Some(1.0),
        "{text}"
    );

    // The term ends; then the role is removed: its gauges go, its counters stay.
    let reason = DemoteReason::Released(ReleaseReason::Shutdown);
    m.record(
        &i,
        &r,
        &TapEvent::Demoted {
            token,
            reason,
            held: Duration::from_secs(12),
        },
        now,
    );
    m.record(
        &i,
        &r,
        &change(RoleState::Leader, RoleState::Demoted, Some(reason)),
        now,
    );
    let text = reader.render().expect("render");
    assert_eq!(
        sample(&text, &format!("nats_roles_election_is_leader{labels}")),
        Some(0.0),
        "{text}"
    );
    assert!(!text.contains("seconds_since_last_renewal{"), "{text}");
    assert_eq!(
        sample(
            &text,
            &format!("nats_roles_election_leader_duration_seconds_sum{labels}")
        ),
        Some(12.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"nats_roles_election_transitions_total{bucket="roles",from_state="LEADER",instance_id="node-a",reason="shutdown",role="scheduler",to_state="DEMOTED"}"#
        ),
        Some(1.0),
        "{text}"
    );
    m.record(
        &i,
        &r,
        &change(RoleState::Demoted, RoleState::Stopped, None),
        now,
    );
    let text = reader.render().expect("render");
    assert!(!text.contains("nats_roles_election_is_leader{"), "{text}");
    assert!(
        !text.contains("nats_roles_election_connection_status{"),
        "{text}"
    );
    assert!(
        text.contains("nats_roles_election_transitions_total{"),
        "{text}"
    );
    // No token, epoch or nonce anywhere.
    assert!(!text.contains("c0ffee") && !text.contains("42."), "{text}");
}

#[test]
fn a_new_role_has_zero_series_of_what_only_moves_on_trouble() {
    let (_provider, reader, m, i) = setup();
    let r = RoleName::new("scheduler").expect("valid");
    let labels = r#"bucket="roles",instance_id="node-a",role="scheduler""#;
    m.record(
        &i,
        &r,
        &TapEvent::StateChanged {
            from: RoleState::Init,
            to: RoleState::Candidate,
            reason: None,
        },
        Instant::now(),
    );
    let text = reader.render().expect("render");
    for error_type in ERROR_TYPES {
        assert_eq!(
            sample(
                &text,
                &format!(
                    r#"nats_roles_election_failures_total{{bucket="roles",error_type="{error_type}",instance_id="node-a",role="scheduler"}}"#
                )
            ),
            Some(0.0),
            "{text}"
        );
    }
    assert_eq!(
        sample(
            &text,
            &format!("nats_roles_election_token_validation_failures_total{{{labels}}}")
        ),
        Some(0.0),
        "{text}"
    );
    for series in [
        format!("nats_roles_election_leader_duration_seconds_count{{{labels}}}"),
        format!(r#"nats_roles_election_heartbeat_duration_seconds_count{{{labels},status="ok"}}"#),
        format!(r#"nats_roles_election_acquire_attempts_total{{{labels},status="won"}}"#),
        format!(r#"nats_roles_election_leader_duration_seconds_bucket{{{labels},le="+Inf"}}"#),
    ] {
        assert_eq!(sample(&text, &series), Some(0.0), "{series}\n{text}");
    }
    // The first term that ends is counted on the same series.
    m.record(
        &i,
        &r,
        &TapEvent::Demoted {
            token: crate::token::FencingToken::new(1, 2, Uuid::nil()),
            reason: DemoteReason::Expired,
            held: Duration::from_secs(3),
        },
        Instant::now(),
    );
    let text = reader.render().expect("render");
    assert_eq!(
        sample(
            &text,
            &format!("nats_roles_election_leader_duration_seconds_count{{{labels}}}")
        ),
        Some(1.0),
        "{text}"
    );
}

/// Protocol v2: the heartbeat histogram measures session renewals (labelled by session
/// key, not role); failed session writes count as failures of that session.
#[test]
fn session_renewals_are_the_heartbeat() {
    let (_provider, reader, m, i) = setup();
    let key = "session.node-a.3000";
    for outcome in [
        WriteOutcome::Ok { revision: 7 },
        WriteOutcome::Ok { revision: 9 },
        WriteOutcome::Unknown,
    ] {
        m.session(
            &i,
            SessionEvent::Written {
                key,
                kind: crate::core::SessionWriteKind::Renew,
                outcome,
                elapsed: Duration::from_millis(2),
            },
        );
    }
    m.session(
        &i,
        SessionEvent::Written {
            key,
            kind: crate::core::SessionWriteKind::Start,
            outcome: WriteOutcome::Failed(FailureKind::PermissionDenied),
            elapsed: Duration::from_millis(1),
        },
    );
    let text = reader.render().expect("render");
    let labels = format!(r#"bucket="roles",instance_id="node-a",session="{key}""#);
    for (series, want) in [
        (
            format!(
                "nats_roles_election_heartbeat_duration_seconds_count{{{labels},status=\"ok\"}}"
            ),
            2.0,
        ),
        (
            format!(
                "nats_roles_election_heartbeat_duration_seconds_count{{{labels},status=\"unknown\"}}"
            ),
            1.0,
        ),
        (
            format!(
                "nats_roles_election_failures_total{{bucket=\"roles\",error_type=\"timeout\",instance_id=\"node-a\",session=\"{key}\"}}"
            ),
            1.0,
        ),
        (
            format!(
                "nats_roles_election_failures_total{{bucket=\"roles\",error_type=\"permission_denied\",instance_id=\"node-a\",session=\"{key}\"}}"
            ),
            1.0,
        ),
    ] {
        assert_eq!(sample(&text, &series), Some(want), "{series}\n{text}");
    }
}

#[test]
fn watcher_and_connection_events() {
    let (_provider, reader, m, i) = setup();
    let r = RoleName::new("gc").expect("valid");
    m.record(&i, &r, &TapEvent::Connection(false), Instant::now());
    m.watcher(&i, WatcherEvent::Restarted);
    m.watcher(
        &i,
        WatcherEvent::Delivered {
            pending: 5,
            lag: Some(Duration::from_millis(3)),
        },
    );
    let text = reader.render().expect("render");
    let inst = r#"{bucket="roles",instance_id="node-a"}"#;
    assert_eq!(
        sample(
            &text,
            r#"nats_roles_election_connection_status{bucket="roles",instance_id="node-a",role="gc"}"#
        ),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!("nats_roles_watcher_restarts_total{inst}")),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, &format!("nats_roles_watcher_pending_entries{inst}")),
        Some(5.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("nats_roles_watcher_delivery_lag_seconds_count{inst}")
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, &format!("nats_roles_roles_held{inst}")),
        Some(0.0)
    );
}

#[test]
fn a_stopped_manager_shows_no_role_held_even_if_its_roles_never_reported_stopped() {
    let (_provider, reader, m, i) = setup();
    let r = RoleName::new("scheduler").expect("valid");
    let change = |from, to| TapEvent::StateChanged {
        from,
        to,
        reason: None,
    };
    m.record(
        &i,
        &r,
        &change(RoleState::Candidate, RoleState::Leader),
        Instant::now(),
    );
    let text = reader.render().expect("render");
    assert!(text.contains("nats_roles_election_is_leader{"), "{text}");
    // Shutdown timed out and aborted the role task: no STOPPED arrives.
    m.manager_stopped(&i);
    // A late event of an aborted driver must not bring the series back.
    m.record(&i, &r, &TapEvent::Connection(true), Instant::now());
    let text = reader.render().expect("render");
    assert!(!text.contains("nats_roles_election_is_leader{"), "{text}");
    assert!(!text.contains("nats_roles_roles_held{"), "{text}");
    assert!(
        !text.contains("nats_roles_election_connection_status{"),
        "{text}"
    );
}

/// The events of role number `i` of a busy instance: every instrument of a role moves
/// (won and lost acquires, terms that end, fenced refusals, failures that block the role
/// and recover, vacancies, a lost connection, late renewals).
fn busy_role(m: &RoleMetrics, i: &InstanceId, n: usize, at: Instant) {
    let r = RoleName::new(format!("shard-{n:04}")).expect("valid");
    let token = FencingToken::new(1, 10 + n as u64, Uuid::nil());
    let change = |from, to, reason| TapEvent::StateChanged { from, to, reason };
    let write = |kind, outcome, ms| TapEvent::WriteCompleted {
        op: 1,
        kind,
        outcome,
        elapsed: Duration::from_millis(ms),
    };
    m.record(
        i,
        &r,
        &change(RoleState::Init, RoleState::Candidate, None),
        at,
    );
    if !n.is_multiple_of(2) {
        m.record(
            i,
            &r,
            &write(WriteKind::Acquire, WriteOutcome::Conflict, 1),
            at,
        );
        m.record(
            i,
            &r,
            &change(RoleState::Candidate, RoleState::Follower, None),
            at,
        );
    } else {
        m.record(
            i,
            &r,
            &write(WriteKind::Acquire, WriteOutcome::Ok { revision: 3 }, 2),
            at,
        );
        let renewed = at
            .checked_sub(Duration::from_millis(n as u64))
            .unwrap_or(at);
        m.record(
            i,
            &r,
            &TapEvent::Promoted {
                token,
                deadline: at,
            },
            renewed,
        );
        m.record(
            i,
            &r,
            &change(RoleState::Candidate, RoleState::Leader, None),
            at,
        );
        m.record(
            i,
            &r,
            &TapEvent::Renewed {
                token,
                deadline: at,
            },
            renewed,
        );
        m.record(
            i,
            &r,
            &write(WriteKind::Renew, WriteOutcome::Unknown, 1_000),
            at,
        );
    }
    if n.is_multiple_of(3) {
        m.record(
            i,
            &r,
            &TapEvent::FencedWrite {
                token,
                key: format!("data.{r}.x"),
                stored: Err(FencedRefusal::Fenced),
            },
            at,
        );
    }
    if n.is_multiple_of(4) {
        let reason = DemoteReason::Released(ReleaseReason::Shutdown);
        let held = Duration::from_millis(100 * n as u64 + 50);
        m.record(
            i,
            &r,
            &TapEvent::Demoted {
                token,
                reason,
                held,
            },
            at,
        );
        m.record(
            i,
            &r,
            &change(RoleState::Leader, RoleState::Demoted, Some(reason)),
            at,
        );
        let took = Duration::from_micros(700 * n as u64 + 300);
        m.record(
            i,
            &r,
            &TapEvent::VacancyEnded {
                cause: "hand_over",
                took,
            },
            at,
        );
    }
    if n.is_multiple_of(5) {
        let kind = if n.is_multiple_of(10) {
            FailureKind::Unavailable
        } else {
            FailureKind::Server(crate::core::ServerCode(10077))
        };
        m.record(
            i,
            &r,
            &write(WriteKind::Acquire, WriteOutcome::Failed(kind), 3),
            at,
        );
        m.record(i, &r, &TapEvent::Failed(kind), at);
    }
    if n.is_multiple_of(15) {
        m.record(i, &r, &TapEvent::Recovered, at);
    }
    if n == 7 {
        m.record(i, &r, &TapEvent::Connection(false), at);
    }
}

/// The Prometheus text of an instance with `roles` busy roles and `per_role`.
fn busy_instance(per_role: PerRole, roles: usize) -> String {
    let (_provider, reader, m, i) = setup_with(per_role);
    let at = Instant::now();
    for n in 0..roles {
        busy_role(&m, &i, n, at);
    }
    reader.render().expect("render")
}

/// The sample lines of `text` as (name, labels without `role`, value).
fn samples(text: &str) -> Vec<(String, Vec<String>, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample line");
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|kv| !kv.is_empty() && !kv.starts_with("role="))
                .map(str::to_owned)
                .collect();
            (name.to_owned(), labels, value.parse().expect("a number"))
        })
        .collect()
}

/// The lines of `text`, sorted, without the values of the gauge that moves with the clock.
fn steady(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text
        .lines()
        .map(
            |l| match l.starts_with("nats_roles_election_seconds_since_last_renewal{") {
                true => l.rsplit_once(' ').map_or(l, |(series, _)| series),
                false => l,
            },
        )
        .collect();
    lines.sort_unstable();
    lines
}

/// The sum of every series of each name and label set, the `role` label left out.
fn sums(text: &str) -> BTreeMap<(String, Vec<String>), f64> {
    let mut sums = BTreeMap::new();
    for (name, labels, value) in samples(text) {
        *sums.entry((name, labels)).or_insert(0.0) += value;
    }
    sums
}

/// With `auto` and more roles than its limit at start, the number of exported lines does
/// not depend on the number of roles; with `all` it does (the test can tell).
#[test]
fn auto_above_the_limit_exports_as_many_lines_for_150_roles_as_for_300() {
    let lines =
        |series: RoleSeries, roles| busy_instance(series.resolve(roles), roles).lines().count();
    let (auto_150, auto_300) = (lines(RoleSeries::Auto, 150), lines(RoleSeries::Auto, 300));
    assert_eq!(auto_150, auto_300);
    let (all_150, all_300) = (lines(RoleSeries::All, 150), lines(RoleSeries::All, 300));
    assert!(all_300 > all_150 + 150 * 30, "{all_150} {all_300}");
    assert!(auto_150 < 300, "{auto_150} lines for 150 roles");
    let text = busy_instance(RoleSeries::Auto.resolve(150), 150);
    assert!(!text.contains("role=\""), "{text}");
    assert!(!text.contains("nats_roles_election_is_leader{"), "{text}");
    // At the limit, auto is all.
    let auto_100 = busy_instance(RoleSeries::Auto.resolve(100), 100);
    let all_100 = busy_instance(PerRole::All, 100);
    assert!(
        steady(&auto_100) == steady(&all_100),
        "auto at its limit differs from all"
    );
}

/// For the same events, every counter and histogram of `auto` above its limit (no `role`
/// label) equals the sum over the roles' series of `all`, and so do `roles_held` and
/// `role_blocked` by `error_type` and `code`; nothing is counted twice.
#[test]
fn sums_without_role_equal_the_per_role_sums_of_all() {
    let all = busy_instance(PerRole::All, 150);
    let auto = busy_instance(RoleSeries::Auto.resolve(150), 150);
    let per_role_gauges = [
        "nats_roles_election_is_leader",
        "nats_roles_election_connection_status",
        "nats_roles_election_seconds_since_last_renewal",
    ];
    let keep = |sums: BTreeMap<(String, Vec<String>), f64>| -> BTreeMap<_, f64> {
        sums.into_iter()
            .filter(|((name, _), _)| !per_role_gauges.contains(&name.as_str()))
            .collect()
    };
    let (all_sums, auto_sums) = (keep(sums(&all)), keep(sums(&auto)));
    let names = |sums: &BTreeMap<(String, Vec<String>), f64>| -> Vec<String> {
        sums.keys()
            .map(|(name, labels)| format!("{name}{labels:?}"))
            .collect()
    };
    assert_eq!(names(&all_sums), names(&auto_sums));
    for ((key, want), got) in all_sums.iter().zip(auto_sums.values()) {
        assert!(
            (want - got).abs() <= 1e-9 * want.abs().max(1.0),
            "{key:?}: all {want}, auto {got}"
        );
    }
    // Measured at all: the comparison covers every instrument that moved.
    for (series, want) in [
        (
            r#"nats_roles_election_acquire_attempts_total{bucket="roles",instance_id="node-a",status="won"}"#,
            75.0,
        ),
        (
            r#"nats_roles_election_acquire_attempts_total{bucket="roles",instance_id="node-a",status="lost"}"#,
            75.0,
        ),
        (
            r#"nats_roles_election_token_validation_failures_total{bucket="roles",instance_id="node-a"}"#,
            50.0,
        ),
        (
            r#"nats_roles_election_leader_duration_seconds_count{bucket="roles",instance_id="node-a"}"#,
            38.0,
        ),
        (
            r#"nats_roles_role_vacancy_seconds_count{bucket="roles",cause="hand_over",instance_id="node-a"}"#,
            38.0,
        ),
        (
            r#"nats_roles_election_heartbeat_duration_seconds_count{bucket="roles",instance_id="node-a",status="unknown"}"#,
            75.0,
        ),
        (
            r#"nats_roles_election_transitions_total{bucket="roles",from_state="INIT",instance_id="node-a",reason="none",to_state="CANDIDATE"}"#,
            150.0,
        ),
        (
            r#"nats_roles_election_failures_total{bucket="roles",error_type="timeout",instance_id="node-a"}"#,
            75.0,
        ),
        (
            r#"nats_roles_election_failures_total{bucket="roles",error_type="role_failed",instance_id="node-a"}"#,
            30.0,
        ),
        (
            r#"nats_roles_election_role_blocked{bucket="roles",code="0",error_type="unavailable",instance_id="node-a"}"#,
            10.0,
        ),
        (
            r#"nats_roles_election_role_blocked{bucket="roles",code="10077",error_type="server_error",instance_id="node-a"}"#,
            10.0,
        ),
        (
            r#"nats_roles_election_role_blocked{bucket="roles",code="0",error_type="none",instance_id="node-a"}"#,
            0.0,
        ),
        (
            r#"nats_roles_roles_held{bucket="roles",instance_id="node-a"}"#,
            37.0,
        ),
    ] {
        assert_eq!(sample(&auto, series), Some(want), "{series}\n{auto}");
    }
    // The per-role gauges: is_leader only per role; one connection series, 0 because
    // one role saw the connection down; the oldest renewal of the held roles.
    assert!(!auto.contains("nats_roles_election_is_leader"), "{auto}");
    assert_eq!(
        sample(
            &auto,
            r#"nats_roles_election_connection_status{bucket="roles",instance_id="node-a"}"#
        ),
        Some(0.0),
        "{auto}"
    );
    let since = sample(
        &auto,
        r#"nats_roles_election_seconds_since_last_renewal{bucket="roles",instance_id="node-a"}"#,
    )
    .expect("since renewal");
    // Role 146 is the held role renewed longest ago (146 ms before the others).
    assert!(since >= 0.146, "{since}");
}

#[test]
fn a_listed_role_has_series_an_unlisted_one_has_not() {
    let listed = RoleName::new("shard-0000").expect("valid");
    let per_role = RoleSeries::Only(vec![listed]).resolve(1_000);
    let text = busy_instance(per_role, 3);
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(r#"nats_roles_election_is_leader{bucket="roles",instance_id="node-a",role="shard-0000"}"#)),
        "{text}"
    );
    for unlisted in ["shard-0001", "shard-0002"] {
        assert!(!text.contains(unlisted), "{unlisted}\n{text}");
    }
    // The listed role's acquire is on its own series, the two others' on the instance's.
    for (series, want) in [
        (
            r#"nats_roles_election_acquire_attempts_total{bucket="roles",instance_id="node-a",role="shard-0000",status="won"}"#,
            1.0,
        ),
        (
            r#"nats_roles_election_acquire_attempts_total{bucket="roles",instance_id="node-a",role="shard-0000",status="lost"}"#,
            0.0,
        ),
        (
            r#"nats_roles_election_acquire_attempts_total{bucket="roles",instance_id="node-a",status="won"}"#,
            1.0,
        ),
        (
            r#"nats_roles_election_acquire_attempts_total{bucket="roles",instance_id="node-a",status="lost"}"#,
            1.0,
        ),
        (
            r#"nats_roles_election_failures_total{bucket="roles",error_type="gave_up",instance_id="node-a"}"#,
            0.0,
        ),
        (
            r#"nats_roles_election_connection_status{bucket="roles",instance_id="node-a"}"#,
            1.0,
        ),
        (
            r#"nats_roles_roles_held{bucket="roles",instance_id="node-a"}"#,
            1.0,
        ),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series}\n{text}");
    }
}

/// The instance's gauge series of the roles without series of their own go with the last
/// of those roles, as a role's own series go with it.
#[test]
fn stopped_roles_take_the_instance_gauge_series_with_them() {
    let (_provider, reader, m, i) = setup_with(PerRole::None);
    let at = Instant::now();
    let (a, b) = (
        RoleName::new("a").expect("valid"),
        RoleName::new("b").expect("valid"),
    );
    let change = |from, to| TapEvent::StateChanged {
        from,
        to,
        reason: None,
    };
    for r in [&a, &b] {
        m.record(&i, r, &change(RoleState::Init, RoleState::Candidate), at);
    }
    m.record(&i, &a, &TapEvent::Failed(FailureKind::PermissionDenied), at);
    let gauges = [
        "nats_roles_election_connection_status{",
        "nats_roles_election_role_blocked{",
    ];
    let text = reader.render().expect("render");
    assert_eq!(
        sample(
            &text,
            r#"nats_roles_election_role_blocked{bucket="roles",code="0",error_type="permission_denied",instance_id="node-a"}"#
        ),
        Some(1.0),
        "{text}"
    );
    m.record(
        &i,
        &a,
        &change(RoleState::Candidate, RoleState::Stopped),
        at,
    );
    let text = reader.render().expect("render");
    assert!(
        !text.contains(
            r#"nats_roles_election_role_blocked{bucket="roles",code="0",error_type="permission_denied""#
        ),
        "{text}"
    );
    for gauge in gauges {
        assert!(text.contains(gauge), "{gauge}\n{text}");
    }
    m.record(
        &i,
        &b,
        &change(RoleState::Candidate, RoleState::Stopped),
        at,
    );
    let text = reader.render().expect("render");
    for gauge in gauges {
        assert!(!text.contains(gauge), "{gauge}\n{text}");
    }
    // The counters stay, on the instance's series.
    assert_eq!(
        sample(
            &text,
            r#"nats_roles_election_transitions_total{bucket="roles",from_state="CANDIDATE",instance_id="node-a",reason="none",to_state="STOPPED"}"#
        ),
        Some(2.0),
        "{text}"
    );
}
