//! The schema walk: holds the YAML tree against the schema and reports every type error,
//! unknown field and missing required field at once, each with its path, line and column;
//! and builds from the values that fit a JSON value the typed configuration can be read
//! from, so that the semantic rules can be checked on the rest of the file too.

use serde_json::{Map, Value as Json};

use super::ConfigProblem;
use super::exec::StopSignal;
use super::message::name_message;
use super::schema::{CONFIG, Field, Kind};
use super::suggest::nearest;
use super::tree::{Node, Pos, Value};
use crate::names::{InstanceId, RoleName};

/// What the walk found.
#[derive(Debug, Default)]
pub(super) struct Checked {
    /// Every problem, in document order.
    pub(super) problems: Vec<ConfigProblem>,
    /// The values that fit, with the bad ones left out; `None` when the document itself is
    /// not a mapping.
    pub(super) fitting: Option<Json>,
    /// The paths of the values left out (what semantic problems must not be about).
    pub(super) bad: Vec<String>,
    /// Lists from which items were left out: the list's path and, for each kept item, its
    /// index in the file.
    pub(super) kept: Vec<(String, Vec<usize>)>,
}

impl Checked {
    /// `path` (in the numbering of [`Checked::fitting`]) in the numbering of the file.
    pub(super) fn renumber(&self, path: &str) -> String {
        if self.kept.is_empty() {
            return path.to_owned();
        }
        let mut out = String::with_capacity(path.len());
        let mut rest = path;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('[')
                && let Some((index, tail)) = after.split_once(']')
                && let Ok(i) = index.parse::<usize>()
            {
                let i = self
                    .kept
                    .iter()
                    .find(|(list, _)| *list == out)
                    .and_then(|(_, kept)| kept.get(i).copied())
                    .unwrap_or(i);
                out.push_str(&format!("[{i}]"));
                rest = tail;
                continue;
            }
            let end = rest
                .char_indices()
                .skip(1)
                .find(|(_, c)| matches!(c, '.' | '['))
                .map_or(rest.len(), |(i, _)| i);
            out.push_str(rest.get(..end).unwrap_or_default());
            rest = rest.get(end..).unwrap_or_default();
        }
        out
    }

    /// Whether `path` (in the file's numbering) is a left-out value or inside one.
    pub(super) fn is_bad(&self, path: &str) -> bool {
        self.bad.iter().any(|bad| {
            path == bad
                || path
                    .strip_prefix(bad.as_str())
                    .is_some_and(|rest| rest.starts_with(['.', '[']))
        })
    }
}

/// Walks `tree` against the schema of the whole file.
pub(super) fn check(tree: &Node) -> Checked {
    let mut walk = Checked::default();
    walk.fitting = match &tree.value {
        // An empty document is the default configuration.
        Value::Null => Some(Json::Object(Map::new())),
        Value::Map(_) => walk.section(tree, CONFIG, "", "the configuration"),
        other => {
            walk.report(
                "(the file)",
                format!(
                    "expected a mapping of sections (nats, bucket, timing, roles, …), found {}",
                    other.describe()
                ),
                tree.pos,
            );
            None
        }
    };
    walk
}

/// `text` read as one YAML scalar of type `T` by the parser the typed configuration is read
/// with, when it looks like a number at all (so that no other YAML syntax is parsed).
fn as_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Option<T> {
    let text = text.trim();
    let number_like = !text.is_empty()
        && text.len() <= 64
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.' | '_'));
    if !number_like {
        return None;
    }
    serde_saphyr::from_str_with_options(text, super::yaml::parse_options()).ok()
}

/// The whole number a field of integer type reads from `node`: a plain or quoted integer in
/// any YAML spelling (`3`, `"3"`, `0x10`, `1_000`); `unsigned` fields refuse a minus sign
/// (even `-0`).
fn whole(node: &Node, unsigned: bool) -> Option<i128> {
    let text = match (&node.value, &node.raw) {
        (Value::Int(_), Some(raw)) => raw.clone(),
        (Value::Int(n), None) => return Some(*n),
        (Value::Str(s), _) => s.clone(),
        _ => return None,
    };
    if unsigned && text.trim_start().starts_with('-') {
        return None;
    }
    as_yaml(&text)
}

