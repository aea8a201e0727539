//! The typed form of one request history item (a `messages[]` entry): the
//! fields the history parse reads, borrowed from the body where they need
//! no unescaping, every other field skipped unbuilt.
//!
//! Read strictly, as [`super::chunk`] reads answers: an item that is not an
//! object, a field of another type than the usual one (a `role` that is a
//! number, `tool_calls` that is an object, a content part that is neither a
//! string nor an object), or a key given twice fails the typed read, and
//! the item is read as a [`serde_json::Value`] instead, with the lenient
//! rules it always had. Wherever the `Value` read succeeds both reads give
//! the same item (a test holds them to it on every recorded trajectory and
//! on odd shapes); the usual item costs no map of every field (issue #14:
//! building the `Value` of each new item was half of a small request's
//! parse).
//!
//! The same difference on purpose as for answers: a field loopguard does
//! not read is checked for its JSON syntax only, so a value there that a
//! `Value` cannot hold (a lone surrogate escape, a number out of `f64`'s
//! range, nesting past serde_json's 128 levels) no longer makes the item,
//! and so the request, unreadable.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::chunk::{Function, Object, Str, present};

/// One `messages[]` item.
#[derive(Debug, Deserialize)]
pub(super) struct Item<'m> {
    #[serde(borrow, default)]
    pub role: Option<Str<'m>>,
    #[serde(borrow, default)]
    pub content: Option<Content<'m>>,
    #[serde(borrow, default)]
    pub tool_calls: Option<Vec<Object<Call<'m>>>>,
    #[serde(borrow, default)]
    pub function_call: Option<Object<Function<'m>>>,
    #[serde(borrow, default)]
    pub tool_call_id: Option<Str<'m>>,
    #[serde(borrow, default)]
    pub name: Option<Str<'m>>,
}

/// One `tool_calls[]` entry of an assistant item.
#[derive(Debug, Deserialize)]
pub(super) struct Call<'m> {
    #[serde(borrow, default)]
    pub id: Option<Str<'m>>,
    /// Absent (`None`), `null` (`Some(None)`: still a call, unnamed, as the
    /// lenient read has it) or an object.
    #[serde(borrow, default, deserialize_with = "present")]
    pub function: Option<Option<Object<Function<'m>>>>,
}

/// `content`: a string, or an array of parts.
#[derive(Debug)]
pub(super) enum Content<'m> {
    Text(Str<'m>),
    /// The texts of the text parts, in order (other parts skipped).
    Parts(Vec<Str<'m>>),
}

impl<'de: 'm, 'm> Deserialize<'de> for Content<'m> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = Content<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of parts")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Content::Text(Str(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Content::Text(Str(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Content::Text(Str(Cow::Owned(v))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut parts: A) -> Result<Self::Value, A::Error> {
                let mut texts = Vec::new();
                while let Some(part) = parts.next_element::<ContentPart<'de>>()? {
                    texts.extend(part.0);
                }
                Ok(Content::Parts(texts))
            }
        }
        deserializer.deserialize_any(Either)
    }
}

/// One content part: a string (its text), or an object whose `type` is
/// `text` or `input_text` (absent: `text`) and whose `text` it carries;
/// `None` for any other object.
struct ContentPart<'m>(Option<Str<'m>>);

/// A content part's fields.
#[derive(Deserialize)]
struct PartFields<'m> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'m>>,
    #[serde(borrow, default)]
    text: Option<Str<'m>>,
}

impl<'de: 'm, 'm> Deserialize<'de> for ContentPart<'m> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Part;
        impl<'de> Visitor<'de> for Part {
            type Value = ContentPart<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an object")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(ContentPart(Some(Str(Cow::Borrowed(v)))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ContentPart(Some(Str(Cow::Owned(v.to_owned())))))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(ContentPart(Some(Str(Cow::Owned(v)))))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let fields = PartFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let kind = fields.kind.as_ref().map_or("text", |k| k.0.as_ref());
                let text = if kind == "text" || kind == "input_text" {
                    fields.text
                } else {
                    None
                };
                Ok(ContentPart(text))
            }
        }
        deserializer.deserialize_any(Part)
    }
}

/// Reads one item in the typed form: `None` when it is not an object of
/// the usual shape (the caller reads it as a `Value` then).
pub(super) fn read(item: &str) -> Option<Item<'_>> {
    serde_json::from_str::<Object<Item<'_>>>(item).ok().map(|o| o.0)
}
