//! Actions rendered for `openai-responses`: warning injection, block answers,
//! abort errors, and stream endings that replace withheld call items.
//!
//! Every event loopguard writes is a named SSE event whose `data` repeats
//! the name in `type` and carries a `sequence_number` continuing the
//! upstream's (strictly increasing); replaced items keep `output_index`
//! contiguous, and `response.completed` lists exactly the items the client
//! received.

use serde_json::{Value, json};

use crate::dialect::openai_responses::{OpenText, StreamState, is_client_call};
use crate::dialect::write::{Answer, Mode, random_id};

/// Appends `warning` to the `output` of the last call-output item
/// (`function_call_output`, `custom_tool_call_output`, …): to the string, or
/// as an `input_text` part when the output is a list of parts. A new user
/// item would start a new turn and can drop the reasoning items since the
/// last one, so the warning never goes there. Returns `false` when `input`
/// has no call output.
pub fn inject_warning(body: &mut Value, warning: &str) -> bool {
    let Some(items) = body.get_mut("input").and_then(Value::as_array_mut) else {
        return false;
    };
    let Some(last) = items.iter_mut().rev().find(|item| {
        item.get("type")
            .and_then(Value::as_str)
            .and_then(|k| k.strip_suffix("_output"))
            .is_some_and(is_client_call)
    }) else {
        return false;
    };
    match last.get_mut("output") {
        Some(Value::String(text)) => {
            text.push_str("\n\n");
            text.push_str(warning);
        }
        Some(Value::Array(parts)) => parts.push(json!({"type": "input_text", "text": warning})),
        _ => last["output"] = json!(warning),
    }
    true
}

/// `{"error":{"message","type":"invalid_request_error","code":"loop_detected","param":null}}`.
pub fn abort_body(message: &str) -> Vec<u8> {
    crate::dialect::openai_chat::write::abort_body(message)
}

/// Writes named SSE events with consecutive sequence numbers.
struct Writer {
    sequence: u64,
    out: Vec<u8>,
}

impl Writer {
    fn new(sequence: u64) -> Self {
        Self {
            sequence,
            out: Vec::new(),
        }
    }

    fn emit(&mut self, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence = self.sequence.saturating_add(1);
        self.out
            .extend(format!("event: {kind}\ndata: {data}\n\n").into_bytes());
    }

