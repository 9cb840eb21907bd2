//! Validation: every rule of the configuration, all problems reported at once.

use std::collections::HashMap;
use std::time::Duration;

use super::locate::LocationMap;
use super::message::shorten;
use super::telemetry::{check_endpoint, check_header};
use super::*;
use crate::core::fmt_duration;

/// A problem plus the paths of other YAML values involved in it, tried in
/// order (after the problem's own field) when looking up its location.
pub(super) struct Found {
    pub(super) problem: ConfigProblem,
    related: Vec<String>,
}

impl Found {
    pub(super) fn locate(mut self, locations: Option<&LocationMap>) -> ConfigProblem {
        if let Some((line, column)) =
            locations.and_then(|map| map.find(&self.problem.field, &self.related))
        {
            self.problem.line = Some(line);
            self.problem.column = Some(column);
        }
        self.problem
    }

    /// Rewrites the paths of the problem with `f` (list indices of the file).
    pub(super) fn renumber(&mut self, f: impl Fn(&str) -> String) {
        self.problem.field = f(&self.problem.field);
        for path in &mut self.related {
            *path = f(path);
        }
    }

    /// The paths the problem is about: its field and the related ones.
    pub(super) fn paths(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.problem.field.as_str()).chain(self.related.iter().map(String::as_str))
    }
}

#[derive(Default)]
pub(super) struct Problems(Vec<Found>);

impl Problems {
    pub(super) fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.push_related(field, message, Vec::new());
    }

    /// Reports `field` when `value` is longer than `max`.
    pub(super) fn at_most(&mut self, field: &str, value: Duration, max: Duration) {
        if value > max {
            self.push(
                field,
                format!(
                    "{} is longer than the maximum {}",
                    fmt_duration(value),
                    fmt_duration(max)
                ),
            );
        }
    }

    /// Reports every problem a library setting found in itself.
    pub(super) fn settings(&mut self, problems: Vec<crate::core::SettingError>) {
        for e in problems {
            let related = e.related.iter().map(|r| (*r).to_owned()).collect();
            self.push_related(e.field, e.message, related);
        }
    }

    pub(super) fn push_related(
        &mut self,
        field: impl Into<String>,
        message: impl Into<String>,
        related: Vec<String>,
    ) {
        self.0.push(Found {
            problem: ConfigProblem::new(field, message),
            related,
        });
    }
}

/// The value of the [`Timing`] field called `field`, as a message shows it.
fn timing_value(t: &Timing, field: &str) -> String {
    match field {
        "heartbeat" => fmt_duration(t.heartbeat),
        "deadline_margin" => t.deadline_margin.to_string(),
        "operation_timeout" => fmt_duration(t.operation_timeout),
        "disconnect_grace" => fmt_duration(t.disconnect_grace),
        "campaign_jitter" => fmt_duration(t.campaign_jitter),
        _ => fmt_duration(t.ttl),
    }
}

/// A broken timing rule: `field` is the value the message is about,
/// `involved` every field the rule depends on (including `field`).
struct TimingIssue {
    field: &'static str,
    involved: &'static [&'static str],
    message: String,
}

fn timing_issues(t: &Timing) -> Vec<TimingIssue> {
    let mut issues: Vec<TimingIssue> = t
        .problems()
        .into_iter()
        .map(|e| TimingIssue {
            field: e.field(),
            involved: e.involved(),
            message: e.detail(),
        })
        .collect();
    // The file format also wants the TTL the server is given (whole seconds) written exactly.
    if (Timing::MIN_TTL..=Timing::MAX_TTL).contains(&t.ttl) && t.ttl.subsec_nanos() != 0 {
        issues.insert(
            0,
            TimingIssue {
                field: "ttl",
                involved: &["ttl"],
                message: format!(
                    "{} is not a whole number of seconds (NATS per-key TTLs are whole seconds)",
                    fmt_duration(t.ttl)
                ),
            },
        );
    }
    issues
}

