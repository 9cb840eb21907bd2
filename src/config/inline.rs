//! Deserializing one YAML map into two typed parts: a `Main` struct (derived `Deserialize`)
//! and an `Extra` part whose keys are written inline in the same map (a role's timing
//! overrides, the health `command` next to the [`HealthPolicy`](crate::health::HealthPolicy)).
//!
//! Unlike `#[serde(flatten)]`, nothing is buffered: every value is deserialized straight from
//! the YAML, so errors keep their line and column, and an unknown key is reported where it is
//! written, with the keys of both parts as the expected ones.

use std::marker::PhantomData;
use std::sync::OnceLock;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// The part of a map deserialized by a derived implementation.
pub(super) trait MainPart<'de>: Sized {
    /// Deserializes the main part from `d` (the derived implementation).
    fn from<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

/// The part of a map whose entries are taken out before the main part sees them.
pub(super) trait Extra<'de> {
    /// Takes the value of `key` from `map` when `key` belongs to this part; `false` otherwise.
    fn take<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error>;
}

/// The field names a derived `Deserialize` of `T` asks for (its `deserialize_struct` call).
pub(super) fn fields<T>(
    from: impl FnOnce(FieldsProbe) -> Result<T, Probed>,
) -> &'static [&'static str] {
    match from(FieldsProbe) {
        Err(Probed(Some(fields))) => fields,
        _ => &[],
    }
}

/// `parts` joined, computed once into `cache`.
pub(super) fn joined(
    cache: &'static OnceLock<Vec<&'static str>>,
    parts: impl FnOnce() -> Vec<&'static [&'static str]>,
) -> &'static [&'static str] {
    cache.get_or_init(|| parts().concat())
}

/// Deserializes `M` from the map `d`, handing the entries `extra` takes to it; `all` is every
/// accepted key (for the unknown-key message).
pub(super) fn split<'de, D, M, X>(
    d: D,
    name: &'static str,
    extra: &mut X,
    all: &'static [&'static str],
) -> Result<M, D::Error>
where
    D: Deserializer<'de>,
    M: MainPart<'de>,
    X: Extra<'de>,
{
    d.deserialize_struct(
        name,
        all,
        SplitVisitor {
            extra,
            all,
            main: PhantomData,
        },
    )
}

/// Deserializes `T` from a map holding only `key` and the next value of `map`.
pub(super) fn one_entry<'de, T: Deserialize<'de>, A: MapAccess<'de>>(
    key: &str,
    map: &mut A,
) -> Result<T, A::Error> {
    T::deserialize(MapAccessDeserializer::new(OneEntry {
        key: Some(key.to_owned()),
        map,
    }))
}

struct OneEntry<'a, A> {
    key: Option<String>,
    map: &'a mut A,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for OneEntry<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.key
            .take()
            .map(|key| seed.deserialize(key.into_deserializer()))
            .transpose()
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

struct SplitVisitor<'x, M, X> {
    extra: &'x mut X,
    all: &'static [&'static str],
    main: PhantomData<M>,
}

impl<'de, M: MainPart<'de>, X: Extra<'de>> Visitor<'de> for SplitVisitor<'_, M, X> {
    type Value = M;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<M, A::Error> {
        M::from(MapAccessDeserializer::new(Split {
            map,
            extra: self.extra,
            all: self.all,
        }))
    }
}

/// The map as the main part sees it: without the entries the extra part took.
struct Split<'x, A, X> {
    map: A,
    extra: &'x mut X,
    all: &'static [&'static str],
}

impl<'de, A: MapAccess<'de>, X: Extra<'de>> MapAccess<'de> for Split<'_, A, X> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        while let Some(key) = self.map.next_key::<String>()? {
            if self.extra.take(&key, &mut self.map)? {
                continue;
            }
            if !self.all.contains(&key.as_str()) {
                return Err(de::Error::unknown_field(&key, self.all));
            }
            return seed.deserialize(key.into_deserializer()).map(Some);
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A deserializer that only records the field names a derived struct asks for.
pub(super) struct FieldsProbe;

/// The end of a [`FieldsProbe`]: the field names, when a struct was asked for.
#[derive(Debug)]
pub(super) struct Probed(Option<&'static [&'static str]>);

impl std::fmt::Display for Probed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field names probed")
    }
}

impl std::error::Error for Probed {}

impl de::Error for Probed {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Probed(None)
    }
}

impl<'de> Deserializer<'de> for FieldsProbe {
    type Error = Probed;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Probed> {
        Err(Probed(None))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Probed> {
        Err(Probed(Some(fields)))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}
