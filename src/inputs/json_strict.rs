//! JSON as pplan's input files mean it: one value per key. serde_json keeps the last of two
//! equal keys of an object silently (into a `Value`, and for fields a struct does not name), so
//! a config.json with `"num_hidden_layers"` twice would be read with whichever came last; this
//! walk refuses it, naming the key's path. A UTF-8 byte-order mark, which Windows editors write
//! and JSON's RFC 8259 (section 8.1) lets a parser ignore, is skipped. No IO.

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// The text without a leading byte-order mark, after checking it has no object with a key
/// twice. `Err`: the message ("duplicate key `layers[2].name` at line 9 column 12"), or
/// serde_json's own message when the text is not JSON (the caller's parse reports that one).
pub fn prepare(text: &str) -> Result<&str, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut de = serde_json::Deserializer::from_str(text);
    match (Walk { at: &Seg::Root }).deserialize(&mut de) {
        Ok(()) => Ok(text),
        // Not JSON at all: leave the message to the reader's own parse, which names fields.
        Err(e) if !e.to_string().starts_with(DUPLICATE) => Ok(text),
        Err(e) => Err(e.to_string()),
    }
}

const DUPLICATE: &str = "duplicate key";

/// Where a value is: its parent and its key or index, rendered only for a message (a plan's
/// action lists have millions of elements; no string is built per element).
enum Seg<'p> {
    Root,
    Key(&'p Seg<'p>, &'p str),
    Index(&'p Seg<'p>, usize),
}

impl fmt::Display for Seg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Seg::Root => Ok(()),
            Seg::Key(Seg::Root, k) => write!(f, "{k}"),
            Seg::Key(p, k) => write!(f, "{p}.{k}"),
            Seg::Index(p, i) => write!(f, "{p}[{i}]"),
        }
    }
}

/// Walks a value, knowing where it is.
struct Walk<'p> {
    at: &'p Seg<'p>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut keys: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if keys.contains(&key) {
                return Err(A::Error::custom(format!(
                    "{DUPLICATE} `{}`: a key may appear once in an object (the first value \
                     would be silently replaced); remove one",
                    Seg::Key(self.at, &key)
                )));
            }
            map.next_value_seed(Walk {
                at: &Seg::Key(self.at, &key),
            })?;
            keys.insert(key);
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        while seq
            .next_element_seed(Walk {
                at: &Seg::Index(self.at, i),
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::prepare;

    #[test]
    fn duplicates_are_named_by_path() {
        let e = prepare(r#"{"a": 1, "b": {"c": [1, {"d": 2, "d": 3}]}}"#).unwrap_err();
        assert!(e.starts_with("duplicate key `b.c[1].d`"), "{e}");
        assert!(e.contains("line 1 column"), "{e}");
        let e = prepare("{\"num_hidden_layers\": 2,\n \"num_hidden_layers\": 80}").unwrap_err();
        assert!(e.contains("`num_hidden_layers`"), "{e}");
    }

    #[test]
    fn one_key_each_passes_and_a_bom_is_skipped() {
        assert_eq!(
            prepare("\u{feff}{\"a\": [1, 2]}").unwrap(),
            "{\"a\": [1, 2]}"
        );
        // Equal keys in different objects are fine; not-JSON is left to the caller.
        assert!(prepare(r#"[{"a": 1}, {"a": 2}]"#).is_ok());
        assert_eq!(prepare("not json").unwrap(), "not json");
    }
}