/// Checks one server URL by parsing it as the NATS client does
/// ([`async_nats::ServerAddr`]: scheme `nats`, `tls`, `ws` or `wss`, `nats://` assumed when
/// there is none), and then requires a host, a port other than 0, and a port when no scheme
/// is given.
pub(super) fn check_server(server: &str) -> Result<(), String> {
    let describe = |why: String| format!("server {server:?} {why}");
    if server.is_empty() {
        return Err("server URL must not be empty".to_owned());
    }
    if server.chars().any(char::is_whitespace) {
        return Err(describe("contains whitespace".to_owned()));
    }
    let scheme = server.split_once("://").map(|(scheme, _)| scheme);
    let url = match server.parse::<async_nats::ServerAddr>() {
        Ok(addr) => addr.into_inner(),
        Err(_)
            if scheme.is_some_and(|s| {
                !matches!(
                    s.to_ascii_lowercase().as_str(),
                    "nats" | "tls" | "ws" | "wss"
                )
            }) =>
        {
            return Err(describe(format!(
                "has unsupported scheme {:?}; use nats://, tls://, ws:// or wss://",
                scheme.unwrap_or_default()
            )));
        }
        Err(e) => {
            let why = e.to_string();
            let why = why
                .strip_prefix("NATS server URL is invalid: ")
                .unwrap_or(&why);
            return Err(describe(format!("is not a valid server URL: {why}")));
        }
    };
    if url.host_str().is_none_or(str::is_empty) {
        return Err(describe("has no host".to_owned()));
    }
    match url.port() {
        Some(0) => Err(describe("has an invalid port \"0\"".to_owned())),
        None if scheme.is_none() => {
            Err(describe("needs a port (host:port) or a scheme".to_owned()))
        }
        _ => Ok(()),
    }
}

impl Config {
    pub(super) fn collect_problems(&self) -> Vec<Found> {
        let mut p = Problems::default();
        self.check_nats(&mut p);
        self.check_bucket(&mut p);
        self.check_instance(&mut p);
        self.check_timing(&mut p);
        self.check_roles(&mut p);
        self.check_retry(&mut p);
        self.check_health(&mut p);
        self.check_fencing_and_shutdown(&mut p);
        self.check_http(&mut p);
        self.check_telemetry(&mut p);
        self.check_placement(&mut p);
        p.0
    }

    fn check_nats(&self, p: &mut Problems) {
        let nats = &self.nats;
        if nats.servers.is_empty() {
            p.push("nats.servers", "at least one server is required");
        }
        for (i, server) in nats.servers.iter().enumerate() {
            if let Err(why) = check_server(server) {
                p.push(format!("nats.servers[{i}]"), why);
            }
        }
        match (&nats.user, &nats.password) {
            (Some(_), None) => p.push("nats.user", "user is set but password is not"),
            (None, Some(_)) => p.push("nats.password", "password is set but user is not"),
            _ => {}
        }
        let mut methods = Vec::new();
        if nats.creds_file.is_some() {
            methods.push("creds_file");
        }
        if nats.nkey_seed_file.is_some() {
            methods.push("nkey_seed_file");
        }
        if nats.user.is_some() || nats.password.is_some() {
            methods.push("user/password");
        }
        if nats.token.is_some() {
            methods.push("token");
        }
        if methods.len() > 1 {
            p.push_related(
                "nats",
                format!(
                    "more than one authentication method is configured ({}); use at most one",
                    methods.join(", ")
                ),
                methods
                    .iter()
                    .map(|m| format!("nats.{}", m.split('/').next().unwrap_or(m)))
                    .collect(),
            );
        }
        p.at_most("nats.ping_interval", nats.ping_interval, MAX_DURATION);
        p.at_most("nats.connect_timeout", nats.connect_timeout, MAX_DURATION);
        p.at_most("nats.request_timeout", nats.request_timeout, MAX_DURATION);
        match (&nats.tls.cert_file, &nats.tls.key_file) {
            (Some(_), None) => p.push("nats.tls.cert_file", "cert_file is set but key_file is not"),
            (None, Some(_)) => p.push("nats.tls.key_file", "key_file is set but cert_file is not"),
            _ => {}
        }
    }

    fn check_bucket(&self, p: &mut Problems) {
        p.settings(self.bucket_settings().problems());
    }

