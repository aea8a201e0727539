//! `bedrock-converse`: request body → [`Transcript`], `Converse` answers
//! and `ConverseStream` events → [`StreamEvent`]s (shapes in the module
//! above).
//!
//! A user message's `toolResult` blocks form a [`Role::Tool`] turn, its
//! `text` blocks a [`Role::User`] turn after it (as Anthropic's, which
//! Converse mirrors); a `toolResult`'s `status: "error"` is its error mark.
//! `reasoningContent`, `image`, `document`, `cachePoint` and other blocks
//! are not text and are skipped. Reading is lenient; nothing is written
//! back from here.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::dialect::split::{HistoryItem, Resume, SplitRequest, parse_whole, resume_with, split_with};
use crate::dialect::{DialectError, ParsedRequest, StreamEvent};
use crate::transcript::{Arguments, Message, ResultContent, Role, ToolCall, ToolResult, Transcript};

/// Parses a `Converse` / `ConverseStream` request body.
///
/// # Errors
/// [`DialectError::Json`] when the body is not JSON; [`DialectError::Shape`]
/// when it is not an object or has no `messages` array.
pub fn parse_request(body: &[u8]) -> Result<ParsedRequest, DialectError> {
    parse_whole(body, "messages", head, parse_items)
}

/// Splits a request body into its envelope and raw `messages[]` (see
/// [`crate::dialect::split`]); the items parse as in [`parse_request`].
///
/// # Errors
/// As [`crate::dialect::split::split_object`]: the caller falls back to [`parse_request`].
pub fn split_request(body: &[u8]) -> Result<SplitRequest<'_>, DialectError> {
    split_with(body, "messages", head, parse_items)
}

/// [`split_request`] taken up again after items an earlier body had.
///
/// # Errors
/// As [`crate::dialect::split::resume_with`]: the caller splits in full.
pub fn resume_request(body: &[u8], from: Resume) -> Result<SplitRequest<'_>, DialectError> {
    resume_with(body, "messages", head, parse_items, from)
}

/// Everything but the history: the `system` blocks' text, the tools of
/// `toolConfig.tools[].toolSpec`. The model is in the path, and whether
/// the answer streams is said by the path (`converse-stream`).
fn head(root: &Map<String, Value>) -> ParsedRequest {
    let tools = root
        .get("toolConfig")
        .and_then(|c| c.get("tools"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("toolSpec")?.get("name")?.as_str())
        .map(str::to_owned)
        .collect();
    ParsedRequest {
        transcript: Transcript {
            system: text_of(root.get("system")),
            tools,
            ..Transcript::default()
        },
        stream: false,
        include_usage: false,
        model: None,
        summarizer: false,
        responses: None,
        ids: crate::dialect::BodyIds::of(root),
    }
}

/// Parses `messages`, given the parses of the messages before them (whose
/// `toolUse` blocks name the tool of a later `toolResult`).
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
            "user" => HistoryItem::Messages(user_messages(content, &names)),
            _ => HistoryItem::Message(Message::text(Role::System, text_of(content))),
        });
    }
    out
}

/// An assistant message: its `text` blocks and its `toolUse` calls.
fn assistant_message(content: Option<&Value>, names: &mut HashMap<String, String>) -> Message {
    let mut out = Message::text(Role::Assistant, text_of(content));
    for tool_use in blocks(content).filter_map(|b| b.get("toolUse")) {
        let id = tool_use
            .get("toolUseId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let name = tool_use.get("name").and_then(Value::as_str).unwrap_or_default();
        if let Some(id) = &id {
            names.insert(id.clone(), name.to_owned());
        }
        let input = match tool_use.get("input") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(input) => input.clone(),
        };
        out.tool_calls
            .push(ToolCall::new(id, name, Arguments::Json(input)));
    }
    out
}

/// A user message: a tool turn of its `toolResult` blocks (if any), then a
/// user turn of its text (if any, or if there are no results).
fn user_messages(content: Option<&Value>, names: &HashMap<String, String>) -> Vec<Message> {
    let mut tool = Message::text(Role::Tool, "");
    for result in blocks(content).filter_map(|b| b.get("toolResult")) {
        let call_id = result.get("toolUseId").and_then(Value::as_str).map(str::to_owned);
        tool.tool_results.push(ToolResult {
            name: call_id.as_ref().and_then(|id| names.get(id).cloned()),
            call_id,
            content: result_content(result.get("content")),
            is_error: result.get("status").and_then(Value::as_str) == Some("error"),
        });
    }
    let mut out = Vec::with_capacity(2);
    let text = text_of(content);
    let has_results = !tool.tool_results.is_empty();
    if has_results {
        out.push(tool);
    }
    if !has_results || !text.is_empty() {
        out.push(Message::text(Role::User, text));
    }
    out
}

