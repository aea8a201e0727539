//! The declared tools of a request, read as far as the dialects' `head`s
//! read them: their names, types and the objects that hold those (an
//! OpenAI `function`, Gemini's `functionDeclarations`). Everything else of
//! a tool (its description, its parameters' JSON schema: nearly all of an
//! agent's tool list, tens of KB that every request carries again) is
//! checked for its JSON syntax and skipped, never built: building it as a
//! `Value` and dropping it was most of a real agent's small request
//! (issue #37: 63 KB bodies of 40 tools and a 20 KB system prompt).
//!
//! As in [`super::openai_chat::item`]: a field loopguard does not read is
//! checked for its syntax only, so a value there that a `Value` cannot
//! hold (nesting past serde_json's 128 levels) no longer makes the request
//! unreadable.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Envelope fields read slim: the declared tools (every dialect's
/// `tools`, OpenAI chat's legacy `functions`).
pub(super) fn is_slim(field: &str) -> bool {
    matches!(field, "tools" | "functions")
}

/// Object keys kept inside a slim field: what a dialect's `head` reads of
/// a tool.
fn kept(key: &str) -> bool {
    matches!(
        key,
        "name" | "type" | "function" | "functionDeclarations" | "function_declarations"
    )
}

/// Reads a value keeping, in objects, only the [`kept`] keys (at every
/// depth), and everything of arrays and scalars.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slim;

impl<'de> DeserializeSeed<'de> for Slim {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Slim {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element_seed(Slim)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if kept(&key) {
                let value = map.next_value_seed(Slim)?;
                out.insert(key.into_owned(), value);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Value::Object(out))
    }
}

/// A value read [`Slim`].
#[derive(Debug)]
pub(super) struct SlimValue(pub Value);

impl<'de> serde::Deserialize<'de> for SlimValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Slim.deserialize(deserializer).map(SlimValue)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;

    fn slim(text: &str) -> Value {
        Slim.deserialize(&mut serde_json::Deserializer::from_str(text))
            .unwrap()
    }

    /// Every dialect's tool shape keeps what its `head` reads, and drops
    /// the descriptions and schemas.
    #[test]
    fn tools_keep_their_names_and_types_only() {
        let tools = r#"[
            {"type":"function","function":{"name":"read","description":"Reads.","parameters":{"type":"object","properties":{"name":{"type":"string"}}}}},
            {"type":"function","name":"write","parameters":{"type":"object"}},
            {"name":"edit","input_schema":{"type":"object"},"description":"d"},
            {"functionDeclarations":[{"name":"ls","parameters":{}}],"function_declarations":[{"name":"cat"}]},
            {"type":"web_search_preview"}, "odd", 1, null, true, -2.5
        ]"#;
        let expected = serde_json::json!([
            {"type":"function","function":{"name":"read"}},
            {"type":"function","name":"write"},
            {"name":"edit"},
            {"functionDeclarations":[{"name":"ls"}],"function_declarations":[{"name":"cat"}]},
            {"type":"web_search_preview"}, "odd", 1, null, true, -2.5
        ]);
        assert_eq!(slim(tools), expected);
    }

    /// An escaped key or value reads as the full read gives it, and a
    /// repeated key keeps its last value, as a `Value` does.
    #[test]
    fn escapes_and_repeated_keys_read_as_a_value_reads_them() {
        let text = r#"{"n\u0061me":"a\"b","name":"c","x":{"deep":[[[1]]]}}"#;
        assert_eq!(slim(text), serde_json::json!({"name":"c"}));
        let text = r#"{"name":"a\"b"}"#;
        assert_eq!(slim(text), serde_json::from_str::<Value>(text).unwrap());
    }

    /// Bad JSON anywhere, skipped parts included, is still an error.
    #[test]
    fn syntax_is_checked_in_skipped_parts() {
        let mut de = serde_json::Deserializer::from_str(r#"{"description":[1,}"#);
        assert!(Slim.deserialize(&mut de).is_err());
    }
}
