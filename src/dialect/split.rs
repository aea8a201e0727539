//! A request body split into its envelope and its raw history items, so that
//! only the items a conversation has not sent before need a full parse.
//!
//! Agents resend the whole history on every request. [`Dialect::split_request`]
//! scans the body once (`serde_json::value::RawValue`: boundaries found and
//! JSON validated, nothing allocated per item) and parses only the envelope
//! (model, tools, flags); [`SplitRequest::parse_items`] parses the items a
//! caller asks for, given the items before them. The session layer keeps what
//! it already parsed (see [`crate::session::chain`]) and assembles the
//! request with [`assemble`]. A dialect's full
//! `parse_request` runs the same per-item code over all items, so both ways
//! give the same [`ParsedRequest`].
//!
//! [`Dialect::split_request`]: super::Dialect::split_request

use std::fmt;
use std::sync::Arc;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{DialectError, ParsedRequest};
use crate::transcript::Message;

/// What one history item parsed into.
#[derive(Debug, Clone, PartialEq)]
pub enum HistoryItem {
    /// Text that goes to [`crate::transcript::Transcript::system`] (OpenAI
    /// `system` / `developer` messages before the first other message).
    System(String),
    /// A turn of the transcript.
    Message(Message),
    /// Several turns from one item (an Anthropic user message carrying tool
    /// results and text becomes a tool turn and a user turn).
    Messages(Vec<Message>),
    /// A part of the turn before it when that turn has the same role (its
    /// text joined on a new line, its calls and results appended), a turn of
    /// its own otherwise: OpenAI Responses items, where consecutive model
    /// items are one assistant turn and consecutive call outputs one tool turn.
    Part(Message),
    /// An opaque compaction item (counted in `Transcript::compactions`).
    Compaction,
    /// A request to summarise the history (a Responses `compaction_trigger`
    /// item): the request is a summarizer request.
    Summarize,
}

impl HistoryItem {
    /// The turns this item made.
    pub fn messages(&self) -> &[Message] {
        match self {
            Self::System(_) | Self::Compaction | Self::Summarize => &[],
            Self::Message(message) | Self::Part(message) => std::slice::from_ref(message),
            Self::Messages(messages) => messages,
        }
    }
}

/// A dialect's item parser: the items `items`, given the parses of every
/// item before them, in order (one output per input).
pub type ItemParser = fn(before: &[HistoryItem], items: &[Value]) -> Vec<HistoryItem>;

/// A dialect's envelope reader: everything but the history (flags, model,
/// declared tools, system text), with `transcript.messages` empty.
pub type HeadParser = fn(&Map<String, Value>) -> ParsedRequest;

/// The full parse of a body whose history is its array field `key`: the
/// envelope by `head`, every item by `parse` — the code the split uses, so
/// both ways give the same request.
///
/// # Errors
/// [`DialectError::Json`] when the body is not JSON; [`DialectError::Shape`]
/// when it is not an object or has no `key` array.
pub fn parse_whole(
    body: &[u8],
    key: &str,
    head: HeadParser,
    parse: ItemParser,
) -> Result<ParsedRequest, DialectError> {
    let root = super::json_object(body)?;
    let Some(items) = root.get(key).and_then(Value::as_array) else {
        return Err(DialectError::Shape(format!("no `{key}` array")));
    };
    Ok(assemble(head(&root), parse(&[], items)))
}

/// The split of a body whose history is its array field `key` (see
/// [`split_object`]), read by `head` and `parse` as [`parse_whole`] does.
///
/// # Errors
/// As [`split_object`]: the caller falls back to the full parse.
pub fn split_with<'a>(
    body: &'a [u8],
    key: &str,
    head: HeadParser,
    parse: ItemParser,
) -> Result<SplitRequest<'a>, DialectError> {
    let (envelope, items) = split_object(body, key)?;
    Ok(SplitRequest::new(head(&envelope), items, parse))
}

/// A request body split into its envelope and its history items.
#[derive(Debug)]
pub struct SplitRequest<'a> {
    /// Everything but the history, parsed: flags, model, declared tools,
    /// the envelope's system text; `transcript.messages` is empty.
    pub head: ParsedRequest,
    /// The history's items (OpenAI chat and Anthropic `messages[]`, Gemini `contents[]`), as
    /// raw JSON borrowed from the body.
    pub items: Vec<&'a RawValue>,
    parse: ItemParser,
}

impl<'a> SplitRequest<'a> {
    /// A split request of a dialect whose items `parse` reads.
    pub fn new(head: ParsedRequest, items: Vec<&'a RawValue>, parse: ItemParser) -> Self {
        Self { head, items, parse }
    }

    /// Parses `items[from..]`, given the parses of `items[..from]` (`before`,
    /// which must have `from` entries).
    ///
    /// # Errors
    /// [`DialectError::Json`] when an item nests deeper than serde_json's
    /// recursion limit (the raw scan has no such limit); nothing else fails,
    /// the items were validated by the split.
    pub fn parse_items(&self, before: &[HistoryItem], from: usize) -> Result<Vec<HistoryItem>, DialectError> {
        self.parse_range(before, from..self.items.len())
    }

