//! The shape of the YAML file, field by field: what the schema walk (`check`) holds a file
//! against to report every type error and unknown field at once, in words. It mirrors the
//! `Deserialize` implementations of the configuration types; a test holds the two together
//! (`config::tests::schema_walk`).

/// What a field's value must be.
#[derive(Debug)]
pub(super) enum Kind {
    /// A mapping with these fields.
    Section(&'static [Field]),
    /// A list of these items; the words name the list ("a list of roles").
    List(&'static Kind, &'static str),
    /// A duration in humantime form (`3s`, `750ms`, `1m 30s`).
    Duration,
    /// `true` or `false`.
    Bool,
    /// A whole number in this range.
    Int(i128, i128),
    /// A number.
    Float,
    /// A single scalar, read as text.
    Text,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// One of these words, or a list of these items (`role_metrics`: `all` or `[a, b]`).
    WordOrList(&'static [&'static str], &'static Kind),
    /// NATS server URLs: a list, or one string of comma-separated URLs (like `NATS_URL`).
    Servers,
    /// A command: the program and its arguments as a list, or the program alone as a string.
    Command,
    /// A mapping of names to text values.
    Table,
    /// A role name (`RoleName`).
    RoleName,
    /// An instance id (`InstanceId`).
    InstanceId,
    /// A stop signal by name (`StopSignal`).
    Signal,
}

/// One field of a section.
#[derive(Debug)]
pub(super) struct Field {
    /// Its name in YAML.
    pub(super) name: &'static str,
    /// What its value must be.
    pub(super) kind: Kind,
    /// `null` is accepted (an `Option`: the same as leaving the field out).
    pub(super) nullable: bool,
    /// The field must be written.
    pub(super) required: bool,
}

const fn f(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        nullable: false,
        required: false,
    }
}

const fn opt(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        nullable: true,
        required: false,
    }
}

const fn req(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        nullable: false,
        required: true,
    }
}

const U32: Kind = Kind::Int(0, u32::MAX as i128);
const I32: Kind = Kind::Int(i32::MIN as i128, i32::MAX as i128);
const USIZE: Kind = Kind::Int(0, usize::MAX as i128);

/// The whole file.
pub(super) const CONFIG: &[Field] = &[
    f("nats", Kind::Section(NATS)),
    f("bucket", Kind::Section(BUCKET)),
    f("instance", Kind::Section(INSTANCE)),
    f("timing", Kind::Section(TIMING)),
    f("retry", Kind::Section(RETRY)),
    f("health", Kind::Section(HEALTH)),
    f("fencing", Kind::Section(FENCING)),
    f("shutdown", Kind::Section(SHUTDOWN)),
    f("http", Kind::Section(HTTP)),
    f("telemetry", Kind::Section(TELEMETRY)),
    f("placement", Kind::Section(PLACEMENT)),
    f("roles", Kind::List(&Kind::Section(ROLE), "a list of roles")),
    f(
        "groups",
        Kind::List(&Kind::Section(GROUP), "a list of role groups"),
    ),
];

pub(super) const NATS: &[Field] = &[
    f("servers", Kind::Servers),
    opt("name", Kind::Text),
    opt("creds_file", Kind::Text),
    opt("nkey_seed_file", Kind::Text),
    opt("user", Kind::Text),
    opt("password", Kind::Text),
    opt("token", Kind::Text),
    f("tls", Kind::Section(TLS)),
    f("ping_interval", Kind::Duration),
    f("connect_timeout", Kind::Duration),
    f("request_timeout", Kind::Duration),
    opt("jetstream_api_prefix", Kind::Text),
    opt("round_trip", Kind::Duration),
];

pub(super) const TLS: &[Field] = &[
    f("required", Kind::Bool),
    opt("ca_file", Kind::Text),
    opt("cert_file", Kind::Text),
    opt("key_file", Kind::Text),
];

pub(super) const BUCKET: &[Field] = &[
    f("name", Kind::Text),
    f("replicas", USIZE),
    f("auto_create", Kind::Bool),
    opt("domain", Kind::Text),
];

pub(super) const INSTANCE: &[Field] = &[
    opt("id", Kind::InstanceId),
    f("priority", I32),
    opt("zone", Kind::Text),
    opt("capacity", U32),
    opt("max_roles", U32),
    opt("version", Kind::Text),
    opt("presence_ttl", Kind::Duration),
    f("meta", Kind::Table),
];

pub(super) const TIMING: &[Field] = &[
    f("ttl", Kind::Duration),
    f("heartbeat", Kind::Duration),
    f("deadline_margin", Kind::Float),
    f("operation_timeout", Kind::Duration),
    f("disconnect_grace", Kind::Duration),
    f("campaign_jitter", Kind::Duration),
];

pub(super) const RETRY: &[Field] = &[
    f("initial_backoff", Kind::Duration),
    f("max_backoff", Kind::Duration),
    f("multiplier", Kind::Float),
    f("jitter", Kind::Float),
    f("max_attempts", U32),
    f("persistent_interval", Kind::Duration),
];

pub(super) const HEALTH: &[Field] = &[
    opt("command", Kind::Command),
    f("interval", Kind::Duration),
    f("timeout", Kind::Duration),
    f("failure_threshold", U32),
    f("cooldown", Kind::Duration),
];

pub(super) const FENCING: &[Field] = &[opt("validation_interval", Kind::Duration)];

pub(super) const SHUTDOWN: &[Field] = &[
    f("timeout", Kind::Duration),
    f("drain_timeout", Kind::Duration),
];