    fn check_instance(&self, p: &mut Problems) {
        let inst = &self.instance;
        if let Some(zone) = inst.effective_zone()
            && !crate::placement::valid_zone(zone)
        {
            let field = if inst.zone.is_some() {
                "instance.zone"
            } else {
                "instance.meta.zone"
            };
            p.push(
                field,
                format!(
                    "{:?} is not a zone name: 1 to 64 letters, digits, '-', '_' or '.'",
                    shorten(zone)
                ),
            );
        }
        if inst.capacity == Some(0) {
            p.push(
                "instance.capacity",
                "must be at least 1 (leave it out for no limit)",
            );
        }
        if inst.max_roles == Some(0) {
            p.push(
                "instance.max_roles",
                "must be at least 1 (leave it out for no limit)",
            );
        }
        if let Some(Err(e)) = inst
            .version
            .as_deref()
            .map(crate::placement::Version::parse)
        {
            p.push("instance.version", e.to_string());
        }
        let meta = &self.instance.meta;
        if meta.len() > MAX_META_ENTRIES {
            p.push(
                "instance.meta",
                format!(
                    "has {} entries; at most {MAX_META_ENTRIES} are allowed",
                    meta.len()
                ),
            );
        }
        for (key, value) in meta {
            if key.len() > MAX_META_LEN {
                let shown: String = key.chars().take(32).collect();
                p.push(
                    "instance.meta",
                    format!(
                        "key {shown:?}... is {} bytes long; at most {MAX_META_LEN} are allowed",
                        key.len()
                    ),
                );
            } else if value.len() > MAX_META_LEN {
                p.push(
                    format!("instance.meta.{key}"),
                    format!(
                        "value is {} bytes long; at most {MAX_META_LEN} are allowed",
                        value.len()
                    ),
                );
            }
        }
    }

    fn check_timing(&self, p: &mut Problems) {
        for issue in timing_issues(&self.timing) {
            p.push_related(
                format!("timing.{}", issue.field),
                issue.message,
                issue
                    .involved
                    .iter()
                    .map(|f| format!("timing.{f}"))
                    .collect(),
            );
        }
    }

    fn check_roles(&self, p: &mut Problems) {
        let mut first_index: HashMap<&RoleName, usize> = HashMap::new();
        for (i, role) in self.roles.iter().enumerate() {
            if let Some(first) = first_index.get(&role.name) {
                p.push(
                    format!("roles[{i}].name"),
                    format!(
                        "duplicate role name {:?}: roles[{first}] and roles[{i}] have the same name",
                        role.name.as_str()
                    ),
                );
            } else {
                first_index.insert(&role.name, i);
            }
            self.check_role(&format!("roles[{i}]"), role, p);
        }
        self.check_groups(p);
    }

    /// `groups`: unique names, a count from 1 to `MAX_GROUP_COUNT`, member names that are
    /// role names and no member configured as a role too (protocol Q14); each group's role
    /// settings by the rules of a role.
    fn check_groups(&self, p: &mut Problems) {
        use crate::groups::{MAX_GROUP_COUNT, member_index, member_name};
        let mut first_index: HashMap<&RoleName, usize> = HashMap::new();
        for (i, group) in self.groups.iter().enumerate() {
            let name = group.name();
            if let Some(first) = first_index.get(name) {
                p.push(
                    format!("groups[{i}].name"),
                    format!(
                        "duplicate group name {:?}: groups[{first}] and groups[{i}] have the same name",
                        name.as_str()
                    ),
                );
            } else {
                first_index.insert(name, i);
            }
            if !(1..=MAX_GROUP_COUNT).contains(&group.count) {
                p.push(
                    format!("groups[{i}].count"),
                    format!(
                        "{} is out of range: a group has 1 to {MAX_GROUP_COUNT} members",
                        group.count
                    ),
                );
            } else if let Err(e) = member_name(name, group.count - 1) {
                p.push(
                    format!("groups[{i}].name"),
                    format!(
                        "the name of its last member ({name}-{}) {e}: shorten the group's name",
                        group.count - 1
                    ),
                );
            }
            for (j, role) in self.roles.iter().enumerate() {
                // Any index: the group's count record can raise the count to it.
                if let Some(k) = member_index(name, &role.name) {
                    p.push_related(
                        format!("roles[{j}].name"),
                        format!(
                            "{:?} is member {k} of the group {:?} (groups[{i}]): a role is \
                             configured once, as a role or as a group's member (a count record can \
                             raise the group's count to any member)",
                            role.name.as_str(),
                            name.as_str()
                        ),
                        vec![format!("groups[{i}].count")],
                    );
                }
            }
            if group.role.slots > 1 {
                p.push(
                    format!("groups[{i}].slots"),
                    "a group's members have one holder each: slots are for a role (`roles[].slots`)",
                );
            }
            self.check_role(&format!("groups[{i}]"), &group.role, p);
        }
    }

