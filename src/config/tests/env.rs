//! Tests of environment overrides.

use std::collections::HashMap;

use super::*;

// ----- environment -----
fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| vars.get(name).cloned()
}

#[test]
fn env_overrides() {
    let mut c = Config::default();
    c.apply_env(env_of(&[
        ("NATS_URL", "nats://a:4222, tls://b:4443,,"),
        ("NATS_CREDS", "/run/secrets/nats.creds"),
        ("NATS_ROLES_INSTANCE_ID", "node-7"),
        ("NATS_ROLES_BUCKET", "roles_v2"),
        ("UNRELATED", "x"),
    ]))
    .unwrap();
    assert_eq!(c.nats.servers, ["nats://a:4222", "tls://b:4443"]);
    assert_eq!(
        c.nats.creds_file,
        Some(PathBuf::from("/run/secrets/nats.creds"))
    );
    assert_eq!(c.instance.id, Some(InstanceId::new("node-7").unwrap()));
    assert_eq!(c.bucket.name, "roles_v2");
    assert!(c.validate().is_ok());

    let mut unchanged = Config::default();
    unchanged
        .apply_env(env_of(&[("NATS_URL", " "), ("NATS_ROLES_BUCKET", "")]))
        .unwrap();
    assert_eq!(unchanged, Config::default());
}

#[test]
fn invalid_env_values_name_the_variable_and_change_nothing() {
    let mut c = Config::default();
    let err = c
        .apply_env(env_of(&[
            ("NATS_URL", "nats://ok:4222,http://bad"),
            ("NATS_CREDS", "/ok.creds"),
            ("NATS_ROLES_INSTANCE_ID", "node 7"),
            ("NATS_ROLES_BUCKET", "a.b"),
        ]))
        .unwrap_err();
    let named: Vec<&str> = err.problems().iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        named,
        ["NATS_URL", "NATS_ROLES_INSTANCE_ID", "NATS_ROLES_BUCKET"]
    );
    assert!(err.problems()[1].message.contains("\"node 7\""), "{err}");
    assert_eq!(c, Config::default());
    let err = c.apply_env(env_of(&[("NATS_URL", ",,")])).unwrap_err();
    assert_eq!(err.problems()[0].field, "NATS_URL");
}

#[test]
fn the_zone_comes_from_the_environment_and_a_blank_one_is_ignored() {
    let mut c = Config::from_yaml_str("instance:\n  zone: from-file\n").unwrap();
    c.apply_env(env_of(&[("NATS_ROLES_ZONE", " eu-west-1a ")]))
        .unwrap();
    assert_eq!(c.instance.zone.as_deref(), Some("eu-west-1a"));
    assert_eq!(c.instance.effective_zone(), Some("eu-west-1a"));
    // What the downward API gives for a label the pod does not have: an empty string.
    let mut unchanged = Config::from_yaml_str("instance:\n  zone: from-file\n").unwrap();
    unchanged
        .apply_env(env_of(&[("NATS_ROLES_ZONE", "")]))
        .unwrap();
    assert_eq!(unchanged.instance.zone.as_deref(), Some("from-file"));
    let err = Config::default()
        .apply_env(env_of(&[("NATS_ROLES_ZONE", "eu west")]))
        .unwrap_err();
    assert_eq!(err.problems()[0].field, "NATS_ROLES_ZONE");
    assert!(err.to_string().contains("\"eu west\""), "{err}");
}