    /// Parses `items[range]`, given the parses of `items[..range.start]`
    /// (`before`), so a caller can parse a long history piece by piece.
    ///
    /// # Errors
    /// As [`SplitRequest::parse_items`].
    pub fn parse_range(
        &self,
        before: &[HistoryItem],
        range: std::ops::Range<usize>,
    ) -> Result<Vec<HistoryItem>, DialectError> {
        let values = self
            .items
            .get(range)
            .unwrap_or_default()
            .iter()
            .map(|raw| serde_json::from_str::<Value>(raw.get()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((self.parse)(before, &values))
    }

    /// Parses items given as values (not items of this body: copies of one
    /// cut into slices, see [`crate::session::slice`]), given the parses of
    /// the items before them.
    pub fn parse_values(&self, before: &[HistoryItem], values: &[Value]) -> Vec<HistoryItem> {
        (self.parse)(before, values)
    }
}

/// The request: `head` with the items' messages, and the items' system
/// texts joined by newlines after the head's own (Responses `instructions`).
pub fn assemble(mut head: ParsedRequest, items: impl IntoIterator<Item = HistoryItem>) -> ParsedRequest {
    let mut system: Vec<String> = Vec::new();
    let messages = Arc::make_mut(&mut head.transcript.messages);
    for item in items {
        match item {
            HistoryItem::System(text) => system.push(text),
            HistoryItem::Compaction => head.transcript.compactions += 1,
            HistoryItem::Summarize => head.summarizer = true,
            turns => push_turns(messages, turns),
        }
    }
    with_system(head, system)
}

/// [`assemble`] for items whose turns were assembled already (`turns`,
/// pushed one item at a time with [`push_turns`]): the request shares them
/// instead of copying every item's turns again. The rest (system texts,
/// compactions, a summarize request) is read from `items`.
pub fn assemble_shared(
    mut head: ParsedRequest,
    items: &[HistoryItem],
    turns: Arc<Vec<Message>>,
) -> ParsedRequest {
    let mut system: Vec<String> = Vec::new();
    for item in items {
        match item {
            HistoryItem::System(text) => system.push(text.clone()),
            HistoryItem::Compaction => head.transcript.compactions += 1,
            HistoryItem::Summarize => head.summarizer = true,
            HistoryItem::Message(_) | HistoryItem::Messages(_) | HistoryItem::Part(_) => {}
        }
    }
    head.transcript.messages = turns;
    with_system(head, system)
}

fn with_system(mut head: ParsedRequest, mut system: Vec<String>) -> ParsedRequest {
    if !system.is_empty() {
        if !head.transcript.system.is_empty() {
            system.insert(0, std::mem::take(&mut head.transcript.system));
        }
        head.transcript.system = system.join("\n");
    }
    head
}

/// Adds an item's turns to `messages`: its messages, or its part joined to
/// the last turn of the same role (see [`HistoryItem::Part`]). Items that
/// make no turn add nothing.
pub fn push_turns(messages: &mut Vec<Message>, item: HistoryItem) {
    match item {
        HistoryItem::Message(message) => messages.push(message),
        HistoryItem::Messages(turns) => messages.extend(turns),
        HistoryItem::Part(part) => match messages.last_mut() {
            Some(last) if last.role == part.role => append_turn(last, part),
            _ => messages.push(part),
        },
        HistoryItem::System(_) | HistoryItem::Compaction | HistoryItem::Summarize => {}
    }
}

/// Appends `part` to the turn `last` of the same role: its text on a new
/// line, its calls and results after `last`'s.
pub fn append_turn(last: &mut Message, part: Message) {
    if !last.text.is_empty() && !part.text.is_empty() {
        last.text.push('\n');
    }
    last.text.push_str(&part.text);
    last.tool_calls.extend(part.tool_calls);
    last.tool_results.extend(part.tool_results);
}

/// Splits a JSON object body into its other fields (parsed) and the items of
/// its array field `key` (raw). When a key repeats, the last one wins, as in
/// a full parse.
///
/// # Errors
/// [`DialectError::Json`] when the body is not JSON, not an object, or its
/// `key` field is not an array; [`DialectError::Shape`] when there is no
/// `key` field. Callers fall back to the full parse, which names the problem.
pub fn split_object<'a>(
    body: &'a [u8],
    key: &str,
) -> Result<(Map<String, Value>, Vec<&'a RawValue>), DialectError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let (envelope, items) = de.deserialize_map(SplitVisitor { key })?;
    de.end()?;
    let items = items.ok_or_else(|| DialectError::Shape(format!("no `{key}` array")))?;
    Ok((envelope, items))
}

struct SplitVisitor<'k> {
    key: &'k str,
}

impl<'de> Visitor<'de> for SplitVisitor<'_> {
    type Value = (Map<String, Value>, Option<Vec<&'de RawValue>>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut envelope = Map::new();
        let mut items = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.key {
                items = Some(map.next_value::<Vec<&'de RawValue>>()?);
            } else {
                let value = map.next_value::<Value>()?;
                envelope.insert(key, value);
            }
        }
        Ok((envelope, items))
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;

    #[test]
    fn items_are_borrowed_raw_and_the_rest_is_parsed() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}, 1 ,"x"],"stream":true}"#;
        let (envelope, items) = split_object(body, "messages").unwrap();
        assert_eq!(envelope.keys().collect::<Vec<_>>(), ["model", "stream"]);
        let raw: Vec<&str> = items.iter().map(|r| r.get()).collect();
        assert_eq!(raw, [r#"{"role":"user","content":"hi"}"#, "1", r#""x""#]);
    }

    #[test]
    fn the_last_repeated_key_wins_and_odd_shapes_are_errors() {
        let (_, items) = split_object(br#"{"messages":[1],"messages":[2,3]}"#, "messages").unwrap();
        assert_eq!(items.len(), 2);
        for body in [
            &br#"{"messages":{}}"#[..],
            br#"{"messages":null}"#,
            br#"[{"messages":[]}]"#,
            br#"{"model":"m"}"#,
            br#"{"messages":[]} x"#,
            br#"{"messages":[1,]}"#,
        ] {
            assert!(
                split_object(body, "messages").is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