    /// The rules of one role's settings (`at`: where it is written, `roles[2]`, `groups[0]`).
    fn check_role(&self, at: &str, role: &RoleConfig, p: &mut Problems) {
        self.check_role_processes(at, role, p);

        if !(1..=1000).contains(&role.weight) {
            p.push(
                format!("{at}.weight"),
                format!(
                    "{} is out of range: a role's cost must be between 1 and 1000",
                    role.weight
                ),
            );
        }

        if !(1..=super::roles::MAX_SLOTS).contains(&role.slots) {
            p.push(
                format!("{at}.slots"),
                format!(
                    "{} is out of range: a role has 1 slot (the default: one holder) or 2 \
                     to {} slots (that many holders, one slot each)",
                    role.slots,
                    super::roles::MAX_SLOTS
                ),
            );
        }

        // Rules whose fields are all inherited fail (and are reported) for
        // the top-level timing already; report only those an override
        // takes part in.
        let effective = self.timing.with(&role.timing);
        let overrides = |field: &str| role.timing.overrides(field);
        for issue in timing_issues(&effective) {
            let overridden: Vec<&str> = issue
                .involved
                .iter()
                .copied()
                .filter(|f| overrides(f))
                .collect();
            let Some(&first_overridden) = overridden.first() else {
                continue;
            };
            let named = if overrides(issue.field) {
                issue.field
            } else {
                first_overridden
            };
            let mut message = if named == issue.field {
                issue.message
            } else {
                format!("{} {}", issue.field, issue.message)
            };
            message.push_str(&format!(" (role {:?}", role.name.as_str()));
            for f in issue.involved.iter().filter(|f| !overrides(f)) {
                let value = timing_value(&effective, f);
                message.push_str(&format!("; {f} {value} inherited from timing.{f}"));
            }
            message.push(')');
            p.push_related(
                format!("{at}.{named}"),
                message,
                overridden.iter().map(|f| format!("{at}.{f}")).collect(),
            );
        }
    }

