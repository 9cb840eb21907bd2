//! Lists that may also be written as one string: `nats.servers` (comma-separated URLs, like
//! `NATS_URL`) and commands (`exec.command`, hooks, `health.command`: the program alone).

use std::fmt;

use serde::Deserializer;
use serde::de::{SeqAccess, Visitor};

/// Reads a list of strings, or one string made into a list by `split`.
struct OneOrMany {
    split: fn(&str) -> Result<Vec<String>, String>,
    expecting: &'static str,
}

impl<'de> Visitor<'de> for OneOrMany {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Vec<String>, E> {
        (self.split)(v).map_err(E::custom)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut out = Vec::new();
        while let Some(item) = seq.next_element::<String>()? {
            out.push(item);
        }
        Ok(out)
    }
}

/// `a, b` → `[a, b]` (empty parts dropped), as `NATS_URL` is read.
pub(super) fn split_servers(s: &str) -> Result<Vec<String>, String> {
    Ok(s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect())
}

/// `prog` → `[prog]`; a string with whitespace is refused (no shell splits it).
pub(super) fn split_command(s: &str) -> Result<Vec<String>, String> {
    if s.contains(char::is_whitespace) {
        return Err(format!(
            "{} has spaces: write the program and its arguments as a list such as \
             `[python3, /opt/job.py]` (no shell; `[sh, -c, \"…\"]` for one)",
            super::message::shorten(s)
        ));
    }
    Ok(vec![s.to_owned()])
}

/// `nats.servers`: a list of URLs or one string of comma-separated URLs.
pub(super) fn servers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_any(OneOrMany {
        split: split_servers,
        expecting: "a list of server URLs or one string of comma-separated URLs",
    })
}

/// A command: a list of the program and its arguments, or the program alone.
pub(super) fn command<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_any(OneOrMany {
        split: split_command,
        expecting: "a list of the program and its arguments, or the program alone",
    })
}

/// An optional command (`health.command`).
pub(super) fn optional_command<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<String>>, D::Error> {
    struct Wrapper(Vec<String>);
    impl<'de> serde::Deserialize<'de> for Wrapper {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            command(d).map(Wrapper)
        }
    }
    Ok(<Option<Wrapper> as serde::Deserialize>::deserialize(d)?.map(|w| w.0))
}
