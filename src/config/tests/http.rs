//! Tests of the `http` section.

use super::*;

#[test]
fn http_defaults_are_on_loopback_without_admin() {
    let c = Config::from_yaml_str("").unwrap();
    assert!(c.http.enabled);
    assert_eq!(c.http.listen, None);
    assert_eq!(c.http.admin_token, None);
    assert_eq!(c.http.listen_addr(), None);
}

#[test]
fn http_section_parses_and_redacts_the_token() {
    let c = Config::from_yaml_str(
        "http:\n  listen: \"0.0.0.0:9090\"\n  admin_token: 0123456789abcdef01\n",
    )
    .unwrap();
    assert_eq!(c.http.listen_addr(), Some("0.0.0.0:9090".parse().unwrap()));
    let shown = format!("{c:?}");
    assert!(!shown.contains("0123456789abcdef01"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

#[test]
fn bad_http_values_are_reported_with_locations() {
    let err = Config::from_yaml_str(
        "http:\n  listen: localhost\n  admin_token: short\n  enabled: true\n",
    )
    .unwrap_err();
    let problems = err.problems();
    assert_eq!(problems.len(), 2, "{err}");
    assert_eq!(problems[0].field, "http.listen");
    assert_eq!(problems[0].line, Some(2));
    assert_eq!(problems[1].field, "http.admin_token");
    assert_eq!(problems[1].line, Some(3));
    assert!(!err.to_string().contains("short\""), "token echoed: {err}");
    let err = Config::from_yaml_str("http:\n  admin_token: \"has a space in it!!\"\n").unwrap_err();
    assert!(err.to_string().contains("whitespace"), "{err}");
    let err = Config::from_yaml_str("http:\n  lisen: 1\n").unwrap_err();
    assert!(err.to_string().contains("lisen"), "{err}");
}

#[test]
fn admin_token_comes_from_the_environment() {
    let mut c = Config::default();
    c.apply_env(|name| (name == ENV_ADMIN_TOKEN).then(|| " 0123456789abcdefXYZ\n".into()))
        .unwrap();
    assert_eq!(c.http.admin_token.as_deref(), Some("0123456789abcdefXYZ"));
    let mut c = Config::default();
    let err = c
        .apply_env(|name| (name == ENV_ADMIN_TOKEN).then(|| "tiny".into()))
        .unwrap_err();
    assert_eq!(err.problems()[0].field, ENV_ADMIN_TOKEN);
    assert_eq!(c.http.admin_token, None);
}