    /// `roles[i].exec` and the hooks: a program that exists and is executable (found in
    /// `PATH` for a bare name), sane timeouts, an `exec` child that stops before the lease is
    /// deleted.
    fn check_role_processes(&self, at: &str, role: &RoleConfig, p: &mut Problems) {
        let mut command = |field: String, argv: &[String]| match argv.first() {
            None => p.push(field, "must not be empty"),
            Some(program) => {
                if let Some(problem) = program_problem(program) {
                    p.push(format!("{field}[0]"), problem);
                }
            }
        };
        if let Some(exec) = &role.exec {
            command(format!("{at}.exec.command"), &exec.command);
        }
        let hooks = [
            ("on_promote", &role.on_promote),
            ("on_demote", &role.on_demote),
            ("on_prepare", &role.on_prepare),
        ];
        for (name, hook) in hooks {
            if let Some(h) = hook {
                command(format!("{at}.{name}.command"), &h.command);
            }
        }
        for (name, hook) in hooks {
            if let Some(h) = hook {
                let field = format!("{at}.{name}.timeout");
                if h.timeout.is_zero() {
                    p.push(field, "must be greater than 0s");
                } else {
                    p.at_most(&field, h.timeout, MAX_DURATION);
                }
            }
        }
        let Some(exec) = &role.exec else {
            return;
        };
        if !role.campaign {
            p.push(
                format!("{at}.exec"),
                "an observed role (campaign: false) is never held here, so its command would never run",
            );
        }
        let drain = self.shutdown.drain_timeout;
        if exec.stop_timeout >= drain {
            p.push_related(
                format!("{at}.exec.stop_timeout"),
                format!(
                    "{} must be shorter than shutdown.drain_timeout ({}): a graceful hand-over \
                     waits for the child to be gone before deleting the lease, at most the \
                     drain timeout",
                    fmt_duration(exec.stop_timeout),
                    fmt_duration(drain)
                ),
                vec!["shutdown.drain_timeout".to_owned()],
            );
        }
        if exec.restart_backoff.is_zero() {
            p.push(
                format!("{at}.exec.restart_backoff"),
                "must be greater than 0s",
            );
        }
        p.at_most(
            &format!("{at}.exec.restart_backoff"),
            exec.restart_backoff,
            MAX_DURATION,
        );
        for name in exec.env.keys() {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                p.push(
                    format!("{at}.exec.env"),
                    format!("{name:?} is not a valid environment variable name"),
                );
            }
        }
    }

    fn check_retry(&self, p: &mut Problems) {
        p.settings(self.retry.problems());
    }

    fn check_health(&self, p: &mut Problems) {
        match self.health.command.as_deref() {
            Some([]) => p.push(
                "health.command",
                "must not be empty; omit it to disable health checking",
            ),
            Some([program, ..]) if program.is_empty() => {
                p.push("health.command[0]", "the program must not be empty");
            }
            _ => {}
        }
        p.settings(self.health.policy.problems());
    }

    fn check_fencing_and_shutdown(&self, p: &mut Problems) {
        if let Some(ttl) = self.instance.presence_ttl {
            if ttl < Duration::from_secs(30) {
                p.push(
                    "instance.presence_ttl",
                    "must be at least 30s (the member record is rewritten every third of it)",
                );
            }
            p.at_most("instance.presence_ttl", ttl, MAX_DURATION);
        }
        if self.fencing.validation_interval == Some(Duration::ZERO) {
            p.push(
                "fencing.validation_interval",
                "must be greater than 0s; omit it to disable background validation",
            );
        }
        if let Some(interval) = self.fencing.validation_interval {
            p.at_most("fencing.validation_interval", interval, MAX_DURATION);
        }
        let s = &self.shutdown;
        p.at_most("shutdown.timeout", s.timeout, MAX_DURATION);
        if s.drain_timeout > s.timeout {
            p.push_related(
                "shutdown.drain_timeout",
                format!(
                    "{} must not exceed timeout {}",
                    fmt_duration(s.drain_timeout),
                    fmt_duration(s.timeout)
                ),
                vec!["shutdown.timeout".to_owned()],
            );
        }
    }
}

impl Config {
    /// What the configured timing cannot do over a WAN round trip of `rtt` (or the declared
    /// `nats.round_trip` when `None`): warnings, not errors (docs/operations.md). The
    /// top-level timing is reported under `timing.*`, a role whose overrides break a rule
    /// under `roles[i].*`.
    #[must_use]
    pub fn round_trip_warnings(&self, rtt: Option<Duration>) -> Vec<ConfigProblem> {
        let Some(rtt) = rtt.or(self.nats.round_trip) else {
            return Vec::new();
        };
        let top = round_trip_issues(&self.timing, rtt);
        let mut out: Vec<ConfigProblem> = top
            .iter()
            .map(|(f, m)| ConfigProblem::new(format!("timing.{f}"), m.clone()))
            .collect();
        for (i, role) in self.roles.iter().enumerate() {
            if role.timing == TimingOverrides::default() {
                continue;
            }
            for (f, m) in round_trip_issues(&self.timing.with(&role.timing), rtt) {
                if !top.iter().any(|(tf, tm)| *tf == f && *tm == m) {
                    out.push(ConfigProblem::new(format!("roles[{i}].{f}"), m));
                }
            }
        }
        out
    }

    fn check_placement(&self, p: &mut Problems) {
        p.settings(self.placement.problems());
    }

    fn check_http(&self, p: &mut Problems) {
        let h = &self.http;
        if let Some(listen) = &h.listen
            && let Err(why) = check_listen(listen)
        {
            p.push("http.listen", why);
        }
        if let Some(Err(why)) = h.admin_token.as_deref().map(check_admin_token) {
            p.push("http.admin_token", why);
        }
        if let Some(Err(why)) = h.local_token.as_deref().map(check_admin_token) {
            p.push("http.local_token", why);
        }
    }
}

