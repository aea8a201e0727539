use serde_json::{Value, json};

use super::{response, value};
use crate::dialect::Mode;

const KEY_HEAD: &str = "sk-abc";
const KEY_TAIL: &str = "defghijklmnopqrstuvwxyz123456";

fn sse(events: &[Value]) -> String {
    events.iter().map(|e| format!("data: {e}\n\n")).collect()
}

/// The strings at `pointer` of every `data:` event of a recorded SSE body, joined.
fn joined(recorded: &str, pointer: &str) -> String {
    recorded
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v.pointer(pointer).and_then(Value::as_str).map(str::to_owned))
        .collect()
}

#[test]
fn an_anthropic_key_cut_between_two_argument_deltas_is_masked_whole() {
    let body = [
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": format!("{{\"path\":\"a.txt\",\"token\":\"{KEY_HEAD}")}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": format!("{KEY_TAIL}\"}}")}}),
        json!({"type": "content_block_stop", "index": 1}),
    ];
    let recorded = response(sse(&body).as_bytes(), Mode::Sse);
    assert!(!recorded.contains(KEY_TAIL), "{recorded}");
    // What a replay assembles is the arguments masked as the request lines mask them.
    let args = joined(&recorded, "/delta/partial_json");
    let mut input = json!({"path": "a.txt", "token": format!("{KEY_HEAD}{KEY_TAIL}")});
    value(&mut input);
    assert_eq!(serde_json::from_str::<Value>(&args).ok(), Some(input));
    // Every event is still there, in order.
    assert_eq!(recorded.matches("data: ").count(), body.len());
}

#[test]
fn an_openai_key_cut_between_chat_argument_deltas_is_masked() {
    let chunk = |args: &str| json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": args}}]}}]});
    let full =
        "{\"command\":\"export OPENAI_API_KEY=sk-proj-ZZZZsecretvalue0123456789abcdef && python run.py\"}";
    let (a, b) = full.split_at(full.find("secretvalue").unwrap_or(0));
    let recorded = response(sse(&[chunk(a), chunk(b)]).as_bytes(), Mode::Sse);
    assert!(!recorded.contains("secretvalue0123456789abcdef"), "{recorded}");
    assert_eq!(
        joined(&recorded, "/choices/0/delta/tool_calls/0/function/arguments"),
        crate::redact::redact(full)
    );
}

#[test]
fn a_responses_key_cut_between_argument_deltas_is_masked() {
    let delta = |d: &str| json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": d});
    let body = sse(&[
        delta(&format!("{{\"token\":\"{KEY_HEAD}")),
        delta(&format!("{KEY_TAIL}\"}}")),
    ]);
    let recorded = response(body.as_bytes(), Mode::Sse);
    assert!(!recorded.contains(KEY_TAIL), "{recorded}");
}

#[test]
fn a_gemini_key_cut_between_text_chunks_of_an_array_is_masked() {
    let chunk =
        |t: &str| json!({"candidates": [{"index": 0, "content": {"role": "model", "parts": [{"text": t}]}}]});
    let body = Value::Array(vec![chunk(&format!("your key is {KEY_HEAD}")), chunk(KEY_TAIL)]).to_string();
    let recorded = response(body.as_bytes(), Mode::JsonArray);
    assert!(!recorded.contains(KEY_TAIL), "{recorded}");
    let items: Vec<Value> = serde_json::from_str(&recorded).unwrap_or_default();
    assert_eq!(items.len(), 2);
}

#[test]
fn a_stream_without_secrets_is_kept_byte_for_byte() {
    let body = "event: message_start\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Reading  the file\"}}\r\n\r\ndata: [DONE]\n\n";
    assert_eq!(response(body.as_bytes(), Mode::Sse), body);
}

#[test]
fn a_value_under_a_secret_named_key_is_masked_in_an_object_argument() {
    let mut input =
        json!({"path": "a.txt", "password": "hunter22", "api_key": "k-123456789", "note": "fine"});
    value(&mut input);
    assert_eq!(
        input,
        json!({"path": "a.txt", "password": "[REDACTED]", "api_key": "[REDACTED]", "note": "fine"})
    );
}
