//! A role's processes (`roles[].exec`, `roles[].on_promote` / `on_demote` / `on_prepare`):
//! the command run while the role is held and the notification hooks (docs/exec.md).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `roles[].exec`: a command the binary runs while this instance holds the role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecConfig {
    /// The program and its arguments (no shell; write `[sh, -c, "…"]` for one); in YAML a
    /// program without arguments may be written as one string. Required.
    #[serde(deserialize_with = "super::lists::command")]
    pub command: Vec<String>,
    /// Environment variables added to the manager's (after the `NATS_ROLES_*` ones, which
    /// they cannot replace). Default: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The signal a demotion sends first. Default: `SIGTERM`.
    #[serde(default)]
    pub stop_signal: StopSignal,
    /// How long the child may take to exit after the stop signal before its process group is
    /// killed; less than `shutdown.drain_timeout`. Default: `3s`.
    #[serde(default = "default_stop_timeout", with = "humantime_serde")]
    pub stop_timeout: Duration,
    /// What happens when the child exits while the role is held. Default: `release`.
    #[serde(default)]
    pub on_exit: OnExit,
    /// The first delay before a restart (`on_exit: restart`), doubling up to 30 s, and the
    /// cooldown after a release (`on_exit: release`). Default: `1s`.
    #[serde(default = "default_restart_backoff", with = "humantime_serde")]
    pub restart_backoff: Duration,
}

fn default_stop_timeout() -> Duration {
    Duration::from_secs(3)
}

fn default_restart_backoff() -> Duration {
    Duration::from_secs(1)
}

/// What an `exec` role does when its child exits while the role is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OnExit {
    /// Release the role (hand it over), with `restart_backoff` as the cooldown.
    #[default]
    Release,
    /// Keep the role and start the child again after a backoff.
    Restart,
}

/// A hook: a command run on a role's transitions, at most `timeout`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    /// The program and its arguments (as for [`ExecConfig::command`]). Required.
    #[serde(deserialize_with = "super::lists::command")]
    pub command: Vec<String>,
    /// Longest run; the hook's process group is killed then. Default: `10s`.
    #[serde(default = "default_hook_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

fn default_hook_timeout() -> Duration {
    Duration::from_secs(10)
}

/// A signal by name (`SIGTERM` or `TERM`, any case): the ones a program may want to stop on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSignal(i32);

impl Default for StopSignal {
    fn default() -> Self {
        Self(libc::SIGTERM)
    }
}

/// The signals `stop_signal` accepts.
const SIGNALS: [(&str, i32); 8] = [
    ("TERM", libc::SIGTERM),
    ("INT", libc::SIGINT),
    ("HUP", libc::SIGHUP),
    ("QUIT", libc::SIGQUIT),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("WINCH", libc::SIGWINCH),
    ("KILL", libc::SIGKILL),
];

impl StopSignal {
    /// The signal number.
    #[must_use]
    pub fn number(self) -> i32 {
        self.0
    }

    /// The signal's name (`SIGTERM`).
    #[must_use]
    pub fn name(self) -> String {
        let short = SIGNALS
            .iter()
            .find(|(_, n)| *n == self.0)
            .map_or("?", |(s, _)| s);
        format!("SIG{short}")
    }

    /// Parses `SIGTERM`, `TERM` or `term`.
    ///
    /// # Errors
    /// A message listing the accepted names.
    pub fn parse(s: &str) -> Result<Self, String> {
        let upper = s.trim().to_ascii_uppercase();
        let short = upper.strip_prefix("SIG").unwrap_or(&upper);
        SIGNALS
            .iter()
            .find(|(name, _)| *name == short)
            .map(|(_, n)| Self(*n))
            .ok_or_else(|| {
                let names: Vec<String> = SIGNALS.iter().map(|(n, _)| format!("SIG{n}")).collect();
                format!("unknown signal {s:?}; expected one of {}", names.join(", "))
            })
    }
}