    /// A complete assistant message item at `output_index` carrying `text`;
    /// returns the finished item.
    fn message_item(&mut self, output_index: u32, text: &str) -> Value {
        let id = format!("msg_loopguard_{}", random_id());
        let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
        self.emit(
            "response.output_item.added",
            json!({"output_index": output_index, "item": {
                "id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
        );
        self.emit(
            "response.content_part.added",
            json!({"item_id": id, "output_index": output_index, "content_index": 0, "part": part("")}),
        );
        let delta = json!({"item_id": id, "output_index": output_index, "content_index": 0, "delta": text, "logprobs": []});
        self.emit("response.output_text.delta", delta);
        self.emit(
            "response.output_text.done",
            json!({"item_id": id, "output_index": output_index, "content_index": 0, "text": text, "logprobs": []}),
        );
        self.emit(
            "response.content_part.done",
            json!({"item_id": id, "output_index": output_index, "content_index": 0, "part": part(text)}),
        );
        let item = message(&id, text);
        self.emit(
            "response.output_item.done",
            json!({"output_index": output_index, "item": item}),
        );
        item
    }

    /// Closes a message item whose text was streaming, adding `note` to it.
    fn close_text(&mut self, open: &OpenText, note: &str) -> Value {
        let text = format!("{}{note}", open.text_before_last());
        let (id, index, content) = (&open.item_id, open.output_index, open.content_index);
        self.emit(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": content, "delta": note, "logprobs": []}),
        );
        self.emit(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": content, "text": text, "logprobs": []}),
        );
        self.emit(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": content,
                "part": {"type": "output_text", "text": text, "annotations": []}}),
        );
        let item = message(id, &text);
        self.emit(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        item
    }
}

fn message(id: &str, text: &str) -> Value {
    json!({"id": id, "type": "message", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A `response` object loopguard made up (request-time block).
fn fresh_response(model: &str) -> Value {
    json!({
        "id": format!("resp_loopguard_{}", random_id()), "object": "response", "created_at": now_secs(),
        "status": "in_progress", "error": null, "incomplete_details": null, "model": model,
        "output": [], "parallel_tool_calls": true, "tools": [], "usage": null,
    })
}

fn zero_usage() -> Value {
    json!({"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0})
}

/// `base` completed with `output` (usage kept when it has one).
fn completed(base: &Value, output: Vec<Value>) -> Value {
    let mut response = base.clone();
    response["status"] = json!("completed");
    response["output"] = Value::Array(output);
    response["error"] = Value::Null;
    response["incomplete_details"] = Value::Null;
    if !response.get("usage").is_some_and(Value::is_object) {
        response["usage"] = zero_usage();
    }
    response
}

/// A complete answer with `message` as the assistant's text: a `response`
/// object, or the whole stream `response.created` … `response.completed`.
pub fn block_answer(mode: Mode, model: &str, message_text: &str) -> Answer {
    let base = fresh_response(model);
    match mode {
        Mode::Whole => {
            let item = message(&format!("msg_loopguard_{}", random_id()), message_text);
            Answer {
                content_type: "application/json",
                body: completed(&base, vec![item]).to_string().into_bytes(),
            }
        }
        Mode::Sse | Mode::JsonArray | Mode::Ndjson | Mode::EventStream => {
            let mut w = Writer::new(0);
            w.emit("response.created", json!({"response": base}));
            w.emit("response.in_progress", json!({"response": base}));
            let item = w.message_item(0, message_text);
            w.emit(
                "response.completed",
                json!({"response": completed(&base, vec![item])}),
            );
            Answer {
                content_type: "text/event-stream",
                body: w.out,
            }
        }
    }
}

/// A non-streaming answer whose client calls are withheld: the upstream's
/// `response` (id, model, usage, its messages and reasoning items) with
/// those items replaced by one assistant message carrying `message_text`
/// (`drop_text`: its messages replaced too; reasoning items stay). `None`
/// when no whole response was parsed.
pub fn block_whole(state: &StreamState, message_text: &str, drop_text: bool) -> Option<Vec<u8>> {
    let base = state.terminal.as_ref()?;
    let mut output: Vec<Value> = base
        .get("output")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|item| {
            let kind = item.get("type").and_then(Value::as_str);
            let withheld = kind.is_some_and(is_client_call);
            let dropped = drop_text && kind == Some("message");
            !withheld && !dropped
        })
        .cloned()
        .collect();
    output.push(message(&format!("msg_loopguard_{}", random_id()), message_text));
    Some(completed(base, output).to_string().into_bytes())
}

/// The items the client received: those completed before output index
/// `before` (all of them for `None`).
fn items_before(state: &StreamState, before: Option<u32>) -> Vec<Value> {
    state
        .done_items
        .iter()
        .filter(|(i, _)| before.is_none_or(|held| *i < held))
        .map(|(_, item)| item.clone())
        .collect()
}

/// The output index after the last one the stream used.
fn next_output_index(state: &StreamState) -> u32 {
    state.max_output_index.map_or(0, |m| m.saturating_add(1))
}

/// The `sequence_number` loopguard's first event takes: the first held
/// event's, else the one after the last the client received.
fn first_sequence(state: &StreamState, held_sequence: Option<u64>) -> u64 {
    held_sequence
        .or_else(|| state.last_sequence.map(|s| s.saturating_add(1)))
        .unwrap_or(0)
}

/// The response object a stream ending completes: the upstream's terminal
/// one, else the one it opened with, else a made-up one.
fn base_of(state: &StreamState) -> Value {
    // Only an object can be completed or failed: an upstream whose
    // `response` is anything else gets one made up (found by fuzzing: a
    // string `response` panicked the cut).
    [&state.terminal, &state.response]
        .into_iter()
        .find_map(|r| r.as_ref().filter(|v| v.is_object()).cloned())
        .unwrap_or_else(|| fresh_response(""))
}

/// The events that replace withheld call items, from the first held event
/// on: its `sequence_number` and `output_index` (`held_sequence`,
/// `held_index`) are taken over by an assistant message item carrying the
/// explanation, then `response.completed` lists the items released before
/// plus that message.
pub fn block_stream_ending(
    state: &StreamState,
    held_sequence: Option<u64>,
    held_index: Option<u32>,
    message_text: &str,
) -> Vec<u8> {
    let index = held_index.unwrap_or_else(|| next_output_index(state));
    let mut output = items_before(state, Some(index));
    let mut w = Writer::new(first_sequence(state, held_sequence));
    output.push(w.message_item(index, message_text));
    w.emit(
        "response.completed",
        json!({"response": completed(&base_of(state), output)}),
    );
    w.out
}

/// The events that end a generation cut short (content detectors): the
/// message item whose text was streaming gets `note` and is closed (or a new
/// one carries it), then `response.completed`.
pub fn cut_ending(state: &StreamState, note: &str) -> Vec<u8> {
    let mut output = items_before(state, None);
    let mut w = Writer::new(first_sequence(state, None));
    let item = match &state.open_text {
        Some(open) => w.close_text(open, &format!("\n\n{note}")),
        None => w.message_item(next_output_index(state), note),
    };
    output.push(item);
    w.emit(
        "response.completed",
        json!({"response": completed(&base_of(state), output)}),
    );
    w.out
}

/// The in-stream ending of an abort after headers went out: the `error`
/// event, then `response.failed` carrying the same error and listing only
/// the items the client received. Codex ignores a bare `error` event (and
/// then fails only after retrying the whole request for "stream closed
/// before response.completed"); it reports `response.failed`. When calls
/// were held, the events take the place of the first held one
/// (`held_sequence`, `held_index`), as a block's would.
pub fn stream_error_event(
    state: &StreamState,
    held_sequence: Option<u64>,
    held_index: Option<u32>,
    message_text: &str,
) -> Vec<u8> {
    let mut w = Writer::new(first_sequence(state, held_sequence));
    w.emit(
        "error",
        json!({"code": "loop_detected", "message": message_text, "param": null}),
    );
    let mut response = base_of(state);
    response["status"] = json!("failed");
    response["error"] = json!({"code": "loop_detected", "message": message_text});
    response["output"] = Value::Array(items_before(state, held_index));
    w.emit("response.failed", json!({"response": response}));
    w.out
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
#[path = "write_tests.rs"]
mod tests;
