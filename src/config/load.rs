//! Reading a configuration: size budget, refusal of files that are not regular files,
//! UTF-8 check and YAML parsing with resource budgets.

use std::io::Read;
use std::path::Path;

use super::locate::tree_locations;
use super::yaml::{parse_options, to_usize};
use super::{Config, ConfigError, MAX_CONFIG_BYTES, check, tree};

/// Keeps serde-saphyr from appending " at line X, column Y" to messages: the
/// location is reported in separate fields.
struct NoLocationSuffix;

impl serde_saphyr::Localizer for NoLocationSuffix {
    fn attach_location<'a>(
        &self,
        base: std::borrow::Cow<'a, str>,
        _location: serde_saphyr::Location,
    ) -> std::borrow::Cow<'a, str> {
        base
    }
}

fn parse_error(err: &serde_saphyr::Error) -> ConfigError {
    let location = err.location();
    let formatter = serde_saphyr::UserMessageFormatter.with_localizer(&NoLocationSuffix);
    ConfigError::Parse {
        line: location.and_then(|l| to_usize(l.line())),
        column: location.and_then(|l| to_usize(l.column())),
        message: err.without_snippet().render_with_formatter(&formatter),
    }
}

/// The configuration is `len` bytes long (or, when `at_least`, longer than that).
fn too_large(len: u64, at_least: bool) -> ConfigError {
    let size = if at_least {
        format!("more than {}", fmt_size(len))
    } else {
        fmt_size(len)
    };
    ConfigError::Parse {
        line: None,
        column: None,
        message: format!(
            "the configuration is {size}; at most {} are accepted",
            fmt_size(MAX_CONFIG_BYTES as u64)
        ),
    }
}

/// `n` bytes, with the size in KiB/MiB/GiB when that is shorter to read.
fn fmt_size(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    match UNITS.iter().find(|(_, unit)| n >= *unit) {
        Some((name, unit)) if n.is_multiple_of(*unit) => format!("{n} bytes ({} {name})", n / unit),
        Some((name, unit)) => format!("{n} bytes ({:.1} {name})", n as f64 / *unit as f64),
        None => format!("{n} bytes"),
    }
}

/// Where the first invalid UTF-8 sequence of `bytes` starts.
fn invalid_utf8(bytes: &[u8], err: &std::str::Utf8Error) -> ConfigError {
    let offset = err.valid_up_to();
    let valid = std::str::from_utf8(bytes.get(..offset).unwrap_or_default()).unwrap_or_default();
    let line = valid.matches('\n').count() + 1;
    let column = valid
        .rsplit('\n')
        .next()
        .map_or(0, |last| last.chars().count())
        + 1;
    let shown: Vec<String> = bytes
        .iter()
        .skip(offset)
        .take(err.error_len().unwrap_or(1).max(1))
        .map(|b| format!("0x{b:02x}"))
        .collect();
    ConfigError::Parse {
        line: Some(line),
        column: Some(column),
        message: format!(
            "the file is not valid UTF-8: invalid byte {} at byte offset {offset}",
            shown.join(" ")
        ),
    }
}

