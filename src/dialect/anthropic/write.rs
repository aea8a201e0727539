//! Actions rendered for `anthropic`: warning injection, block answers,
//! abort errors, and stream endings that replace withheld `tool_use` blocks.
//!
//! Block indices stay contiguous and ascending: the explanation takes the
//! index of the first withheld block, and the answer ends with
//! `stop_reason: "end_turn"`. `thinking` blocks already sent are never
//! touched (their signatures stay valid).

use serde_json::{Value, json};

use crate::dialect::anthropic::StreamState;
use crate::dialect::write::{Answer, Mode, random_id};

/// Adds `warning` as a `text` block after the `tool_result` blocks of the
/// last user message. Returns `false` when that message carries no tool
/// result (its content is a string, or has no `tool_result` block).
pub fn inject_warning(body: &mut Value, warning: &str) -> bool {
    let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
        return false;
    };
    let Some(last_user) = messages
        .iter_mut()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
    else {
        return false;
    };
    let Some(blocks) = last_user.get_mut("content").and_then(Value::as_array_mut) else {
        return false;
    };
    let has_result = blocks
        .iter()
        .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"));
    if has_result {
        blocks.push(json!({"type": "text", "text": warning}));
    }
    has_result
}

/// `{"type":"error","error":{"type":"invalid_request_error","message":…}}`.
pub fn abort_body(message: &str) -> Vec<u8> {
    error_value(message).to_string().into_bytes()
}

fn error_value(message: &str) -> Value {
    json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
}

fn event(out: &mut Vec<u8>, kind: &str, mut data: Value) {
    data["type"] = json!(kind);
    out.extend(format!("event: {kind}\ndata: {data}\n\n").into_bytes());
}

/// A text block at `index` carrying `text`, started, filled and stopped.
fn text_block(out: &mut Vec<u8>, index: u32, text: &str) {
    event(
        out,
        "content_block_start",
        json!({"index": index, "content_block": {"type": "text", "text": ""}}),
    );
    event(
        out,
        "content_block_delta",
        json!({"index": index, "delta": {"type": "text_delta", "text": text}}),
    );
    event(out, "content_block_stop", json!({"index": index}));
}

/// `message_delta` with `stop_reason: "end_turn"` and `usage`, then `message_stop`.
fn end_turn(out: &mut Vec<u8>, usage: Value) {
    event(
        out,
        "message_delta",
        json!({"delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": usage}),
    );
    event(out, "message_stop", json!({}));
}

/// A complete answer with `message` as the assistant's text: a `message`
/// object, or the whole stream `message_start` … `message_stop`.
pub fn block_answer(mode: Mode, model: &str, message: &str) -> Answer {
    let id = format!("msg_loopguard_{}", random_id());
    let usage = json!({"input_tokens": 0, "output_tokens": 0});
    match mode {
        Mode::Whole => Answer {
            content_type: "application/json",
            body: json!({
                "id": id, "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": message}],
                "stop_reason": "end_turn", "stop_sequence": null, "usage": usage,
            })
            .to_string()
            .into_bytes(),
        },
        Mode::Sse | Mode::JsonArray | Mode::Ndjson | Mode::EventStream => {
            let mut out = Vec::new();
            event(
                &mut out,
                "message_start",
                json!({"message": {"id": id, "type": "message", "role": "assistant", "model": model,
                    "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage}}),
            );
            text_block(&mut out, 0, message);
            end_turn(&mut out, json!({"output_tokens": 0}));
            Answer {
                content_type: "text/event-stream",
                body: out,
            }
        }
    }
}

/// A non-streaming answer whose `tool_use` blocks are withheld: the
/// upstream's message (id, model, usage, its text and thinking blocks) with
/// those blocks replaced by one text block carrying `message`, and
/// `stop_reason: "end_turn"` (`drop_text`: its text blocks replaced too;
/// thinking blocks stay). `None` when no whole message was parsed.
pub fn block_whole(state: &StreamState, message: &str, drop_text: bool) -> Option<Vec<u8>> {
    // Only an object can carry the text (an upstream's `message` that is
    // anything else gets the block's own answer instead).
    let mut whole = state.message.clone().filter(Value::is_object)?;
    let mut content: Vec<Value> = whole
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| {
            let kind = b.get("type").and_then(Value::as_str);
            kind != Some("tool_use") && !(drop_text && kind == Some("text"))
        })
        .cloned()
        .collect();
    content.push(json!({"type": "text", "text": message}));
    whole["content"] = Value::Array(content);
    whole["stop_reason"] = json!("end_turn");
    whole["stop_sequence"] = Value::Null;
    Some(whole.to_string().into_bytes())
}

fn usage_of(state: &StreamState) -> Value {
    state
        .delta_usage
        .clone()
        .unwrap_or_else(|| json!({"output_tokens": 0}))
}

/// The events that replace withheld `tool_use` blocks from the first held
/// one on (index `held_index`): the explanation as a text block at that
/// index, then `end_turn` with the upstream's usage.
pub fn block_stream_ending(state: &StreamState, held_index: Option<u32>, message: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let index = held_index.unwrap_or(state.blocks);
    text_block(&mut out, index, message);
    end_turn(&mut out, usage_of(state));
    out
}

/// The events that end a generation cut short (content detectors): the
/// note is added to the text block that was streaming (or follows the open
/// block as a new one), then `end_turn`.
pub fn cut_ending(state: &StreamState, note: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (open, next) = state.before_last();
    match open {
        Some((index, kind)) if kind == "text" => {
            event(
                &mut out,
                "content_block_delta",
                json!({"index": index, "delta": {"type": "text_delta", "text": format!("\n\n{note}")}}),
            );
            event(&mut out, "content_block_stop", json!({"index": index}));
        }
        Some((index, _)) => {
            event(&mut out, "content_block_stop", json!({"index": index}));
            text_block(&mut out, next, note);
        }
        None => text_block(&mut out, next, note),
    }
    end_turn(&mut out, usage_of(state));
    out
}

/// The in-stream `error` event for an abort after headers went out.
pub fn stream_error_event(message: &str) -> Vec<u8> {
    let mut out = Vec::new();
    event(&mut out, "error", error_value(message));
    out
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
#[path = "write_tests.rs"]
mod tests;
