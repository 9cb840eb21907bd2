//! NATS contexts of the `nats` command-line tool (`nats context add|select`): the JSON files
//! `$XDG_CONFIG_HOME/nats/context/NAME.json` (default `~/.config/nats/context/`) and the
//! selected context's name in `$XDG_CONFIG_HOME/nats/context.txt`, read by every command that
//! connects (`--context NAME` or `NATS_CONTEXT`). Precedence, lowest first: the defaults, the
//! configuration file, the context, the environment variables, the flags
//! (docs/configuration.md, "NATS contexts").

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::outcome::Failure;
use crate::config::Config;

/// Environment variable naming the context (as `--context`).
pub(crate) const ENV_CONTEXT: &str = "NATS_CONTEXT";

/// Largest context file read, in bytes (the nats tool writes a few hundred).
const MAX_CONTEXT_BYTES: u64 = 64 * 1024;

/// One context file's settings. Fields the nats tool writes that do not change how to connect
/// (`description`, `color_scheme`, `jetstream_event_prefix`, the Windows certificate store
/// selectors, which only apply on Windows) are ignored, as are fields unknown here.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Settings {
    url: Option<String>,
    token: Option<String>,
    user: Option<String>,
    password: Option<String>,
    creds: Option<String>,
    nkey: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    ca: Option<String>,
    jetstream_domain: Option<String>,
    jetstream_api_prefix: Option<String>,
    // Set, these change how the nats tool connects in ways nats-roles does not support: a
    // context that sets one is refused rather than used differently.
    nsc: Option<String>,
    socks_proxy: Option<String>,
    inbox_prefix: Option<String>,
    user_jwt: Option<String>,
    tls_first: Option<bool>,
}

/// A context read from its file.
#[derive(Debug)]
pub(crate) struct NatsContext {
    name: String,
    path: PathBuf,
    settings: Settings,
}

/// A non-empty trimmed value.
fn set(value: Option<&String>) -> Option<&str> {
    value.map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// The folder holding `nats/context.txt` and `nats/context/`: `$XDG_CONFIG_HOME`, else
/// `$HOME/.config` (as the nats tool looks for it).
fn config_home(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|home| Path::new(&home).join(".config")))
}

/// Whether `name` can name a context file: not empty, no path separator, no `..`, no
/// whitespace or control character.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.contains(['/', '\\'])
        || name.contains("..")
        || name.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "invalid NATS context name {name:?} (a file name without path separators, `..` or \
             whitespace)"
        ));
    }
    Ok(())
}

