//! The `anthropic` dialect (Anthropic Messages, Claude Code's only wire
//! protocol): request body → [`Transcript`], response payloads →
//! [`StreamEvent`]s.
//!
//! History is `messages[]` of content blocks: `text`, `tool_use {id, name,
//! input}`, `tool_result {tool_use_id, content, is_error}`, `thinking` /
//! `redacted_thinking` (opaque; never altered, their signatures stay valid).
//! `server_tool_use` and `mcp_tool_use` blocks ran on the server and are not
//! calls the agent executes (never held); they and their `*_tool_result`
//! blocks still become a server-side call and its result in the assistant
//! turn, so their repeats count (issue #12 point 10). Claude Code also sends `role: "system"`
//! messages in the middle of the list; they become [`Role::System`] turns.
//!
//! A stream is a sequence of named SSE events (`message_start`,
//! `content_block_start` / `_delta` / `_stop` with an `index`,
//! `message_delta` with the `stop_reason`, `message_stop`, `ping`, `error`).

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::dialect::split::{HistoryItem, Resume, SplitRequest, parse_whole, resume_with, split_with};
use crate::dialect::{DialectError, ParsedRequest, StreamEvent};
use crate::transcript::{Arguments, Message, ResultContent, Role, ToolCall, ToolResult, Transcript};

/// Parses a `POST …/messages` request body.
///
/// `system` (a string or text blocks) is [`Transcript::system`]. A user
/// message's `tool_result` blocks form a [`Role::Tool`] turn; its text
/// blocks (Claude Code's `<system-reminder>`s, loopguard's own warning) a
/// [`Role::User`] turn after it. A `tool_result`'s `is_error` is kept.
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
    split_with(body, "messages", head, parse_items)
}

/// [`split_request`] taken up again after items an earlier body had (see
/// [`crate::dialect::split::resume_with`]).
///
/// # Errors
/// As [`crate::dialect::split::resume_with`]: the caller splits in full.
pub fn resume_request(body: &[u8], from: Resume) -> Result<SplitRequest<'_>, DialectError> {
    resume_with(body, "messages", head, parse_items, from)
}

/// Everything but the history: system text, declared tools, flags.
fn head(root: &Map<String, Value>) -> ParsedRequest {
    ParsedRequest {
        transcript: Transcript {
            system: text_of(root.get("system")),
            tools: root
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|t| t.get("name").and_then(Value::as_str))
                .map(str::to_owned)
                .collect(),
            ..Transcript::default()
        },
        stream: root.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_usage: false,
        model: root.get("model").and_then(Value::as_str).map(str::to_owned),
        summarizer: false,
        responses: None,
        ids: crate::dialect::BodyIds::of(root),
    }
}

/// Parses `messages`, given the parses of the messages before them
/// (`before`, whose calls name the tool of a later `tool_result`).
fn parse_items(before: &[HistoryItem], messages: &[Value]) -> Vec<HistoryItem> {
    let mut names: HashMap<String, String> = HashMap::new();
    let earlier = before.iter().flat_map(HistoryItem::messages);
    for call in earlier.flat_map(|m| m.tool_calls.iter()) {
        if let Some(id) = &call.id {
            names.insert(id.clone(), call.name.clone());
        }
    }
    let mut out = Vec::with_capacity(messages.len());
    for message in messages {
        let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
        let content = message.get("content");
        out.push(match role {
            "assistant" => HistoryItem::Message(assistant_message(content, &mut names)),
            "user" => {
                let mut turns = Vec::new();
                user_messages(content, &names, &mut turns);
                HistoryItem::Messages(turns)
            }
            _ => HistoryItem::Message(Message::text(Role::System, text_of(content))),
        });
    }
    out
}