pub(super) const HTTP: &[Field] = &[
    f("enabled", Kind::Bool),
    opt("listen", Kind::Text),
    opt("admin_token", Kind::Text),
    opt("local_token", Kind::Text),
];

pub(super) const TELEMETRY: &[Field] = &[
    f("log_format", Kind::Choice(&["text", "json"])),
    opt("service_name", Kind::Text),
    f("resource_attributes", Kind::Table),
    opt("otlp", Kind::Section(OTLP)),
    f(
        "role_metrics",
        Kind::WordOrList(
            &crate::metrics::RoleSeries::WORDS,
            &Kind::List(&Kind::RoleName, "a list of role names"),
        ),
    ),
];

pub(super) const OTLP: &[Field] = &[
    f("endpoint", Kind::Text),
    opt("metrics_endpoint", Kind::Text),
    opt("traces_endpoint", Kind::Text),
    opt("protocol", Kind::Choice(&["http/protobuf", "http/json"])),
    f("metrics", Kind::Bool),
    f("traces", Kind::Bool),
    f("export_interval", Kind::Duration),
    f("timeout", Kind::Duration),
    f("headers", Kind::Table),
];

pub(super) const PLACEMENT: &[Field] = &[
    f("enabled", Kind::Bool),
    f("weight", U32),
    f("stability_window", Kind::Duration),
    f("leave_delay", Kind::Duration),
    f("claim_grace", Kind::Duration),
    f("cooldown", Kind::Duration),
    f("move_budget", U32),
    f("move_interval", Kind::Duration),
    f("hysteresis", U32),
    f("draining", Kind::Bool),
    f("prepare_timeout", Kind::Duration),
    f("frozen", Kind::Bool),
    opt("member_ttl", Kind::Duration),
];

/// A section of every setting of a role after `$first` (the fields before them): its own
/// fields, then the timing overrides written inline. `roles` and `groups` entries share it.
macro_rules! role_entry {
    ($($first:expr),*) => {
        &[
            $($first,)*
            opt("description", Kind::Text),
            f("campaign", Kind::Bool),
            opt("priority", I32),
            f("takeover", Kind::Choice(&["voluntary", "never"])),
            f("weight", U32),
            f("slots", U32),
            opt("exec", Kind::Section(EXEC)),
            opt("on_promote", Kind::Section(HOOK)),
            opt("on_demote", Kind::Section(HOOK)),
            opt("on_prepare", Kind::Section(HOOK)),
            opt("ttl", Kind::Duration),
            opt("heartbeat", Kind::Duration),
            opt("deadline_margin", Kind::Float),
            opt("operation_timeout", Kind::Duration),
            opt("disconnect_grace", Kind::Duration),
            opt("campaign_jitter", Kind::Duration),
        ]
    };
}

/// One entry of `roles`: its name, then every role setting.
pub(super) const ROLE: &[Field] = role_entry!(req("name", Kind::RoleName));

/// One entry of `groups`: its name and count, then every role setting.
pub(super) const GROUP: &[Field] = role_entry!(req("name", Kind::RoleName), req("count", U32));

pub(super) const EXEC: &[Field] = &[
    req("command", Kind::Command),
    f("env", Kind::Table),
    f("stop_signal", Kind::Signal),
    f("stop_timeout", Kind::Duration),
    f("on_exit", Kind::Choice(&["release", "restart"])),
    f("restart_backoff", Kind::Duration),
];

pub(super) const HOOK: &[Field] = &[req("command", Kind::Command), f("timeout", Kind::Duration)];

impl Kind {
    /// What a value of this kind is, in words.
    pub(super) fn words(&self) -> String {
        match self {
            Kind::Section(fields) => {
                let names: Vec<&str> = fields.iter().take(3).map(|f| f.name).collect();
                format!("a mapping of settings ({}, …)", names.join(", "))
            }
            Kind::List(_, words) => (*words).to_owned(),
            Kind::Duration => "a duration such as `3s` or `750ms`".to_owned(),
            Kind::Bool => "true or false".to_owned(),
            Kind::Int(0, max) if *max > u32::MAX.into() => "a whole number, 0 or more".to_owned(),
            Kind::Int(min, max) => format!("a whole number from {min} to {max}"),
            Kind::Float => "a number such as `0.1`".to_owned(),
            Kind::Text => "a single value (text, not a list or mapping)".to_owned(),
            Kind::Choice(words) => {
                let quoted: Vec<String> = words.iter().map(|w| format!("`{w}`")).collect();
                format!("one of {}", quoted.join(", "))
            }
            Kind::WordOrList(words, list) => {
                let quoted: Vec<String> = words.iter().map(|w| format!("`{w}`")).collect();
                format!("one of {}, or {}", quoted.join(", "), list.words())
            }
            Kind::Servers => {
                "a list of server URLs such as `[nats://nats-1:4222, nats://nats-2:4222]` \
                 (or one string of comma-separated URLs)"
                    .to_owned()
            }
            Kind::Command => "a command: a list of the program and its arguments such as \
                 `[python3, /opt/job.py]` (no shell; `[sh, -c, \"…\"]` for one), or the \
                 program alone as one string"
                .to_owned(),
            Kind::Table => "a mapping of names to values".to_owned(),
            Kind::RoleName => "a role name".to_owned(),
            Kind::InstanceId => "an instance id".to_owned(),
            Kind::Signal => "a signal name such as `SIGTERM`".to_owned(),
        }
    }
}