/// Checks an HTTP listen address: `IP:port` or `[IPv6]:port`.
fn check_listen(listen: &str) -> Result<(), String> {
    listen
        .trim()
        .parse::<std::net::SocketAddr>()
        .map(|_| ())
        .map_err(|_| {
            format!(
                "{} is not an IP:port address (e.g. \"127.0.0.1:8080\", \"0.0.0.0:8080\" \
                 or \"[::1]:8080\"; port 0 picks a free port)",
                shorten(listen)
            )
        })
}

/// Checks an admin bearer token (never echoes it).
pub(super) fn check_admin_token(token: &str) -> Result<(), String> {
    if token.chars().any(char::is_whitespace) {
        return Err("must not contain whitespace".to_owned());
    }
    if token.len() < MIN_ADMIN_TOKEN_LEN {
        return Err(format!(
            "is {} bytes long; at least {MIN_ADMIN_TOKEN_LEN} are required (e.g. `openssl rand \
             -hex 24`)",
            token.len()
        ));
    }
    Ok(())
}

impl Config {
    /// Checks every rule and reports all problems found, not just the first.
    ///
    /// A missing `instance.id` is not a problem here (it is usually given on
    /// the command line); use [`Config::require_instance_id`] once all sources
    /// have been applied. No roles is not a problem either (roles may be added
    /// at runtime).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] listing every problem. The problems carry no
    /// line/column; [`Config::from_yaml_str`] and [`Config::load`] add them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let problems = self.collect_problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(
                problems.into_iter().map(|p| p.problem).collect(),
            ))
        }
    }

    /// This instance's id.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with a problem for `instance.id` when no id was
    /// configured (in YAML, on the command line, or via
    /// `NATS_ROLES_INSTANCE_ID`).
    pub fn require_instance_id(&self) -> Result<&InstanceId, ConfigError> {
        self.instance.id.as_ref().ok_or_else(|| {
            ConfigError::Invalid(vec![ConfigProblem::new(
                "instance.id",
                format!(
                    "no instance id configured; set instance.id, pass it on the command line \
                     or set {ENV_INSTANCE_ID}"
                ),
            )])
        })
    }
}

// The `telemetry` section (its types and endpoint rule are in `telemetry`).
impl Config {
    pub(super) fn check_telemetry(&self, p: &mut Problems) {
        let t = &self.telemetry;
        if t.service_name
            .as_deref()
            .is_some_and(|n| n.trim().is_empty())
        {
            p.push("telemetry.service_name", "must not be empty");
        }
        for (key, value) in &t.resource_attributes {
            if key.trim().is_empty() {
                p.push("telemetry.resource_attributes", "a key is empty");
            }
            if value.chars().any(char::is_control) {
                p.push(
                    format!("telemetry.resource_attributes.{key}"),
                    "the value contains control characters",
                );
            }
        }
        let Some(o) = &t.otlp else {
            return;
        };
        if (o.needs_endpoint() || !o.endpoint.trim().is_empty())
            && let Err(why) = check_endpoint(&o.endpoint)
        {
            p.push("telemetry.otlp.endpoint", why);
        }
        for (field, url) in [
            ("telemetry.otlp.metrics_endpoint", &o.metrics_endpoint),
            ("telemetry.otlp.traces_endpoint", &o.traces_endpoint),
        ] {
            if let Some(Err(why)) = url.as_deref().map(check_endpoint) {
                p.push(field, why);
            }
        }
        if !o.metrics && !o.traces {
            p.push(
                "telemetry.otlp",
                "exports neither metrics nor traces; remove the section or enable one",
            );
        }
        if o.export_interval.is_zero() {
            p.push(
                "telemetry.otlp.export_interval",
                "must be greater than zero",
            );
        }
        if o.timeout.is_zero() {
            p.push("telemetry.otlp.timeout", "must be greater than zero");
        }
        p.at_most(
            "telemetry.otlp.export_interval",
            o.export_interval,
            MAX_DURATION,
        );
        p.at_most("telemetry.otlp.timeout", o.timeout, MAX_DURATION);
        for (name, value) in &o.headers {
            if let Err(why) = check_header(name, value) {
                p.push(format!("telemetry.otlp.headers.{name}"), why);
            }
        }
    }
}
