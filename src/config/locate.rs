//! Where values are written in a YAML document, to give problems a line and column.

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;

use super::yaml::{parse_options, to_usize};

/// Line and column of every value in a YAML document, by path
/// (`roles[2].ttl`, `nats.servers[0]`, ...).
pub(super) struct LocationMap(HashMap<String, (usize, usize)>);

impl LocationMap {
    /// The location of `field`, else of the first of `related` present, else
    /// of the nearest enclosing value of `field` (other than the document).
    pub(super) fn find(&self, field: &str, related: &[String]) -> Option<(usize, usize)> {
        if let Some(loc) = std::iter::once(field)
            .chain(related.iter().map(String::as_str))
            .find_map(|path| self.0.get(path))
        {
            return Some(*loc);
        }
        let mut path = field;
        while let Some(end) = path.rfind(['.', '[']) {
            path = path.get(..end).unwrap_or_default();
            if let Some(loc) = self.0.get(path) {
                return Some(*loc);
            }
        }
        None
    }
}

/// A YAML node with the locations of its children, used only to find where
/// values are written.
enum Node {
    Map(Vec<(String, serde_saphyr::Spanned<Node>)>),
    Seq(Vec<serde_saphyr::Spanned<Node>>),
    Scalar,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

macro_rules! visit_scalars {
    ($($name:ident: $t:ty),*) => {
        $(
            fn $name<E: serde::de::Error>(self, _: $t) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
        )*
    };
}

impl<'de> serde::de::Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    visit_scalars!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_i128: i128,
        visit_u128: u128, visit_f64: f64, visit_str: &str, visit_bytes: &[u8]);

    fn visit_unit<E: serde::de::Error>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(Key(key)) = map.next_key()? {
            entries.push((key, map.next_value()?));
        }
        Ok(Node::Map(entries))
    }
}

/// A mapping key rendered as a string (non-scalar keys become `?`).
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping key")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_owned()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Key, E> {
                Ok(Key("~".to_owned()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Key, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Key("?".to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Key, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Key("?".to_owned()))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}

fn record(
    node: &serde_saphyr::Spanned<Node>,
    path: &mut String,
    out: &mut HashMap<String, (usize, usize)>,
) {
    let loc = node.referenced;
    if let (Some(line), Some(column)) = (to_usize(loc.line()), to_usize(loc.column())) {
        out.entry(path.clone()).or_insert((line, column));
    }
    let len = path.len();
    match &node.value {
        Node::Map(entries) => {
            for (key, child) in entries {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                record(child, path, out);
                path.truncate(len);
            }
        }
        Node::Seq(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push_str(&format!("[{i}]"));
                record(child, path, out);
                path.truncate(len);
            }
        }
        Node::Scalar => {}
    }
}

/// Locations of the values in `text`, or `None` if it cannot be parsed as a
/// generic YAML tree.
pub(super) fn source_locations(text: &str) -> Option<LocationMap> {
    // The tree is typeless: let `.nan` / `.inf` through so that a validation problem about
    // them (e.g. `deadline_margin: .nan`) still gets its line and column.
    let mut options = parse_options();
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
    let root: serde_saphyr::Spanned<Node> =
        serde_saphyr::from_str_with_options(text, options).ok()?;
    let mut out = HashMap::new();
    record(&root, &mut String::new(), &mut out);
    // The document itself is never a useful location.
    out.remove("");
    Some(LocationMap(out))
}
