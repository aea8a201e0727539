//! A `openai-chat` conversation for `loopguard demo`: its first
//! request and how a tool call and its result extend the history.

use serde_json::{Value, json};

/// The demo's first request through the proxy at `proxy`: its URL and body
/// (streamed, one `list_directory` tool).
pub fn demo_request(proxy: &str) -> (String, Value) {
    (
        format!("{proxy}/v1/chat/completions"),
        json!({"model": "demo", "stream": true, "messages": [{"role": "user", "content": "What files are in this project?"}],
           "tools": [{"type": "function", "function": {"name": "list_directory", "parameters": {"type": "object"}}}]}),
    )
}

/// Appends call `n` of `name` with `args` (JSON text) and its `result` to the
/// history in `body`.
pub fn push_call_turn(body: &mut Value, n: usize, name: &str, args: &str, result: &str) {
    if let Some(messages) = body["messages"].as_array_mut() {
        let id = format!("call_{n}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": name, "arguments": args}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
    }
}

/// Appends a message of the person (`text`) to the history in `body`.
pub fn push_user_turn(body: &mut Value, text: &str) {
    if let Some(items) = body["messages"].as_array_mut() {
        items.push(json!({"role": "user", "content": text}));
    }
}
