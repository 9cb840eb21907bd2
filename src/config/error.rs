//! Why a configuration could not be loaded or is invalid.

use std::fmt;
use std::path::PathBuf;

#[cfg(doc)]
use super::Config;

/// One problem of a configuration: a value of the wrong type, an unknown or
/// missing field ([`Config::from_yaml_str`], [`Config::load`]), or a broken rule
/// ([`Config::validate`], [`Config::apply_env`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The offending field as a path, e.g. `roles[2].ttl` or
    /// `timing.heartbeat`, or the name of an environment variable.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
    /// 1-based line in the YAML source the problem points at, when known.
    pub line: Option<usize>,
    /// 1-based column in the YAML source the problem points at, when known.
    pub column: Option<usize>,
}

impl ConfigProblem {
    /// A problem with `field` without a source location.
    #[must_use]
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
            line: None,
            column: None,
        }
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)?;
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, " (line {line}, column {column})"),
            (Some(line), None) => write!(f, " (line {line})"),
            _ => Ok(()),
        }
    }
}

/// Why a configuration could not be loaded or is invalid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The configuration file could not be read (returned by
    /// [`Config::load`]).
    #[error("cannot read configuration file {}: {source}", path.display())]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The configuration path names something other than a regular file (a
    /// FIFO, socket, device or directory); returned by [`Config::load`]
    /// without reading from it.
    #[error("cannot read configuration file {}: it is {kind}, not a regular file", path.display())]
    NotAFile {
        /// The path given.
        path: PathBuf,
        /// What it is instead (e.g. `a FIFO (named pipe)`, `a directory`).
        kind: &'static str,
    },
    /// The input is not valid YAML (or has a duplicate key or several
    /// documents), is too large (the message names its size), is not UTF-8
    /// (line, column and byte offset of the first invalid byte), or exceeds a
    /// parser resource budget (nesting, node or alias counts). Wrong types and
    /// unknown keys of a YAML file are [`ConfigError::Invalid`] problems.
    #[error("{}", display_parse(*line, *column, message))]
    Parse {
        /// 1-based line of the error, when known.
        line: Option<usize>,
        /// 1-based column of the error, when known.
        column: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// The configuration has values of the wrong type, unknown or missing
    /// fields, or breaks one or more rules (returned by [`Config::from_yaml_str`],
    /// [`Config::load`], [`Config::validate`] and [`Config::apply_env`]); lists
    /// every problem found.
    #[error("{}", display_problems(.0))]
    Invalid(Vec<ConfigProblem>),
}

impl ConfigError {
    /// The problems of an [`ConfigError::Invalid`] error; empty for other
    /// kinds.
    #[must_use]
    pub fn problems(&self) -> &[ConfigProblem] {
        match self {
            ConfigError::Invalid(problems) => problems,
            _ => &[],
        }
    }
}

fn display_parse(line: Option<usize>, column: Option<usize>, message: &str) -> String {
    match (line, column) {
        (Some(line), Some(column)) => {
            format!("invalid configuration at line {line}, column {column}: {message}")
        }
        (Some(line), None) => format!("invalid configuration at line {line}: {message}"),
        _ => format!("invalid configuration: {message}"),
    }
}

fn display_problems(problems: &[ConfigProblem]) -> String {
    let mut out = match problems.len() {
        1 => "invalid configuration (1 problem):".to_owned(),
        n => format!("invalid configuration ({n} problems):"),
    };
    for problem in problems {
        out.push_str("\n  ");
        out.push_str(&problem.to_string());
    }
    out
}