/// An assistant message: its text blocks and `tool_use` blocks, and its
/// server-side calls (`server_tool_use`, `mcp_tool_use`, marked
/// [`ToolCall::server`]) with their `*_tool_result` blocks as the turn's own
/// results (issue #12 point 10); `encrypted_*` fields are left out of them.
fn assistant_message(content: Option<&Value>, names: &mut HashMap<String, String>) -> Message {
    let mut out = Message::text(Role::Assistant, text_of(content));
    for block in blocks(content) {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or_default();
        if matches!(kind, "server_tool_use" | "mcp_tool_use") {
            let (id, name, input) = use_block(block, names);
            out.tool_calls
                .push(ToolCall::server_side(id, name, Arguments::Json(input)));
            continue;
        }
        if kind.ends_with("_tool_result") {
            let call_id = block
                .get("tool_use_id")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let mut result = block.get("content").cloned().unwrap_or(Value::Null);
            drop_encrypted(&mut result);
            let failed = block.get("is_error").and_then(Value::as_bool).unwrap_or(false)
                || result
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.ends_with("_error"));
            out.tool_results.push(ToolResult {
                name: call_id.as_ref().and_then(|id| names.get(id).cloned()),
                call_id,
                content: ResultContent::Json(result),
                is_error: failed,
            });
            continue;
        }
        if kind != "tool_use" {
            continue;
        }
        let (id, name, input) = use_block(block, names);
        out.tool_calls
            .push(ToolCall::new(id, name, Arguments::Json(input)));
    }
    out
}

/// A `tool_use`-shaped block's id, name and input (an empty object when
/// absent); the id's tool name is noted in `names` for its result.
fn use_block<'b>(block: &'b Value, names: &mut HashMap<String, String>) -> (Option<String>, &'b str, Value) {
    let id = block.get("id").and_then(Value::as_str).map(str::to_owned);
    let name = block.get("name").and_then(Value::as_str).unwrap_or_default();
    if let Some(id) = &id {
        names.insert(id.clone(), name.to_owned());
    }
    let input = block
        .get("input")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    (id, name, input)
}

/// A user message: a tool turn of its `tool_result` blocks (if any), then a
/// user turn of its text (if any).
fn user_messages(content: Option<&Value>, names: &HashMap<String, String>, out: &mut Vec<Message>) {
    let mut tool = Message::text(Role::Tool, "");
    for block in blocks(content) {
        if block.get("type").and_then(Value::as_str) != Some("tool_result") {
            continue;
        }
        let call_id = block
            .get("tool_use_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        tool.tool_results.push(ToolResult {
            name: call_id.as_ref().and_then(|id| names.get(id).cloned()),
            call_id,
            content: ResultContent::Text(text_of(block.get("content"))),
            is_error: block.get("is_error").and_then(Value::as_bool).unwrap_or(false),
        });
    }
    let text = text_of(content);
    let has_results = !tool.tool_results.is_empty();
    if has_results {
        out.push(tool);
    }
    if !has_results || !text.is_empty() {
        out.push(Message::text(Role::User, text));
    }
}

/// Removes `encrypted_*` fields (opaque, different on every call) at any depth.
fn drop_encrypted(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|k, _| !k.starts_with("encrypted_"));
            map.values_mut().for_each(drop_encrypted);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_encrypted),
        _ => {}
    }
}

fn blocks(content: Option<&Value>) -> impl Iterator<Item = &Value> {
    content.and_then(Value::as_array).into_iter().flatten()
}

/// Content as text: a string, or the `text` of its `text` blocks joined by
/// newlines (other blocks skipped).
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Where a Messages stream stands: what loopguard's own events must continue from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamState {
    /// The `message` object of `message_start` (id, model, usage).
    pub message: Option<Value>,
    /// The `usage` of the last `message_delta`.
    pub delta_usage: Option<Value>,
    /// The `index` of the last payload that had one.
    pub anchor: Option<u32>,
    /// The block started and not stopped yet: its index and type.
    pub open_block: Option<(u32, String)>,
    /// The number of blocks started so far (the next block's index).
    pub blocks: u32,
    /// The last payload started the open block (a cut at that payload drops
    /// its start with it).
    pub opened_by_last: bool,
}

impl StreamState {
    /// The block the client has open and the next free index, when the
    /// generation is cut at the last payload (whose bytes are dropped).
    pub fn before_last(&self) -> (Option<&(u32, String)>, u32) {
        block_before_last(self.open_block.as_ref(), self.blocks, self.opened_by_last)
    }
}

/// [`StreamState::before_last`] of a stream whose block `open` is open,
/// `blocks` started, and whose last payload opened `open` or not: no block
/// and one index less when it did (its bytes dropped, the block never
/// opened), else `open` and `blocks`. Bedrock's Converse streams count
/// their blocks the same way.
pub(crate) fn block_before_last(
    open: Option<&(u32, String)>,
    blocks: u32,
    opened_by_last: bool,
) -> (Option<&(u32, String)>, u32) {
    if opened_by_last {
        (None, blocks.saturating_sub(1))
    } else {
        (open, blocks)
    }
}

