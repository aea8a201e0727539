//! The mock's Ollama native answers (`/api/chat`, `/api/generate`), in the
//! shape Ollama documents: NDJSON lines `{"model","created_at","message",
//! "done": false}`, the text a few words per line, tool calls whole in one
//! line's `message.tool_calls` (arguments an object), then a last line with
//! `done: true`, `done_reason` and the counters; or that last line alone,
//! with the whole message, for `stream: false`.

use serde_json::{Map, Value, json};

use super::script::Turn;

const CREATED_AT: &str = "2026-12-07T00:00:00.000000000Z";

fn counters() -> Map<String, Value> {
    let mut map = Map::new();
    for (k, v) in [
        ("total_duration", 4_883_583_458u64),
        ("load_duration", 1_334_875),
        ("prompt_eval_count", 26),
        ("prompt_eval_duration", 342_546_000),
        ("eval_count", 12),
        ("eval_duration", 4_535_599_000),
    ] {
        map.insert(k.to_owned(), json!(v));
    }
    map
}

fn calls(turn: &Turn) -> Vec<Value> {
    turn.tool_calls
        .iter()
        .map(|c| json!({"function": {"name": c.name, "arguments": c.arguments}}))
        .collect()
}

fn line(model: &str, generate: bool, content: &str, thinking: &str, calls: Vec<Value>, done: bool) -> Value {
    let mut object = Map::new();
    object.insert("model".to_owned(), json!(model));
    object.insert("created_at".to_owned(), json!(CREATED_AT));
    if generate {
        object.insert("response".to_owned(), json!(content));
    } else {
        let mut message = Map::new();
        message.insert("role".to_owned(), json!("assistant"));
        message.insert("content".to_owned(), json!(content));
        if !thinking.is_empty() {
            message.insert("thinking".to_owned(), json!(thinking));
        }
        if !calls.is_empty() {
            message.insert("tool_calls".to_owned(), Value::Array(calls));
        }
        object.insert("message".to_owned(), Value::Object(message));
    }
    object.insert("done".to_owned(), json!(done));
    if done {
        object.insert("done_reason".to_owned(), json!("stop"));
        object.extend(counters());
        if generate {
            object.insert("context".to_owned(), json!([1, 2, 3]));
        }
    }
    Value::Object(object)
}

/// A streamed turn: one NDJSON line per piece, each ending with `\n`.
pub fn stream(turn: &Turn, model: &str, generate: bool) -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    if !turn.reasoning.is_empty() && !generate {
        lines.push(line(model, false, "", &turn.reasoning, Vec::new(), false));
    }
    for piece in super::script::deltas(&turn.text) {
        lines.push(line(model, generate, &piece, "", Vec::new(), false));
    }
    if !generate && !turn.tool_calls.is_empty() {
        lines.push(line(model, false, "", "", calls(turn), false));
    }
    lines.push(line(model, generate, "", "", Vec::new(), true));
    lines.into_iter().map(|l| format!("{l}\n").into_bytes()).collect()
}

/// A `stream: false` answer: one object.
pub fn whole(turn: &Turn, model: &str, generate: bool) -> Vec<u8> {
    let calls = if generate { Vec::new() } else { calls(turn) };
    line(model, generate, &turn.text, &turn.reasoning, calls, true)
        .to_string()
        .into_bytes()
}

/// A fixture file of NDJSON lines, one piece per line (newline kept).
pub fn fixture_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}
