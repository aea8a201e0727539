//! The mock's Bedrock `Converse` (`…/model/{id}/converse`, one JSON
//! answer) and `ConverseStream` (`…/model/{id}/converse-stream`, AWS event
//! stream, one message per event). Scripted turns and recorded `anthropic`
//! fixtures are translated event by event from Anthropic's stream (the
//! shapes Bedrock maps Claude's answers to): `message_start` →
//! `messageStart`, a `tool_use` block start → `contentBlockStart` with
//! `start.toolUse`, text / thinking / `input_json_delta` deltas →
//! `contentBlockDelta` (`text`, `reasoningContent`, `toolUse.input`),
//! `content_block_stop` → `contentBlockStop`, `message_delta`'s
//! `stop_reason` → `messageStop`, `message_stop` → `metadata` (usage,
//! metrics); `ping` has no counterpart.

use serde_json::{Value, json};

use super::script::{self, Turn};
use crate::dialect::Dialect;
use crate::dialect::bedrock_converse::frames_from_events;

/// The request is a `Converse` or `ConverseStream` call.
pub fn is_converse(path: &str) -> bool {
    Dialect::from_path(path) == Some(Dialect::BedrockConverse)
}

/// The request is a `ConverseStream` call (answered as an event stream).
pub fn streams(path: &str) -> bool {
    is_converse(path) && path.trim_end_matches('/').ends_with("/converse-stream")
}

/// The answer to a scripted `turn` (`seq` numbers the mock's ids): one
/// piece per event for `ConverseStream`, one JSON document for `Converse`.
pub fn scripted(turn: &Turn, seq: u64, path: &str) -> Vec<Vec<u8>> {
    if !streams(path) {
        return vec![whole(turn, seq).into_bytes()];
    }
    let anthropic: Vec<Value> = script::anthropic_stream(turn, "mock", seq)
        .into_iter()
        .filter_map(|(_, data)| serde_json::from_str(&data).ok())
        .collect();
    translate(&anthropic)
}

/// A recorded `anthropic` SSE fixture as a `ConverseStream`, one piece
/// per event.
pub fn recorded(sse: &[u8]) -> Vec<Vec<u8>> {
    let mut decoder = crate::sse::SseDecoder::new();
    let mut events = Vec::new();
    decoder.push(sse, &mut events);
    events.extend(decoder.finish());
    let anthropic: Vec<Value> = events
        .iter()
        .filter_map(|e| serde_json::from_str(&e.data).ok())
        .collect();
    translate(&anthropic)
}

/// Anthropic stream events → framed `ConverseStream` events, one piece each.
fn translate(anthropic: &[Value]) -> Vec<Vec<u8>> {
    let mut usage = json!({"inputTokens": 0, "outputTokens": 0, "totalTokens": 0});
    anthropic
        .iter()
        .filter_map(|event| converse_event(event, &mut usage))
        .map(|event| frames_from_events(&[event]))
        .collect()
}

/// One Anthropic event as a `{"<event-type>": …}` Converse event, noting
/// its token counts in `usage`; `None` for one with no counterpart.
fn converse_event(event: &Value, usage: &mut Value) -> Option<Value> {
    let index = event.get("index").cloned().unwrap_or(json!(0));
    let count = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    match event.get("type")?.as_str()? {
        "message_start" => {
            usage["inputTokens"] = json!(count(event.pointer("/message/usage/input_tokens")));
            Some(json!({"messageStart": {"role": "assistant"}}))
        }
        "content_block_start" => {
            let block = event.get("content_block")?;
            (block.get("type")?.as_str()? == "tool_use").then(|| {
                json!({"contentBlockStart": {"contentBlockIndex": index, "start": {"toolUse": {
                    "toolUseId": block.get("id").cloned().unwrap_or(json!("")),
                    "name": block.get("name").cloned().unwrap_or(json!(""))}}}})
            })
        }
        "content_block_delta" => {
            let delta = event.get("delta")?;
            let text = |key: &str| delta.get(key).cloned().unwrap_or(json!(""));
            let converse = match delta.get("type")?.as_str()? {
                "text_delta" => json!({"text": text("text")}),
                "thinking_delta" => json!({"reasoningContent": {"text": text("thinking")}}),
                "signature_delta" => json!({"reasoningContent": {"signature": text("signature")}}),
                "input_json_delta" => json!({"toolUse": {"input": text("partial_json")}}),
                _ => return None,
            };
            Some(json!({"contentBlockDelta": {"contentBlockIndex": index, "delta": converse}}))
        }
        "content_block_stop" => Some(json!({"contentBlockStop": {"contentBlockIndex": index}})),
        "message_delta" => {
            usage["outputTokens"] = json!(count(event.pointer("/usage/output_tokens")));
            let reason = event
                .pointer("/delta/stop_reason")
                .cloned()
                .unwrap_or(json!("end_turn"));
            Some(json!({"messageStop": {"stopReason": reason}}))
        }
        "message_stop" => {
            let total = count(usage.get("inputTokens")) + count(usage.get("outputTokens"));
            usage["totalTokens"] = json!(total);
            Some(json!({"metadata": {"usage": usage.clone(), "metrics": {"latencyMs": 42}}}))
        }
        _ => None,
    }
}

