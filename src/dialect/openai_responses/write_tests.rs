use serde_json::{Value, json};

use super::*;

#[test]
fn warning_is_appended_to_the_last_call_output_only() {
    let mut body = json!({"input": [
        {"role": "user", "content": "go"},
        {"type": "function_call_output", "call_id": "a", "output": "first"},
        {"type": "reasoning", "summary": []},
        {"type": "custom_tool_call_output", "call_id": "b", "output": [{"type": "input_text", "text": "x"}]},
    ]});
    assert!(inject_warning(&mut body, "[loopguard] stop"));
    assert_eq!(body["input"][1]["output"], "first");
    assert_eq!(
        body["input"][3]["output"][1],
        json!({"type": "input_text", "text": "[loopguard] stop"})
    );
    let mut string_output =
        json!({"input": [{"type": "function_call_output", "call_id": "a", "output": "r"}]});
    assert!(inject_warning(&mut string_output, "w"));
    assert_eq!(string_output["input"][0]["output"], "r\n\nw");
    let mut none = json!({"input": [{"role": "user", "content": "hi"}]});
    assert!(!inject_warning(&mut none, "w"));
}

#[test]
fn a_request_time_block_is_a_complete_response_stream() {
    let answer = block_answer(Mode::Sse, "gpt-5", "[loopguard] stopped");
    let text = String::from_utf8(answer.body).unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"));
    assert_eq!(kinds.last(), Some(&"response.completed"));
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>());
    let done = &events[events.len() - 1]["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["content"][0]["text"], "[loopguard] stopped");
    for event in text.split("\n\n").filter(|e| !e.is_empty()) {
        let name = event.lines().next().unwrap().strip_prefix("event: ").unwrap();
        assert!(event.contains(&format!("\"type\":\"{name}\"")), "{event}");
    }
    let whole: Value = serde_json::from_slice(&block_answer(Mode::Whole, "m", "x").body).unwrap();
    assert_eq!(whole["object"], "response");
    assert_eq!(whole["output"][0]["role"], "assistant");
}

#[test]
fn abort_shapes_match_openai() {
    let v: Value = serde_json::from_slice(&abort_body("loop_detected: x")).unwrap();
    assert_eq!(v["error"]["code"], "loop_detected");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let state = StreamState {
        last_sequence: Some(4),
        ..StreamState::default()
    };
    let event = String::from_utf8(stream_error_event(&state, None, None, "loop_detected: x")).unwrap();
    assert!(event.starts_with("event: error\ndata: "));
    assert!(event.contains("\"sequence_number\":5") && event.contains("\"code\":\"loop_detected\""));
}

/// Found by fuzzing (`writer`): an upstream whose `response.created` carried
/// a string as its `response` panicked the cut, the block and the abort,
/// which completed that value as if it were an object. They now complete a
/// response object of their own.
#[test]
fn a_response_that_is_not_an_object_is_completed_as_one_of_our_own() {
    let state = StreamState {
        response: Some(json!("not an object")),
        terminal: Some(json!(7)),
        ..StreamState::default()
    };
    for out in [
        cut_ending(&state, "[loopguard] cut"),
        block_stream_ending(&state, None, None, "[loopguard] blocked"),
        stream_error_event(&state, None, None, "loop_detected: x"),
    ] {
        let text = String::from_utf8(out).unwrap();
        let last = text.rsplit("data: ").next().unwrap().trim();
        let event: Value = serde_json::from_str(last).unwrap();
        assert!(event["response"]["status"].is_string(), "{text}");
        assert_eq!(event["response"]["object"], "response", "{text}");
    }
}
