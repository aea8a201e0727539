//! Actions rendered for `gemini`: warning injection, block answers, abort
//! errors, and stream endings that replace withheld function calls.

use serde_json::{Value, json};

use crate::dialect::write::{Answer, Mode, StreamEnding};

/// Sets `loopguard_warning` inside the last `functionResponse.response`
/// object of the request — never as a sibling part, which Gemini rejects in a
/// content of function responses. Returns `false` when there is none.
pub fn inject_warning(body: &mut Value, warning: &str) -> bool {
    let Some(contents) = body.get_mut("contents").and_then(Value::as_array_mut) else {
        return false;
    };
    for content in contents.iter_mut().rev() {
        let Some(parts) = content.get_mut("parts").and_then(Value::as_array_mut) else {
            continue;
        };
        if let Some(response) = parts
            .iter_mut()
            .rev()
            .find_map(|p| p.get_mut("functionResponse").and_then(|f| f.get_mut("response")))
        {
            if let Some(object) = response.as_object_mut() {
                object.insert("loopguard_warning".to_owned(), json!(warning));
            } else {
                let original = response.take();
                *response = json!({"output": original, "loopguard_warning": warning});
            }
            return true;
        }
    }
    false
}

fn zero_usage() -> Value {
    json!({"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0})
}

fn final_chunk(model: &str, choice: u32, message: &str, usage: Option<&Value>) -> Value {
    json!({
        "candidates": [{
            "content": {"role": "model", "parts": [{"text": message}]},
            "finishReason": "STOP",
            "index": choice,
        }],
        "usageMetadata": usage.cloned().unwrap_or_else(zero_usage),
        "modelVersion": model,
    })
}

/// A non-streaming answer whose function calls are withheld: the
/// upstream's `generateContent` document (usage, model version, the text and
/// thought parts the model wrote) with the first candidate's `functionCall`
/// parts replaced by one text part carrying `message`, finishReason `STOP`
/// (`drop_text`: its text and thought parts replaced too). `None` when
/// `body` is not such a document.
pub fn block_whole(body: &[u8], message: &str, drop_text: bool) -> Option<Vec<u8>> {
    let mut answer: Value = serde_json::from_slice(body).ok()?;
    let candidate = answer.get_mut("candidates")?.as_array_mut()?.first_mut()?;
    let parts = candidate.get_mut("content")?.get_mut("parts")?.as_array_mut()?;
    parts.retain(|part| {
        part.get("functionCall").is_none()
            && part.get("function_call").is_none()
            && !(drop_text && part.get("text").is_some())
    });
    parts.push(json!({"text": message}));
    candidate["finishReason"] = json!("STOP");
    serde_json::to_vec(&answer).ok()
}

/// A complete answer with `message` as the model's text and finishReason
/// `STOP`: one `generateContent` document, one SSE event, or a one-element
/// JSON array.
pub fn block_answer(mode: Mode, model: &str, message: &str) -> Answer {
    let chunk = final_chunk(model, 0, message, None);
    match mode {
        Mode::Whole => Answer {
            content_type: "application/json",
            body: chunk.to_string().into_bytes(),
        },
        Mode::Sse | Mode::Ndjson | Mode::EventStream => Answer {
            content_type: "text/event-stream",
            body: format!("data: {chunk}\r\n\r\n").into_bytes(),
        },
        Mode::JsonArray => Answer {
            content_type: "application/json",
            body: format!("[{chunk}]").into_bytes(),
        },
    }
}

/// `{"error":{"code":400,"message","status":"FAILED_PRECONDITION"}}`.
pub fn abort_body(message: &str) -> Vec<u8> {
    json!({"error": {"code": 400, "message": message, "status": "FAILED_PRECONDITION"}})
        .to_string()
        .into_bytes()
}

/// The final chunk that ends a stream in place of withheld function calls,
/// framed for `mode` (an SSE event, or the array's next element and its
/// closing `]`). `first_element` says whether nothing of the array was sent
/// yet (then the element opens with `[`).
pub fn block_stream_ending(
    ending: &StreamEnding,
    message: &str,
    usage: Option<&Value>,
    mode: Mode,
    first_element: bool,
) -> Vec<u8> {
    let chunk = final_chunk(
        ending.model.as_deref().unwrap_or_default(),
        ending.choice,
        message,
        usage,
    );
    frame(&chunk, mode, first_element, true)
}

/// The in-stream error for an abort after headers went out.
pub fn stream_error_event(message: &str, mode: Mode, first_element: bool) -> Vec<u8> {
    let error = json!({"error": {"code": 400, "message": message, "status": "FAILED_PRECONDITION"}});
    frame(&error, mode, first_element, true)
}

fn frame(value: &Value, mode: Mode, first_element: bool, close_array: bool) -> Vec<u8> {
    match mode {
        Mode::Sse | Mode::Ndjson | Mode::EventStream => format!("data: {value}\r\n\r\n").into_bytes(),
        Mode::JsonArray => {
            let lead = if first_element { "[" } else { ",\r\n" };
            let tail = if close_array { "]" } else { "" };
            format!("{lead}{value}{tail}").into_bytes()
        }
        Mode::Whole => value.to_string().into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_goes_inside_the_last_function_response() {
        let mut body = json!({"contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "ls", "response": {"output": "a"}}},
                {"functionResponse": {"name": "ls", "response": {"output": "b"}}},
            ]},
        ]});
        assert!(inject_warning(&mut body, "[loopguard] w"));
        let parts = &body["contents"][2]["parts"];
        assert_eq!(parts.as_array().map(Vec::len), Some(2), "no sibling part added");
        assert_eq!(
            parts[1]["functionResponse"]["response"]["loopguard_warning"],
            "[loopguard] w"
        );
        assert!(
            parts[0]["functionResponse"]["response"]
                .get("loopguard_warning")
                .is_none()
        );
    }

    #[test]
    fn no_function_response_means_no_injection() {
        let mut body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        assert!(!inject_warning(&mut body, "w"));
    }

    #[test]
    fn block_answers_are_valid_in_every_mode() {
        for mode in [Mode::Whole, Mode::JsonArray] {
            let a = block_answer(mode, "g", "stopped");
            let v: Value = serde_json::from_slice(&a.body).unwrap_or_default();
            let chunk = if mode == Mode::JsonArray { &v[0] } else { &v };
            assert_eq!(chunk["candidates"][0]["finishReason"], "STOP");
            assert_eq!(chunk["candidates"][0]["content"]["parts"][0]["text"], "stopped");
        }
        let sse = block_answer(Mode::Sse, "g", "stopped");
        assert!(sse.body.starts_with(b"data: {") && sse.body.ends_with(b"\r\n\r\n"));
    }

    #[test]
    fn abort_body_has_the_gemini_error_shape() {
        let v: Value = serde_json::from_slice(&abort_body("loop_detected: x")).unwrap_or_default();
        assert_eq!(v["error"]["code"], 400);
        assert_eq!(v["error"]["status"], "FAILED_PRECONDITION");
    }

    #[test]
    fn array_ending_closes_the_array() {
        let ending = StreamEnding::default();
        let out = block_stream_ending(&ending, "m", None, Mode::JsonArray, false);
        let text = String::from_utf8(out).unwrap_or_default();
        assert!(text.starts_with(",\r\n{") && text.ends_with("}]"), "{text}");
    }
}