/// A `toolResult`'s `content`: its `text` blocks joined when it has no
/// `json` block; its one `json` block's value when that is all it has;
/// else the whole content array.
fn result_content(content: Option<&Value>) -> ResultContent {
    let jsons: Vec<&Value> = blocks(content).filter_map(|b| b.get("json")).collect();
    match jsons.as_slice() {
        [] => ResultContent::Text(text_of(content)),
        [only] if blocks(content).count() == 1 => ResultContent::Json((*only).clone()),
        _ => ResultContent::Json(content.cloned().unwrap_or(Value::Null)),
    }
}

fn blocks(content: Option<&Value>) -> impl Iterator<Item = &Value> {
    content.and_then(Value::as_array).into_iter().flatten()
}

/// The `text` of the `text` blocks, joined by newlines (a bare string is
/// taken as is, leniently).
fn text_of(content: Option<&Value>) -> String {
    if let Some(Value::String(text)) = content {
        return text.clone();
    }
    blocks(content)
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where a `ConverseStream` stands: what loopguard's own events continue.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamState {
    /// The `contentBlockIndex` of the last payload that had one.
    pub anchor: Option<u32>,
    /// The block open for the client (a text block opens with its first
    /// delta, a tool block with `contentBlockStart`): index and kind
    /// (`text`, `toolUse`, `reasoningContent`).
    pub open_block: Option<(u32, String)>,
    /// The next free `contentBlockIndex`.
    pub blocks: u32,
    /// The last payload opened the open block (a cut at that payload drops
    /// its opening with it).
    pub opened_by_last: bool,
    /// The `usage` of `metadata`, or of a whole answer.
    pub usage: Option<Value>,
    /// A whole `Converse` answer, as the upstream sent it.
    pub whole: Option<Value>,
}

impl StreamState {
    /// The block the client has open and the next free index when the
    /// generation is cut at the last payload (whose bytes are dropped).
    pub fn before_last(&self) -> (Option<&(u32, String)>, u32) {
        crate::dialect::anthropic::parse::block_before_last(
            self.open_block.as_ref(),
            self.blocks,
            self.opened_by_last,
        )
    }
}

/// Incremental parser for one answer: `ConverseStream` payloads
/// (`{"<event-type>": …}`, see [`super::payload_of`]) or a whole
/// `Converse` answer (`{"output": …}`).
#[derive(Debug, Default)]
pub struct ResponseParser {
    /// `toolUse` blocks being streamed: block index → call.
    calls: HashMap<u32, PendingCall>,
    next_position: u32,
    state: StreamState,
}

/// A `toolUse` block being streamed.
#[derive(Debug)]
struct PendingCall {
    position: u32,
    id: String,
    name: String,
    input: String,
}

impl ResponseParser {
    /// Where the stream stands after the last payload.
    pub fn state(&self) -> &StreamState {
        &self.state
    }