/// The number a field of float type reads from `node`: a plain or quoted number
/// (`0.5`, `"0.5"`, `3`, `.nan`; not `0x10` or `1e400`).
fn number(node: &Node) -> Option<f64> {
    match (&node.value, &node.raw) {
        (Value::Float(_) | Value::Int(_), Some(raw)) => as_yaml(raw),
        (Value::Float(x), None) => Some(*x),
        (Value::Int(n), None) => Some(*n as f64),
        (Value::Str(s), _) => as_yaml(s),
        _ => None,
    }
}

/// `parent.name`, or `name` at the top.
fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}.{name}")
    }
}

fn at(problem: &mut ConfigProblem, pos: Pos) {
    if let Some((line, column)) = pos {
        problem.line = Some(line);
        problem.column = Some(column);
    }
}

impl Checked {
    fn report(&mut self, path: &str, message: String, pos: Pos) {
        let mut problem = ConfigProblem::new(path, message);
        at(&mut problem, pos);
        self.problems.push(problem);
    }

    /// The wrong kind of value at `path`.
    fn mismatch(&mut self, path: &str, kind: &Kind, node: &Node) -> Option<Json> {
        self.report(
            path,
            format!("expected {}, found {}", kind.words(), node.value.describe()),
            node.pos,
        );
        self.bad.push(path.to_owned());
        None
    }

    /// A value of `kind` at `path`, or `None` (reported) when it does not fit.
    fn value(&mut self, node: &Node, kind: &Kind, path: &str) -> Option<Json> {
        match kind {
            Kind::Section(fields) => self.section(node, fields, path, path),
            Kind::List(item, _) => {
                let Value::Seq(items) = &node.value else {
                    return self.mismatch(path, kind, node);
                };
                let mut out = Vec::new();
                let mut kept = Vec::new();
                for (i, child) in items.iter().enumerate() {
                    if let Some(v) = self.value(child, item, &format!("{path}[{i}]")) {
                        out.push(v);
                        kept.push(i);
                    }
                }
                if kept.len() < items.len() {
                    self.kept.push((path.to_owned(), kept));
                }
                Some(Json::Array(out))
            }
            Kind::Duration => match node.text() {
                Some(text) if humantime::parse_duration(&text).is_ok() => Some(Json::String(text)),
                _ => self.mismatch(path, kind, node),
            },
            // A quoted `"true"` is read as the boolean too.
            Kind::Bool => match &node.value {
                Value::Bool(b) => Some(Json::Bool(*b)),
                Value::Str(s) if s == "true" || s == "false" => Some(Json::Bool(s == "true")),
                _ => self.mismatch(path, kind, node),
            },
            Kind::Int(min, max) => match whole(node, *min >= 0) {
                Some(n) if (*min..=*max).contains(&n) => {
                    let number = u64::try_from(n).map_or_else(
                        |_| i64::try_from(n).ok().map(serde_json::Number::from),
                        |n| Some(serde_json::Number::from(n)),
                    );
                    number.map(Json::Number)
                }
                _ => self.mismatch(path, kind, node),
            },
            Kind::Float => match number(node) {
                // Non-finite values are the validation's to report (JSON cannot hold them):
                // left out of what the rules are checked on, not reported here.
                Some(x) => serde_json::Number::from_f64(x).map(Json::Number),
                None => self.mismatch(path, kind, node),
            },
            Kind::Text => match node.text() {
                Some(text) => Some(Json::String(text)),
                None => self.mismatch(path, kind, node),
            },
            Kind::Choice(words) => match node.text() {
                Some(text) if words.contains(&text.as_str()) => Some(Json::String(text)),
                _ => self.mismatch(path, kind, node),
            },
            Kind::WordOrList(words, list) => match &node.value {
                Value::Seq(_) => self.value(node, list, path),
                _ => match node.text() {
                    Some(text) if words.contains(&text.as_str()) => Some(Json::String(text)),
                    Some(text) => {
                        let hint = nearest(&text, words.iter().copied())
                            .map(|near| format!("; did you mean `{near}`?"))
                            .unwrap_or_default();
                        self.report(
                            path,
                            format!(
                                "expected {}, found {}{hint}",
                                kind.words(),
                                node.value.describe()
                            ),
                            node.pos,
                        );
                        self.bad.push(path.to_owned());
                        None
                    }
                    None => self.mismatch(path, kind, node),
                },
            },
            Kind::Servers => match &node.value {
                Value::Str(s) => Some(Json::Array(
                    s.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(|s| Json::String(s.to_owned()))
                        .collect(),
                )),
                Value::Seq(_) => self.texts(node, kind, path),
                _ => self.mismatch(path, kind, node),
            },
            Kind::Command => match &node.value {
                Value::Str(s) if s.trim() != s.as_str() || s.contains(char::is_whitespace) => {
                    self.report(
                        path,
                        format!(
                            "{} has spaces: write the program and its arguments as a list \
                             such as `[python3, /opt/job.py]` (no shell; `[sh, -c, \"…\"]` \
                             for one)",
                            super::message::shorten(s)
                        ),
                        node.pos,
                    );
                    self.bad.push(path.to_owned());
                    None
                }
                Value::Str(s) => Some(Json::Array(vec![Json::String(s.clone())])),
                Value::Seq(_) => self.texts(node, kind, path),
                _ => self.mismatch(path, kind, node),
            },
            Kind::Table => {
                let Value::Map(entries) = &node.value else {
                    return self.mismatch(path, kind, node);
                };
                let mut out = Map::new();
                for entry in entries {
                    let child = join(path, &entry.key);
                    if let Some(v) = self.value(&entry.value, &Kind::Text, &child) {
                        out.insert(entry.key.clone(), v);
                    }
                }
                Some(Json::Object(out))
            }
            Kind::RoleName | Kind::InstanceId | Kind::Signal => {
                let Some(text) = node.text() else {
                    return self.mismatch(path, kind, node);
                };
                let refused = match kind {
                    Kind::RoleName => RoleName::new(text.as_str())
                        .err()
                        .map(|e| name_message("role name", &text, &e)),
                    Kind::InstanceId => InstanceId::new(text.as_str())
                        .err()
                        .map(|e| name_message("instance id", &text, &e)),
                    _ => StopSignal::parse(&text).err(),
                };
                match refused {
                    None => Some(Json::String(text)),
                    Some(message) => {
                        self.report(path, message, node.pos);
                        self.bad.push(path.to_owned());
                        None
                    }
                }
            }
        }
    }

