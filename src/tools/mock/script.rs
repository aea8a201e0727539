//! Scripted answers: a list of assistant turns rendered in the dialect and
//! mode the request asked for.
//!
//! The mock is stateless: the turn it answers with is the number of assistant
//! turns already in the request's history (so an agent loop walks the script),
//! and past the end it repeats the last turn — which is how a looping model
//! looks from outside.
//!
//! Script format (JSON; every key but `turns` optional):
//!
//! ```json
//! {
//!   "turns": [{"text": "…", "reasoning": "…", "tool_calls": [{"name": "read", "arguments": {"filePath": "a.txt"}}]}],
//!   "no_tools": {"text": "A short title"},
//!   "json": {"next_speaker": "user"},
//!   "stop_after": 30,
//!   "final": {"text": "Done."}
//! }
//! ```
//!
//! Which answer a request gets, first match wins ([`Script::answer`]):
//!
//! 1. a request constrained to JSON output (Gemini `responseMimeType:
//!    application/json`, `responseSchema` or `responseJsonSchema`; OpenAI
//!    `response_format` of type `json_object` / `json_schema`) gets one text
//!    part holding `json` when the script sets it, else a minimal instance of
//!    the request's schema ([`instance_of`]: each property present, first enum
//!    value, integers at their minimum or 1, other numbers at their minimum or
//!    0, strings `"mock"`), so an agent's
//!    side calls (routers, next-speaker or loop checks) parse and move on;
//! 2. when the script sets `no_tools`, a request that declares no tools (title
//!    or summary side calls) gets that turn;
//! 3. when the script sets `stop_after: N`, a request with N or more
//!    assistant turns in its history gets `final` (default: the text
//!    "Done."), so a loop without a guard ends after N turns;
//! 4. otherwise the turn indexed by the history's assistant turns, the last one
//!    repeating.

mod responses;

use serde::Deserialize;
use serde_json::{Value, json};

pub use responses::{responses_stream, responses_whole};

