//! Reading histories: a directory of `*.jsonl` files or a list of files, merged by time.

use std::path::{Path, PathBuf};

use super::event::Record;

/// Why a history could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line other than a file's last one is not a history record.
    #[error("{path}:{line}: not a history record: {message}")]
    BadLine {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// No records at all.
    #[error("no history records in {0}")]
    Empty(String),
}

/// Records read from one or more files.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// Every record, in file order (file by file).
    pub records: Vec<Record>,
    /// Files with a line cut off by a killed node (the last one, or one before a restarted
    /// node's `start`): it was skipped.
    pub truncated: Vec<PathBuf>,
    /// The files read.
    pub files: Vec<PathBuf>,
}

/// Reads the given paths: each directory contributes its `*.jsonl` files (sorted by name).
///
/// # Errors
/// [`LoadError`] when a path cannot be read, a line in the middle of a file is not a record,
/// or nothing was found.
pub fn load_paths(paths: &[PathBuf]) -> Result<Loaded, LoadError> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let entries = std::fs::read_dir(p).map_err(|source| LoadError::Io {
                path: p.clone(),
                source,
            })?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|f| f.extension().is_some_and(|x| x == "jsonl"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    let mut loaded = Loaded::default();
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|source| LoadError::Io {
            path: f.clone(),
            source,
        })?;
        if parse_into(f, &text, &mut loaded)? {
            loaded.truncated.push(f.clone());
        }
    }
    loaded.files = files;
    if loaded.records.is_empty() {
        let names: Vec<_> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(LoadError::Empty(names.join(", ")));
    }
    Ok(loaded)
}

/// Parses one file's text into `out`; returns whether its last line was cut off.
///
/// # Errors
/// [`LoadError::BadLine`] for an unparseable line that is not the last one.
pub fn parse_into(path: &Path, text: &str, out: &mut Loaded) -> Result<bool, LoadError> {
    let lines: Vec<&str> = text.lines().collect();
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    let mut truncated = false;
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(r) => out.records.push(r),
            // A killed process may leave a partial last line (no newline at the end).
            Err(_) if Some(i) == last && !text.ends_with('\n') => truncated = true,
            // ... and a restarted one appends after it (the recorder ends the partial line
            // first), starting with `start`.
            Err(_) if next_is_start(&lines[i + 1..]) => truncated = true,
            Err(e) => {
                return Err(LoadError::BadLine {
                    path: path.to_path_buf(),
                    line: i + 1,
                    message: e.to_string(),
                });
            }
        }
    }
    Ok(truncated)
}

/// Whether the next non-empty line is a node's `start` record.
fn next_is_start(rest: &[&str]) -> bool {
    rest.iter()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str::<Record>(l).ok())
        .is_some_and(|r| matches!(r.event, super::event::Event::Start { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_off_last_line_is_tolerated_but_a_bad_middle_line_is_not() {
        let good = r#"{"mono_ns":1,"src":"node","node":"n1","ev":"stop"}"#;
        let mut out = Loaded::default();
        let text = format!("{good}\n{good}\n{{\"mono_ns\":3,\"src\":\"no");
        assert!(parse_into(Path::new("a"), &text, &mut out).expect("tolerated"));
        assert_eq!(out.records.len(), 2);
        let text = format!("{good}\nnot json\n{good}\n");
        let err = parse_into(Path::new("b"), &text, &mut out).expect_err("bad line");
        assert!(err.to_string().contains("b:2"), "{err}");
        // A complete (newline-terminated) bad last line is bad input, not a truncation.
        let text = format!("{good}\nnot json\n");
        assert!(parse_into(Path::new("c"), &text, &mut out).is_err());
        // A partial line followed by a restarted process's `start` is a truncation.
        let start = r#"{"mono_ns":9,"src":"node","node":"n1","ev":"start"}"#;
        let mut out = Loaded::default();
        let text = format!("{good}\n{{\"mono_ns\":3,\"sr\n{start}\n{good}\n");
        assert!(parse_into(Path::new("d"), &text, &mut out).expect("tolerated"));
        assert_eq!(out.records.len(), 3);
    }

    #[test]
    fn a_directory_is_read_and_an_empty_one_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(matches!(
            load_paths(&[dir.path().to_path_buf()]),
            Err(LoadError::Empty(_))
        ));
        std::fs::write(
            dir.path().join("n1.jsonl"),
            "{\"mono_ns\":1,\"src\":\"node\",\"node\":\"n1\",\"ev\":\"stop\"}\n",
        )
        .expect("write");
        std::fs::write(dir.path().join("notes.txt"), "ignored").expect("write");
        let l = load_paths(&[dir.path().to_path_buf()]).expect("loads");
        assert_eq!(l.records.len(), 1);
        assert_eq!(l.files.len(), 1);
        assert!(matches!(
            load_paths(&[dir.path().join("missing.jsonl")]),
            Err(LoadError::Io { .. })
        ));
    }
}
