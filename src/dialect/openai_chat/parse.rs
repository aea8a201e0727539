//! The `openai-chat` dialect (OpenAI Chat Completions and compatible servers):
//! request body → [`Transcript`]; response payloads → stream events are
//! [`super::ResponseParser`]'s.
//!
//! Reading is lenient: fields loopguard does not need are ignored, and shapes
//! that compatible servers send differently (arguments as an object instead
//! of a string, tool-call fragments without `index`, empty continuation ids)
//! are accepted. Nothing is ever written back from here.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::dialect::split::{HistoryItem, Resume, SplitRequest, parse_whole, resume_with, split_with};
use crate::dialect::{DialectError, ParsedRequest};
use crate::transcript::{Arguments, Message, ResultContent, Role, ToolCall, ToolResult, Transcript};

/// Parses a `POST …/chat/completions` request body.
///
/// `system` and `developer` messages before the first other message form
/// [`Transcript::system`]; later ones are [`Role::System`] messages, as are
/// messages of an unknown role (they never count as the person speaking).
/// A `tool` message's tool name is resolved from the earlier assistant call
/// with its `tool_call_id`, falling back to its own `name` field.
///
/// # Errors
/// [`DialectError::Json`] when the body is not JSON; [`DialectError::Shape`]
/// when it is not an object or has no `messages` array.
pub fn parse_request(body: &[u8]) -> Result<ParsedRequest, DialectError> {
    parse_whole(body, "messages", head, parse_items)
}

/// Splits a request body into its envelope and its raw `messages[]` (see
/// [`crate::dialect::split`]); the items parse as in [`parse_request`].
///
/// # Errors
/// As [`crate::dialect::split::split_object`]: the caller falls back to [`parse_request`].
pub fn split_request(body: &[u8]) -> Result<SplitRequest<'_>, DialectError> {
    split_with(body, "messages", head, parse_items).map(|split| split.reading_raw(parse_raw))
}

/// [`split_request`] taken up again after items an earlier body had (see
/// [`crate::dialect::split::resume_with`]).
///
/// # Errors
/// As [`crate::dialect::split::resume_with`]: the caller splits in full.
pub fn resume_request(body: &[u8], from: Resume) -> Result<SplitRequest<'_>, DialectError> {
    resume_with(body, "messages", head, parse_items, from).map(|split| split.reading_raw(parse_raw))
}

/// Everything but the history: flags, model, declared tools.
fn head(root: &Map<String, Value>) -> ParsedRequest {
    ParsedRequest {
        transcript: Transcript {
            tools: declared_tools(root),
            ..Transcript::default()
        },
        stream: root.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_usage: root
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
        model: root.get("model").and_then(Value::as_str).map(str::to_owned),
        summarizer: false,
        responses: None,
        ids: crate::dialect::BodyIds::of(root),
    }
}

/// Parses `messages`, given the parses of the messages before them (`before`):
/// whether a non-system message came already, and the ids of earlier calls
/// (read from `before` only when a `tool` message needs them).
fn parse_items(before: &[HistoryItem], messages: &[Value]) -> Vec<HistoryItem> {
    let mut history = History::new(before, messages.len());
    for message in messages {
        history.push(Entry::of_value(message));
    }
    history.out
}

/// [`parse_items`] of items still raw in the body: each read in the typed
/// form ([`super::item`]), or as a `Value` when that read refuses it, then
/// parsed by the same rules.
///
/// # Errors
/// [`DialectError::Json`] when an item the typed read refuses cannot be
/// read as a `Value` either (nesting past serde_json's limit).
fn parse_raw(before: &[HistoryItem], items: &[&RawValue]) -> Result<Vec<HistoryItem>, DialectError> {
    let mut history = History::new(before, items.len());
    for raw in items {
        if let Some(item) = super::item::read(raw.get()) {
            history.push(Entry::of_typed(item));
        } else {
            let value: Value = serde_json::from_str(raw.get())?;
            history.push(Entry::of_value(&value));
        }
    }
    Ok(history.out)
}

/// One `messages[]` item as the history parse uses it: its role (`""`
/// when absent or not a string), its text, its calls (an assistant's only)
/// and the fields a tool result names its call by.
struct Entry<'m> {
    role: Cow<'m, str>,
    text: String,
    calls: Vec<ToolCall>,
    tool_call_id: Option<Cow<'m, str>>,
    name: Option<Cow<'m, str>>,
}

