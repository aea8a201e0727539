//! Actions rendered in Ollama's shapes: the warning appended to the last
//! `tool` message, block answers (one object, or a complete NDJSON stream
//! ending with `done: true`, `done_reason: "stop"`), abort errors
//! (`{"error": "…"}`), and the endings that replace withheld tool calls.

use serde_json::{Map, Value, json};

use super::parse::Identity;
use crate::dialect::ending::Kept;
use crate::dialect::write::{Answer, Mode};

/// Content type of a streamed Ollama answer.
pub const NDJSON: &str = "application/x-ndjson";

/// Which endpoint an answer belongs to: `/api/chat` answers carry
/// `message`, `/api/generate` answers `response`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST …/api/chat`.
    Chat,
    /// `POST …/api/generate`.
    Generate,
}

/// Appends `warning` to the content of the last `role: "tool"` message
/// (on a new paragraph). Returns `false` when there is none (always for
/// `/api/generate`, which has no tool results).
pub fn inject_warning(body: &mut Value, warning: &str) -> bool {
    let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
        return false;
    };
    let Some(last_tool) = messages
        .iter_mut()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
    else {
        return false;
    };
    match last_tool.get_mut("content") {
        Some(Value::String(text)) if !text.is_empty() => {
            text.push_str("\n\n");
            text.push_str(warning);
        }
        _ => last_tool["content"] = json!(warning),
    }
    true
}

/// `{"error": "…"}`, Ollama's error body (sent with HTTP 400).
pub fn abort_body(message: &str) -> Vec<u8> {
    json!({"error": message}).to_string().into_bytes()
}

/// One answer line: `text` as the assistant's content (`message` for chat,
/// `response` for generate), `done` as given, then `extra` fields.
fn line(endpoint: Endpoint, identity: &Identity, text: &str, done: bool, extra: Map<String, Value>) -> Value {
    let mut object = Map::new();
    object.insert(
        "model".to_owned(),
        json!(identity.model.as_deref().unwrap_or_default()),
    );
    object.insert(
        "created_at".to_owned(),
        json!(identity.created_at.clone().unwrap_or_else(now_rfc3339)),
    );
    match endpoint {
        Endpoint::Chat => object.insert(
            "message".to_owned(),
            json!({"role": "assistant", "content": text}),
        ),
        Endpoint::Generate => object.insert("response".to_owned(), json!(text)),
    };
    object.insert("done".to_owned(), json!(done));
    object.extend(extra);
    Value::Object(object)
}

/// The fields of a last line: `done_reason: "stop"` and the counters
/// (`usage`, the upstream's held counters, else zeros).
fn final_fields(usage: Option<&Value>) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("done_reason".to_owned(), json!("stop"));
    match usage.and_then(Value::as_object) {
        Some(counters) => fields.extend(counters.clone()),
        None => {
            for key in [
                "total_duration",
                "load_duration",
                "prompt_eval_count",
                "eval_count",
            ] {
                fields.insert(key.to_owned(), json!(0));
            }
        }
    }
    fields
}

