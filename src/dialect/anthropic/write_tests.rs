use serde_json::{Value, json};

use super::*;

#[test]
fn warning_is_a_text_block_after_the_tool_results() {
    let mut body = json!({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]},
    ]});
    assert!(inject_warning(&mut body, "[loopguard] stop"));
    assert_eq!(
        body["messages"][2]["content"][1],
        json!({"type": "text", "text": "[loopguard] stop"})
    );
    let mut plain = json!({"messages": [{"role": "user", "content": "hi"}]});
    let before = plain.clone();
    assert!(!inject_warning(&mut plain, "w"));
    assert_eq!(plain, before);
}

#[test]
fn a_request_time_block_is_a_complete_message_stream() {
    let text = String::from_utf8(block_answer(Mode::Sse, "claude", "[loopguard] stopped").body).unwrap();
    let kinds: Vec<&str> = text
        .split("\n\n")
        .filter_map(|e| e.lines().next())
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert!(text.contains("\"usage\":{\"input_tokens\":0"));
    assert!(text.contains("\"stop_reason\":\"end_turn\""));
    let whole: Value = serde_json::from_slice(&block_answer(Mode::Whole, "claude", "x").body).unwrap();
    assert_eq!(whole["type"], "message");
    assert_eq!(whole["stop_reason"], "end_turn");
}

#[test]
fn abort_shapes_match_anthropic() {
    let v: Value = serde_json::from_slice(&abort_body("loop_detected: x")).unwrap();
    assert_eq!(
        v,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "loop_detected: x"}})
    );
    let event = String::from_utf8(stream_error_event("loop_detected: x")).unwrap();
    assert!(event.starts_with("event: error\ndata: {"));
}

#[test]
fn a_cut_closes_the_open_text_block_with_the_note() {
    let state = StreamState {
        open_block: Some((0, "text".into())),
        blocks: 1,
        ..StreamState::default()
    };
    let text = String::from_utf8(cut_ending(&state, "[loopguard] cut")).unwrap();
    assert!(text.contains("\"index\":0") && !text.contains("\"index\":1"));
    assert!(
        text.contains("content_block_stop")
            && text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
    );
}

/// Found while fixing the Responses writer's fuzz crash: a `message_start`
/// whose `message` is not an object is not completed as one (it panicked);
/// the whole-body block falls back to the block's own answer.
#[test]
fn a_message_that_is_not_an_object_is_not_completed() {
    let state = StreamState {
        message: Some(json!(["not", "an", "object"])),
        ..StreamState::default()
    };
    assert_eq!(block_whole(&state, "[loopguard] blocked", false), None);
}