impl<'m> Entry<'m> {
    /// The lenient read: a field of another type counts as absent.
    fn of_value(message: &'m Value) -> Self {
        let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
        let str_field = |key| message.get(key).and_then(Value::as_str).map(Cow::Borrowed);
        Self {
            role: Cow::Borrowed(role),
            text: content_text(message.get("content")),
            calls: if role == "assistant" {
                value_calls(message)
            } else {
                Vec::new()
            },
            tool_call_id: str_field("tool_call_id"),
            name: str_field("name"),
        }
    }

    /// The typed read's item, read by the same rules.
    fn of_typed(item: super::item::Item<'m>) -> Self {
        use super::item::Content;
        let role = item.role.map_or(Cow::Borrowed(""), |r| r.0);
        let text = match item.content {
            None => String::new(),
            Some(Content::Text(text)) => text.0.into_owned(),
            Some(Content::Parts(texts)) => texts.iter().map(|t| t.0.as_ref()).collect::<Vec<_>>().join("\n"),
        };
        let mut calls = Vec::new();
        if role == "assistant" {
            for super::chunk::Object(call) in item.tool_calls.into_iter().flatten() {
                // An entry without `function` is skipped; `function: null` is an unnamed call.
                let Some(function) = call.function else {
                    continue;
                };
                let id = call.id.map(|id| id.0).filter(|id| !id.is_empty());
                let function = function.map(|f| f.0);
                let name = function
                    .as_ref()
                    .and_then(|f| f.name.as_ref())
                    .map(|n| n.0.as_ref());
                let arguments = arguments_of(function.as_ref().and_then(|f| f.arguments.as_ref()));
                calls.push(ToolCall::new(
                    id.map(Cow::into_owned),
                    name.unwrap_or_default(),
                    arguments,
                ));
            }
            if let Some(super::chunk::Object(function)) = item.function_call {
                let name = function.name.as_ref().map(|n| n.0.as_ref()).unwrap_or_default();
                calls.push(ToolCall::new(
                    None,
                    name,
                    arguments_of(function.arguments.as_ref()),
                ));
            }
        }
        Self {
            role,
            text,
            calls,
            tool_call_id: item.tool_call_id.map(|s| s.0),
            name: item.name.map(|s| s.0),
        }
    }
}

/// The running parse of a history: whether a non-system message came
/// already, the call id → tool name of the calls parsed so far, and the
/// items.
struct History<'b> {
    before: &'b [HistoryItem],
    any_message: bool,
    /// Call id → tool name of the calls in `before` (built on first need).
    before_names: Option<HashMap<&'b str, &'b str>>,
    /// Call id → tool name of the calls pushed (later calls win, as in a
    /// map filled in order).
    names: HashMap<String, String>,
    out: Vec<HistoryItem>,
}

impl<'b> History<'b> {
    fn new(before: &'b [HistoryItem], capacity: usize) -> Self {
        Self {
            before,
            any_message: before.iter().any(|i| !matches!(i, HistoryItem::System(_))),
            before_names: None,
            names: HashMap::new(),
            out: Vec::with_capacity(capacity),
        }
    }

    fn push(&mut self, entry: Entry<'_>) {
        let Entry {
            role,
            text,
            calls,
            tool_call_id,
            name,
        } = entry;
        let parsed = match role.as_ref() {
            "system" | "developer" if !self.any_message => {
                self.out.push(HistoryItem::System(text));
                return;
            }
            "user" => Message::text(Role::User, text),
            "assistant" => {
                for call in &calls {
                    if let Some(id) = &call.id {
                        self.names.insert(id.clone(), call.name.clone());
                    }
                }
                let mut message = Message::text(Role::Assistant, text);
                message.tool_calls = calls;
                message
            }
            "tool" => {
                let resolved = tool_call_id.as_deref().and_then(|id| self.call_name(id));
                let call_id = tool_call_id.map(Cow::into_owned);
                tool_message(call_id, resolved.or_else(|| name.map(Cow::into_owned)), text)
            }
            "function" => tool_message(None, name.map(Cow::into_owned), text),
            _ => Message::text(Role::System, text),
        };
        self.any_message = true;
        self.out.push(HistoryItem::Message(parsed));
    }

