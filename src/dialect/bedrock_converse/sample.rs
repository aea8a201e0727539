//! A `bedrock-converse` conversation (for `loopguard demo` and tests): its
//! first request and how a tool call and its result extend the history.

use serde_json::{Value, json};

/// The first request through the proxy at `proxy`: its URL (a
/// `ConverseStream` on a `/bedrock` route) and body (one `list_directory`
/// tool).
pub fn demo_request(proxy: &str) -> (String, Value) {
    (
        format!("{proxy}/bedrock/model/demo/converse-stream"),
        json!({"messages": [{"role": "user", "content": [{"text": "What files are in this project?"}]}],
           "inferenceConfig": {"maxTokens": 1024},
           "toolConfig": {"tools": [{"toolSpec": {"name": "list_directory",
               "inputSchema": {"json": {"type": "object"}}}}]}}),
    )
}

/// Appends call `n` of `name` with `args` (JSON text) and its `result` to the
/// history in `body`.
pub fn push_call_turn(body: &mut Value, n: usize, name: &str, args: &str, result: &str) {
    let args_value: Value = serde_json::from_str(args).unwrap_or(json!({}));
    if let Some(messages) = body["messages"].as_array_mut() {
        let id = format!("tooluse_{n}");
        messages.push(json!({"role": "assistant", "content": [
            {"toolUse": {"toolUseId": id, "name": name, "input": args_value}}]}));
        messages.push(json!({"role": "user", "content": [
            {"toolResult": {"toolUseId": id, "content": [{"text": result}], "status": "success"}}]}));
    }
}

/// Appends a message of the person (`text`) to the history in `body`.
pub fn push_user_turn(body: &mut Value, text: &str) {
    if let Some(items) = body["messages"].as_array_mut() {
        items.push(json!({"role": "user", "content": [{"text": text}]}));
    }
}
