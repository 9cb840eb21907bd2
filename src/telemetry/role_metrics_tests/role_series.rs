//! Which roles get series of their own ([`RoleSeries`], `telemetry.role_metrics`), as
//! exported: `auto` above its limit exports as many lines for any number of roles, the
//! instance's series sum up the roles' series of `all`, a listed role has series of its own,
//! and the instance's gauge series go with the last role recorded on them.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::{sample, setup_with};
use crate::core::{DemoteReason, FailureKind, ReleaseReason, WriteKind, WriteOutcome};
use crate::metrics::{PerRole, RoleMetrics, RoleSeries};
use crate::names::{InstanceId, RoleName};
use crate::status::RoleState;
use crate::tap::{FencedRefusal, TapEvent, TapSink};
use crate::token::FencingToken;

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
                session: None,
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
                session: None,
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

/// Roles without series of their own resting on one session keep the session's renewal, not
/// one each: the instance's renewal age follows the session's latest renewal record (a role
/// promoted after it counts from its promotion), a second session renewed long ago shows as
/// the oldest, and once no held role rests on a session its renewal is forgotten.
#[test]
fn roles_without_series_take_their_renewal_age_from_their_session() {
    let (_provider, reader, m, i) = setup_with(PerRole::None);
    let since = |text: &str| {
        sample(
            text,
            r#"nats_roles_election_seconds_since_last_renewal{bucket="roles",instance_id="node-a"}"#,
        )
    };
    let now = Instant::now();
    let ago = |ms: u64| now.checked_sub(Duration::from_millis(ms)).unwrap_or(now);
    let (fresh, stale) = (Uuid::from_u64_pair(1, 1), Uuid::from_u64_pair(2, 2));
    let promote = |n: u64, session: Uuid, at: Instant| {
        let r = RoleName::new(format!("r{n}")).expect("valid");
        let token = FencingToken::new(1, n, Uuid::nil());
        m.record(
            &i,
            &r,
            &TapEvent::Promoted {
                token,
                deadline: now,
                session: Some(session),
            },
            at,
        );
        (r, token)
    };
    let renew = |(r, token): &(RoleName, FencingToken), session: Uuid, at: Instant| {
        m.record(
            &i,
            r,
            &TapEvent::Renewed {
                token: *token,
                deadline: now,
                session: Some(session),
            },
            at,
        );
    };
    // Three roles promoted 9 s ago on `fresh`; one renewal of the session 5 s ago carried
    // by one role's record and a later one, 1 s ago, by another's: all three are 1 s old.
    let roles: Vec<_> = (1..=3).map(|n| promote(n, fresh, ago(9_000))).collect();
    renew(&roles[0], fresh, ago(5_000));
    renew(&roles[1], fresh, ago(1_000));
    let age = since(&reader.render().expect("render")).expect("an age");
    assert!((1.0..4.0).contains(&age), "{age}");
    // A role on `stale`, promoted 30 s ago and renewed 20 s ago: the oldest.
    let old = promote(4, stale, ago(30_000));
    renew(&old, stale, ago(20_000));
    let age = since(&reader.render().expect("render")).expect("an age");
    assert!((20.0..25.0).contains(&age), "{age}");
    // It ends: the age is `fresh`'s again, and `stale` is forgotten at the next reading.
    m.record(
        &i,
        &old.0,
        &TapEvent::Demoted {
            token: old.1,
            reason: DemoteReason::Released(ReleaseReason::Requested),
            held: Duration::from_secs(30),
        },
        now,
    );
    let age = since(&reader.render().expect("render")).expect("an age");
    assert!((1.0..4.0).contains(&age), "{age}");
    let _ = reader.render().expect("render");
    assert!(
        !m.book_sessions().contains(&stale) && m.book_sessions().contains(&fresh),
        "{:?}",
        m.book_sessions()
    );
}
