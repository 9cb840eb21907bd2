//! The configuration as an untyped YAML tree with the line and column of every key and value:
//! what the schema walk (`check`) and the location map (`locate`) read.

use std::fmt;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::yaml::{parse_options, to_usize};

/// A 1-based line and column, when known.
pub(super) type Pos = Option<(usize, usize)>;

/// One YAML value and where it is written.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Node {
    /// The value.
    pub(super) value: Value,
    /// Where it is written (for an alias: where the alias is).
    pub(super) pos: Pos,
    /// A plain scalar resolved to a number, boolean or null as it is spelt in the file
    /// (`0x10`, `+5`, `1.10`): what a text field reads.
    pub(super) raw: Option<String>,
    /// The bytes of the value in the source (its definition, for an alias).
    span: Option<(usize, usize)>,
}

/// One mapping entry: its key (rendered as a string), where the key is written, its value.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    pub(super) key: String,
    pub(super) key_pos: Pos,
    pub(super) value: Node,
}

/// A YAML value as the parser resolved it (YAML 1.2 core schema, strict booleans).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Map(Vec<Entry>),
    Seq(Vec<Node>),
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
}

impl Value {
    /// What this value is, for "found …" in a message.
    pub(super) fn describe(&self) -> String {
        match self {
            Value::Map(_) => "a mapping".to_owned(),
            Value::Seq(_) => "a list".to_owned(),
            Value::Null => "nothing (null)".to_owned(),
            Value::Bool(b) => format!("`{b}`"),
            Value::Int(n) => format!("the number {n}"),
            Value::Float(f) => format!("the number {f}"),
            Value::Str(s) => format!("the string {}", super::message::shorten(s)),
        }
    }

    /// The scalar as text, without its spelling; `None` for null and collections.
    pub(super) fn as_text(&self) -> Option<String> {
        match self {
            Value::Bool(b) => Some(b.to_string()),
            Value::Int(n) => Some(n.to_string()),
            Value::Float(f) => Some(f.to_string()),
            Value::Str(s) => Some(s.clone()),
            Value::Map(_) | Value::Seq(_) | Value::Null => None,
        }
    }
}

fn pos(location: serde_saphyr::Location) -> Pos {
    Some((to_usize(location.line())?, to_usize(location.column())?))
}

fn node(spanned: Spanned<Value>) -> Node {
    let span = spanned.defined.span();
    let span = span
        .byte_offset()
        .zip(span.byte_len())
        .and_then(|(offset, len)| {
            Some((usize::try_from(offset).ok()?, usize::try_from(len).ok()?))
        });
    Node {
        pos: pos(spanned.referenced),
        value: spanned.value,
        raw: None,
        span,
    }
}

impl Node {
    /// The scalar as a text field reads it: its spelling in the file for a plain number or
    /// boolean, the string itself for a string; `None` for null and collections.
    pub(super) fn text(&self) -> Option<String> {
        match (&self.value, &self.raw) {
            (Value::Bool(_) | Value::Int(_) | Value::Float(_), Some(raw)) => Some(raw.clone()),
            (value, _) => value.as_text(),
        }
    }

    /// Fills in `raw` of every scalar other than a string from `text`.
    fn spell(&mut self, text: &str) {
        match &mut self.value {
            Value::Map(entries) => entries.iter_mut().for_each(|e| e.value.spell(text)),
            Value::Seq(items) => items.iter_mut().for_each(|n| n.spell(text)),
            Value::Str(_) => {}
            Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) => {
                self.raw = self
                    .span
                    .and_then(|(offset, len)| text.get(offset..offset.checked_add(len)?))
                    .map(|raw| raw.trim().to_owned())
                    .filter(|raw| !raw.is_empty());
            }
        }
    }
}

/// Parses `text` into a tree, with the budgets of every configuration parse and
/// non-finite floats passed through (`.nan` is the validation's to report).
///
/// # Errors
/// The parser's error: not YAML, more than one document, a budget exceeded, a duplicate key.
pub(super) fn parse(text: &str) -> Result<Node, serde_saphyr::Error> {
    let mut options = parse_options();
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
    let root: Spanned<Value> = serde_saphyr::from_str_with_options(text, options)?;
    let mut root = node(root);
    root.spell(text);
    Ok(root)
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> serde::de::Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }

    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Int(v))
    }

    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Value, E> {
        Ok(i128::try_from(v).map_or(Value::Float(v as f64), Value::Int))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::Str(String::from_utf8_lossy(v).into_owned()))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Value>>()? {
            items.push(node(item));
        }
        Ok(Value::Seq(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<Value>>()? {
            let text = match &key.value {
                Value::Map(_) | Value::Seq(_) => "?".to_owned(),
                Value::Null => "~".to_owned(),
                other => other.as_text().unwrap_or_default(),
            };
            let value: Spanned<Value> = map.next_value()?;
            entries.push(Entry {
                key: text,
                key_pos: pos(key.referenced),
                value: node(value),
            });
        }
        Ok(Value::Map(entries))
    }
}
