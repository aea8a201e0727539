//! What loopguard writes on `Converse` / `ConverseStream`: a block as a
//! `Converse` answer or a complete `ConverseStream` (`messageStart`, the
//! explanation as a text block, `messageStop` with `stopReason:
//! "end_turn"`, `metadata`), the endings that replace withheld `toolUse`
//! blocks, and Bedrock's error shapes (shared with `bedrock`). Nothing is
//! ever injected into a request (it may be signed over its body).

use serde_json::{Value, json};

use super::{StreamState, frames_from_events};
use crate::dialect::bedrock::EVENT_STREAM;
use crate::dialect::write::{Answer, Mode};

/// Zero counts in `TokenUsage`'s shape.
fn zero_usage() -> Value {
    json!({"inputTokens": 0, "outputTokens": 0, "totalTokens": 0})
}

/// A text block at `index` carrying `text` (a text block has no
/// `contentBlockStart` on Bedrock: it opens with its first delta), closed.
fn text_block(out: &mut Vec<Value>, index: u32, text: &str) {
    out.push(json!({"contentBlockDelta": {"contentBlockIndex": index, "delta": {"text": text}}}));
    out.push(json!({"contentBlockStop": {"contentBlockIndex": index}}));
}

/// `messageStop` with `stopReason: "end_turn"`, then `metadata` with `usage`.
fn end_turn(out: &mut Vec<Value>, usage: Value) {
    out.push(json!({"messageStop": {"stopReason": "end_turn"}}));
    out.push(json!({"metadata": {"usage": usage, "metrics": {"latencyMs": 0}}}));
}

/// A complete answer with `message` as the assistant's text: a `Converse`
/// answer (`output.message`, `stopReason: "end_turn"`, zero `usage`), or a
/// whole `ConverseStream`. `_model` is unused: neither names its model.
pub fn block_answer(mode: Mode, _model: &str, message: &str) -> Answer {
    if mode == Mode::Whole {
        let body = json!({
            "output": {"message": {"role": "assistant", "content": [{"text": message}]}},
            "stopReason": "end_turn", "usage": zero_usage(), "metrics": {"latencyMs": 0},
        });
        return Answer {
            content_type: "application/json",
            body: body.to_string().into_bytes(),
        };
    }
    let mut events = vec![json!({"messageStart": {"role": "assistant"}})];
    text_block(&mut events, 0, message);
    end_turn(&mut events, zero_usage());
    Answer {
        content_type: EVENT_STREAM,
        body: frames_from_events(&events),
    }
}

/// A whole answer whose `toolUse` blocks are withheld: the upstream's
/// answer (usage, metrics, its text and reasoning blocks) with those blocks
/// replaced by one text block carrying `message`, and `stopReason:
/// "end_turn"` (`drop_text`: its text blocks replaced too). `None` when no
/// whole answer was parsed.
pub fn block_whole(state: &StreamState, message: &str, drop_text: bool) -> Option<Vec<u8>> {
    let mut whole = state.whole.clone().filter(Value::is_object)?;
    let content: Vec<Value> = whole
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b.get("toolUse").is_none() && !(drop_text && b.get("text").is_some()))
        .cloned()
        .chain(std::iter::once(json!({"text": message})))
        .collect();
    let role = whole
        .pointer("/output/message/role")
        .cloned()
        .unwrap_or(json!("assistant"));
    whole["output"] = json!({"message": {"role": role, "content": content}});
    whole["stopReason"] = json!("end_turn");
    Some(whole.to_string().into_bytes())
}

fn usage_of(state: &StreamState) -> Value {
    state.usage.clone().unwrap_or_else(zero_usage)
}

/// The events that replace withheld `toolUse` blocks from the first held
/// one on (index `held_index`): the explanation as a text block at that
/// index, then `end_turn` and `metadata` (the upstream's usage when it
/// was seen, else zeros).
pub fn block_stream_ending(state: &StreamState, held_index: Option<u32>, message: &str) -> Vec<u8> {
    let mut events = Vec::new();
    text_block(&mut events, held_index.unwrap_or(state.blocks), message);
    end_turn(&mut events, usage_of(state));
    frames_from_events(&events)
}

/// The events that end a generation cut short (content detectors): the
/// note is added to the text block that was streaming (or follows the open
/// block as a new one), then `end_turn`.
pub fn cut_ending(state: &StreamState, note: &str) -> Vec<u8> {
    let mut events = Vec::new();
    let (open, next) = state.before_last();
    match open {
        Some((index, kind)) if kind == "text" => text_block(&mut events, *index, &format!("\n\n{note}")),
        Some((index, _)) => {
            events.push(json!({"contentBlockStop": {"contentBlockIndex": index}}));
            text_block(&mut events, next, note);
        }
        None => text_block(&mut events, next, note),
    }
    end_turn(&mut events, usage_of(state));
    frames_from_events(&events)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
#[path = "write_tests.rs"]
mod tests;
