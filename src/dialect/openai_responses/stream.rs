//! The `openai-responses` stream parser: named SSE events (or one whole
//! `response` object) → [`StreamEvent`]s, and the [`StreamState`] that
//! loopguard's own events continue from.
//!
//! A stream is a sequence of named SSE events whose `data` repeats the event
//! name in `type` and carries a `sequence_number`; there is no `[DONE]`.
//! Calls are correlated by `output_index` (and `item_id`), never by `call_id`.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::parse::{call_of, content_text, is_client_call};
use crate::dialect::{DialectError, StreamEvent};

/// Where in the stream the last payload stood: what loopguard's own events
/// must continue from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamState {
    /// The `response` object of `response.created` / `response.in_progress`.
    pub response: Option<Value>,
    /// The `response` object of the terminal event (`response.completed`,
    /// `.incomplete`), with its usage.
    pub terminal: Option<Value>,
    /// Output items completed so far (`response.output_item.done`), with
    /// their `output_index`.
    pub done_items: Vec<(u32, Value)>,
    /// `sequence_number` of the last payload that had one.
    pub last_sequence: Option<u64>,
    /// `sequence_number` and `output_index` of the last payload.
    pub anchor: Anchor,
    /// The message item whose text is streaming, if one is open.
    pub open_text: Option<OpenText>,
    /// Highest `output_index` seen.
    pub max_output_index: Option<u32>,
}

/// Position of one payload in a Responses stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Anchor {
    /// Its `sequence_number`.
    pub sequence: Option<u64>,
    /// Its `output_index`.
    pub output_index: Option<u32>,
}

/// A message item whose `output_text` is streaming.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenText {
    /// The item's `id`.
    pub item_id: String,
    /// Its `output_index`.
    pub output_index: u32,
    /// The `content_index` of the text part.
    pub content_index: u32,
    /// The text so far, including the last payload's delta.
    pub text: String,
    /// Bytes of `text` the last payload added (0 when it added none): a cut
    /// at that payload drops them with it.
    pub last_delta: usize,
}

impl OpenText {
    /// The text the client received when the generation is cut at the last
    /// payload (whose bytes are dropped).
    pub fn text_before_last(&self) -> &str {
        self.text
            .get(..self.text.len().saturating_sub(self.last_delta))
            .unwrap_or_default()
    }
}

/// Incremental parser for one Responses response, streamed (named SSE
/// events) or not (one whole `response` object).
#[derive(Debug, Default)]
pub struct ResponseParser {
    /// Client calls being streamed: `output_index` → position among the calls.
    calls: HashMap<u32, u32>,
    next_position: u32,
    state: StreamState,
}

impl ResponseParser {
    /// Where the stream stands after the last payload.
    pub fn state(&self) -> &StreamState {
        &self.state
    }

