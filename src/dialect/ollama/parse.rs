//! Ollama native: request body → [`Transcript`], response lines →
//! [`StreamEvent`]s.
//!
//! `/api/chat` carries its history in `messages[]`: `system`, `user`,
//! `assistant` (with `tool_calls: [{function: {name, arguments: {…}}}]`,
//! arguments an object; newer servers add `id` and `function.index`) and
//! `tool` results naming their tool in `tool_name`. `/api/generate` carries
//! one `prompt` (and `system`): one user turn, no calls. Reading is
//! lenient; nothing is written back from here.

use serde_json::{Map, Value};

use crate::dialect::split::{HistoryItem, Resume, SplitRequest, parse_whole, resume_with, split_with};
use crate::dialect::{DialectError, Meta, ParsedRequest, StreamEvent};
use crate::transcript::{Arguments, Message, ResultContent, Role, ToolCall, ToolResult, Transcript};

/// Parses a `POST …/api/chat` body.
///
/// # Errors
/// [`DialectError::Json`] when the body is not JSON; [`DialectError::Shape`]
/// when it is not an object or has no `messages` array.
pub fn parse_chat(body: &[u8]) -> Result<ParsedRequest, DialectError> {
    parse_whole(body, "messages", head, parse_items)
}

/// Splits an `/api/chat` body into its envelope and raw `messages[]`.
///
/// # Errors
/// As [`crate::dialect::split::split_object`]: the caller falls back to [`parse_chat`].
pub fn split_chat(body: &[u8]) -> Result<SplitRequest<'_>, DialectError> {
    split_with(body, "messages", head, parse_items)
}

/// [`split_chat`] taken up again after items an earlier body had.
///
/// # Errors
/// As [`crate::dialect::split::resume_with`]: the caller splits in full.
pub fn resume_chat(body: &[u8], from: Resume) -> Result<SplitRequest<'_>, DialectError> {
    resume_with(body, "messages", head, parse_items, from)
}

/// Parses a `POST …/api/generate` body: `system` is the system text,
/// `prompt` one user turn.
///
/// # Errors
/// [`DialectError::Json`] when the body is not JSON; [`DialectError::Shape`]
/// when it is not an object.
pub fn parse_generate(body: &[u8]) -> Result<ParsedRequest, DialectError> {
    let root = crate::dialect::json_object(body)?;
    let mut parsed = head(&root);
    parsed.transcript.system = str_of(&root, "system").to_owned();
    let prompt = str_of(&root, "prompt");
    if !prompt.is_empty() {
        parsed.transcript.messages = std::sync::Arc::new(vec![Message::text(Role::User, prompt)]);
    }
    Ok(parsed)
}

fn str_of<'a>(object: &'a Map<String, Value>, key: &str) -> &'a str {
    object.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Everything but the history: `stream` (absent is `true`, Ollama's
/// default), `model`, declared tools.
fn head(root: &Map<String, Value>) -> ParsedRequest {
    let tools = root.get("tools").and_then(Value::as_array).into_iter().flatten();
    let tools = tools
        .filter_map(|t| {
            t.get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
        })
        .map(str::to_owned)
        .collect();
    ParsedRequest {
        transcript: Transcript {
            tools,
            ..Transcript::default()
        },
        stream: root.get("stream").and_then(Value::as_bool).unwrap_or(true),
        include_usage: false,
        model: root.get("model").and_then(Value::as_str).map(str::to_owned),
        summarizer: false,
        responses: None,
        ids: crate::dialect::BodyIds::of(root),
    }
}

/// Parses `messages`: `system` messages before any other are the system
/// text; unknown roles are system turns (never the person speaking).
fn parse_items(before: &[HistoryItem], messages: &[Value]) -> Vec<HistoryItem> {
    let mut any_message = before.iter().any(|i| !matches!(i, HistoryItem::System(_)));
    let mut out = Vec::with_capacity(messages.len());
    for message in messages {
        let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
        let text = message
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let parsed = match role {
            "system" if !any_message => {
                out.push(HistoryItem::System(text));
                continue;
            }
            "user" => Message::text(Role::User, text),
            "assistant" => {
                let mut turn = Message::text(Role::Assistant, text);
                turn.tool_calls = calls_of(message);
                turn
            }
            "tool" => {
                let name = message
                    .get("tool_name")
                    .or_else(|| message.get("name"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let call_id = message
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned);
                let mut turn = Message::text(Role::Tool, "");
                turn.tool_results.push(ToolResult {
                    call_id,
                    name,
                    content: ResultContent::Text(text),
                    is_error: false,
                });
                turn
            }
            _ => Message::text(Role::System, text),
        };
        any_message = true;
        out.push(HistoryItem::Message(parsed));
    }
    out
}

/// An assistant message's (or a response line's) `tool_calls`.
fn calls_of(message: &Value) -> Vec<ToolCall> {
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    calls
        .filter_map(|call| {
            let function = call.get("function")?;
            let name = function.get("name").and_then(Value::as_str).unwrap_or_default();
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned);
            let arguments = match function.get("arguments") {
                Some(Value::String(text)) => Arguments::from_json_str(text),
                None | Some(Value::Null) => Arguments::Json(Value::Object(Map::new())),
                Some(other) => Arguments::Json(other.clone()),
            };
            Some(ToolCall::new(id, name, arguments))
        })
        .collect()
}

/// What loopguard's own lines repeat of the upstream's: `model` and
/// `created_at` of its first line, and whether the answer is
/// `/api/generate`'s (`response`) or `/api/chat`'s (`message`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// `model` as the upstream wrote it.
    pub model: Option<String>,
    /// `created_at` of the first line (RFC 3339 text).
    pub created_at: Option<String>,
}

