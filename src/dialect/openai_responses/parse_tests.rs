use serde_json::{Value, json};

use super::*;
use crate::dialect::StreamEvent;

fn request(body: Value) -> ParsedRequest {
    crate::dialect::testing::request(crate::dialect::Dialect::OpenaiResponses, &body)
}

fn events(payloads: &[Value]) -> Vec<StreamEvent> {
    crate::dialect::testing::events(crate::dialect::Dialect::OpenaiResponses, payloads)
}

#[test]
fn input_items_become_turns_with_calls_and_named_results() {
    let parsed = request(json!({
        "model": "gpt-5", "instructions": "You are Codex.", "stream": true, "store": false,
        "tools": [{"type": "function", "name": "exec_command"}, {"type": "web_search"}],
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sandbox rules"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
            {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"},
            {"type": "local_shell_call", "call_id": "c3", "action": {"type": "exec", "command": ["ls"]}},
            {"type": "local_shell_call_output", "call_id": "c3", "output": "b.txt"},
        ]
    }));
    let t = &parsed.transcript;
    assert_eq!(t.system, "You are Codex.\nsandbox rules");
    assert_eq!(t.tools, vec!["exec_command", "web_search"]);
    assert!(parsed.stream);
    let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        vec![
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::Tool
        ]
    );
    assert_eq!(t.messages[1].tool_calls[0].name, "exec_command");
    assert_eq!(
        t.messages[1].tool_calls[0].arguments,
        Arguments::Json(json!({"cmd": "ls"}))
    );
    assert_eq!(
        t.messages[2].tool_results[0].name.as_deref(),
        Some("exec_command")
    );
    assert_eq!(
        t.messages[3].tool_calls[0].arguments,
        Arguments::Json(json!("*** Begin Patch"))
    );
    assert_eq!(t.messages[5].tool_calls[0].name, "local_shell");
    assert_eq!(t.messages[6].tool_results[0].name.as_deref(), Some("local_shell"));
    let r = parsed.responses.unwrap();
    assert!(!r.stateful && r.previous_response_id.is_none());
}

#[test]
fn stateful_requests_and_compaction_signals_are_recognised() {
    let chained = request(json!({"previous_response_id": "resp_1", "input": [
        {"type": "function_call_output", "call_id": "c1", "output": "x"}]}));
    let r = chained.responses.unwrap();
    assert_eq!(r.previous_response_id.as_deref(), Some("resp_1"));
    assert!(r.stateful);
    assert!(
        request(json!({"store": true, "input": "hi"}))
            .responses
            .unwrap()
            .stateful
    );
    assert!(
        request(json!({"conversation": "conv_1", "input": "hi"}))
            .responses
            .unwrap()
            .stateful
    );
    assert!(request(json!({"input": [{"type": "compaction_trigger"}]})).summarizer);
    let compacted = request(
        json!({"input": [{"type": "compaction", "encrypted_content": "…"}, {"role": "user", "content": "go on"}]}),
    );
    assert_eq!(compacted.transcript.compactions, 1);
    assert!(!compacted.summarizer);
    assert_eq!(
        request(json!({"input": "hello"})).transcript.messages[0].text,
        "hello"
    );
    assert!(parse_request(b"{\"input\": 3}").is_err());
    assert!(parse_request(b"[1]").is_err());
}

#[test]
fn a_streamed_function_call_is_held_from_its_item_and_completed_by_its_done_item() {
    let out = events(&[
        json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_9", "model": "m", "output": []}}),
        json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
            "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "sequence_number": 2, "output_index": 0, "item_id": "msg_1", "content_index": 0, "delta": "Let me look."}),
        json!({"type": "response.output_item.done", "sequence_number": 3, "output_index": 0, "item": {"id": "msg_1", "type": "message"}}),
        json!({"type": "response.output_item.added", "sequence_number": 4, "output_index": 1,
            "item": {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "sequence_number": 5, "output_index": 1, "item_id": "fc_1", "delta": "{\"cmd\":"}),
        json!({"type": "response.function_call_arguments.delta", "sequence_number": 6, "output_index": 1, "item_id": "fc_1", "delta": "\"ls\"}"}),
        json!({"type": "response.function_call_arguments.done", "sequence_number": 7, "output_index": 1, "item_id": "fc_1", "arguments": "{\"cmd\":\"ls\"}"}),
        json!({"type": "response.output_item.done", "sequence_number": 8, "output_index": 1,
            "item": {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"}}),
        json!({"type": "response.completed", "sequence_number": 9, "response": {"id": "resp_9", "status": "completed", "usage": {"input_tokens": 1}}}),
    ]);
    assert_eq!(out[0], StreamEvent::ResponseId { id: "resp_9".into() });
    assert_eq!(
        out[1],
        StreamEvent::TextDelta {
            choice: 0,
            text: "Let me look.".into()
        }
    );
    assert!(matches!(out[2], StreamEvent::ToolCallDelta { index: 0, .. }));
    let complete = out.iter().find_map(|e| match e {
        StreamEvent::ToolCallComplete { call, .. } => Some(call.clone()),
        _ => None,
    });
    let call = complete.unwrap();
    assert_eq!(call.id.as_deref(), Some("c1"));
    assert_eq!(call.arguments, Arguments::Json(json!({"cmd": "ls"})));
    assert!(matches!(out.last(), Some(StreamEvent::Finish { reason, .. }) if reason == "completed"));
}

#[test]
fn server_side_tools_are_not_client_calls_and_errors_are_reported() {
    let out = events(&[
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "ws_1", "type": "web_search_call"}}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"id": "ws_1", "type": "web_search_call"}}),
        json!({"type": "error", "code": "insufficient_quota", "message": "quota"}),
        json!({"type": "response.failed", "response": {"error": {"message": "failed"}}}),
    ]);
    assert_eq!(
        out,
        vec![
            StreamEvent::Error {
                message: "quota".into()
            },
            StreamEvent::Error {
                message: "failed".into()
            },
        ]
    );
}

#[test]
fn a_whole_response_yields_text_calls_usage_and_finish() {
    let out = events(&[
        json!({"id": "resp_1", "object": "response", "status": "completed",
        "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        ],
        "usage": {"input_tokens": 3}}),
    ]);
    assert_eq!(out.len(), 6, "{out:?}");
    assert!(matches!(&out[3], StreamEvent::ToolCallComplete { call, .. } if call.name == "read"));
}

#[test]
fn a_call_without_its_done_item_is_completed_from_the_final_output() {
    let call = json!({"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "read", "arguments": "{\"p\":1}"});
    let out = events(&[
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "read", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": "fc_1", "delta": "{\"p\":1}"}),
        json!({"type": "response.completed", "response": {"status": "completed", "output": [call]}}),
    ]);
    let completed: Vec<&ToolCall> = out
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallComplete { call, .. } => Some(call),
            _ => None,
        })
        .collect();
    assert_eq!(completed.len(), 1, "{out:?}");
    assert_eq!(completed[0].arguments, Arguments::Json(json!({"p": 1})));
}

#[test]
fn codex_prompt_cache_key_is_read_while_parsing() {
    let parsed = request(json!({"prompt_cache_key": "thread-7", "input": []}));
    assert_eq!(parsed.ids.prompt_cache_key.as_deref(), Some("thread-7"));
}