    /// Parses one payload (an SSE `data` field, or a whole response body):
    /// notes its position, then handles it by its `type`.
    ///
    /// # Errors
    /// [`DialectError::Json`] when the payload is not JSON,
    /// [`DialectError::Shape`] when it is not an object.
    pub fn payload(&mut self, payload: &str, out: &mut Vec<StreamEvent>) -> Result<(), DialectError> {
        let body = crate::dialect::payload_object(payload)?;
        let event = Event::of(&body);
        self.note_position(&event);
        if event.kind.is_empty() && body.get("object").and_then(Value::as_str) == Some("response") {
            self.whole(&body, out);
            return Ok(());
        }
        match event.kind {
            "response.created" | "response.in_progress" => self.created(&event, out),
            "response.output_item.added" => self.item_added(&event, out),
            "response.output_text.delta" | "response.refusal.delta" => self.text_delta(&event, out),
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                reasoning_delta(&event, out);
            }
            "response.output_item.done" => self.item_done(&event, out),
            "response.completed" | "response.incomplete" => self.completed(&event, out),
            "response.failed" => out.push(failed(&event)),
            "error" => out.push(error(&event)),
            _ => self.call_part(&event, out),
        }
        Ok(())
    }

    /// Records where the payload stands ([`StreamState::anchor`], the last
    /// sequence number, the highest output index); the open text has no
    /// delta from it yet.
    fn note_position(&mut self, event: &Event<'_>) {
        self.state.anchor = Anchor {
            sequence: event.sequence,
            output_index: event.output_index,
        };
        if event.sequence.is_some() {
            self.state.last_sequence = event.sequence;
        }
        if let Some(i) = event.output_index {
            self.state.max_output_index = Some(self.state.max_output_index.map_or(i, |m| m.max(i)));
        }
        if let Some(open) = self.state.open_text.as_mut() {
            open.last_delta = 0;
        }
    }

    /// `response.created` / `.in_progress`: the response's id (once) and
    /// its `response` object.
    fn created(&mut self, event: &Event<'_>, out: &mut Vec<StreamEvent>) {
        let Some(response) = event.body.get("response") else {
            return;
        };
        if self.state.response.is_none() {
            if let Some(id) = response.get("id").and_then(Value::as_str) {
                out.push(StreamEvent::ResponseId { id: id.to_owned() });
            }
        }
        self.state.response = Some(response.clone());
    }

    /// `response.output_item.added`: a client call opens (it takes the next
    /// position among the calls), or a message item's text opens.
    fn item_added(&mut self, event: &Event<'_>, out: &mut Vec<StreamEvent>) {
        let item = event.body.get("item").unwrap_or(&Value::Null);
        let item_kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
        if let (true, Some(i)) = (is_client_call(item_kind), event.output_index) {
            let position = self.next_position;
            self.next_position += 1;
            self.calls.insert(i, position);
            out.push(StreamEvent::ToolCallDelta {
                choice: 0,
                index: position,
                arguments_delta: String::new(),
            });
        } else if item_kind == "message" {
            self.state.open_text = Some(OpenText {
                item_id: item
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                output_index: event.output_index.unwrap_or(0),
                content_index: 0,
                text: String::new(),
                last_delta: 0,
            });
        }
    }

    /// `response.output_text.delta` / `.refusal.delta`: the open text grows.
    fn text_delta(&mut self, event: &Event<'_>, out: &mut Vec<StreamEvent>) {
        let delta = event.delta();
        if let Some(open) = self.state.open_text.as_mut() {
            open.text.push_str(delta);
            open.last_delta = delta.len();
            open.content_index = event
                .body
                .get("content_index")
                .and_then(Value::as_u64)
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or(open.content_index);
        }
        if !delta.is_empty() {
            out.push(StreamEvent::TextDelta {
                choice: 0,
                text: delta.to_owned(),
            });
        }
    }

    /// `response.output_item.done`: the item closes (its text, or its call,
    /// which is complete now) and is kept among the done items.
    fn item_done(&mut self, event: &Event<'_>, out: &mut Vec<StreamEvent>) {
        let item = event.body.get("item").cloned().unwrap_or(Value::Null);
        let Some(i) = event.output_index else {
            return;
        };
        if self.state.open_text.as_ref().is_some_and(|o| o.output_index == i) {
            self.state.open_text = None;
        }
        if let Some(position) = self.calls.remove(&i) {
            if let Some(call) = call_of(&item) {
                out.push(StreamEvent::ToolCallComplete {
                    choice: 0,
                    index: position,
                    call,
                });
            }
        }
        self.state.done_items.push((i, item));
    }

    /// `response.completed` / `.incomplete`: open calls complete from the
    /// final output, then usage and the finish reason.
    fn completed(&mut self, event: &Event<'_>, out: &mut Vec<StreamEvent>) {
        let response = event.body.get("response").cloned().unwrap_or(Value::Null);
        self.complete_from(&response, out);
        if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
            out.push(StreamEvent::Usage { usage: usage.clone() });
        }
        let reason = response
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str)
            .or_else(|| response.get("status").and_then(Value::as_str))
            .unwrap_or(event.kind.trim_start_matches("response."))
            .to_owned();
        self.state.terminal = Some(response);
        out.push(StreamEvent::Finish { choice: 0, reason });
    }

    /// Any other event at the output index of a streaming call (argument /
    /// input deltas, `.done` events) is a part of that call.
    fn call_part(&self, event: &Event<'_>, out: &mut Vec<StreamEvent>) {
        if let Some(&position) = event.output_index.and_then(|i| self.calls.get(&i)) {
            let delta = if event.kind.ends_with(".delta") {
                event.delta()
            } else {
                ""
            };
            out.push(StreamEvent::ToolCallDelta {
                choice: 0,
                index: position,
                arguments_delta: delta.to_owned(),
            });
        }
    }

    /// Calls still open when the response ended (no `output_item.done`
    /// arrived for them) are completed from the final `response.output`,
    /// so they are judged like any other.
    fn complete_from(&mut self, response: &Value, out: &mut Vec<StreamEvent>) {
        let mut open: Vec<(u32, u32)> = self.calls.drain().collect();
        open.sort_by_key(|(_, position)| *position);
        let items = response.get("output").and_then(Value::as_array);
        for (output_index, position) in open {
            let item = usize::try_from(output_index)
                .ok()
                .and_then(|i| items.and_then(|items| items.get(i)));
            if let Some(call) = item.and_then(call_of) {
                out.push(StreamEvent::ToolCallComplete {
                    choice: 0,
                    index: position,
                    call,
                });
            }
        }
    }

    /// A whole (non-streaming) `response` object.
    fn whole(&mut self, response: &Map<String, Value>, out: &mut Vec<StreamEvent>) {
        if let Some(id) = response.get("id").and_then(Value::as_str) {
            out.push(StreamEvent::ResponseId { id: id.to_owned() });
        }
        let items = response
            .get("output")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        let mut position = 0;
        for item in items {
            let kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
            if kind == "message" {
                let text = content_text(item.get("content"));
                if !text.is_empty() {
                    out.push(StreamEvent::TextDelta { choice: 0, text });
                }
            } else if let Some(call) = call_of(item) {
                crate::dialect::push_whole_call(out, position, call);
                position += 1;
            }
        }
        if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
            out.push(StreamEvent::Usage { usage: usage.clone() });
        }
        let reason = response
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("completed")
            .to_owned();
        self.state.terminal = Some(Value::Object(response.clone()));
        out.push(StreamEvent::Finish { choice: 0, reason });
    }

    /// The body ended: nothing is completed by the end alone (a call without
    /// its `output_item.done` was cut off and never reaches the agent whole).
    pub fn end(&mut self, _out: &mut Vec<StreamEvent>) {}
}
/// One stream payload with the fields every event kind reads.
struct Event<'a> {
    /// The payload object.
    body: &'a Map<String, Value>,
    /// Its `type` (empty when it has none).
    kind: &'a str,
    /// Its `output_index`, when it has one that fits a `u32`.
    output_index: Option<u32>,
    /// Its `sequence_number`.
    sequence: Option<u64>,
}