/// Incremental parser for one Ollama answer: the lines of a stream, or the
/// one object of a `stream: false` answer (the same shape, `done: true`).
///
/// Every line with `message.tool_calls` yields, per call, a delta and its
/// completion (calls arrive whole); `done: true` yields the counters as
/// [`StreamEvent::Usage`] and the `done_reason` as [`StreamEvent::Finish`];
/// `{"error": …}` yields [`StreamEvent::Error`].
#[derive(Debug, Default)]
pub struct ResponseParser {
    meta: Option<Meta>,
    identity: Identity,
    next_index: u32,
}

/// The counters of Ollama's last line, kept as its usage.
const COUNTERS: [&str; 6] = [
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
];

impl ResponseParser {
    /// Parses one line (or the whole non-streaming body).
    ///
    /// # Errors
    /// [`DialectError`] when it is not a JSON object.
    pub fn payload(&mut self, payload: &str, out: &mut Vec<StreamEvent>) -> Result<(), DialectError> {
        let line = crate::dialect::payload_object(payload)?;
        if let Some(error) = line.get("error").filter(|e| !e.is_null()) {
            let message = error.as_str().map_or_else(|| error.to_string(), str::to_owned);
            out.push(StreamEvent::Error { message });
            return Ok(());
        }
        if self.identity.model.is_none() {
            self.identity.model = line.get("model").and_then(Value::as_str).map(str::to_owned);
            self.identity.created_at = line.get("created_at").and_then(Value::as_str).map(str::to_owned);
            if self.identity.model.is_some() {
                self.meta = Some(Meta {
                    model: self.identity.model.clone(),
                    ..Meta::default()
                });
            }
        }
        if let Some(message) = line.get("message") {
            if let Some(fields) = message.as_object() {
                push_deltas(fields, "content", out);
            }
            for call in calls_of(message) {
                let index = self.next_index;
                self.next_index += 1;
                crate::dialect::push_whole_call(out, index, call);
            }
        }
        push_deltas(&line, "response", out);
        if line.get("done").and_then(Value::as_bool) == Some(true) {
            let usage: Map<String, Value> = COUNTERS
                .iter()
                .filter_map(|k| line.get(*k).map(|v| ((*k).to_owned(), v.clone())))
                .collect();
            if !usage.is_empty() {
                out.push(StreamEvent::Usage {
                    usage: Value::Object(usage),
                });
            }
            let reason = line.get("done_reason").and_then(Value::as_str).unwrap_or("stop");
            out.push(StreamEvent::Finish {
                choice: 0,
                reason: reason.to_owned(),
            });
        }
        Ok(())
    }

    /// The body ended: calls arrive whole, nothing is left open.
    pub fn end(&mut self, _out: &mut Vec<StreamEvent>) {}

    /// `model` of the first line that had one.
    pub fn meta(&self) -> Option<&Meta> {
        self.meta.as_ref()
    }

    /// `model` and `created_at` of the first line.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }
}

/// The reasoning (`thinking`) and text (under `text_key`: a chat line's
/// `message.content`, a generate line's `response`) deltas of `object`, in
/// that order; empty strings carry none.
fn push_deltas(object: &Map<String, Value>, text_key: &str, out: &mut Vec<StreamEvent>) {
    let text = |key: &str| object.get(key).and_then(Value::as_str).filter(|t| !t.is_empty());
    if let Some(thinking) = text("thinking") {
        out.push(StreamEvent::ReasoningDelta {
            choice: 0,
            text: thinking.to_owned(),
        });
    }
    if let Some(delta) = text(text_key) {
        out.push(StreamEvent::TextDelta {
            choice: 0,
            text: delta.to_owned(),
        });
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
#[path = "parse_tests.rs"]
mod tests;