/// A `Converse` answer for a turn: reasoning, text and `toolUse` blocks,
/// `stopReason`, `usage`, `metrics`.
pub fn whole(turn: &Turn, seq: u64) -> String {
    let mut content = Vec::new();
    if !turn.reasoning.is_empty() {
        let signature = super::signatures::sign("mock");
        content.push(
            json!({"reasoningContent": {"reasoningText": {"text": turn.reasoning, "signature": signature}}}),
        );
    }
    if !turn.text.is_empty() {
        content.push(json!({"text": turn.text}));
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        content.push(json!({"toolUse": {"toolUseId": format!("tooluse_mock_{seq}_{i}"),
            "name": call.name, "input": call.arguments}}));
    }
    let stop = if turn.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    json!({"output": {"message": {"role": "assistant", "content": content}}, "stopReason": stop,
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}, "metrics": {"latencyMs": 42}})
    .to_string()
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;
    use crate::dialect::bedrock_converse::payload_of;
    use crate::eventstream::Decoder;

    fn turn() -> Turn {
        serde_json::from_value(json!({"text": "Let me look.", "reasoning": "hmm",
            "tool_calls": [{"name": "ls", "arguments": {"path": "."}}]}))
        .unwrap()
    }

    /// A scripted ConverseStream decodes (CRCs right) to the event
    /// sequence Bedrock sends, and parses to the scripted text and call.
    #[test]
    fn a_scripted_stream_is_a_converse_stream() {
        let body = scripted(&turn(), 3, "/model/m/converse-stream").concat();
        let mut messages = Vec::new();
        Decoder::default().push(&body, &mut messages).unwrap();
        let payloads: Vec<String> = messages.iter().filter_map(payload_of).collect();
        let kinds: Vec<String> = payloads
            .iter()
            .map(|p| serde_json::from_str::<Value>(p).unwrap())
            .filter_map(|v| v.as_object()?.keys().next().cloned())
            .collect();
        assert_eq!(kinds.first().map(String::as_str), Some("messageStart"));
        assert_eq!(kinds.last().map(String::as_str), Some("metadata"));
        assert!(kinds.iter().any(|k| k == "contentBlockStart"));
        let mut parser = Dialect::BedrockConverse.stream_parser();
        let mut out = Vec::new();
        for p in &payloads {
            parser.payload(p, &mut out).unwrap();
        }
        let text: String = out
            .iter()
            .filter_map(|e| match e {
                crate::dialect::StreamEvent::TextDelta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "Let me look.");
        assert!(out.iter().any(|e| matches!(e,
            crate::dialect::StreamEvent::ToolCallComplete { call, .. } if call.name == "ls")));
    }

    /// `Converse` answers one JSON document.
    #[test]
    fn a_scripted_whole_answer_is_a_converse_answer() {
        let body = scripted(&turn(), 3, "/model/m/converse").concat();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["stopReason"], "tool_use");
        assert_eq!(v["output"]["message"]["content"][2]["toolUse"]["name"], "ls");
    }
}