    /// A list of text values (server URLs, a command's words).
    fn texts(&mut self, node: &Node, kind: &Kind, path: &str) -> Option<Json> {
        let Value::Seq(items) = &node.value else {
            return self.mismatch(path, kind, node);
        };
        let mut out = Vec::new();
        let mut fits = true;
        for (i, item) in items.iter().enumerate() {
            match self.value(item, &Kind::Text, &format!("{path}[{i}]")) {
                Some(v) => out.push(v),
                None => fits = false,
            }
        }
        if fits {
            Some(Json::Array(out))
        } else {
            // A command or server list with a hole in it means something else: leave it out.
            self.bad.push(path.to_owned());
            None
        }
    }

    /// A mapping with `fields` at `path` (`what` names it in messages).
    fn section(
        &mut self,
        node: &Node,
        fields: &'static [Field],
        path: &str,
        what: &str,
    ) -> Option<Json> {
        let Value::Map(entries) = &node.value else {
            return self.mismatch(path, &Kind::Section(fields), node);
        };
        let mut out = Map::new();
        let mut complete = true;
        for entry in entries {
            let child = join(path, &entry.key);
            let Some(field) = fields.iter().find(|f| f.name == entry.key) else {
                let names = fields.iter().map(|f| f.name);
                let hint = match nearest(&entry.key, names.clone()) {
                    Some(near) => format!("; did you mean `{near}`?"),
                    None => format!(
                        "; the fields here are {}",
                        names.collect::<Vec<_>>().join(", ")
                    ),
                };
                let key = super::message::shorten(&entry.key);
                let key = key.trim_matches('"');
                self.report(
                    &child,
                    format!("unknown field `{key}` in {what}{hint}"),
                    entry.key_pos,
                );
                continue;
            };
            if field.nullable && entry.value.value == Value::Null {
                continue;
            }
            match self.value(&entry.value, &field.kind, &child) {
                Some(v) => {
                    out.insert(entry.key.clone(), v);
                }
                None => complete &= !field.required,
            }
        }
        for field in fields.iter().filter(|f| f.required) {
            if !entries.iter().any(|e| e.key == field.name) {
                self.report(
                    &join(path, field.name),
                    format!(
                        "the required field `{}` is missing in {what} (expected {})",
                        field.name,
                        field.kind.words()
                    ),
                    node.pos,
                );
                complete = false;
            }
        }
        if complete {
            Some(Json::Object(out))
        } else {
            self.bad.push(path.to_owned());
            None
        }
    }
}