impl Serialize for StopSignal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> Deserialize<'de> for StopSignal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Why a program cannot be started, told apart as a shell does: nothing of that name (127) or
/// something that cannot be run (126).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProgramProblem {
    /// No such program: not found in `PATH`, or no file at the path (a shell's 127).
    NotFound(String),
    /// It exists but cannot be run: not a file, not executable, not reachable (a shell's 126).
    NotRunnable(String),
}

impl ProgramProblem {
    /// What is wrong, naming the program as given.
    pub(crate) fn message(&self) -> &str {
        match self {
            Self::NotFound(m) | Self::NotRunnable(m) => m,
        }
    }

    /// The exit status a shell gives such a command: 127 (not found) or 126 (not runnable).
    #[cfg(feature = "cli")]
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Self::NotFound(_) => 127,
            Self::NotRunnable(_) => 126,
        }
    }
}

/// Why a program given by name or path cannot be started, or `None` when it is found and
/// executable. A bare name is looked up in `PATH` (as `execvp` does).
#[must_use]
pub(crate) fn check_program(program: &str) -> Option<ProgramProblem> {
    use std::os::unix::fs::PermissionsExt as _;
    if program.is_empty() {
        return Some(ProgramProblem::NotFound(
            "the program must not be empty".into(),
        ));
    }
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = std::path::Path::new(program);
        return match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Some(ProgramProblem::NotFound(format!("{program:?}: {e}")))
            }
            Err(e) => Some(ProgramProblem::NotRunnable(format!("{program:?}: {e}"))),
            Ok(m) if !m.is_file() => Some(ProgramProblem::NotRunnable(format!(
                "{program:?} is not a file"
            ))),
            Ok(_) if !executable(path) => Some(ProgramProblem::NotRunnable(format!(
                "{program:?} is not executable"
            ))),
            Ok(_) => None,
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|dir| executable(&dir.join(program))) {
        None
    } else {
        Some(ProgramProblem::NotFound(format!(
            "{program:?} was not found in PATH"
        )))
    }
}

/// [`check_program`]'s problem in words (for `validate`).
#[must_use]
pub(crate) fn program_problem(program: &str) -> Option<String> {
    check_program(program).map(|p| p.message().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_parse_by_either_name_and_print_the_long_one() {
        assert_eq!(StopSignal::parse("SIGINT"), Ok(StopSignal(libc::SIGINT)));
        assert_eq!(StopSignal::parse("term"), Ok(StopSignal(libc::SIGTERM)));
        assert_eq!(StopSignal(libc::SIGUSR1).name(), "SIGUSR1");
        let err = StopSignal::parse("SIGSEGV").expect_err("not a stop signal");
        assert!(err.contains("SIGTERM"), "{err}");
    }

    #[test]
    fn programs_are_checked_like_execvp_finds_them() {
        assert_eq!(program_problem("sh"), None);
        assert_eq!(program_problem("/bin/sh"), None);
        let missing = program_problem("no-such-program-here").expect("missing");
        assert!(missing.contains("not found in PATH"), "{missing}");
        let dir = program_problem("/").expect("a directory");
        assert!(dir.contains("not a file"), "{dir}");
        let file = tempfile::NamedTempFile::new().expect("temp file");
        let plain = file.path().to_string_lossy().into_owned();
        let not_exec = program_problem(&plain).expect("not executable");
        assert!(not_exec.contains("not executable"), "{not_exec}");
    }

    #[cfg(feature = "cli")]
    #[test]
    fn programs_that_cannot_start_get_a_shell_s_exit_codes() {
        let code = |p: &str| check_program(p).map(|p| p.exit_code());
        assert_eq!(code("sh"), None);
        assert_eq!(code("no-such-program-here"), Some(127));
        assert_eq!(code("/no/such/program"), Some(127));
        assert_eq!(code(""), Some(127));
        assert_eq!(code("/"), Some(126));
        let file = tempfile::NamedTempFile::new().expect("temp file");
        assert_eq!(code(&file.path().to_string_lossy()), Some(126));
        // A path through a file: ENOTDIR, which a shell reports with 126.
        let through = format!("{}/x", file.path().display());
        assert_eq!(code(&through), Some(126));
    }
}
