//! The typed form of a response payload (a `chat.completion.chunk`, or a
//! whole `chat.completion`): the fields [`super::ResponseParser`] reads,
//! borrowed from the payload where they need no unescaping, every other
//! field skipped unbuilt.
//!
//! Read strictly: a field of another type than the usual one (an `index`
//! that is a string, `tool_calls` that is an object, an array where an
//! object belongs), a key given twice, or a payload that is not an object
//! fails the typed read, and the parser reads that payload as a
//! [`serde_json::Value`] instead, with the lenient rules it always had. So
//! wherever the `Value` read succeeds both reads give the same events (a
//! test holds them to it), and the usual payload costs no map of every
//! field (issue #14: building the `Value` of each answer was half of its
//! parse).
//!
//! One difference, on purpose: a field loopguard does not read is checked
//! for its JSON syntax only. A value there that a `Value` cannot hold — a
//! lone surrogate escape (servers that split an emoji across `logprobs`
//! tokens send them), a number out of `f64`'s range, nesting past
//! serde_json's 128 levels — no longer makes the whole payload unreadable:
//! its text and tool calls are still seen. (Skipping keeps no stack of its
//! own beyond one byte per level, within the payload's size.)

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde_json::Value;

/// One payload.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Chunk<'p> {
    #[serde(borrow, default)]
    pub id: Option<Str<'p>>,
    #[serde(borrow, default)]
    pub model: Option<Str<'p>>,
    #[serde(default)]
    pub created: Option<u64>,
    #[serde(borrow, default, rename = "modelVersion")]
    pub model_version: Option<Str<'p>>,
    /// `null` reads as absent, as the lenient read treats it.
    #[serde(default)]
    pub error: Option<Value>,
    #[serde(borrow, default)]
    pub choices: Option<Vec<Object<Choice<'p>>>>,
    #[serde(default)]
    pub usage: Option<Value>,
}

/// One entry of `choices[]`.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Choice<'p> {
    #[serde(default)]
    pub index: Option<u64>,
    /// Absent (`None`), `null` (`Some(None)`) or an object: a `delta` that
    /// is `null` still marks the choice as streamed, and hides `message`.
    #[serde(borrow, default, deserialize_with = "present")]
    pub delta: Option<Option<Object<Part<'p>>>>,
    #[serde(borrow, default)]
    pub message: Option<Object<Part<'p>>>,
    #[serde(borrow, default)]
    pub finish_reason: Option<Str<'p>>,
}

/// A `delta` or a `message`.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Part<'p> {
    #[serde(default)]
    pub reasoning_content: Option<Value>,
    #[serde(default)]
    pub reasoning: Option<Value>,
    #[serde(default)]
    pub content: Option<Value>,
    #[serde(default)]
    pub refusal: Option<Value>,
    #[serde(borrow, default)]
    pub tool_calls: Option<Vec<Object<Call<'p>>>>,
    #[serde(borrow, default)]
    pub function_call: Option<Object<Function<'p>>>,
}

/// One `tool_calls[]` fragment.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Call<'p> {
    #[serde(default)]
    pub index: Option<u64>,
    #[serde(borrow, default)]
    pub id: Option<Str<'p>>,
    #[serde(borrow, default)]
    pub function: Option<Object<Function<'p>>>,
}

/// A fragment's `function` (or a legacy `function_call`).
#[derive(Debug, serde::Deserialize)]
pub(super) struct Function<'p> {
    #[serde(borrow, default)]
    pub name: Option<Str<'p>>,
    /// A string as a rule; some servers send an object, whole.
    #[serde(default)]
    pub arguments: Option<Value>,
}

/// A string, borrowed from the payload unless it had escapes.
#[derive(Debug)]
pub(super) struct Str<'p>(pub Cow<'p, str>);

impl<'de: 'p, 'p> Deserialize<'de> for Str<'p> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(Text)
    }
}

/// A struct read only from a JSON object: serde's derived structs also
/// accept an array (fields by position), which the lenient read never does.
#[derive(Debug)]
pub(super) struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(MapsOnly(deserializer)).map(Object)
    }
}

/// `Some` for a field that is present, `null` included (serde's `Option`
/// alone reads `null` as absent).
pub(super) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// Asks the wrapped deserializer for a map where a struct is expected.
struct MapsOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for MapsOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// Reads `payload` in the typed form: `None` when it is not an object of
/// the usual shape (the caller reads it as a `Value` then).
pub(super) fn read(payload: &str) -> Option<Chunk<'_>> {
    serde_json::from_str::<Object<Chunk<'_>>>(payload)
        .ok()
        .map(|o| o.0)
}
