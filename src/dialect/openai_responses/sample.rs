//! A `openai-responses` conversation for `loopguard demo`: its first
//! request and how a tool call and its result extend the history.

use serde_json::{Value, json};

/// The demo's first request through the proxy at `proxy`: its URL and body
/// (streamed, one `list_directory` tool).
pub fn demo_request(proxy: &str) -> (String, Value) {
    (
        format!("{proxy}/v1/responses"),
        json!({"model": "demo", "stream": true, "store": false,
           "input": [{"role": "user", "content": "What files are in this project?"}],
           "tools": [{"type": "function", "name": "list_directory", "parameters": {"type": "object"}}]}),
    )
}

/// Appends call `n` of `name` with `args` (JSON text) and its `result` to the
/// history in `body`.
pub fn push_call_turn(body: &mut Value, n: usize, name: &str, args: &str, result: &str) {
    if let Some(input) = body["input"].as_array_mut() {
        let id = format!("call_{n}");
        input.push(json!({"type": "function_call", "call_id": id, "name": name, "arguments": args}));
        input.push(json!({"type": "function_call_output", "call_id": id, "output": result}));
    }
}

/// Appends a message of the person (`text`) to the history in `body`.
pub fn push_user_turn(body: &mut Value, text: &str) {
    if let Some(items) = body["input"].as_array_mut() {
        items.push(json!({"role": "user", "content": text}));
    }
}
