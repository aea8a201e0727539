use serde_json::{Value, json};

use super::*;

fn request(body: Value) -> ParsedRequest {
    crate::dialect::testing::request(crate::dialect::Dialect::Anthropic, &body)
}

fn events(payloads: &[Value]) -> Vec<StreamEvent> {
    crate::dialect::testing::events(crate::dialect::Dialect::Anthropic, payloads)
}

#[test]
fn messages_become_turns_with_calls_results_and_errors() {
    let parsed = request(json!({
        "model": "claude", "stream": true,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "tools": [{"name": "Bash"}, {"name": "Read"}],
        "messages": [
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "a.txt"}], "is_error": true},
                {"type": "text", "text": "<system-reminder>keep going</system-reminder>"}]},
            {"role": "system", "content": "mid-list system text"},
        ]
    }));
    let t = &parsed.transcript;
    assert_eq!(t.system, "You are Claude Code.");
    assert_eq!(t.tools, vec!["Bash", "Read"]);
    let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        vec![Role::User, Role::Assistant, Role::Tool, Role::User, Role::System]
    );
    assert_eq!(t.messages[1].text, "Looking.");
    assert_eq!(
        t.messages[1].tool_calls[0].arguments,
        Arguments::Json(json!({"command": "ls"}))
    );
    let result = &t.messages[2].tool_results[0];
    assert_eq!(result.name.as_deref(), Some("Bash"));
    assert!(result.is_error);
    assert_eq!(result.content, ResultContent::Text("a.txt".into()));
    assert!(parse_request(b"{}").is_err());
}

#[test]
fn a_streamed_tool_use_is_assembled_from_its_partial_json() {
    let out = events(&[
        json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 5}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "I'll look."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "ping"}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": "}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"ls\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        json!({"type": "message_stop"}),
    ]);
    assert_eq!(
        out[0],
        StreamEvent::TextDelta {
            choice: 0,
            text: "I'll look.".into()
        }
    );
    assert!(matches!(out[1], StreamEvent::ToolCallDelta { index: 0, .. }));
    let call = out.iter().find_map(|e| match e {
        StreamEvent::ToolCallComplete { call, .. } => Some(call.clone()),
        _ => None,
    });
    let call = call.unwrap();
    assert_eq!(call.id.as_deref(), Some("t1"));
    assert_eq!(call.arguments, Arguments::Json(json!({"command": "ls"})));
    let tail: Vec<&StreamEvent> = out.iter().rev().take(3).collect();
    assert_eq!(tail[0], &StreamEvent::Done);
    assert!(matches!(tail[1], StreamEvent::Finish { reason, .. } if reason == "tool_use"));
}

#[test]
fn server_tool_use_is_not_a_client_call_and_a_whole_message_parses() {
    let out = events(&[
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "s1", "name": "web_search"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ]);
    assert_eq!(
        out,
        vec![StreamEvent::Error {
            message: "Overloaded".into()
        }]
    );
    let whole = events(&[json!({"type": "message", "content": [
        {"type": "text", "text": "ok"}, {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}}],
        "stop_reason": "tool_use", "usage": {"output_tokens": 1}})]);
    assert!(matches!(&whole[2], StreamEvent::ToolCallComplete { call, .. } if call.name == "Read"));
    assert!(matches!(whole.last(), Some(StreamEvent::Finish { reason, .. }) if reason == "tool_use"));
}

#[test]
fn body_ids_are_read_while_parsing() {
    let parsed = request(json!({"metadata": {"user_id": "{\"session_id\":\"s-1\"}"}, "messages": []}));
    assert_eq!(
        parsed.ids.metadata,
        Some(json!({"user_id": "{\"session_id\":\"s-1\"}"}))
    );
    assert_eq!(parsed.ids.prompt_cache_key, None);
}
