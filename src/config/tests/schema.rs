//! Tests of defaults, parsing and helpers of the schema types.

use std::path::Path;

use super::*;

#[test]
fn placement_section_parses_with_defaults_and_takeover() {
    let c = Config::from_yaml_str(
        "placement:\n  enabled: true\n  weight: 3\n  claim_grace: 200ms\n\
             roles:\n  - name: a\n    takeover: never\n  - name: b\n",
    )
    .expect("valid");
    assert!(c.placement.enabled);
    assert_eq!(c.placement.weight, 3);
    assert_eq!(c.placement.claim_grace, Duration::from_millis(200));
    assert_eq!(c.placement.stability_window, Duration::from_secs(5));
    assert_eq!(c.roles[0].takeover, Takeover::Never);
    assert_eq!(c.roles[1].takeover, Takeover::Voluntary);
    assert_eq!(c.member_ttl(), c.timing.ttl);
    assert!(!Config::default().placement.enabled);
}

#[test]
fn defaults_validate() {
    assert_eq!(
        Config::default().validate().map_err(|e| e.to_string()),
        Ok(())
    );
}

#[test]
fn defaults_match_documentation() {
    let c = Config::default();
    assert_eq!(c.nats.servers, ["nats://127.0.0.1:4222"]);
    assert_eq!(c.nats.ping_interval, Duration::from_secs(1));
    assert_eq!(c.nats.connect_timeout, Duration::from_secs(2));
    assert_eq!(c.nats.request_timeout, Duration::from_secs(2));
    assert!(!c.nats.tls.required);
    assert_eq!(
        c.bucket,
        BucketSettings {
            name: "roles".into(),
            replicas: 1,
            auto_create: false,
            domain: None,
            api_prefix: None,
        }
    );
    assert_eq!(c.instance.id, None);
    assert_eq!(c.instance.priority, 0);
    assert_eq!(c.timing.ttl, Duration::from_secs(3));
    assert_eq!(c.timing.heartbeat, Duration::from_millis(750));
    assert_eq!(c.timing.deadline_margin, 0.1);
    assert_eq!(c.timing.operation_timeout, Duration::from_secs(1));
    assert_eq!(c.timing.disconnect_grace, Duration::from_secs(2));
    assert_eq!(c.timing.campaign_jitter, Duration::ZERO);
    assert_eq!(c.retry.initial, Duration::from_millis(50));
    assert_eq!(c.retry.max, Duration::from_secs(2));
    assert_eq!(
        (c.retry.multiplier, c.retry.jitter, c.retry.max_attempts),
        (2.0, 0.2, 0)
    );
    assert_eq!(c.health.command, None);
    assert_eq!(c.health.policy.interval, Duration::from_secs(1));
    assert_eq!(c.health.policy.timeout, Duration::from_millis(500));
    assert_eq!(c.health.policy.failure_threshold, 3);
    assert_eq!(c.health.policy.cooldown, Duration::from_secs(10));
    assert_eq!(c.fencing.validation_interval, None);
    assert_eq!(c.shutdown.timeout, Duration::from_secs(10));
    assert_eq!(c.shutdown.drain_timeout, Duration::from_secs(5));
    assert!(c.roles.is_empty());
}

#[test]
fn empty_document_gives_defaults() {
    assert_eq!(Config::from_yaml_str("").unwrap(), Config::default());
    assert_eq!(
        Config::from_yaml_str("# nothing\n").unwrap(),
        Config::default()
    );
    assert_eq!(Config::from_yaml_str("{}").unwrap(), Config::default());
}

#[test]
fn full_sample_parses() {
    let c = Config::from_yaml_str(FULL).unwrap();
    assert_eq!(c.nats.servers.len(), 3);
    assert_eq!(c.nats.name.as_deref(), Some("my-conn"));
    assert_eq!(
        c.nats.creds_file,
        Some(PathBuf::from("/etc/nats/roles.creds"))
    );
    assert!(c.nats.tls.required);
    assert_eq!(
        c.nats.tls.key_file,
        Some(PathBuf::from("/etc/nats/key.pem"))
    );
    assert_eq!(c.nats.request_timeout, Duration::from_millis(1500));
    assert_eq!(c.bucket.name, "control-plane_roles");
    assert_eq!(c.bucket.replicas, 3);
    assert!(c.bucket.auto_create);
    assert_eq!(c.instance.id, Some(InstanceId::new("node-a").unwrap()));
    assert_eq!(c.instance.meta["http"], "10.0.0.5:8080");
    assert_eq!(c.timing.ttl, Duration::from_secs(6));
    assert_eq!(c.timing.deadline_margin, 0.2);
    assert_eq!(c.retry.max_attempts, 12);
    assert_eq!(
        c.health.command,
        Some(vec![
            "/usr/local/bin/healthy".to_owned(),
            "--quick".to_owned()
        ])
    );
    assert_eq!(
        c.fencing.validation_interval,
        Some(Duration::from_millis(250))
    );
    assert_eq!(c.shutdown.drain_timeout, Duration::from_secs(15));
    assert_eq!(c.roles.len(), 3);
    assert_eq!(c.roles[0].name.as_str(), "scheduler");
    assert!(c.roles[0].campaign);
    assert_eq!(c.roles[0].effective_priority(&c.instance), 7);
    assert_eq!(c.roles[1].effective_priority(&c.instance), 10);
    assert_eq!(c.roles[1].timing.ttl, Some(Duration::from_secs(10)));
    assert_eq!(
        c.roles[1].timing.campaign_jitter,
        Some(Duration::from_millis(100))
    );
    assert!(!c.roles[2].campaign);
}