/// Incremental parser for one Messages response, streamed or whole.
#[derive(Debug, Default)]
pub struct ResponseParser {
    /// `tool_use` blocks being streamed: block index → (position, call parts).
    calls: HashMap<u32, PendingCall>,
    next_position: u32,
    state: StreamState,
}

/// A `tool_use` block being streamed.
#[derive(Debug)]
struct PendingCall {
    position: u32,
    id: String,
    name: String,
    input: Value,
    partial: String,
}

impl PendingCall {
    /// The call a `content_block_start` opens, at `position` among the calls.
    fn start(position: u32, block: &Value) -> Self {
        Self {
            position,
            id: block
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            name: block
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            input: block.get("input").cloned().unwrap_or(Value::Null),
            partial: String::new(),
        }
    }
}

impl ResponseParser {
    /// Where the stream stands after the last payload.
    pub fn state(&self) -> &StreamState {
        &self.state
    }

    /// Parses one payload (an SSE `data` field, or a whole message body):
    /// notes its block index, then handles it by its `type`.
    ///
    /// # Errors
    /// [`DialectError::Json`] when the payload is not JSON,
    /// [`DialectError::Shape`] when it is not an object.
    pub fn payload(&mut self, payload: &str, out: &mut Vec<StreamEvent>) -> Result<(), DialectError> {
        let event = crate::dialect::payload_object(payload)?;
        let index = event
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| u32::try_from(i).ok());
        self.state.anchor = index;
        self.state.opened_by_last = false;
        match event.get("type").and_then(Value::as_str).unwrap_or_default() {
            "message_start" => self.state.message = event.get("message").cloned(),
            "message" => self.whole(&event, out),
            "content_block_start" => self.block_start(&event, index, out),
            "content_block_delta" => self.block_delta(&event, index, out),
            "content_block_stop" => self.block_stop(index, out),
            "message_delta" => self.message_delta(&event, out),
            "message_stop" => {
                self.complete_all(out);
                out.push(StreamEvent::Done);
            }
            "error" => out.push(error(&event)),
            _ => {}
        }
        Ok(())
    }

    /// `content_block_start`: the block opens (at `index`, else the next
    /// free one); a `tool_use` block starts a call at the next position, a
    /// `text` / `thinking` block may carry its first text.
    fn block_start(&mut self, event: &Map<String, Value>, index: Option<u32>, out: &mut Vec<StreamEvent>) {
        let block = event.get("content_block").unwrap_or(&Value::Null);
        let kind = block.get("type").and_then(Value::as_str).unwrap_or_default();
        let i = index.unwrap_or(self.state.blocks);
        self.state.open_block = Some((i, kind.to_owned()));
        self.state.opened_by_last = true;
        self.state.blocks = self.state.blocks.max(i.saturating_add(1));
        match kind {
            "tool_use" => {
                let position = self.next_position;
                self.next_position += 1;
                self.calls.insert(i, PendingCall::start(position, block));
                out.push(StreamEvent::ToolCallDelta {
                    choice: 0,
                    index: position,
                    arguments_delta: String::new(),
                });
            }
            "text" => push_text(block.get("text"), false, out),
            "thinking" => push_text(block.get("thinking"), true, out),
            _ => {}
        }
    }

    /// `content_block_delta`: text or thinking, or a part of a streaming
    /// call's `partial_json`.
    fn block_delta(&mut self, event: &Map<String, Value>, index: Option<u32>, out: &mut Vec<StreamEvent>) {
        let delta = event.get("delta").unwrap_or(&Value::Null);
        match delta.get("type").and_then(Value::as_str).unwrap_or_default() {
            "text_delta" => push_text(delta.get("text"), false, out),
            "thinking_delta" => push_text(delta.get("thinking"), true, out),
            "input_json_delta" => {
                if let Some(call) = index.and_then(|i| self.calls.get_mut(&i)) {
                    let part = delta
                        .get("partial_json")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    call.partial.push_str(part);
                    out.push(StreamEvent::ToolCallDelta {
                        choice: 0,
                        index: call.position,
                        arguments_delta: part.to_owned(),
                    });
                }
            }
            _ => {}
        }
    }

    /// `content_block_stop`: the block closes; a call in it is complete.
    fn block_stop(&mut self, index: Option<u32>, out: &mut Vec<StreamEvent>) {
        if self.state.open_block.as_ref().map(|(i, _)| Some(*i)) == Some(index) {
            self.state.open_block = None;
        }
        if let Some(call) = index.and_then(|i| self.calls.remove(&i)) {
            out.push(complete(call));
        }
    }

    /// `message_delta`: usage, and with a `stop_reason` the open calls
    /// complete and the message finishes.
    fn message_delta(&mut self, event: &Map<String, Value>, out: &mut Vec<StreamEvent>) {
        if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
            self.state.delta_usage = Some(usage.clone());
            out.push(StreamEvent::Usage { usage: usage.clone() });
        }
        if let Some(reason) = event
            .get("delta")
            .and_then(|d| d.get("stop_reason"))
            .and_then(Value::as_str)
        {
            self.complete_all(out);
            out.push(StreamEvent::Finish {
                choice: 0,
                reason: reason.to_owned(),
            });
        }
    }

    /// A whole (non-streaming) message.
    fn whole(&mut self, message: &Map<String, Value>, out: &mut Vec<StreamEvent>) {
        let mut position = 0;
        for block in blocks(message.get("content")) {
            match block.get("type").and_then(Value::as_str).unwrap_or_default() {
                "text" => push_text(block.get("text"), false, out),
                "thinking" => push_text(block.get("thinking"), true, out),
                "tool_use" => {
                    let input = block
                        .get("input")
                        .cloned()
                        .unwrap_or_else(|| Value::Object(Map::new()));
                    let id = block.get("id").and_then(Value::as_str).map(str::to_owned);
                    let name = block.get("name").and_then(Value::as_str).unwrap_or_default();
                    let call = ToolCall::new(id, name, Arguments::Json(input));
                    crate::dialect::push_whole_call(out, position, call);
                    position += 1;
                }
                _ => {}
            }
        }
        if let Some(usage) = message.get("usage").filter(|u| u.is_object()) {
            out.push(StreamEvent::Usage { usage: usage.clone() });
        }
        if let Some(reason) = message.get("stop_reason").and_then(Value::as_str) {
            out.push(StreamEvent::Finish {
                choice: 0,
                reason: reason.to_owned(),
            });
        }
        self.state.message = Some(Value::Object(message.clone()));
    }

    fn complete_all(&mut self, out: &mut Vec<StreamEvent>) {
        let mut open: Vec<PendingCall> = self.calls.drain().map(|(_, c)| c).collect();
        open.sort_by_key(|c| c.position);
        out.extend(open.into_iter().map(complete));
    }

    /// The body ended: completes `tool_use` blocks still open.
    pub fn end(&mut self, out: &mut Vec<StreamEvent>) {
        self.complete_all(out);
    }
}

