//! Actions rendered for `openai-chat`: warning injection, block answers,
//! abort errors, and stream endings that replace withheld tool calls.

use serde_json::{Value, json};

use crate::dialect::write::{Answer, Mode, StreamEnding, random_id};

/// Appends `warning` to the content of the last `tool` (or legacy
/// `function`) message: to the string, or as a text part when the content is
/// an array of parts. Returns `false` when there is no such message.
pub fn inject_warning(body: &mut Value, warning: &str) -> bool {
    let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
        return false;
    };
    let Some(last_tool) = messages
        .iter_mut()
        .rev()
        .find(|m| matches!(m.get("role").and_then(Value::as_str), Some("tool" | "function")))
    else {
        return false;
    };
    match last_tool.get_mut("content") {
        Some(Value::String(text)) => {
            text.push_str("\n\n");
            text.push_str(warning);
        }
        Some(Value::Array(parts)) => parts.push(json!({"type": "text", "text": warning})),
        _ => {
            last_tool["content"] = json!(warning);
        }
    }
    true
}

fn chunk(id: &str, model: &str, created: u64, choice: u32, delta: Value, finish: Value) -> Value {
    json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": choice, "delta": delta, "finish_reason": finish}],
    })
}

fn zero_usage() -> Value {
    json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})
}

fn sse(value: &Value) -> Vec<u8> {
    format!("data: {value}\n\n").into_bytes()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A complete answer with `message` as the assistant's text: a
/// `chat.completion`, or a stream of chunks (role + text, finish "stop", a
/// usage chunk when asked for, `[DONE]`).
pub fn block_answer(mode: Mode, model: &str, message: &str, include_usage: bool) -> Answer {
    let id = format!("chatcmpl-loopguard-{}", random_id());
    let created = now_secs();
    match mode {
        Mode::Whole => Answer {
            content_type: "application/json",
            body: json!({
                "id": id,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": message, "refusal": null},
                    "logprobs": null,
                    "finish_reason": "stop",
                }],
                "usage": zero_usage(),
            })
            .to_string()
            .into_bytes(),
        },
        Mode::Sse | Mode::JsonArray | Mode::Ndjson | Mode::EventStream => {
            let mut body = sse(&chunk(
                &id,
                model,
                created,
                0,
                json!({"role": "assistant", "content": message}),
                Value::Null,
            ));
            body.extend(sse(&chunk(&id, model, created, 0, json!({}), json!("stop"))));
            if include_usage {
                body.extend(sse(&json!({
                    "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [], "usage": zero_usage(),
                })));
            }
            body.extend_from_slice(b"data: [DONE]\n\n");
            Answer {
                content_type: "text/event-stream",
                body,
            }
        }
    }
}

/// A non-streaming answer whose tool calls are withheld: the upstream's
/// `chat.completion` (id, model, usage, the text the model wrote) with the
/// first choice's `tool_calls` / `function_call` removed, `message` added to
/// its content (`drop_text`: in place of its content), and finish reason
/// "stop". `None` when `body` is not such an answer.
pub fn block_whole(body: &[u8], message: &str, drop_text: bool) -> Option<Vec<u8>> {
    let mut answer: Value = serde_json::from_slice(body).ok()?;
    let choice = answer.get_mut("choices")?.as_array_mut()?.first_mut()?;
    let reply = choice.get_mut("message")?.as_object_mut()?;
    reply.remove("tool_calls");
    reply.remove("function_call");
    let content = match reply.get("content").and_then(Value::as_str) {
        Some(text) if !text.is_empty() && !drop_text => format!("{text}\n\n{message}"),
        _ => message.to_owned(),
    };
    reply.insert("content".to_owned(), json!(content));
    choice["finish_reason"] = json!("stop");
    serde_json::to_vec(&answer).ok()
}

/// `{"error":{"message","type":"invalid_request_error","code":"loop_detected","param":null}}`.
pub fn abort_body(message: &str) -> Vec<u8> {
    json!({"error": {"message": message, "type": "invalid_request_error", "code": "loop_detected", "param": null}})
        .to_string()
        .into_bytes()
}

/// The events that end a stream in place of withheld tool calls: the
/// explanation as a content delta, then finish reason "stop", keeping the
/// upstream's `id`, `model` and choice index. The caller appends the
/// upstream's usage chunk (if any) and `data: [DONE]`.
pub fn block_stream_ending(ending: &StreamEnding, message: &str) -> Vec<u8> {
    let id = ending
        .id
        .clone()
        .unwrap_or_else(|| format!("chatcmpl-loopguard-{}", random_id()));
    let model = ending.model.clone().unwrap_or_default();
    let created = ending.created.unwrap_or_else(now_secs);
    let mut out = sse(&chunk(
        &id,
        &model,
        created,
        ending.choice,
        json!({"content": message}),
        Value::Null,
    ));
    out.extend(sse(&chunk(
        &id,
        &model,
        created,
        ending.choice,
        json!({}),
        json!("stop"),
    )));
    out
}

/// The in-stream error event for an abort after headers went out.
pub fn stream_error_event(message: &str) -> Vec<u8> {
    format!(
        "data: {}\n\n",
        json!({"error": {"message": message, "type": "invalid_request_error", "code": "loop_detected", "param": null}})
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_is_appended_to_the_last_tool_message_only() {
        let mut body = json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "tool", "tool_call_id": "a", "content": "first"},
            {"role": "assistant", "content": null},
            {"role": "tool", "tool_call_id": "b", "content": "second"},
        ]});
        assert!(inject_warning(&mut body, "[loopguard] stop"));
        assert_eq!(body["messages"][1]["content"], "first");
        assert_eq!(body["messages"][3]["content"], "second\n\n[loopguard] stop");
    }

    #[test]
    fn warning_goes_into_a_parts_array_as_a_text_part() {
        let mut body = json!({"messages": [{"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "x"}]}]});
        assert!(inject_warning(&mut body, "w"));
        assert_eq!(
            body["messages"][0]["content"][1],
            json!({"type": "text", "text": "w"})
        );
    }

    #[test]
    fn no_tool_message_means_no_injection() {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
        let before = body.clone();
        assert!(!inject_warning(&mut body, "w"));
        assert_eq!(body, before);
    }

    #[test]
    fn streamed_block_has_every_terminal_piece() {
        let answer = block_answer(Mode::Sse, "gpt", "[loopguard] stopped", true);
        let text = String::from_utf8(answer.body).unwrap_or_default();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 4, "{text}");
        assert!(events[0].contains("[loopguard] stopped"));
        assert!(events[1].contains("\"finish_reason\":\"stop\""));
        assert!(events[2].contains("\"usage\""));
        assert_eq!(events[3], "data: [DONE]");
    }

    #[test]
    fn abort_body_has_the_openai_error_shape() {
        let v: Value = serde_json::from_slice(&abort_body("loop_detected: x")).unwrap_or_default();
        assert_eq!(v["error"]["code"], "loop_detected");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["param"].is_null());
    }
}