    /// The tool name of the call with id `id`: among the calls pushed, else
    /// among the last of `before`, else among all of `before`.
    fn call_name(&mut self, id: &str) -> Option<String> {
        if let Some(name) = self.names.get(id) {
            return Some(name.clone());
        }
        let before = self.before;
        recent_call_name(before, id)
            .or_else(|| {
                let names = self.before_names.get_or_insert_with(|| call_names(before));
                names.get(id).copied()
            })
            .map(str::to_owned)
    }
}

/// Items and calls looked at from the end of `before` for a tool message's
/// call before all of them are indexed (its call is nearly always among the
/// last: a history parsed a few items at a time then costs no index each).
const RECENT_ITEMS: usize = 64;
/// See [`RECENT_ITEMS`].
const RECENT_CALLS: usize = 256;

/// The tool name of the last call with id `id` among the last
/// [`RECENT_CALLS`] calls of the last [`RECENT_ITEMS`] items of `items`.
fn recent_call_name<'a>(items: &'a [HistoryItem], id: &str) -> Option<&'a str> {
    items
        .iter()
        .rev()
        .take(RECENT_ITEMS)
        .flat_map(|item| item.messages().iter().rev())
        .flat_map(|message| message.tool_calls.iter().rev())
        .take(RECENT_CALLS)
        .find(|call| call.id.as_deref() == Some(id))
        .map(|call| call.name.as_str())
}

/// Call id → tool name of every call with an id in `items`, later calls winning.
fn call_names(items: &[HistoryItem]) -> HashMap<&str, &str> {
    items
        .iter()
        .flat_map(HistoryItem::messages)
        .flat_map(|message| &message.tool_calls)
        .filter_map(|call| Some((call.id.as_deref()?, call.name.as_str())))
        .collect()
}

/// Tool names from `tools[].function.name` (or a flat `tools[].name`) and legacy `functions[].name`.
fn declared_tools(root: &Map<String, Value>) -> Vec<String> {
    let tools = root.get("tools").and_then(Value::as_array).into_iter().flatten();
    let tools = tools.filter_map(|t| {
        t.get("function")
            .and_then(|f| f.get("name"))
            .or_else(|| t.get("name"))
            .and_then(Value::as_str)
    });
    let functions = root
        .get("functions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    let functions = functions.filter_map(|f| f.get("name").and_then(Value::as_str));
    tools.chain(functions).map(str::to_owned).collect()
}

/// An assistant item's calls: its `tool_calls[]` and legacy `function_call`.
fn value_calls(message: &Value) -> Vec<ToolCall> {
    let mut out = Vec::new();
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    for call in calls {
        let Some(function) = call.get("function") else {
            continue;
        };
        let id = call.get("id").and_then(Value::as_str).filter(|s| !s.is_empty());
        let name = function.get("name").and_then(Value::as_str).unwrap_or_default();
        out.push(ToolCall::new(
            id.map(str::to_owned),
            name,
            arguments_of(function.get("arguments")),
        ));
    }
    if let Some(function) = message.get("function_call").filter(|f| f.is_object()) {
        let name = function.get("name").and_then(Value::as_str).unwrap_or_default();
        out.push(ToolCall::new(None, name, arguments_of(function.get("arguments"))));
    }
    out
}

/// Arguments as sent: a JSON string (the standard), or an object some servers send; absent is `{}`.
fn arguments_of(value: Option<&Value>) -> Arguments {
    match value {
        Some(Value::String(text)) => Arguments::from_json_str(text),
        None | Some(Value::Null) => Arguments::Json(Value::Object(Map::new())),
        Some(other) => Arguments::Json(other.clone()),
    }
}

/// A message carrying one tool result as text.
fn tool_message(call_id: Option<String>, name: Option<String>, text: String) -> Message {
    let mut message = Message::text(Role::Tool, "");
    message.tool_results.push(ToolResult {
        call_id,
        name,
        content: ResultContent::Text(text),
        is_error: false,
    });
    message
}

/// `content` as text: a string, or the `text` of its text parts joined by
/// newlines (images, audio and files are skipped); null or absent is empty.
pub(super) fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            let texts = parts.iter().filter_map(|part| match part {
                Value::String(text) => Some(text.as_str()),
                Value::Object(obj) => {
                    let kind = obj.get("type").and_then(Value::as_str).unwrap_or("text");
                    if kind == "text" || kind == "input_text" {
                        obj.get("text").and_then(Value::as_str)
                    } else {
                        None
                    }
                }
                _ => None,
            });
            texts.collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
#[path = "parse_tests.rs"]
mod tests;

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
#[path = "item_tests.rs"]
mod item_tests;
