//! `ollama` request and response parsing.

use serde_json::json;

use super::*;
use crate::dialect::{Dialect, testing};

#[test]
fn a_chat_history_becomes_turns_calls_and_named_results() {
    let body = json!({"model": "llama3.2", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "get_weather", "content": "11 C"},
    ], "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]});
    let parsed = testing::request(Dialect::OllamaChat, &body);
    assert!(parsed.stream, "stream absent is true in Ollama");
    assert_eq!(parsed.model.as_deref(), Some("llama3.2"));
    let t = &parsed.transcript;
    assert_eq!(t.system, "be brief");
    assert_eq!(t.tools, vec!["get_weather"]);
    assert_eq!(t.messages.len(), 3);
    let call = &t.messages[1].tool_calls[0];
    assert_eq!(call.name, "get_weather");
    assert_eq!(call.arguments, Arguments::Json(json!({"city": "Paris"})));
    let result = &t.messages[2].tool_results[0];
    assert_eq!(result.name.as_deref(), Some("get_weather"));
    assert_eq!(result.content, ResultContent::Text("11 C".into()));
}

#[test]
fn the_split_parse_equals_the_whole_parse() {
    let body = json!({"model": "m", "stream": false, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "ls", "arguments": {"path": "."}}}]},
        {"role": "tool", "tool_name": "ls", "content": "a b"},
    ]});
    let bytes = body.to_string();
    let whole = parse_chat(bytes.as_bytes()).unwrap();
    assert!(!whole.stream);
    let split = split_chat(bytes.as_bytes()).unwrap();
    let items = split.parse_items(&[], 0).unwrap();
    let assembled = crate::dialect::split::assemble(split.head.clone(), items);
    assert_eq!(assembled, whole);
}

#[test]
fn a_generate_prompt_is_one_user_turn() {
    let body = json!({"model": "m", "prompt": "Why is the sky blue?", "system": "sys"});
    let parsed = testing::request(Dialect::OllamaGenerate, &body);
    assert!(parsed.stream);
    assert_eq!(parsed.transcript.system, "sys");
    assert_eq!(parsed.transcript.messages.len(), 1);
    assert_eq!(parsed.transcript.messages[0].text, "Why is the sky blue?");
}

#[test]
fn stream_lines_become_text_whole_calls_usage_and_finish() {
    let events = testing::events(
        Dialect::OllamaChat,
        &[
            json!({"model": "m", "created_at": "t", "message": {"role": "assistant", "content": "Let me"}, "done": false}),
            json!({"model": "m", "created_at": "t", "message": {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "ls", "arguments": {"path": "."}}},
                {"function": {"name": "cat", "arguments": {"path": "a"}}}]}, "done": false}),
            json!({"model": "m", "created_at": "t", "message": {"role": "assistant", "content": ""}, "done": true,
                "done_reason": "stop", "total_duration": 5, "eval_count": 3}),
        ],
    );
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            StreamEvent::TextDelta { .. } => "text",
            StreamEvent::ToolCallDelta { .. } => "delta",
            StreamEvent::ToolCallComplete { .. } => "call",
            StreamEvent::Usage { .. } => "usage",
            StreamEvent::Finish { .. } => "finish",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["text", "delta", "call", "delta", "call", "usage", "finish"]
    );
    let StreamEvent::ToolCallComplete { index, call, .. } = &events[4] else {
        panic!("{events:?}")
    };
    assert_eq!((*index, call.name.as_str()), (1, "cat"));
    assert_eq!(
        events[5],
        StreamEvent::Usage {
            usage: json!({"total_duration": 5, "eval_count": 3})
        }
    );
}

#[test]
fn generate_lines_carry_text_in_response_and_errors_are_events() {
    let events = testing::events(
        Dialect::OllamaGenerate,
        &[
            json!({"model": "m", "created_at": "t", "response": "The", "done": false}),
            json!({"error": "model runner has unexpectedly stopped"}),
        ],
    );
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta {
                choice: 0,
                text: "The".into()
            },
            StreamEvent::Error {
                message: "model runner has unexpectedly stopped".into()
            },
        ]
    );
}

#[test]
fn the_first_line_gives_the_identity() {
    let mut parser = ResponseParser::default();
    let mut out = Vec::new();
    parser
        .payload(r#"{"model":"qwen3","created_at":"2026-12-07T00:00:00Z","message":{"role":"assistant","content":""},"done":false}"#, &mut out)
        .unwrap();
    assert_eq!(parser.identity().model.as_deref(), Some("qwen3"));
    assert_eq!(parser.meta().and_then(|m| m.model.as_deref()), Some("qwen3"));
    assert!(parser.payload("not json", &mut out).is_err());
}