/// A finished `tool_use` block: its streamed `partial_json` assembled, else
/// the `input` its start carried.
fn complete(call: PendingCall) -> StreamEvent {
    let arguments = if call.partial.trim().is_empty() {
        match call.input {
            Value::Null => Arguments::Json(Value::Object(Map::new())),
            input => Arguments::Json(input),
        }
    } else {
        Arguments::from_json_str(&call.partial)
    };
    let id = (!call.id.is_empty()).then_some(call.id);
    StreamEvent::ToolCallComplete {
        choice: 0,
        index: call.position,
        call: ToolCall::new(id, call.name, arguments),
    }
}

/// An `error` event: its `error.message`.
fn error(event: &Map<String, Value>) -> StreamEvent {
    let message = event
        .get("error")
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("error")
        .to_owned();
    StreamEvent::Error { message }
}

fn push_text(text: Option<&Value>, reasoning: bool, out: &mut Vec<StreamEvent>) {
    let Some(text) = text.and_then(Value::as_str).filter(|t| !t.is_empty()) else {
        return;
    };
    let text = text.to_owned();
    out.push(if reasoning {
        StreamEvent::ReasoningDelta { choice: 0, text }
    } else {
        StreamEvent::TextDelta { choice: 0, text }
    });
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
#[path = "parse_tests.rs"]
mod tests;