#[test]
fn serialization_round_trips() {
    let c = Config::from_yaml_str(FULL).unwrap();
    let text = serde_saphyr::to_string(&c).unwrap();
    assert_eq!(Config::from_yaml_str(&text).unwrap(), c);
    let text = serde_saphyr::to_string(&Config::default()).unwrap();
    assert_eq!(Config::from_yaml_str(&text).unwrap(), Config::default());
}

#[test]
fn example_config_validates() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/roles.example.yaml");
    let c = Config::load(Path::new(path)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.bucket.name, "roles");
    assert_eq!(c.timing.ttl, Duration::from_secs(3));
    assert_eq!(c.timing.heartbeat, Duration::from_millis(750));
    assert_eq!(c.instance.id, None);
    // Only what every instance shares: per-instance values come from the environment.
    assert!(c.instance.meta.contains_key("team"));
    assert!(!c.instance.meta.contains_key("host"));
    assert!((4..=12).contains(&c.roles.len()), "{} roles", c.roles.len());
    // The shards as a role group (protocol Q14).
    assert_eq!(c.groups.len(), 1);
    assert_eq!(c.groups[0].count, 6);
    assert!(c.roles.iter().any(|r| !r.campaign));
    assert!(c.roles.iter().any(|r| r.priority.is_some()));
    assert!(c.roles.iter().any(|r| r.timing.ttl.is_some()));
}

// ----- timing helpers -----
#[test]
fn timing_helpers() {
    let t = Timing::default();
    assert_eq!(t.local_lease(), Duration::from_millis(2700));
    assert_eq!(t.ttl_whole_seconds(), 3);
    let fractional = Timing {
        ttl: Duration::from_millis(1500),
        ..t
    };
    assert_eq!(fractional.ttl_whole_seconds(), 2);

    let mut r = role("a");
    assert_eq!(t.with(&r.timing), t);
    r.timing.ttl = Some(Duration::from_secs(9));
    r.timing.heartbeat = Some(Duration::from_secs(2));
    r.timing.deadline_margin = Some(0.3);
    r.timing.operation_timeout = Some(Duration::from_secs(4));
    r.timing.disconnect_grace = Some(Duration::from_secs(5));
    r.timing.campaign_jitter = Some(Duration::from_millis(6));
    assert_eq!(
        t.with(&r.timing),
        Timing {
            ttl: Duration::from_secs(9),
            heartbeat: Duration::from_secs(2),
            deadline_margin: 0.3,
            operation_timeout: Duration::from_secs(4),
            disconnect_grace: Duration::from_secs(5),
            campaign_jitter: Duration::from_millis(6),
        }
    );
}

/// The local lease is total: a NaN or out-of-range margin and the largest TTL give a lease
/// within `0..=ttl`, never a panic.
#[test]
fn library_local_lease_never_panics() {
    let t = Timing::default();
    assert_eq!(t.local_lease(), Duration::from_millis(2700));
    for (ttl, deadline_margin, lease) in [
        (t.ttl, f64::NAN, Duration::ZERO),
        (t.ttl, -3.0, t.ttl),
        (Duration::MAX, -3.0, Duration::MAX),
        (Duration::MAX, 7.0, Duration::ZERO),
    ] {
        let odd = Timing {
            ttl,
            deadline_margin,
            ..t
        };
        assert_eq!(
            odd.local_lease(),
            lease,
            "ttl {ttl:?}, margin {deadline_margin}"
        );
    }
}

#[test]
fn role_defaults_and_priority() {
    let r = role("a");
    assert!(r.campaign);
    assert_eq!(r.priority, None);
    let instance = InstanceConfig {
        priority: 4,
        ..InstanceConfig::default()
    };
    assert_eq!(r.effective_priority(&instance), 4);
    let r = RoleConfig {
        priority: Some(-2),
        ..r
    };
    assert_eq!(r.effective_priority(&instance), -2);
    let parsed = Config::from_yaml_str("roles: [{name: a}]").unwrap();
    assert_eq!(parsed.roles, [role("a")]);
}

#[test]
fn debug_redacts_secrets() {
    let nats = NatsConfig {
        user: Some("alice".into()),
        password: Some("hunter2-secret".into()),
        token: Some("tok-secret".into()),
        ..NatsConfig::default()
    };
    let debug = format!("{nats:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
    assert!(!debug.contains("tok-secret"), "{debug}");
    assert!(debug.contains("<redacted>"), "{debug}");
    assert!(debug.contains("alice"), "{debug}");
    let whole = format!(
        "{:?}",
        Config {
            nats,
            ..Config::default()
        }
    );
    assert!(
        !whole.contains("hunter2") && !whole.contains("tok-secret"),
        "{whole}"
    );
    assert!(format!("{:?}", NatsConfig::default()).contains("password: None"));
}