    /// Parses one payload.
    ///
    /// # Errors
    /// [`DialectError`] when it is not a JSON object.
    pub fn payload(&mut self, payload: &str, out: &mut Vec<StreamEvent>) -> Result<(), DialectError> {
        let object = crate::dialect::payload_object(payload)?;
        self.state.opened_by_last = false;
        if object.contains_key("output") {
            self.whole(&object, out);
            return Ok(());
        }
        for (kind, event) in &object {
            let index = event
                .get("contentBlockIndex")
                .and_then(Value::as_u64)
                .and_then(|i| u32::try_from(i).ok());
            self.state.anchor = index;
            match kind.as_str() {
                "contentBlockStart" => self.block_start(event, index, out),
                "contentBlockDelta" => self.block_delta(event, index, out),
                "contentBlockStop" => self.block_stop(index, out),
                "messageStop" => {
                    self.complete_all(out);
                    let reason = event.get("stopReason").and_then(Value::as_str);
                    out.push(StreamEvent::Finish {
                        choice: 0,
                        reason: reason.unwrap_or("end_turn").to_owned(),
                    });
                }
                "metadata" => {
                    if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
                        self.state.usage = Some(usage.clone());
                        out.push(StreamEvent::Usage { usage: usage.clone() });
                    }
                    out.push(StreamEvent::Done);
                }
                exception if exception.ends_with("Exception") || exception == "exception" => {
                    let message = event.get("message").and_then(Value::as_str);
                    out.push(StreamEvent::Error {
                        message: message.map_or_else(|| event.to_string(), str::to_owned),
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Notes block `i` (of `kind`) open when it is not yet.
    fn open(&mut self, i: u32, kind: &str) {
        if self.state.open_block.as_ref().is_some_and(|(open, _)| *open == i) {
            return;
        }
        self.state.open_block = Some((i, kind.to_owned()));
        self.state.opened_by_last = true;
        self.state.blocks = self.state.blocks.max(i.saturating_add(1));
    }

    /// `contentBlockStart`: a `toolUse` start opens a call at the next position.
    fn block_start(&mut self, event: &Value, index: Option<u32>, out: &mut Vec<StreamEvent>) {
        let i = index.unwrap_or(self.state.blocks);
        let Some(tool_use) = event.get("start").and_then(|s| s.get("toolUse")) else {
            self.open(i, "other");
            return;
        };
        self.open(i, "toolUse");
        let text = |key: &str| {
            tool_use
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let position = self.next_position;
        self.next_position += 1;
        let call = PendingCall {
            position,
            id: text("toolUseId"),
            name: text("name"),
            input: String::new(),
        };
        self.calls.insert(i, call);
        out.push(StreamEvent::ToolCallDelta {
            choice: 0,
            index: position,
            arguments_delta: String::new(),
        });
    }

    /// `contentBlockDelta`: text, reasoning text, or a fragment of a call's
    /// `input` (JSON text).
    fn block_delta(&mut self, event: &Value, index: Option<u32>, out: &mut Vec<StreamEvent>) {
        let i = index.unwrap_or(self.state.blocks);
        let delta = event.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta.get("text").and_then(Value::as_str) {
            self.open(i, "text");
            push_text(text, false, out);
        } else if let Some(reasoning) = delta.get("reasoningContent") {
            self.open(i, "reasoningContent");
            push_text(
                reasoning.get("text").and_then(Value::as_str).unwrap_or_default(),
                true,
                out,
            );
        } else if let Some(part) = delta.get("toolUse").and_then(|t| t.get("input")) {
            if let Some(call) = self.calls.get_mut(&i) {
                let part = part.as_str().unwrap_or_default();
                call.input.push_str(part);
                out.push(StreamEvent::ToolCallDelta {
                    choice: 0,
                    index: call.position,
                    arguments_delta: part.to_owned(),
                });
            }
        }
    }

    /// `contentBlockStop`: the block closes; a call in it is complete.
    fn block_stop(&mut self, index: Option<u32>, out: &mut Vec<StreamEvent>) {
        if self.state.open_block.as_ref().map(|(i, _)| Some(*i)) == Some(index) {
            self.state.open_block = None;
        }
        if let Some(call) = index.and_then(|i| self.calls.remove(&i)) {
            out.push(complete(call));
        }
    }

    /// A whole `Converse` answer: its message's blocks, usage and stop reason.
    fn whole(&mut self, answer: &Map<String, Value>, out: &mut Vec<StreamEvent>) {
        let content = answer
            .get("output")
            .and_then(|o| o.get("message"))
            .and_then(|m| m.get("content"));
        let mut position = 0;
        for block in blocks(content) {
            if let Some(text) = block.get("text").and_then(Value::as_str) {
                push_text(text, false, out);
            } else if let Some(reasoning) = block.get("reasoningContent") {
                let text = reasoning.pointer("/reasoningText/text").and_then(Value::as_str);
                push_text(text.unwrap_or_default(), true, out);
            } else if block.get("toolUse").is_some() {
                let mut names = HashMap::new();
                let message = assistant_message(Some(&Value::Array(vec![block.clone()])), &mut names);
                for call in message.tool_calls {
                    crate::dialect::push_whole_call(out, position, call);
                    position += 1;
                }
            }
        }
        if let Some(usage) = answer.get("usage").filter(|u| u.is_object()) {
            self.state.usage = Some(usage.clone());
            out.push(StreamEvent::Usage { usage: usage.clone() });
        }
        if let Some(reason) = answer.get("stopReason").and_then(Value::as_str) {
            out.push(StreamEvent::Finish {
                choice: 0,
                reason: reason.to_owned(),
            });
        }
        self.state.whole = Some(Value::Object(answer.clone()));
    }

    fn complete_all(&mut self, out: &mut Vec<StreamEvent>) {
        let mut open: Vec<PendingCall> = self.calls.drain().map(|(_, c)| c).collect();
        open.sort_by_key(|c| c.position);
        out.extend(open.into_iter().map(complete));
    }

    /// The body ended: completes `toolUse` blocks still open.
    pub fn end(&mut self, out: &mut Vec<StreamEvent>) {
        self.complete_all(out);
    }
}

/// A finished `toolUse` block, its streamed `input` fragments assembled.
fn complete(call: PendingCall) -> StreamEvent {
    let id = (!call.id.is_empty()).then_some(call.id);
    StreamEvent::ToolCallComplete {
        choice: 0,
        index: call.position,
        call: ToolCall::new(id, call.name, Arguments::from_json_str(&call.input)),
    }
}

fn push_text(text: &str, reasoning: bool, out: &mut Vec<StreamEvent>) {
    if text.is_empty() {
        return;
    }
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
