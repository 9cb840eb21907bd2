//! Where values are written in a YAML document, to give problems a line and column.

use std::collections::HashMap;

use super::tree::{Node, Value};

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

fn record(node: &Node, path: &mut String, out: &mut HashMap<String, (usize, usize)>) {
    if let Some(loc) = node.pos {
        out.entry(path.clone()).or_insert(loc);
    }
    let len = path.len();
    match &node.value {
        Value::Map(entries) => {
            for entry in entries {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&entry.key);
                record(&entry.value, path, out);
                path.truncate(len);
            }
        }
        Value::Seq(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push_str(&format!("[{i}]"));
                record(child, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Locations of the values in `tree`, by path.
pub(super) fn tree_locations(tree: &Node) -> LocationMap {
    let mut out = HashMap::new();
    record(tree, &mut String::new(), &mut out);
    // The document itself is never a useful location.
    out.remove("");
    LocationMap(out)
}
