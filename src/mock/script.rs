//! Scripted answers: a list of assistant turns rendered in the dialect and
//! mode the request asked for.
//!
//! The mock is stateless: the turn it answers with is the number of assistant
//! turns already in the request's history (so an agent loop walks the script),
//! and past the end it repeats the last turn — which is how a looping model
//! looks from outside.

use serde::Deserialize;
use serde_json::{Value, json};

/// A script: the turns of a scripted model.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The turns, in order; the last one repeats forever.
    pub turns: Vec<Turn>,
}

/// One assistant turn.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// Answer text (split into several deltas when streamed).
    #[serde(default)]
    pub text: String,
    /// Reasoning text sent before the answer (OpenAI-compatible
    /// `reasoning_content`, Gemini `thought` parts).
    #[serde(default)]
    pub reasoning: String,
    /// Tool calls, after the text.
    #[serde(default)]
    pub tool_calls: Vec<ScriptCall>,
}

/// A scripted tool call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptCall {
    /// Tool name.
    pub name: String,
    /// Arguments object.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    json!({})
}

impl Script {
    /// The built-in script: one text turn, then a call to `list_directory`
    /// with `{"path": "."}` that repeats forever.
    pub fn default_loop() -> Self {
        Self {
            turns: vec![Turn {
                text: "Let me look at the files.".to_owned(),
                reasoning: String::new(),
                tool_calls: vec![ScriptCall {
                    name: "list_directory".to_owned(),
                    arguments: json!({"path": "."}),
                }],
            }],
        }
    }

    /// The turn for a request whose history has `assistant_turns` assistant turns.
    pub fn turn(&self, assistant_turns: usize) -> Turn {
        self.turns
            .get(assistant_turns)
            .or_else(|| self.turns.last())
            .cloned()
            .unwrap_or_default()
    }
}

/// Splits text into deltas of a few words each, keeping every character.
fn deltas(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut words = 0;
    for ch in text.chars() {
        current.push(ch);
        if ch == ' ' {
            words += 1;
            if words == 3 {
                out.push(std::mem::take(&mut current));
                words = 0;
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Counts assistant turns in an OpenAI chat or Gemini request body.
pub fn assistant_turns(body: &Value) -> usize {
    if let Some(messages) = body.get("messages").and_then(Value::as_array) {
        return messages
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
            .count();
    }
    if let Some(contents) = body.get("contents").and_then(Value::as_array) {
        return contents
            .iter()
            .filter(|c| c.get("role").and_then(Value::as_str) == Some("model"))
            .count();
    }
    0
}

/// OpenAI chat: the chunk payloads of a streamed turn (without `[DONE]`).
pub fn openai_stream(turn: &Turn, model: &str, seq: u64, include_usage: bool) -> Vec<String> {
    let id = format!("chatcmpl-mock-{seq}");
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": 1_700_000_000u64, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        })
        .to_string()
    };
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    for piece in deltas(&turn.reasoning) {
        out.push(chunk(json!({"reasoning_content": piece}), Value::Null));
    }
    for piece in deltas(&turn.text) {
        out.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        let args = call.arguments.to_string();
        let mid = args
            .char_indices()
            .nth(args.chars().count() / 2)
            .map_or(0, |(b, _)| b);
        out.push(chunk(
            json!({"tool_calls": [{"index": i, "id": format!("call_{seq}_{i}"), "type": "function",
                "function": {"name": call.name, "arguments": ""}}]}),
            Value::Null,
        ));
        for part in [&args[..mid], &args[mid..]] {
            out.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                Value::Null,
            ));
        }
    }
    let finish = if turn.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    out.push(chunk(json!({}), json!(finish)));
    if include_usage {
        out.push(
            json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000u64, "model": model,
                "choices": [], "usage": usage_openai()})
            .to_string(),
        );
    }
    out
}

fn usage_openai() -> Value {
    json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
}

/// OpenAI chat: a non-streaming `chat.completion` for a turn.
pub fn openai_whole(turn: &Turn, model: &str, seq: u64) -> String {
    let mut message = json!({"role": "assistant", "content": if turn.text.is_empty() { Value::Null } else { json!(turn.text) }});
    if !turn.tool_calls.is_empty() {
        message["tool_calls"] = turn
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"id": format!("call_{seq}_{i}"), "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments.to_string()}})
            })
            .collect();
    }
    let finish = if turn.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    json!({
        "id": format!("chatcmpl-mock-{seq}"), "object": "chat.completion", "created": 1_700_000_000u64,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
        "usage": usage_openai(),
    })
    .to_string()
}

fn usage_gemini() -> Value {
    json!({"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15})
}

/// Gemini: the chunk payloads of a streamed turn.
pub fn gemini_stream(turn: &Turn, model: &str) -> Vec<String> {
    let chunk = |parts: Value, finish: bool| {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if finish {
            candidate["finishReason"] = json!("STOP");
        }
        json!({"candidates": [candidate], "usageMetadata": usage_gemini(), "modelVersion": model}).to_string()
    };
    let mut out = Vec::new();
    for piece in deltas(&turn.reasoning) {
        out.push(chunk(json!([{"text": piece, "thought": true}]), false));
    }
    for piece in deltas(&turn.text) {
        out.push(chunk(json!([{"text": piece}]), false));
    }
    let calls: Vec<Value> = turn
        .tool_calls
        .iter()
        .map(|c| json!({"functionCall": {"name": c.name, "args": c.arguments}}))
        .collect();
    if calls.is_empty() {
        out.push(chunk(json!([{"text": ""}]), true));
    } else {
        out.push(chunk(Value::Array(calls), true));
    }
    out
}

/// Gemini: a non-streaming `generateContent` answer for a turn.
pub fn gemini_whole(turn: &Turn, model: &str) -> String {
    let mut parts = Vec::new();
    if !turn.reasoning.is_empty() {
        parts.push(json!({"text": turn.reasoning, "thought": true}));
    }
    if !turn.text.is_empty() {
        parts.push(json!({"text": turn.text}));
    }
    for c in &turn.tool_calls {
        parts.push(json!({"functionCall": {"name": c.name, "args": c.arguments}}));
    }
    json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage_gemini(), "modelVersion": model,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_keep_every_character() {
        let text = "one two three four five six seven";
        assert_eq!(deltas(text).concat(), text);
        assert!(deltas(text).len() > 1);
    }

    #[test]
    fn the_turn_follows_the_history_and_the_last_one_repeats() {
        let script = Script {
            turns: vec![
                Turn {
                    text: "a".into(),
                    ..Turn::default()
                },
                Turn {
                    text: "b".into(),
                    ..Turn::default()
                },
            ],
        };
        let body = json!({"messages": [{"role": "user"}, {"role": "assistant"}, {"role": "tool"}]});
        assert_eq!(script.turn(assistant_turns(&body)).text, "b");
        assert_eq!(script.turn(7).text, "b");
        assert_eq!(script.turn(0).text, "a");
    }

    #[test]
    fn openai_stream_splits_arguments_into_fragments_that_rejoin() {
        let turn = Script::default_loop().turn(0);
        let chunks = openai_stream(&turn, "m", 1, true);
        let args: String = chunks
            .iter()
            .filter_map(|c| serde_json::from_str::<Value>(c).ok())
            .filter_map(|v| {
                v["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        assert_eq!(args, r#"{"path":"."}"#);
        assert!(chunks.last().is_some_and(|c| c.contains("\"usage\"")));
    }
}
