//! Tests of the configuration: shared helpers, one module per concept.

use super::*;
use std::path::PathBuf;

mod env;
mod http;
mod load;
mod locate;
mod schema;
mod schema_walk;
mod telemetry;
mod validate;

fn role(name: &str) -> RoleConfig {
    RoleConfig::new(RoleName::new(name).unwrap())
}

fn problems(config: &Config) -> Vec<ConfigProblem> {
    match config.validate() {
        Ok(()) => Vec::new(),
        Err(e) => e.problems().to_vec(),
    }
}

fn fields(config: &Config) -> Vec<String> {
    problems(config).into_iter().map(|p| p.field).collect()
}

/// The only problem of `config`, which must name `field`.
fn only_problem(config: &Config, field: &str) -> ConfigProblem {
    let found = problems(config);
    assert_eq!(
        found.iter().map(|p| p.field.as_str()).collect::<Vec<_>>(),
        [field],
        "{found:#?}"
    );
    found.into_iter().next().unwrap()
}

fn yaml_problems(text: &str) -> Vec<ConfigProblem> {
    match Config::from_yaml_str(text) {
        Err(ConfigError::Invalid(problems)) => problems,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// The one problem of `text`, which must be invalid with exactly one problem.
fn one_problem(text: &str) -> ConfigProblem {
    let found = yaml_problems(text);
    assert_eq!(found.len(), 1, "{text:?}: {found:#?}");
    found.into_iter().next().unwrap()
}

fn parse_err(text: &str) -> (Option<usize>, Option<usize>, String) {
    match Config::from_yaml_str(text) {
        Err(ConfigError::Parse {
            line,
            column,
            message,
        }) => (line, column, message),
        other => panic!("expected Parse, got {other:?}"),
    }
}

fn with_timing(f: impl FnOnce(&mut Timing)) -> Config {
    let mut config = Config::default();
    f(&mut config.timing);
    config
}

fn with_role(f: impl FnOnce(&mut RoleConfig)) -> Config {
    let mut r = role("scheduler");
    f(&mut r);
    Config {
        roles: vec![role("first"), r],
        ..Config::default()
    }
}

const FULL: &str = r#"
nats:
  servers: ["nats://n1:4222", "tls://n2:4222", "n3:4222"]
  name: my-conn
  creds_file: /etc/nats/roles.creds
  tls:
    required: true
    ca_file: /etc/nats/ca.pem
    cert_file: /etc/nats/cert.pem
    key_file: /etc/nats/key.pem
  ping_interval: 5s
  connect_timeout: 3s
  request_timeout: 1500ms
bucket:
  name: control-plane_roles
  replicas: 3
  auto_create: true
instance:
  id: node-a
  priority: 7
  meta:
    host: node-a.example.com
    http: "10.0.0.5:8080"
timing:
  ttl: 6s
  heartbeat: 1s
  deadline_margin: 0.2
  operation_timeout: 800ms
  disconnect_grace: 4s
  campaign_jitter: 50ms
retry:
  initial_backoff: 100ms
  max_backoff: 10s
  multiplier: 1.5
  jitter: 0.5
  max_attempts: 12
health:
  command: ["/usr/local/bin/healthy", "--quick"]
  interval: 2s
  timeout: 1s
  failure_threshold: 5
  cooldown: 30s
fencing:
  validation_interval: 250ms
shutdown:
  timeout: 20s
  drain_timeout: 15s
roles:
  - name: scheduler
    description: Runs the job scheduler
  - name: billing-sweeper
    priority: 10
    ttl: 10s
    heartbeat: 2s
    deadline_margin: 0.25
    operation_timeout: 2s
    disconnect_grace: 5s
    campaign_jitter: 100ms
  - name: dashboard
    campaign: false
"#;

fn fields_of(problems: &[ConfigProblem]) -> Vec<&str> {
    problems.iter().map(|p| p.field.as_str()).collect()
}