impl<'a> Event<'a> {
    /// The fields of a payload object.
    fn of(body: &'a Map<String, Value>) -> Self {
        Self {
            body,
            kind: body.get("type").and_then(Value::as_str).unwrap_or_default(),
            output_index: body
                .get("output_index")
                .and_then(Value::as_u64)
                .and_then(|i| u32::try_from(i).ok()),
            sequence: body.get("sequence_number").and_then(Value::as_u64),
        }
    }

    /// Its `delta` string (empty when it has none).
    fn delta(&self) -> &'a str {
        self.body.get("delta").and_then(Value::as_str).unwrap_or_default()
    }
}

/// `response.reasoning_summary_text.delta` / `.reasoning_text.delta`.
fn reasoning_delta(event: &Event<'_>, out: &mut Vec<StreamEvent>) {
    let delta = event.delta();
    if !delta.is_empty() {
        out.push(StreamEvent::ReasoningDelta {
            choice: 0,
            text: delta.to_owned(),
        });
    }
}

/// `response.failed`: an error with the response's error message.
fn failed(event: &Event<'_>) -> StreamEvent {
    let message = event
        .body
        .get("response")
        .and_then(|r| r.pointer("/error/message"))
        .and_then(Value::as_str)
        .unwrap_or("response failed")
        .to_owned();
    StreamEvent::Error { message }
}

/// `error`: an error with its `message` (top-level or under `error`).
fn error(event: &Event<'_>) -> StreamEvent {
    let message = event
        .body
        .get("message")
        .or_else(|| event.body.get("error").and_then(|e| e.get("message")))
        .and_then(Value::as_str)
        .unwrap_or("error")
        .to_owned();
    StreamEvent::Error { message }
}
