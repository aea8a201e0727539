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

/// A dialect's reader of items still raw in the body: the same items as
/// its [`ItemParser`] gives for their `Value`s, without building them where
/// it can (see `openai_chat::item`).
///
/// # Errors
/// [`DialectError::Json`] as [`SplitRequest::parse_items`].
pub type RawItemParser =
    fn(before: &[HistoryItem], items: &[&RawValue]) -> Result<Vec<HistoryItem>, DialectError>;

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
    let (envelope, items, once) = split_fields(body, key, Envelope::Slim)?;
    let history_end = if once {
        items.last().map(|raw| end_in(body, raw))
    } else {
        None
    };
    let mut split = SplitRequest::new(head(&envelope), items, parse);
    split.history_end = history_end;
    Ok(split)
}

/// `bytes` as text: UTF-8, as the full parse requires of a whole body.
fn utf8(bytes: &[u8]) -> Result<&str, DialectError> {
    std::str::from_utf8(bytes).map_err(|e| DialectError::Shape(format!("the body is not UTF-8: {e}")))
}

/// Where a body's history array is taken up again ([`resume_with`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Resume {
    /// Byte offset just past the last item already known.
    pub at: usize,
    /// How many items come before `at`.
    pub items: usize,
    /// The fields after the earlier body's history, as they were read: taken
    /// as they are when this body's bytes after its history are the same.
    pub after: Option<Arc<AfterHistory>>,
}

/// A resumed body's envelope as read, by the bytes after its history:
/// most agents send their tool list after the history (and Anthropic's
/// `system` too), tens of KB the same on every turn. A resumed body's bytes
/// up to its known items are the earlier body's (the fields before the
/// history included), so when its bytes after the history are the same
/// too its whole envelope is, and it takes this head instead of reading
/// those fields again (issue #37).
#[derive(Debug, Clone, PartialEq)]
pub struct AfterHistory {
    /// Bytes from just past the history array's `]` to the body's end.
    pub len: usize,
    /// xxh3-128 of those bytes.
    pub digest: u128,
    /// The envelope's head, as the dialect's `head` read it.
    pub head: ParsedRequest,
}

impl AfterHistory {
    /// What it weighs kept, bytes: at most about the fields' text (the
    /// head keeps their names and texts, not their schemas).
    pub fn weight(&self) -> usize {
        self.len
    }
}

/// The split of a body whose bytes up to `from.at` are those of an earlier
/// body whose `from.items` history items ended there (the same envelope
/// before the history, and the same items): the fields before the history
/// are read, the known items are jumped over unread, and only what follows
/// is scanned. The known items are [`RawValue::NULL`] placeholders (the
/// caller has their parses); the rest is as [`split_with`] gives it.
///
/// # Errors
/// [`DialectError::Shape`] or [`DialectError::Json`] for a body that does
/// not continue that way (`from.at` not just past an item of its history,
/// the history key repeated, not JSON): the caller splits it in full.
pub fn resume_with<'a>(
    body: &'a [u8],
    key: &str,
    head: HeadParser,
    parse: ItemParser,
    from: Resume,
) -> Result<SplitRequest<'a>, DialectError> {
    // The bytes before `from.at` were an earlier body's, checked then (the
    // offset is just past an item: a character boundary).
    utf8(body.get(from.at..).unwrap_or_default())?;
    let mut envelope = Map::new();
    let at = fields_before_history(body, key, &mut envelope)?;
    if body.get(at) != Some(&b'[') || from.at <= at || from.at > body.len() || from.items == 0 {
        return Err(resumed("no history array before the known items' end"));
    }
    // The known items: jumped over (with room for a turn's new ones).
    let mut items: Vec<&'a RawValue> = Vec::with_capacity(from.items + 8);
    items.resize(from.items, RawValue::NULL);
    let close = new_items(body, from.at, &mut items)?;
    let history_end = match items.get(from.items..).and_then(<[_]>::last) {
        Some(raw) => end_in(body, raw),
        None => from.at,
    };
    // The fields after the history: taken as read before when their bytes
    // are the same, else read.
    let tail = body.get(close + 1..).unwrap_or_default();
    let digest = xxhash_rust::xxh3::xxh3_128(tail);
    let after = match from.after.filter(|k| k.len == tail.len() && k.digest == digest) {
        Some(known) => known,
        None => {
            fields_after_history(body, close + 1, key, &mut envelope)?;
            Arc::new(AfterHistory {
                len: tail.len(),
                digest,
                head: head(&envelope),
            })
        }
    };
    let mut split = SplitRequest::new(after.head.clone(), items, parse);
    split.history_end = Some(history_end);
    split.after = Some(after);
    Ok(split)
}