fn ndjson(lines: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for value in lines {
        out.extend_from_slice(value.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

/// A complete answer with `message` as the assistant's text, `done_reason`
/// "stop": one object (`stream: false`), or a stream of two lines (the
/// text, then `done: true` with zero counters).
pub fn block_answer(endpoint: Endpoint, mode: Mode, model: &str, message: &str) -> Answer {
    let identity = Identity {
        model: Some(model.to_owned()),
        created_at: None,
    };
    if mode == Mode::Whole {
        let whole = line(endpoint, &identity, message, true, final_fields(None));
        return Answer {
            content_type: "application/json; charset=utf-8",
            body: whole.to_string().into_bytes(),
        };
    }
    Answer {
        content_type: NDJSON,
        body: stream_ending(endpoint, &identity, message, None),
    }
}

/// The lines that end a stream with `message`: the text, then `done: true`.
fn stream_ending(endpoint: Endpoint, identity: &Identity, message: &str, usage: Option<&Value>) -> Vec<u8> {
    ndjson(&[
        line(endpoint, identity, message, false, Map::new()),
        line(endpoint, identity, "", true, final_fields(usage)),
    ])
}

/// A non-streaming answer whose tool calls are withheld: the upstream's
/// object (counters, model, what else it carried) with `message.tool_calls`
/// removed, `message` added to the content (`drop_text`: in its place) and
/// `done_reason: "stop"`. `None` when `body` is not such an object.
pub fn block_whole(body: &[u8], message: &str, drop_text: bool) -> Option<Vec<u8>> {
    let mut answer: Value = serde_json::from_slice(body).ok()?;
    let root = answer.as_object_mut()?;
    let key = if root.contains_key("message") {
        "message"
    } else {
        "response"
    };
    let content = if key == "message" {
        let m = root.get_mut("message")?.as_object_mut()?;
        m.remove("tool_calls");
        if drop_text {
            m.remove("thinking");
        }
        m.entry("content").or_insert_with(|| json!(""))
    } else {
        root.entry("response").or_insert_with(|| json!(""))
    };
    let kept = content.as_str().filter(|t| !drop_text && !t.is_empty());
    *content = json!(kept.map_or_else(|| message.to_owned(), |t| format!("{t}\n\n{message}")));
    root.insert("done_reason".to_owned(), json!("stop"));
    serde_json::to_vec(&answer).ok()
}

/// What replaces the held region for a block.
pub(crate) fn block(endpoint: Endpoint, identity: &Identity, k: &Kept<'_>, message: &str) -> Vec<u8> {
    let message = k.continued(message);
    if k.mode == Mode::Whole {
        let kept = k
            .whole_body
            .and_then(|body| block_whole(body, &message, k.drop_text));
        let model = identity.model.as_deref().unwrap_or_default();
        return kept.unwrap_or_else(|| block_answer(endpoint, Mode::Whole, model, &message).body);
    }
    stream_ending(endpoint, identity, &message, k.held_usage)
}

/// What replaces the held region for an abort: the error body, or the
/// error line Ollama itself sends when a stream fails under way.
pub(crate) fn error(k: &Kept<'_>, message: &str) -> Vec<u8> {
    let mut body = abort_body(message);
    if k.mode != Mode::Whole {
        body.push(b'\n');
    }
    body
}

/// What ends a generation cut short: the note replaces what was not released.
pub(crate) fn cut(endpoint: Endpoint, identity: &Identity, k: &Kept<'_>, message: &str) -> Vec<u8> {
    block(endpoint, identity, &k.without_text(), message)
}

/// The current time as RFC 3339 UTC (`2026-12-07T04:50:00.000000000Z`), as
/// Ollama writes `created_at`.
fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or_default();
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        now.subsec_nanos()
    )
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;

    #[test]
    fn the_warning_is_appended_to_the_last_tool_message() {
        let mut body = json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "ls", "arguments": {}}}]},
            {"role": "tool", "tool_name": "ls", "content": "a"},
            {"role": "tool", "tool_name": "ls", "content": "b"},
        ]});
        assert!(inject_warning(&mut body, "[loopguard] w"));
        assert_eq!(body["messages"][3]["content"], "b\n\n[loopguard] w");
        assert_eq!(body["messages"][2]["content"], "a");
        let mut generate = json!({"model": "m", "prompt": "hi"});
        assert!(!inject_warning(&mut generate, "w"));
    }

    #[test]
    fn a_streamed_block_is_a_complete_ndjson_stream() {
        for endpoint in [Endpoint::Chat, Endpoint::Generate] {
            let answer = block_answer(endpoint, Mode::Ndjson, "llama3.2", "[loopguard] stopped");
            assert_eq!(answer.content_type, NDJSON);
            let text = String::from_utf8(answer.body).unwrap();
            assert!(text.ends_with('\n'));
            let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            assert_eq!(lines.len(), 2);
            assert_eq!(lines[0]["done"], false);
            assert_eq!(lines[1]["done"], true);
            assert_eq!(lines[1]["done_reason"], "stop");
            assert_eq!(lines[1]["model"], "llama3.2");
            let said = match endpoint {
                Endpoint::Chat => &lines[0]["message"]["content"],
                Endpoint::Generate => &lines[0]["response"],
            };
            assert_eq!(said, "[loopguard] stopped");
            assert!(lines[0]["created_at"].as_str().unwrap().ends_with('Z'));
        }
    }

    #[test]
    fn a_whole_block_is_one_done_object() {
        let answer = block_answer(Endpoint::Chat, Mode::Whole, "m", "stopped");
        let v: Value = serde_json::from_slice(&answer.body).unwrap();
        assert_eq!(v["done"], true);
        assert_eq!(v["done_reason"], "stop");
        assert_eq!(v["message"], json!({"role": "assistant", "content": "stopped"}));
    }

    #[test]
    fn a_whole_answer_keeps_everything_but_its_calls() {
        let body = json!({"model": "m", "created_at": "t", "message": {"role": "assistant", "content": "Looking.",
            "tool_calls": [{"function": {"name": "ls", "arguments": {}}}]}, "done": true, "done_reason": "stop", "eval_count": 9});
        let out = block_whole(body.to_string().as_bytes(), "[loopguard] x", false).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["message"]["content"], "Looking.\n\n[loopguard] x");
        assert!(v["message"].get("tool_calls").is_none());
        assert_eq!(v["eval_count"], 9);
        assert_eq!(v["created_at"], "t");
    }

    #[test]
    fn abort_is_ollamas_error_shape() {
        let v: Value = serde_json::from_slice(&abort_body("loop_detected: x")).unwrap();
        assert_eq!(v, json!({"error": "loop_detected: x"}));
    }

    #[test]
    fn created_at_is_rfc3339() {
        let t = now_rfc3339();
        assert_eq!(t.len(), "2026-12-07T04:50:00.000000000Z".len(), "{t}");
        assert!(t.starts_with("20"), "{t}");
    }
}
