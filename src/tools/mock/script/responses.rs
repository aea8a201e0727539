//! The mock's OpenAI Responses answers: a scripted turn as the named
//! events of a stream (`response.created` … `response.completed`) or as
//! the whole `response` object.

use serde_json::{Value, json};

use super::{Turn, deltas, halves};

/// The events of one streamed response, numbered as they are emitted.
#[derive(Default)]
struct Events {
    out: Vec<(String, String)>,
}

impl Events {
    /// Adds event `kind` with `data` (its `type` and `sequence_number` set).
    fn emit(&mut self, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.out.len());
        self.out.push((kind.to_owned(), data.to_string()));
    }
}

/// OpenAI Responses: the named events (`(event, data)`) of a streamed turn,
/// `response.created` … `response.completed`, with sequence numbers.
pub fn responses_stream(turn: &Turn, model: &str, seq: u64) -> Vec<(String, String)> {
    let mut events = Events::default();
    let id = format!("resp_mock_{seq}");
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": id, "object": "response", "created_at": 1_700_000_000u64, "status": status,
            "model": model, "output": output, "usage": usage, "error": null, "incomplete_details": null,
            "parallel_tool_calls": true, "tools": []})
    };
    events.emit(
        "response.created",
        json!({"response": response("in_progress", json!([]), Value::Null)}),
    );
    events.emit(
        "response.in_progress",
        json!({"response": response("in_progress", json!([]), Value::Null)}),
    );
    let mut output = Vec::new();
    if !turn.reasoning.is_empty() {
        output.push(reasoning_item(&mut events, turn, seq, output.len()));
    }
    if !turn.text.is_empty() {
        output.push(message_item(&mut events, turn, seq, output.len()));
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        output.push(call_item(&mut events, call, seq, i, output.len()));
    }
    events.emit(
        "response.completed",
        json!({"response": response("completed", Value::Array(output), usage_responses())}),
    );
    events.out
}

/// The events of the turn's reasoning item at output `index`; the item.
fn reasoning_item(events: &mut Events, turn: &Turn, seq: u64, index: usize) -> Value {
    let rid = format!("rs_mock_{seq}");
    events.emit(
        "response.output_item.added",
        json!({"output_index": index,
        "item": {"id": rid, "type": "reasoning", "summary": []}}),
    );
    for piece in deltas(&turn.reasoning) {
        events.emit(
            "response.reasoning_summary_text.delta",
            json!({"item_id": rid, "output_index": index,
            "summary_index": 0, "delta": piece}),
        );
    }
    let item = json!({"id": rid, "type": "reasoning",
        "summary": [{"type": "summary_text", "text": turn.reasoning}]});
    events.emit(
        "response.output_item.done",
        json!({"output_index": index, "item": item}),
    );
    item
}

/// The events of the turn's text, a message item at output `index`; the item.
fn message_item(events: &mut Events, turn: &Turn, seq: u64, index: usize) -> Value {
    let mid = format!("msg_mock_{seq}");
    events.emit(
        "response.output_item.added",
        json!({"output_index": index,
        "item": {"id": mid, "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
    );
    events.emit(
        "response.content_part.added",
        json!({"item_id": mid, "output_index": index, "content_index": 0,
        "part": {"type": "output_text", "text": "", "annotations": []}}),
    );
    for piece in deltas(&turn.text) {
        events.emit(
            "response.output_text.delta",
            json!({"item_id": mid, "output_index": index,
            "content_index": 0, "delta": piece, "logprobs": []}),
        );
    }
    events.emit(
        "response.output_text.done",
        json!({"item_id": mid, "output_index": index, "content_index": 0,
        "text": turn.text, "logprobs": []}),
    );
    let part = json!({"type": "output_text", "text": turn.text, "annotations": []});
    events.emit(
        "response.content_part.done",
        json!({"item_id": mid, "output_index": index, "content_index": 0,
        "part": part}),
    );
    let item = json!({"id": mid, "type": "message", "status": "completed", "role": "assistant",
        "content": [part]});
    events.emit(
        "response.output_item.done",
        json!({"output_index": index, "item": item}),
    );
    item
}

/// The events of the turn's call `i`, a function call item at output
/// `index`; the item.
fn call_item(events: &mut Events, call: &super::ScriptCall, seq: u64, i: usize, index: usize) -> Value {
    let fid = format!("fc_mock_{seq}_{i}");
    let call_id = format!("call_{seq}_{i}");
    let args = call.arguments.to_string();
    events.emit(
        "response.output_item.added",
        json!({"output_index": index, "item": {"id": fid,
        "type": "function_call", "status": "in_progress", "arguments": "", "call_id": call_id, "name": call.name}}),
    );
    for part in halves(&args) {
        events.emit(
            "response.function_call_arguments.delta",
            json!({"item_id": fid, "output_index": index,
            "delta": part}),
        );
    }
    events.emit(
        "response.function_call_arguments.done",
        json!({"item_id": fid, "output_index": index,
        "arguments": args}),
    );
    let item = json!({"id": fid, "type": "function_call", "status": "completed", "arguments": args,
        "call_id": call_id, "name": call.name});
    events.emit(
        "response.output_item.done",
        json!({"output_index": index, "item": item}),
    );
    item
}

/// The usage a Responses answer reports.
fn usage_responses() -> Value {
    json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15})
}

/// OpenAI Responses: a non-streaming `response` object for a turn.
pub fn responses_whole(turn: &Turn, model: &str, seq: u64) -> String {
    let events = responses_stream(turn, model, seq);
    let last = events.last().map(|(_, data)| data.as_str()).unwrap_or("{}");
    let completed: Value = serde_json::from_str(last).unwrap_or_default();
    completed.get("response").cloned().unwrap_or_default().to_string()
}
