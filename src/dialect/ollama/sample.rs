//! An `ollama-chat` conversation for `loopguard demo`: its first request and
//! how a tool call and its result extend the history.

use serde_json::{Value, json};

/// The demo's first request through the proxy at `proxy` (Ollama's route
/// `/ollama` of the default config): its URL and body.
pub fn demo_request(proxy: &str) -> (String, Value) {
    (
        format!("{proxy}/ollama/api/chat"),
        json!({"model": "demo", "messages": [{"role": "user", "content": "What files are in this project?"}],
           "tools": [{"type": "function", "function": {"name": "list_directory", "parameters": {"type": "object"}}}]}),
    )
}

/// Appends call `n` of `name` with `args` (JSON text) and its `result`.
pub fn push_call_turn(body: &mut Value, _n: usize, name: &str, args: &str, result: &str) {
    if let Some(messages) = body["messages"].as_array_mut() {
        let arguments: Value = serde_json::from_str(args).unwrap_or_else(|_| json!({}));
        messages.push(json!({"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": name, "arguments": arguments}}]}));
        messages.push(json!({"role": "tool", "tool_name": name, "content": result}));
    }
}

/// Appends a message of the person (`text`).
pub fn push_user_turn(body: &mut Value, text: &str) {
    if let Some(items) = body["messages"].as_array_mut() {
        items.push(json!({"role": "user", "content": text}));
    }
}