/// The error of a body that does not resume: `what` is wrong with it.
fn resumed(what: &str) -> DialectError {
    DialectError::Shape(format!("resumed split: {what}"))
}

/// Reads the fields of the body's object before its history key into
/// `envelope`: the offset of the history's value (whitespace skipped).
#[inline]
fn fields_before_history(
    body: &[u8],
    key: &str,
    envelope: &mut Map<String, Value>,
) -> Result<usize, DialectError> {
    let mut at = skip_space(body, 0);
    if body.get(at) != Some(&b'{') {
        return Err(resumed("not an object"));
    }
    at += 1;
    loop {
        at = skip_space(body, at);
        let (name, next) = next_value::<String>(body, at)?;
        at = expect(body, next, b':')?;
        if name == key {
            break;
        }
        let (value, next) = next_field(&name, body, at)?;
        envelope.insert(name, value);
        at = expect(body, next, b',')?;
    }
    Ok(skip_space(body, at))
}

/// Scans the history's items after the known ones, which end at `known_end`,
/// onto `items`: the offset of the history's closing `]`.
#[inline]
fn new_items<'a>(
    body: &'a [u8],
    known_end: usize,
    items: &mut Vec<&'a RawValue>,
) -> Result<usize, DialectError> {
    let mut at = skip_space(body, known_end);
    loop {
        match body.get(at) {
            Some(b',') => {
                let (raw, next) = next_value::<&RawValue>(body, at + 1)?;
                items.push(raw);
                at = skip_space(body, next);
            }
            Some(b']') => return Ok(at),
            _ => return Err(resumed("the known items do not end where they did")),
        }
    }
}

/// Reads the fields of the body's object after its history, from `from`
/// (just past the history's `]`), into `envelope`, up to the object's end,
/// which must end the body.
#[inline]
fn fields_after_history(
    body: &[u8],
    from: usize,
    key: &str,
    envelope: &mut Map<String, Value>,
) -> Result<(), DialectError> {
    let mut at = skip_space(body, from);
    loop {
        match body.get(at) {
            Some(b',') => {
                let (name, next) = next_value::<String>(body, skip_space(body, at + 1))?;
                if name == key {
                    return Err(resumed("the history key repeats"));
                }
                at = expect(body, next, b':')?;
                let (value, next) = next_field(&name, body, at)?;
                // Read on its own, a value may nest one level deeper than
                // inside the body's object: the full split refuses that.
                if nesting(&value) >= MAX_NESTING {
                    return Err(resumed("a field nests past serde_json's limit"));
                }
                envelope.insert(name, value);
                at = skip_space(body, next);
            }
            Some(b'}') => break,
            _ => return Err(resumed("not an object")),
        }
    }
    if skip_space(body, at + 1) != body.len() {
        return Err(resumed("trailing characters"));
    }
    Ok(())
}

/// Levels a field of the body's object may not reach: serde_json refuses
/// the 128th level of one deserializer, the object itself being the first.
const MAX_NESTING: usize = 127;

/// How many arrays and objects deep `value` nests (a scalar: 0).
fn nesting(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(nesting).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(nesting).max().unwrap_or(0),
        _ => 0,
    }
}

/// The byte offset in `body` just past `raw`, a value borrowed from it.
fn end_in(body: &[u8], raw: &RawValue) -> usize {
    (raw.get().as_ptr() as usize - body.as_ptr() as usize) + raw.get().len()
}

