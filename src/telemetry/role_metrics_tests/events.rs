//! A role's events as measurements: a term moves its gauges, counters and histograms; a new
//! role has zero series of what only moves on trouble; session renewals are the heartbeat;
//! the watcher's and the connection's events; a stopped manager shows no role.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::{sample, setup};
use crate::core::{DemoteReason, FailureKind, ReleaseReason, WriteKind, WriteOutcome};
use crate::metrics::ERROR_TYPES;
use crate::names::RoleName;
use crate::status::RoleState;
use crate::tap::{FencedRefusal, SessionEvent, TapEvent, TapSink, WatcherEvent};
use crate::token::FencingToken;

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
            session: None,
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
    // Shutdown timed out and aborted the role runner: no STOPPED arrives.
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
