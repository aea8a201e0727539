//! A `anthropic` conversation for `loopguard demo`: its first
//! request and how a tool call and its result extend the history.

use serde_json::{Value, json};

/// The demo's first request through the proxy at `proxy`: its URL and body
/// (streamed, one `list_directory` tool).
pub fn demo_request(proxy: &str) -> (String, Value) {
    (
        format!("{proxy}/anthropic/v1/messages"),
        json!({"model": "demo", "stream": true, "max_tokens": 1024,
           "messages": [{"role": "user", "content": "What files are in this project?"}],
           "tools": [{"name": "list_directory", "input_schema": {"type": "object"}}]}),
    )
}

/// Appends call `n` of `name` with `args` (JSON text) and its `result` to the
/// history in `body`.
pub fn push_call_turn(body: &mut Value, n: usize, name: &str, args: &str, result: &str) {
    let args_value: Value = serde_json::from_str(args).unwrap_or(json!({}));
    if let Some(messages) = body["messages"].as_array_mut() {
        let id = format!("toolu_{n}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": name, "input": args_value}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": result}]}));
    }
}

/// Appends a message of the person (`text`) to the history in `body`.
pub fn push_user_turn(body: &mut Value, text: &str) {
    if let Some(items) = body["messages"].as_array_mut() {
        items.push(json!({"role": "user", "content": text}));
    }
}