/// The context to use: `explicit` (`--context` or `NATS_CONTEXT`) if given, else, when
/// `use_selected`, the one named in `nats/context.txt` if that file names one; `None` when
/// there is none. `env` reads the environment (`XDG_CONFIG_HOME`, `HOME`, and `$VAR`s in the
/// file's paths).
///
/// # Errors
/// [`Failure::Usage`] for an invalid name, a context that has no file, a file that cannot be
/// read or parsed, or one that sets a field nats-roles does not support.
pub(crate) fn resolve(
    explicit: Option<&str>,
    use_selected: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<NatsContext>, Failure> {
    let explicit = explicit.map(str::trim).filter(|n| !n.is_empty());
    let home = config_home(env);
    let name = match (explicit, &home) {
        (Some(name), _) => name.to_owned(),
        (None, Some(home)) if use_selected => {
            match std::fs::read_to_string(home.join("nats").join("context.txt")) {
                Ok(text) if !text.trim().is_empty() => text.trim().to_owned(),
                _ => return Ok(None),
            }
        }
        (None, _) => return Ok(None),
    };
    let Some(home) = home else {
        return Err(Failure::Usage(format!(
            "NATS context {name:?}: cannot find the contexts (neither XDG_CONFIG_HOME nor HOME \
             is set)"
        )));
    };
    check_name(&name).map_err(Failure::Usage)?;
    let path = home
        .join("nats")
        .join("context")
        .join(format!("{name}.json"));
    let text = read(&path).map_err(|why| {
        let chosen = if explicit.is_some() {
            String::new()
        } else {
            format!(" (selected in {})", home.join("nats/context.txt").display())
        };
        Failure::Usage(format!("NATS context {name:?}{chosen}: {why}"))
    })?;
    let settings: Settings = serde_json::from_str(&text).map_err(|e| {
        Failure::Usage(format!(
            "NATS context {name:?}: {} is not a valid context file: {e}",
            path.display()
        ))
    })?;
    let context = NatsContext {
        name,
        path,
        settings,
    };
    context.check_supported()?;
    Ok(Some(context.expand_paths(env)))
}

/// The text of a context file: a regular file of at most [`MAX_CONTEXT_BYTES`].
fn read(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            format!("no such context ({} does not exist)", path.display())
        }
        _ => format!("cannot read {}: {e}", path.display()),
    })?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if meta.len() > MAX_CONTEXT_BYTES {
        return Err(format!(
            "{} is {} bytes; a context file has at most {MAX_CONTEXT_BYTES}",
            path.display(),
            meta.len()
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

impl NatsContext {
    /// The context's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Refuses a context that sets what nats-roles cannot do as the nats tool would.
    fn check_supported(&self) -> Result<(), Failure> {
        let s = &self.settings;
        let unsupported: Vec<&str> = [
            ("nsc", set(s.nsc.as_ref()).is_some()),
            ("socks_proxy", set(s.socks_proxy.as_ref()).is_some()),
            ("inbox_prefix", set(s.inbox_prefix.as_ref()).is_some()),
            ("user_jwt", set(s.user_jwt.as_ref()).is_some()),
            ("tls_first", s.tls_first == Some(true)),
        ]
        .into_iter()
        .filter_map(|(field, on)| on.then_some(field))
        .collect();
        if unsupported.is_empty() {
            return Ok(());
        }
        Err(Failure::Usage(format!(
            "NATS context {:?} ({}) sets {}, which nats-roles does not support: use another \
             context, or flags",
            self.name,
            self.path.display(),
            unsupported.join(", ")
        )))
    }

    /// The paths with `~/` and `$VAR` / `${VAR}` expanded, as the nats tool expands them.
    fn expand_paths(mut self, env: &dyn Fn(&str) -> Option<String>) -> Self {
        let s = &mut self.settings;
        for path in [
            &mut s.creds,
            &mut s.nkey,
            &mut s.cert,
            &mut s.key,
            &mut s.ca,
        ] {
            if let Some(p) = path.as_mut() {
                *p = expand(p.trim(), env);
            }
        }
        self
    }

    /// Applies the context over `config`: what the context sets replaces the file's value; any
    /// authentication it sets replaces all of the file's; `jetstream_domain` and
    /// `jetstream_api_prefix` replace `bucket.domain` and `nats.jetstream_api_prefix` (each
    /// clearing the other).
    ///
    /// # Errors
    /// [`Failure::Usage`] when the context sets a client certificate without its key (or the
    /// other way round), both a domain and an API prefix, or no server in a set `url`.
    pub(crate) fn apply(&self, config: &mut Config) -> Result<(), Failure> {
        let s = &self.settings;
        let problem = |why: &str| {
            Failure::Usage(format!(
                "NATS context {:?} ({}): {why}",
                self.name,
                self.path.display()
            ))
        };
        let nats = &mut config.nats;
        if let Some(url) = set(s.url.as_ref()) {
            let servers: Vec<String> = url
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect();
            if servers.is_empty() {
                return Err(problem(&format!("url {url:?} names no server")));
            }
            nats.servers = servers;
        }
        let (user, creds, nkey, token) = (
            set(s.user.as_ref()),
            set(s.creds.as_ref()),
            set(s.nkey.as_ref()),
            set(s.token.as_ref()),
        );
        if user.is_some() || creds.is_some() || nkey.is_some() || token.is_some() {
            nats.user = user.map(str::to_owned);
            // A password is kept as written (spaces can be part of it).
            nats.password = user.and(s.password.clone());
            nats.creds_file = creds.map(PathBuf::from);
            nats.nkey_seed_file = nkey.map(PathBuf::from);
            nats.token = token.map(str::to_owned);
        }
        if let Some(ca) = set(s.ca.as_ref()) {
            nats.tls.ca_file = Some(PathBuf::from(ca));
        }
        match (set(s.cert.as_ref()), set(s.key.as_ref())) {
            (Some(cert), Some(key)) => {
                nats.tls.cert_file = Some(PathBuf::from(cert));
                nats.tls.key_file = Some(PathBuf::from(key));
            }
            (None, None) => {}
            (Some(_), None) => return Err(problem("sets cert without key")),
            (None, Some(_)) => return Err(problem("sets key without cert")),
        }
        match (
            set(s.jetstream_domain.as_ref()),
            set(s.jetstream_api_prefix.as_ref()),
        ) {
            (Some(_), Some(_)) => {
                return Err(problem(
                    "sets both jetstream_domain and jetstream_api_prefix",
                ));
            }
            (Some(domain), None) => {
                config.bucket.domain = Some(domain.to_owned());
                config.nats.jetstream_api_prefix = None;
            }
            (None, Some(prefix)) => {
                config.nats.jetstream_api_prefix = Some(prefix.to_owned());
                config.bucket.domain = None;
            }
            (None, None) => {}
        }
        Ok(())
    }
}

/// `path` with a leading `~/` (or a lone `~`) replaced by `$HOME`, and `$VAR` / `${VAR}`
/// replaced by the variable's value (empty when unset), like Go's `os.ExpandEnv`.
fn expand(path: &str, env: &dyn Fn(&str) -> Option<String>) -> String {
    let home = || env("HOME").unwrap_or_default();
    let path = match path.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("{}{rest}", home()),
        _ => path.to_owned(),
    };
    let mut out = String::with_capacity(path.len());
    let mut rest = path.as_str();
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            match braced.split_once('}') {
                Some((name, tail)) => (name, tail),
                None => ("", after),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        if name.is_empty() {
            out.push('$');
            rest = after;
        } else {
            out.push_str(&env(name).unwrap_or_default());
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A context folder in a temporary directory, and the environment pointing at it.
    struct Home {
        dir: tempfile::TempDir,
        vars: HashMap<String, String>,
    }

    impl Home {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("temp dir");
            std::fs::create_dir_all(dir.path().join("nats/context")).expect("context dir");
            let vars = HashMap::from([
                (
                    "XDG_CONFIG_HOME".to_owned(),
                    dir.path().display().to_string(),
                ),
                ("HOME".to_owned(), "/home/op".to_owned()),
                ("SECRETS".to_owned(), "/run/secrets".to_owned()),
            ]);
            Self { dir, vars }
        }

        fn add(&self, name: &str, json: &str) {
            std::fs::write(
                self.dir.path().join(format!("nats/context/{name}.json")),
                json,
            )
            .expect("write context");
        }

        fn select(&self, name: &str) {
            std::fs::write(
                self.dir.path().join("nats/context.txt"),
                format!("{name}\n"),
            )
            .expect("write context.txt");
        }

        fn env(&self) -> impl Fn(&str) -> Option<String> + '_ {
            |name| self.vars.get(name).cloned()
        }

        fn resolve(
            &self,
            explicit: Option<&str>,
            selected: bool,
        ) -> Result<Option<NatsContext>, Failure> {
            resolve(explicit, selected, &self.env())
        }
    }

    fn message(f: Failure) -> String {
        match f {
            Failure::Usage(m) => m,
            Failure::Runtime(m) | Failure::Exit(_, m) => {
                panic!("expected a usage error, got another failure: {m}")
            }
        }
    }

    /// Every field the nats tool writes, as `nats context add` writes them.
    const FULL: &str = r#"{
  "description": "production",
  "url": "nats://n1:4222, nats://n2:4222",
  "socks_proxy": "",
  "token": "",
  "user": "",
  "password": "",
  "creds": "~/keys/ops.creds",
  "nkey": "",
  "cert": "$SECRETS/client.pem",
  "key": "${SECRETS}/client.key",
  "ca": "/etc/nats/ca.pem",
  "nsc": "",
  "jetstream_domain": "hub",
  "jetstream_api_prefix": "",
  "jetstream_event_prefix": "",
  "inbox_prefix": "",
  "user_jwt": "",
  "color_scheme": "",
  "tls_first": false,
  "windows_cert_store": "",
  "windows_cert_match_by": "",
  "windows_cert_match": "",
  "windows_ca_certs_match": null
}"#;

    #[test]
    fn a_full_context_file_sets_servers_credentials_tls_and_domain() {
        let home = Home::new();
        home.add("prod", FULL);
        let context = home
            .resolve(Some("prod"), false)
            .map_err(message)
            .expect("valid")
            .expect("named");
        assert_eq!(context.name(), "prod");
        let mut config = Config::default();
        config.nats.user = Some("from-file".into());
        config.nats.password = Some("pw".into());
        config.nats.jetstream_api_prefix = Some("$JS.other.API".into());
        context
            .apply(&mut config)
            .map_err(message)
            .expect("applies");
        let n = &config.nats;
        assert_eq!(n.servers, ["nats://n1:4222", "nats://n2:4222"]);
        assert_eq!(n.creds_file, Some(PathBuf::from("/home/op/keys/ops.creds")));
        // The file's user and password are replaced by the context's authentication.
        assert_eq!((n.user.as_deref(), n.password.as_deref()), (None, None));
        assert_eq!(
            n.tls.cert_file,
            Some(PathBuf::from("/run/secrets/client.pem"))
        );
        assert_eq!(
            n.tls.key_file,
            Some(PathBuf::from("/run/secrets/client.key"))
        );
        assert_eq!(n.tls.ca_file, Some(PathBuf::from("/etc/nats/ca.pem")));
        assert_eq!(config.bucket.domain.as_deref(), Some("hub"));
        assert_eq!(config.nats.jetstream_api_prefix, None);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn user_password_token_nkey_and_api_prefix() {
        let home = Home::new();
        home.add(
            "u",
            r#"{"url": "nats://a:4222", "user": "ops", "password": " s p "}"#,
        );
        home.add(
            "t",
            r#"{"token": "s3cret", "jetstream_api_prefix": "$JS.hub.API"}"#,
        );
        home.add("k", r#"{"nkey": "/keys/ops.nk"}"#);
        let apply = |name: &str| {
            let mut config = Config::default();
            config.bucket.domain = Some("leaf".into());
            home.resolve(Some(name), false)
                .map_err(message)
                .expect("valid")
                .expect("named")
                .apply(&mut config)
                .map_err(message)
                .expect("applies");
            config
        };
        let u = apply("u");
        assert_eq!(u.nats.user.as_deref(), Some("ops"));
        assert_eq!(u.nats.password.as_deref(), Some(" s p "));
        assert_eq!(u.bucket.domain.as_deref(), Some("leaf"), "not set: kept");
        let t = apply("t");
        assert_eq!(t.nats.token.as_deref(), Some("s3cret"));
        assert_eq!(
            t.nats.servers,
            Config::default().nats.servers,
            "no url: kept"
        );
        assert_eq!(t.nats.jetstream_api_prefix.as_deref(), Some("$JS.hub.API"));
        assert_eq!(t.bucket.domain, None, "the prefix replaces the domain");
        let k = apply("k");
        assert_eq!(k.nats.nkey_seed_file, Some(PathBuf::from("/keys/ops.nk")));
    }

    #[test]
    fn the_selected_context_is_used_only_when_asked_for() {
        let home = Home::new();
        home.add("dev", r#"{"url": "nats://dev:4222"}"#);
        home.add("prod", r#"{"url": "nats://prod:4222"}"#);
        assert!(
            home.resolve(None, true)
                .map_err(message)
                .expect("ok")
                .is_none(),
            "none selected"
        );
        home.select("dev");
        let name = |c: Option<NatsContext>| c.map(|c| c.name().to_owned());
        assert_eq!(
            name(home.resolve(None, true).map_err(message).expect("ok")).as_deref(),
            Some("dev")
        );
        assert_eq!(
            name(home.resolve(None, false).map_err(message).expect("ok")),
            None
        );
        // An explicit name beats the selection.
        assert_eq!(
            name(
                home.resolve(Some("prod"), true)
                    .map_err(message)
                    .expect("ok")
            )
            .as_deref(),
            Some("prod")
        );
        // A blank NATS_CONTEXT is no name.
        assert_eq!(
            name(home.resolve(Some(" "), false).map_err(message).expect("ok")),
            None
        );
        // Without XDG_CONFIG_HOME, $HOME/.config.
        let env = |name: &str| (name == "HOME").then(|| "/home/op".to_owned());
        assert_eq!(config_home(&env), Some(PathBuf::from("/home/op/.config")));
    }

    #[test]
    fn bad_names_missing_files_and_unsupported_fields_are_usage_errors() {
        let home = Home::new();
        for bad in ["../etc/passwd", "a/b", "..", "a b"] {
            let err = message(home.resolve(Some(bad), false).expect_err(bad));
            assert!(err.contains("invalid NATS context name"), "{err}");
        }
        let err = message(home.resolve(Some("nope"), false).expect_err("missing"));
        assert!(err.contains("nope.json does not exist"), "{err}");
        home.select("gone");
        let err = message(home.resolve(None, true).expect_err("selected but missing"));
        assert!(err.contains("\"gone\" (selected in "), "{err}");
        home.add("broken", "{\"url\": ");
        let err = message(home.resolve(Some("broken"), false).expect_err("broken"));
        assert!(err.contains("is not a valid context file"), "{err}");
        home.add(
            "proxy",
            r#"{"url": "nats://a:4222", "socks_proxy": "s:1080", "tls_first": true}"#,
        );
        let err = message(home.resolve(Some("proxy"), false).expect_err("unsupported"));
        assert!(
            err.contains("sets socks_proxy, tls_first, which nats-roles does not support"),
            "{err}"
        );
        home.add("half", r#"{"cert": "/c.pem"}"#);
        let half = home
            .resolve(Some("half"), false)
            .map_err(message)
            .expect("ok")
            .expect("named");
        let err = message(half.apply(&mut Config::default()).expect_err("cert alone"));
        assert!(err.contains("sets cert without key"), "{err}");
        home.add(
            "both",
            r#"{"jetstream_domain": "d", "jetstream_api_prefix": "p"}"#,
        );
        let both = home
            .resolve(Some("both"), false)
            .map_err(message)
            .expect("ok")
            .expect("named");
        let err = message(both.apply(&mut Config::default()).expect_err("both"));
        assert!(
            err.contains("both jetstream_domain and jetstream_api_prefix"),
            "{err}"
        );
    }

    #[test]
    fn paths_expand_like_the_nats_tool() {
        let env = |name: &str| match name {
            "HOME" => Some("/home/op".to_owned()),
            "A" => Some("/a".to_owned()),
            _ => None,
        };
        assert_eq!(expand("~/x", &env), "/home/op/x");
        assert_eq!(expand("~", &env), "/home/op");
        assert_eq!(expand("/~/x", &env), "/~/x");
        assert_eq!(expand("~other/x", &env), "~other/x");
        assert_eq!(expand("$A/b", &env), "/a/b");
        assert_eq!(expand("${A}b", &env), "/ab");
        assert_eq!(expand("$UNSET/b", &env), "/b");
        assert_eq!(expand("a$", &env), "a$");
        assert_eq!(expand("plain", &env), "plain");
    }
}