fn skip_space(body: &[u8], mut at: usize) -> usize {
    while matches!(body.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// `byte` after optional whitespace at `at`: the offset past both.
fn expect(body: &[u8], at: usize, byte: u8) -> Result<usize, DialectError> {
    let at = skip_space(body, at);
    if body.get(at) == Some(&byte) {
        Ok(skip_space(body, at + 1))
    } else {
        Err(DialectError::Shape(format!(
            "resumed split: `{}` expected",
            byte as char
        )))
    }
}

/// The value of envelope field `name` at `at` ([`next_value`]), read as
/// [`split_with`] reads it: slim for the declared tools ([`super::slim`]).
fn next_field(name: &str, body: &[u8], at: usize) -> Result<(Value, usize), DialectError> {
    if !super::slim::is_slim(name) {
        return next_value::<Value>(body, at);
    }
    let (super::slim::SlimValue(value), next) = next_value(body, at)?;
    Ok((value, next))
}

/// One JSON value of type `T` starting at `at` (after optional whitespace),
/// and the offset just past it.
fn next_value<'a, T: serde::Deserialize<'a>>(body: &'a [u8], at: usize) -> Result<(T, usize), DialectError> {
    let rest = body.get(at..).unwrap_or_default();
    let mut values = serde_json::Deserializer::from_slice(rest).into_iter::<T>();
    match values.next() {
        Some(Ok(value)) => Ok((value, at + values.byte_offset())),
        Some(Err(e)) => Err(e.into()),
        None => Err(DialectError::Shape("resumed split: a value expected".into())),
    }
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
    /// Byte offset just past the last history item, when the body has one
    /// and its history key once (a later request that repeats these bytes
    /// can be resumed there, [`resume_with`]).
    pub history_end: Option<usize>,
    /// The fields after the history with the bytes they were read from,
    /// when the split was resumed ([`resume_with`]): for the next body.
    pub after: Option<Arc<AfterHistory>>,
    parse: ItemParser,
    raw: Option<RawItemParser>,
}

impl<'a> SplitRequest<'a> {
    /// A split request of a dialect whose items `parse` reads.
    pub fn new(head: ParsedRequest, items: Vec<&'a RawValue>, parse: ItemParser) -> Self {
        Self {
            head,
            items,
            history_end: None,
            after: None,
            parse,
            raw: None,
        }
    }

    /// Reads the body's items with `raw` instead of through their `Value`s
    /// ([`SplitRequest::parse_values`] still takes `Value`s).
    #[must_use]
    pub fn reading_raw(mut self, raw: RawItemParser) -> Self {
        self.raw = Some(raw);
        self
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
        let items = self.items.get(range).unwrap_or_default();
        if let Some(raw) = self.raw {
            return raw(before, items);
        }
        let values = items
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
    // Its text changes: detection reads it again.
    last.read = crate::transcript::Memo::default();
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
/// `key` field or the body is not UTF-8. Callers fall back to the full
/// parse, which names the problem.
pub fn split_object<'a>(
    body: &'a [u8],
    key: &str,
) -> Result<(Map<String, Value>, Vec<&'a RawValue>), DialectError> {
    let (envelope, items, _) = split_fields(body, key, Envelope::Whole)?;
    Ok((envelope, items))
}

/// A body's other fields, its history items, and whether the key came once.
type Fields<'a> = (Map<String, Value>, Vec<&'a RawValue>, bool);

/// How the envelope's fields are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Envelope {
    /// Each as a whole `Value` (a caller that writes the body again).
    Whole,
    /// The declared tools slim ([`super::slim`]): for the dialects' `head`s.
    Slim,
}

/// [`split_object`], and whether the key came once.
fn split_fields<'a>(body: &'a [u8], key: &str, read: Envelope) -> Result<Fields<'a>, DialectError> {
    // The whole body checked once, then read as text: serde_json checks no
    // string of it again, and the strings the slim read skips (which it
    // would not check) are checked too, as the full parse checks them.
    let mut de = serde_json::Deserializer::from_str(utf8(body)?);
    let (envelope, items, once) = de.deserialize_map(SplitVisitor { key, read })?;
    de.end()?;
    let items = items.ok_or_else(|| DialectError::Shape(format!("no `{key}` array")))?;
    Ok((envelope, items, once))
}