/// What kind of file `file_type` is, for a message refusing it.
fn file_kind(file_type: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if file_type.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading only if it is a regular file (after following symlinks).
///
/// The type is checked with `stat` before opening, so that opening a FIFO without a writer
/// cannot block; the file is opened non-blocking and checked again on the open descriptor, so
/// a file swapped for a FIFO or device in between is refused as well. Returns the file and its
/// size.
fn open_regular(path: &Path) -> Result<(std::fs::File, u64), ConfigError> {
    let io_error = |source| ConfigError::Io {
        path: path.to_owned(),
        source,
    };
    let not_a_file = |file_type| ConfigError::NotAFile {
        path: path.to_owned(),
        kind: file_kind(file_type),
    };
    let meta = std::fs::metadata(path).map_err(io_error)?;
    if !meta.is_file() {
        return Err(not_a_file(meta.file_type()));
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = options.open(path).map_err(io_error)?;
    let meta = file.metadata().map_err(io_error)?;
    if !meta.is_file() {
        return Err(not_a_file(meta.file_type()));
    }
    Ok((file, meta.len()))
}

impl Config {
    /// Parses a YAML configuration and validates it.
    ///
    /// The input is treated as untrusted: it may be at most
    /// [`MAX_CONFIG_BYTES`] long and is parsed with resource budgets (nesting
    /// depth, node, alias and anchor counts, a single document). Unknown and
    /// duplicate keys are rejected; booleans must be spelled `true`/`false`.
    /// An empty document yields the defaults.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] (with line and column where known) when the
    /// input is not YAML at all (syntax, a duplicate key, more than one
    /// document, a resource budget exceeded) or too large;
    /// [`ConfigError::Invalid`] listing every problem of a YAML file at once —
    /// values of the wrong type (what was expected, in words), unknown keys
    /// (with the nearest known name), missing role names, and every broken rule
    /// on the values that are well typed — each with the line and column of
    /// the offending value (or key) in `text`.
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigError> {
        if text.len() > MAX_CONFIG_BYTES {
            return Err(too_large(text.len() as u64, false));
        }
        let tree = tree::parse(text).map_err(|e| parse_error(&e))?;
        let checked = check::check(&tree);
        let locations = tree_locations(&tree);
        if checked.problems.is_empty() {
            // The file fits the schema: read it as the typed configuration (a mismatch
            // between the two is reported as the parser's error).
            let config: Config = serde_saphyr::from_str_with_options(text, parse_options())
                .map_err(|e| parse_error(&e))?;
            let problems = config.collect_problems();
            if problems.is_empty() {
                return Ok(config);
            }
            return Err(ConfigError::Invalid(
                problems
                    .into_iter()
                    .map(|p| p.locate(Some(&locations)))
                    .collect(),
            ));
        }
        // The rules are checked on the values that fit, for problems about them alone.
        let mut problems = checked.problems.clone();
        let fitting = checked
            .fitting
            .clone()
            .and_then(|json| serde_json::from_value::<Config>(json).ok());
        if let Some(config) = fitting {
            for mut found in config.collect_problems() {
                found.renumber(|path| checked.renumber(path));
                if !found.paths().any(|path| checked.is_bad(path)) {
                    problems.push(found.locate(Some(&locations)));
                }
            }
        }
        Err(ConfigError::Invalid(problems))
    }

    /// Reads the YAML file at `path`, parses and validates it (see
    /// [`Config::from_yaml_str`]).
    ///
    /// Only regular files (or symlinks to them) are read: a FIFO, socket,
    /// device or directory is refused before it is opened for reading, so a
    /// pipe without a writer cannot block the caller. A file larger than
    /// [`MAX_CONFIG_BYTES`] is refused from its size, unread.
    ///
    /// # Errors
    /// [`ConfigError::Io`] naming `path` when the file cannot be read;
    /// [`ConfigError::NotAFile`] when it is not a regular file;
    /// [`ConfigError::Parse`] with the size when it is too large, or with the
    /// line, column and byte offset of the first invalid byte when it is not
    /// UTF-8; otherwise as [`Config::from_yaml_str`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let io_error = |source| ConfigError::Io {
            path: path.to_owned(),
            source,
        };
        let (file, len) = open_regular(path)?;
        let limit = MAX_CONFIG_BYTES as u64;
        if len > limit {
            return Err(too_large(len, false));
        }
        let mut bytes = Vec::new();
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(io_error)?;
        if bytes.len() > MAX_CONFIG_BYTES {
            // It grew after it was measured.
            return Err(too_large(limit, true));
        }
        let text = std::str::from_utf8(&bytes).map_err(|e| invalid_utf8(&bytes, &e))?;
        Config::from_yaml_str(text)
    }
}
