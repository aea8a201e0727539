//! A `gemini` conversation for `loopguard demo`: its first
//! request and how a tool call and its result extend the history.

use serde_json::{Value, json};

/// The demo's first request through the proxy at `proxy`: its URL and body
/// (streamed, one `list_directory` tool).
pub fn demo_request(proxy: &str) -> (String, Value) {
    (
        format!("{proxy}/v1beta/models/demo:streamGenerateContent?alt=sse"),
        json!({"contents": [{"role": "user", "parts": [{"text": "What files are in this project?"}]}],
           "tools": [{"functionDeclarations": [{"name": "list_directory"}]}]}),
    )
}

/// Appends call `n` of `name` with `args` (JSON text) and its `result` to the
/// history in `body` (Gemini calls carry no id: `_n` is unused).
pub fn push_call_turn(body: &mut Value, _n: usize, name: &str, args: &str, result: &str) {
    let args_value: Value = serde_json::from_str(args).unwrap_or(json!({}));
    if let Some(contents) = body["contents"].as_array_mut() {
        contents
            .push(json!({"role": "model", "parts": [{"functionCall": {"name": name, "args": args_value}}]}));
        contents.push(json!({"role": "user", "parts": [
            {"functionResponse": {"name": name, "response": {"output": result}}}]}));
    }
}

/// Appends a message of the person (`text`) to the history in `body`.
pub fn push_user_turn(body: &mut Value, text: &str) {
    if let Some(items) = body["contents"].as_array_mut() {
        items.push(json!({"role": "user", "parts": [{"text": text}]}));
    }
}