struct SplitVisitor<'k> {
    key: &'k str,
    read: Envelope,
}

impl<'de> Visitor<'de> for SplitVisitor<'_> {
    /// The other fields, the items, and whether the key came once.
    type Value = (Map<String, Value>, Option<Vec<&'de RawValue>>, bool);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut envelope = Map::new();
        let mut items = None;
        let mut seen = 0_usize;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.key {
                items = Some(map.next_value::<Vec<&'de RawValue>>()?);
                seen += 1;
            } else if self.read == Envelope::Slim && super::slim::is_slim(&key) {
                let value = map.next_value_seed(super::slim::Slim)?;
                envelope.insert(key, value);
            } else {
                let value = map.next_value::<Value>()?;
                envelope.insert(key, value);
            }
        }
        Ok((envelope, items, seen == 1))
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

    /// `new` split in full and resumed where `old`'s history ended.
    fn both_ways(
        old: &[u8],
        new: &[u8],
    ) -> (
        Result<SplitRequest<'static>, DialectError>,
        Result<SplitRequest<'static>, DialectError>,
    ) {
        let old: &'static [u8] = Box::leak(old.to_vec().into_boxed_slice());
        let new: &'static [u8] = Box::leak(new.to_vec().into_boxed_slice());
        let d = crate::dialect::Dialect::OpenaiChat;
        let earlier = d.split_request(old).unwrap().unwrap();
        let from = Resume {
            at: earlier.history_end.unwrap(),
            items: earlier.items.len(),
            after: None,
        };
        (d.split_request(new).unwrap(), d.resume_request(new, from))
    }

    #[test]
    fn a_resumed_split_is_the_full_split() {
        let old = br#"{"model":"m", "messages" : [ {"role":"user","content":"a"} ,{"role":"assistant","content":"b"} ], "stream":true}"#;
        for new in [
            // Two items more, the fields after the history changed.
            &br#"{"model":"m", "messages" : [ {"role":"user","content":"a"} ,{"role":"assistant","content":"b"} , {"role":"user","content":"c"},{"role":"assistant","content":"d"}], "stream":false, "tools":[{"type":"function","function":{"name":"ls"}}] }  "#[..],
            // Nothing new.
            br#"{"model":"m", "messages" : [ {"role":"user","content":"a"} ,{"role":"assistant","content":"b"}],"model":"n"}"#,
        ] {
            let (full, resumed) = both_ways(old, new);
            let (full, resumed) = (full.unwrap(), resumed.unwrap());
            assert_eq!(resumed.head, full.head);
            assert_eq!(resumed.history_end, full.history_end);
            assert_eq!(resumed.items.len(), full.items.len());
            let raw = |s: &SplitRequest<'_>| s.items[2..].iter().map(|r| r.get().to_owned()).collect::<Vec<_>>();
            assert_eq!(raw(&resumed), raw(&full));
        }
    }

    /// Bad UTF-8 in a field the slim read skips (a tool's schema) is
    /// refused by the split as by the full parse (found by the
    /// `history_chain` fuzz target), and in the new bytes of a resumed body.
    #[test]
    fn bad_utf8_in_a_skipped_field_is_refused_both_ways() {
        let d = crate::dialect::Dialect::Anthropic;
        let good = br#"{"model":"m","messages":[{"role":"user","content":"a"}],"tools":[{"name":"ls","input_schema":{"type":"ob"}}]}"#;
        let bad: Vec<u8> = String::from_utf8_lossy(good)
            .replace("\"ob\"", "\"o\u{1}\"")
            .into_bytes();
        let mut bad = bad;
        let at = bad.windows(3).position(|w| w == b"o\x01\"").unwrap() + 1;
        bad[at] = 0xe0;
        assert!(d.split_request(good).unwrap().is_ok());
        assert!(d.parse_request(&bad).is_err());
        assert!(d.split_request(&bad).unwrap().is_err());
        let earlier = d.split_request(good).unwrap().unwrap();
        let mut longer = good[..earlier.history_end.unwrap()].to_vec();
        longer.extend_from_slice(&bad[earlier.history_end.unwrap()..]);
        let from = Resume {
            at: earlier.history_end.unwrap(),
            items: earlier.items.len(),
            after: None,
        };
        assert!(d.resume_request(&longer, from).is_err());
    }

    /// The fields after the history are taken unread only when their
    /// bytes are those they were read from; either way the split is the
    /// full split's.
    #[test]
    fn fields_after_the_history_are_taken_only_for_the_same_bytes() {
        let d = crate::dialect::Dialect::OpenaiChat;
        let turn = |n: usize, tail: &str| -> &'static [u8] {
            let items: Vec<String> = (0..n)
                .map(|i| format!(r#"{{"role":"user","content":"m{i}"}}"#))
                .collect();
            let body = format!(r#"{{"model":"m","messages":[{}]{tail}"#, items.join(","));
            Box::leak(body.into_bytes().into_boxed_slice())
        };
        let tools =
            r#","tools":[{"type":"function","function":{"name":"ls","description":"lists"}}],"stream":true}"#;
        let renamed =
            r#","tools":[{"type":"function","function":{"name":"cd","description":"lists"}}],"stream":true}"#;
        let resume = |old: &SplitRequest<'_>, new: &'static [u8], after| {
            let from = Resume {
                at: old.history_end.unwrap(),
                items: old.items.len(),
                after,
            };
            d.resume_request(new, from).unwrap()
        };
        let first = d.split_request(turn(1, tools)).unwrap().unwrap();
        assert!(
            first.after.is_none(),
            "a full split does not know where its history ends"
        );
        let second = resume(&first, turn(2, tools), None);
        let known = second.after.clone().unwrap();
        assert_eq!(known.head.transcript.tools, ["ls"]);
        // The same bytes after the history: taken, as they were read.
        let third = resume(&second, turn(3, tools), Some(Arc::clone(&known)));
        assert!(Arc::ptr_eq(third.after.as_ref().unwrap(), &known));
        assert_eq!(third.head, d.split_request(turn(3, tools)).unwrap().unwrap().head);
        // Other bytes of the same length: read again.
        let changed = resume(&second, turn(3, renamed), Some(Arc::clone(&known)));
        assert!(!Arc::ptr_eq(changed.after.as_ref().unwrap(), &known));
        assert_eq!(
            changed.head,
            d.split_request(turn(3, renamed)).unwrap().unwrap().head
        );
        assert_eq!(changed.head.transcript.tools, ["cd"]);
    }

    #[test]
    fn a_body_that_does_not_continue_is_not_resumed() {
        let old = br#"{"messages":[{"role":"user","content":"a"},12]}"#;
        for new in [
            // The last known item goes on (a number is a prefix of a longer one).
            &br#"{"messages":[{"role":"user","content":"a"},123]}"#[..],
            // The history key again after the history.
            br#"{"messages":[{"role":"user","content":"a"},12],"messages":[]}"#,
            br#"{"messages":[{"role":"user","content":"a"},12,]}"#,
            br#"{"messages":[{"role":"user","content":"a"},12]} x"#,
            br#"{"messages":[{"role":"user","content":"a"},12]"#,
        ] {
            let (_, resumed) = both_ways(old, new);
            assert!(resumed.is_err(), "{}", String::from_utf8_lossy(new));
        }
        // A field after the history nesting as deep as the full split
        // refuses (127 levels in the object), and one level less.
        let nested = |n: usize| {
            format!(
                r#"{{"messages":[{{"role":"user","content":"a"}},12],"x":{}{}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        let (full, resumed) = both_ways(old, nested(127).as_bytes());
        assert!(full.is_err() && resumed.is_err(), "127 deep in the object");
        let (full, resumed) = both_ways(old, nested(126).as_bytes());
        assert!(full.is_ok() && resumed.is_ok(), "126 deep");
        // A body whose history key repeats records no end to resume at.
        let d = crate::dialect::Dialect::OpenaiChat;
        let twice = br#"{"messages":[1],"messages":[{"role":"user","content":"a"}]}"#;
        assert_eq!(d.split_request(twice).unwrap().unwrap().history_end, None);
    }
}