/// A script: the turns of a scripted model (format in the module docs).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The turns, in order; the last one repeats (until `stop_after`).
    pub turns: Vec<Turn>,
    /// The answer to a request that declares no tools; `None`: such requests walk `turns` too.
    #[serde(default)]
    pub no_tools: Option<Turn>,
    /// The JSON sent as text to a JSON-constrained request; `None`: a minimal instance of its schema.
    #[serde(default)]
    pub json: Option<Value>,
    /// From this many assistant turns in the history on, answer with `final`.
    #[serde(default)]
    pub stop_after: Option<usize>,
    /// The turn sent once `stop_after` is reached (default: the text "Done.").
    #[serde(default, rename = "final")]
    pub final_turn: Option<Turn>,
    /// Other models: a request naming one of these models is answered by
    /// its script instead (one model loops, another answers in text).
    #[serde(default)]
    pub models: std::collections::HashMap<String, Script>,
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
        Self::from_turns(vec![Turn {
            text: "Let me look at the files.".to_owned(),
            reasoning: String::new(),
            tool_calls: vec![ScriptCall {
                name: "list_directory".to_owned(),
                arguments: json!({"path": "."}),
            }],
        }])
    }

    /// A script of these turns only (no side answers, no turn limit).
    pub fn from_turns(turns: Vec<Turn>) -> Self {
        Self {
            turns,
            no_tools: None,
            json: None,
            stop_after: None,
            final_turn: None,
            models: std::collections::HashMap::new(),
        }
    }

    /// The answer to a request body (rules in the module docs).
    pub fn answer(&self, body: &Value) -> Turn {
        if let Some(schema) = json_constraint(body) {
            let value = self.json.clone().unwrap_or_else(|| instance_of(&schema));
            return Turn {
                text: value.to_string(),
                ..Turn::default()
            };
        }
        if let Some(turn) = self.no_tools.as_ref().filter(|_| !declares_tools(body)) {
            return turn.clone();
        }
        let done = assistant_turns(body);
        if self.stop_after.is_some_and(|limit| done >= limit) {
            return self.final_turn.clone().unwrap_or_else(|| Turn {
                text: "Done.".to_owned(),
                ..Turn::default()
            });
        }
        self.turn(done)
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
pub(crate) fn deltas(text: &str) -> Vec<String> {
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

/// A call's argument text in two fragments (split at its middle character),
/// as servers stream them.
fn halves(args: &str) -> [&str; 2] {
    let mid = args
        .char_indices()
        .nth(args.chars().count() / 2)
        .map_or(0, |(b, _)| b);
    [&args[..mid], &args[mid..]]
}

/// Whether an OpenAI chat or Gemini request declares at least one tool.
pub fn declares_tools(body: &Value) -> bool {
    let Some(tools) = body.get("tools").and_then(Value::as_array) else {
        return body
            .get("functions")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
    };
    tools.iter().any(|tool| match tool.get("functionDeclarations") {
        Some(decls) => decls.as_array().is_some_and(|d| !d.is_empty()),
        // OpenAI tools, and Gemini built-ins (googleSearch, codeExecution, …).
        None => true,
    })
}

/// When a request is constrained to JSON output, its schema (`{}` when it
/// asks for JSON without one); `None` for free-form requests.
pub fn json_constraint(body: &Value) -> Option<Value> {
    if let Some(config) = body.get("generationConfig") {
        let schema = config
            .get("responseJsonSchema")
            .or_else(|| config.get("responseSchema"));
        let mime_json = config.get("responseMimeType").and_then(Value::as_str) == Some("application/json");
        if schema.is_some() || mime_json {
            return Some(schema.cloned().unwrap_or_else(empty_object));
        }
    }
    if let Some(format) = body.pointer("/text/format") {
        if format.get("type").and_then(Value::as_str) == Some("json_schema") {
            return Some(format.get("schema").cloned().unwrap_or_else(empty_object));
        }
    }
    let format = body.get("response_format")?;
    match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => Some(
            format
                .pointer("/json_schema/schema")
                .cloned()
                .unwrap_or_else(empty_object),
        ),
        Some("json_object") => Some(empty_object()),
        _ => None,
    }
}

/// A minimal value matching a JSON schema (OpenAPI-style upper-case types
/// too): objects with every listed property, the first enum value, integers
/// at their `minimum` or 1 (scores and counts tend to start at 1), numbers at
/// their `minimum` or 0 (confidences stay low), strings `"mock"`, empty
/// arrays, `false`.
pub fn instance_of(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if let Some(value) = schema.get("const") {
        return value.clone();
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(first) = schema.get(key).and_then(Value::as_array).and_then(|s| s.first()) {
            return instance_of(first);
        }
    }
    let kind = match schema.get("type") {
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|k| !k.eq_ignore_ascii_case("null"))
            .unwrap_or("null")
            .to_ascii_lowercase(),
        Some(Value::String(kind)) => kind.to_ascii_lowercase(),
        _ if schema.get("properties").is_some() => "object".to_owned(),
        _ => "null".to_owned(),
    };
    match kind.as_str() {
        "object" => Value::Object(
            schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|props| {
                    props
                        .iter()
                        .map(|(name, sub)| (name.clone(), instance_of(sub)))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        "array" => json!([]),
        "string" => json!("mock"),
        "integer" => schema.get("minimum").cloned().unwrap_or_else(|| json!(1)),
        "number" => schema.get("minimum").cloned().unwrap_or_else(|| json!(0)),
        "boolean" => json!(false),
        _ => Value::Null,
    }
}

/// Counts assistant turns in a request body of any dialect (OpenAI chat and
/// Anthropic `messages`, Gemini `contents`, Responses `input`, where a run of
/// consecutive model items — assistant messages, calls, reasoning — is one turn).
pub fn assistant_turns(body: &Value) -> usize {
    if let Some(items) = body.get("input").and_then(Value::as_array) {
        let model_side = |item: &Value| {
            let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
            match kind {
                "message" => item.get("role").and_then(Value::as_str) == Some("assistant"),
                "reasoning" => true,
                _ => kind.ends_with("_call"),
            }
        };
        let mut turns = 0;
        let mut previous = false;
        for item in items {
            let now = model_side(item);
            if now && !previous {
                turns += 1;
            }
            previous = now;
        }
        return turns;
    }
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
        out.push(chunk(
            json!({"tool_calls": [{"index": i, "id": format!("call_{seq}_{i}"), "type": "function",
                "function": {"name": call.name, "arguments": ""}}]}),
            Value::Null,
        ));
        for part in halves(&args) {
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

/// Anthropic Messages: the named events (`(event, data)`) of a streamed
/// turn, `message_start` … `message_stop`, with a `ping` after the start.
pub fn anthropic_stream(turn: &Turn, model: &str, seq: u64) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut emit = |kind: &str, mut data: Value| {
        data["type"] = json!(kind);
        out.push((kind.to_owned(), data.to_string()));
    };
    emit(
        "message_start",
        json!({"message": {"id": format!("msg_mock_{seq}"), "type": "message",
        "role": "assistant", "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    );
    emit("ping", json!({}));
    let mut index = 0;
    if !turn.reasoning.is_empty() {
        emit(
            "content_block_start",
            json!({"index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        );
        for piece in deltas(&turn.reasoning) {
            emit(
                "content_block_delta",
                json!({"index": index, "delta": {"type": "thinking_delta", "thinking": piece}}),
            );
        }
        emit(
            "content_block_delta",
            json!({"index": index, "delta": {"type": "signature_delta", "signature": super::signatures::sign(model)}}),
        );
        emit("content_block_stop", json!({"index": index}));
        index += 1;
    }
    if !turn.text.is_empty() {
        emit(
            "content_block_start",
            json!({"index": index, "content_block": {"type": "text", "text": ""}}),
        );
        for piece in deltas(&turn.text) {
            emit(
                "content_block_delta",
                json!({"index": index, "delta": {"type": "text_delta", "text": piece}}),
            );
        }
        emit("content_block_stop", json!({"index": index}));
        index += 1;
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        emit(
            "content_block_start",
            json!({"index": index, "content_block": {"type": "tool_use",
            "id": format!("toolu_mock_{seq}_{i}"), "name": call.name, "input": {}}}),
        );
        let args = call.arguments.to_string();
        for part in halves(&args) {
            emit(
                "content_block_delta",
                json!({"index": index, "delta": {"type": "input_json_delta", "partial_json": part}}),
            );
        }
        emit("content_block_stop", json!({"index": index}));
        index += 1;
    }
    let stop = if turn.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    emit(
        "message_delta",
        json!({"delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": 5}}),
    );
    emit("message_stop", json!({}));
    out
}

/// Anthropic Messages: a non-streaming `message` for a turn.
pub fn anthropic_whole(turn: &Turn, model: &str, seq: u64) -> String {
    let mut content = Vec::new();
    if !turn.reasoning.is_empty() {
        content.push(json!({"type": "thinking", "thinking": turn.reasoning, "signature": super::signatures::sign(model)}));
    }
    if !turn.text.is_empty() {
        content.push(json!({"type": "text", "text": turn.text}));
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        content.push(
            json!({"type": "tool_use", "id": format!("toolu_mock_{seq}_{i}"), "name": call.name,
            "input": call.arguments}),
        );
    }
    let stop = if turn.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    json!({"id": format!("msg_mock_{seq}"), "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 5}})
    .to_string()
}

#[cfg(test)]
#[path = "script_tests.rs"]
mod tests;
