//! The `gemini` dialect (Gemini API and Vertex AI `generateContent` /
//! `streamGenerateContent`): request body → [`Transcript`], response
//! payloads → [`StreamEvent`]s.
//!
//! Field names are read in the REST API's camelCase and, where the API also
//! accepts it, snake_case (`function_call`, `system_instruction`, …). Vertex
//! streamed function-call arguments (`partialArgs` with a `jsonPath` each,
//! `willContinue` until a final part without it) are assembled by path.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{DialectError, ParsedRequest, StreamEvent};
use crate::transcript::{Arguments, Message, ResultContent, Role, ToolCall, ToolResult, Transcript};

/// Largest array index a `partialArgs` path may set; a fragment past it is
/// ignored rather than allocating a huge array.
const MAX_PATH_INDEX: usize = 100_000;

/// Parses a `:generateContent` / `:streamGenerateContent` request body.
///
/// Text parts marked `thought: true` are skipped. `model` contents are
/// [`Role::Assistant`]; a `user` content with function responses and no
/// text is [`Role::Tool`]. A function response's content is its `response`
/// object, an error when that object has an `error` key. The model is named
/// in the path, not the body, so [`ParsedRequest::model`] is `None` and
/// [`ParsedRequest::stream`] is `false`.
///
/// # Errors
/// [`DialectError::Json`] when the body is not JSON; [`DialectError::Shape`]
/// when it is not an object or has no `contents` array.
pub fn parse_request(body: &[u8]) -> Result<ParsedRequest, DialectError> {
    let value: Value = serde_json::from_slice(body)?;
    let Value::Object(root) = value else {
        return Err(DialectError::Shape(
            "request body is not a JSON object".to_owned(),
        ));
    };
    let Some(contents) = root.get("contents").and_then(Value::as_array) else {
        return Err(DialectError::Shape("no `contents` array".to_owned()));
    };
    let system = match field(&root, "systemInstruction", "system_instruction") {
        Some(Value::String(text)) => text.clone(),
        Some(content) => content_message(content, Role::System).text,
        None => String::new(),
    };
    let tools = root.get("tools").and_then(Value::as_array).into_iter().flatten();
    let tools = tools
        .filter_map(|tool| field_of(tool, "functionDeclarations", "function_declarations"))
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|declaration| declaration.get("name").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    let messages = contents
        .iter()
        .map(|content| {
            let role = match content.get("role").and_then(Value::as_str) {
                Some("model") => Role::Assistant,
                Some("function" | "tool") => Role::Tool,
                _ => Role::User,
            };
            let mut message = content_message(content, role);
            if role == Role::User && !message.tool_results.is_empty() && message.text.is_empty() {
                message.role = Role::Tool;
            }
            message
        })
        .collect();
    Ok(ParsedRequest {
        transcript: Transcript {
            system,
            tools,
            messages,
        },
        stream: false,
        include_usage: false,
        model: None,
    })
}

/// One `Content` (`{role, parts[]}`) as a message of the given role.
fn content_message(content: &Value, role: Role) -> Message {
    let mut message = Message::text(role, "");
    let mut texts: Vec<&str> = Vec::new();
    for part in content
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(call) = field_of(part, "functionCall", "function_call").filter(|c| c.is_object()) {
            let args = call.get("args").filter(|a| !a.is_null()).cloned();
            message.tool_calls.push(ToolCall::new(
                call.get("id").and_then(Value::as_str).map(str::to_owned),
                call.get("name").and_then(Value::as_str).unwrap_or_default(),
                Arguments::Json(args.unwrap_or_else(|| Value::Object(Map::new()))),
            ));
        } else if let Some(response) = field_of(part, "functionResponse", "function_response") {
            let content = response.get("response").cloned().unwrap_or(Value::Null);
            message.tool_results.push(ToolResult {
                call_id: response.get("id").and_then(Value::as_str).map(str::to_owned),
                name: response.get("name").and_then(Value::as_str).map(str::to_owned),
                is_error: content.get("error").is_some(),
                content: ResultContent::Json(content),
            });
        } else if let Some(text) = part.get("text").and_then(Value::as_str) {
            if !is_thought(part) {
                texts.push(text);
            }
        }
    }
    message.text = texts.join("\n");
    message
}

fn is_thought(part: &Value) -> bool {
    part.get("thought").and_then(Value::as_bool).unwrap_or(false)
}

/// A field by its camelCase or snake_case name.
fn field<'a>(object: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    object.get(camel).or_else(|| object.get(snake))
}

fn field_of<'a>(value: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    value.as_object().and_then(|object| field(object, camel, snake))
}

/// Incremental response parser for one Gemini response: `alt=sse` data
/// payloads, elements of the streamed JSON array, or a whole
/// `generateContent` body (an array of responses is read element by element).
///
/// A `functionCall` part with a `name` starts a call. Without `willContinue`
/// it is whole: [`StreamEvent::ToolCallDelta`] and
/// [`StreamEvent::ToolCallComplete`] at once. With `willContinue: true` the
/// call stays open: the following nameless `functionCall` parts add
/// `partialArgs`, and the first one without `willContinue` (often `{}`)
/// completes it. A new named call, the candidate's `finishReason` or
/// [`ResponseParser::end`] completes one still open with what was assembled.
#[derive(Debug, Default)]
pub struct ResponseParser {
    /// Per candidate index.
    candidates: BTreeMap<u32, Candidate>,
}

/// Call bookkeeping of one candidate.
#[derive(Debug, Default)]
struct Candidate {
    /// Position the next call will get.
    next_index: u32,
    /// A streamed call still being assembled.
    open: Option<OpenCall>,
}

/// A streamed call being assembled from `partialArgs`.
#[derive(Debug)]
struct OpenCall {
    index: u32,
    id: Option<String>,
    name: String,
    args: Value,
    /// The `jsonPath` whose string value continues in the next fragment.
    continuing: Option<String>,
}

impl ResponseParser {
    /// Parses one payload.
    ///
    /// # Errors
    /// [`DialectError::Json`] when the payload is not JSON,
    /// [`DialectError::Shape`] when it is neither an object nor an array of
    /// objects. The parser stays usable.
    pub fn payload(&mut self, payload: &str, out: &mut Vec<StreamEvent>) -> Result<(), DialectError> {
        match serde_json::from_str(payload)? {
            Value::Object(response) => self.response(&response, out),
            Value::Array(responses) => {
                for response in &responses {
                    match response {
                        Value::Object(response) => self.response(response, out),
                        _ => return Err(DialectError::Shape("array element is not an object".to_owned())),
                    }
                }
            }
            _ => return Err(DialectError::Shape("payload is not a JSON object".to_owned())),
        }
        Ok(())
    }

    /// Ends the response: completes every call still open, candidate by
    /// candidate. Calling it again appends nothing.
    pub fn end(&mut self, out: &mut Vec<StreamEvent>) {
        for (&choice, candidate) in &mut self.candidates {
            complete_open(choice, candidate, out);
        }
    }

    /// One `GenerateContentResponse`.
    fn response(&mut self, response: &Map<String, Value>, out: &mut Vec<StreamEvent>) {
        if let Some(error) = response.get("error").filter(|e| !e.is_null()) {
            let message = match error.get("message").and_then(Value::as_str) {
                Some(message) => message.to_owned(),
                None => error.to_string(),
            };
            out.push(StreamEvent::Error { message });
        }
        for candidate in response
            .get("candidates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.candidate(candidate, out);
        }
        if let Some(usage) = field(response, "usageMetadata", "usage_metadata").filter(|u| u.is_object()) {
            out.push(StreamEvent::Usage { usage: usage.clone() });
        }
    }

    fn candidate(&mut self, candidate: &Value, out: &mut Vec<StreamEvent>) {
        let choice = candidate
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| u32::try_from(i).ok())
            .unwrap_or(0);
        let state = self.candidates.entry(choice).or_default();
        let parts = candidate
            .get("content")
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            if let Some(call) = field_of(part, "functionCall", "function_call").filter(|c| c.is_object()) {
                function_call(choice, state, call, out);
            } else if let Some(text) = part.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                let text = text.to_owned();
                out.push(if is_thought(part) {
                    StreamEvent::ReasoningDelta { choice, text }
                } else {
                    StreamEvent::TextDelta { choice, text }
                });
            }
        }
        if let Some(reason) = field_of(candidate, "finishReason", "finish_reason").and_then(Value::as_str) {
            complete_open(choice, state, out);
            out.push(StreamEvent::Finish {
                choice,
                reason: reason.to_owned(),
            });
        }
    }
}

/// One `functionCall` part of a candidate.
fn function_call(choice: u32, state: &mut Candidate, call: &Value, out: &mut Vec<StreamEvent>) {
    let name = call.get("name").and_then(Value::as_str).filter(|n| !n.is_empty());
    let id = call.get("id").and_then(Value::as_str).map(str::to_owned);
    let will_continue = call.get("willContinue").and_then(Value::as_bool).unwrap_or(false);
    let partial = call
        .get("partialArgs")
        .and_then(Value::as_array)
        .map(Vec::as_slice);
    let mut open = match (name, state.open.take()) {
        (Some(name), previous) => {
            if let Some(previous) = previous {
                emit_complete(choice, previous, out);
            }
            let index = state.next_index;
            state.next_index += 1;
            let args = call.get("args").filter(|a| a.is_object()).cloned();
            OpenCall {
                index,
                id,
                name: name.to_owned(),
                args: args.unwrap_or_else(|| Value::Object(Map::new())),
                continuing: None,
            }
        }
        (None, Some(mut open)) => {
            if open.id.is_none() {
                open.id = id;
            }
            open
        }
        // A nameless part with no call open (a stray terminator) carries nothing to assemble.
        (None, None) => return,
    };
    let mut arguments_delta = match call.get("args") {
        Some(args) if name.is_some() && args.is_object() => args.to_string(),
        _ => String::new(),
    };
    for fragment in partial.unwrap_or_default() {
        apply_partial(&mut open, fragment, &mut arguments_delta);
    }
    out.push(StreamEvent::ToolCallDelta {
        choice,
        index: open.index,
        arguments_delta,
    });
    if will_continue {
        state.open = Some(open);
    } else {
        emit_complete(choice, open, out);
    }
}

/// Sets one `partialArgs` entry at its `jsonPath`; a string value continues
/// the previous fragment's string when that one said `willContinue`.
fn apply_partial(call: &mut OpenCall, fragment: &Value, delta: &mut String) {
    let Some(path) = fragment.get("jsonPath").and_then(Value::as_str) else {
        return;
    };
    let value = if let Some(text) = fragment.get("stringValue").and_then(Value::as_str) {
        Value::String(text.to_owned())
    } else if let Some(number) = fragment.get("numberValue").filter(|n| n.is_number()) {
        number.clone()
    } else if let Some(flag) = fragment.get("boolValue").and_then(Value::as_bool) {
        Value::Bool(flag)
    } else if fragment.get("nullValue").is_some() {
        Value::Null
    } else {
        return;
    };
    let Some(segments) = parse_path(path) else { return };
    let continues = call.continuing.as_deref() == Some(path);
    let Some(slot) = slot(&mut call.args, &segments) else {
        return;
    };
    match (value, slot) {
        (Value::String(text), Value::String(existing)) if continues => {
            existing.push_str(&text);
            delta.push_str(&text);
        }
        (Value::String(text), slot) => {
            delta.push_str(&text);
            *slot = Value::String(text);
        }
        (value, slot) => {
            delta.push_str(&value.to_string());
            *slot = value;
        }
    }
    let string_continues = fragment.get("stringValue").is_some()
        && fragment
            .get("willContinue")
            .and_then(Value::as_bool)
            .unwrap_or(false);
    call.continuing = string_continues.then(|| path.to_owned());
}

/// One step of a `jsonPath`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// Parses `$.a.b[0]['c d']` into segments; `None` when it is not such a path.
fn parse_path(path: &str) -> Option<Vec<Segment>> {
    let mut rest = path.strip_prefix('$')?;
    let mut segments = Vec::new();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            if end == 0 {
                return None;
            }
            segments.push(Segment::Key(after[..end].to_owned()));
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let close = after.find(']')?;
            let inner = &after[..close];
            let quoted = inner
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')));
            segments.push(match quoted {
                Some(key) => Segment::Key(key.to_owned()),
                None => Segment::Index(inner.parse().ok()?),
            });
            rest = &after[close + 1..];
        } else {
            return None;
        }
    }
    Some(segments)
}

/// The value at `segments` under `root`, creating objects, arrays (padded
/// with nulls) and replacing scalars on the way as needed.
fn slot<'a>(root: &'a mut Value, segments: &[Segment]) -> Option<&'a mut Value> {
    let mut here = root;
    for segment in segments {
        here = match segment {
            Segment::Key(key) => {
                if !here.is_object() {
                    *here = Value::Object(Map::new());
                }
                here.as_object_mut()?.entry(key.clone()).or_insert(Value::Null)
            }
            Segment::Index(index) => {
                if *index > MAX_PATH_INDEX {
                    return None;
                }
                if !here.is_array() {
                    *here = Value::Array(Vec::new());
                }
                let array = here.as_array_mut()?;
                if array.len() <= *index {
                    array.resize(index + 1, Value::Null);
                }
                &mut array[*index]
            }
        };
    }
    Some(here)
}

fn complete_open(choice: u32, state: &mut Candidate, out: &mut Vec<StreamEvent>) {
    if let Some(open) = state.open.take() {
        emit_complete(choice, open, out);
    }
}

fn emit_complete(choice: u32, call: OpenCall, out: &mut Vec<StreamEvent>) {
    out.push(StreamEvent::ToolCallComplete {
        choice,
        index: call.index,
        call: ToolCall::new(call.id, call.name, Arguments::Json(call.args)),
    });
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(body: Value) -> ParsedRequest {
        parse_request(body.to_string().as_bytes()).unwrap()
    }

    fn events(payloads: &[Value]) -> Vec<StreamEvent> {
        let mut parser = ResponseParser::default();
        let mut out = Vec::new();
        for payload in payloads {
            parser.payload(&payload.to_string(), &mut out).unwrap();
        }
        parser.end(&mut out);
        out
    }

    fn parts(parts: Value) -> Value {
        json!({"candidates": [{"content": {"role": "model", "parts": parts}}]})
    }

    fn completed(events: &[StreamEvent]) -> Vec<(u32, Option<String>, String, Value)> {
        events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallComplete { index, call, .. } => match &call.arguments {
                    Arguments::Json(args) => Some((*index, call.id.clone(), call.name.clone(), args.clone())),
                    Arguments::Unparsable(_) => None,
                },
                _ => None,
            })
            .collect()
    }

    /// Roles, thought parts skipped, calls with ids, responses (errors by `error` key), tools, system.
    #[test]
    fn request_history() {
        let parsed = request(json!({
            "systemInstruction": {"parts": [{"text": "be brief"}, {"text": "use tools"}]},
            "tools": [{"functionDeclarations": [{"name": "read_file"}, {"name": "run"}]}, {"googleSearch": {}}],
            "contents": [
                {"role": "user", "parts": [{"text": "<session_context>"}, {"text": "fix it"}]},
                {"role": "model", "parts": [
                    {"text": "planning", "thought": true},
                    {"text": "Reading."},
                    {"functionCall": {"name": "read_file", "args": {"path": "a"}, "id": "f1"}, "thoughtSignature": "sig"},
                    {"functionCall": {"name": "run"}}
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "read_file", "id": "f1", "response": {"output": "x"}}},
                    {"functionResponse": {"name": "run", "response": {"error": "exit 1"}}}
                ]},
                {"role": "user", "parts": [{"text": "thanks"}]}
            ]
        }));
        let t = &parsed.transcript;
        assert_eq!(t.system, "be brief\nuse tools");
        assert_eq!(t.tools, ["read_file", "run"]);
        assert_eq!(parsed.model, None);
        let roles: Vec<_> = t.messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::User]);
        assert_eq!(t.messages[0].text, "<session_context>\nfix it");
        assert_eq!(t.messages[1].text, "Reading.");
        let calls = &t.messages[1].tool_calls;
        assert_eq!(calls[0].id.as_deref(), Some("f1"));
        assert_eq!(calls[0].arguments, Arguments::Json(json!({"path": "a"})));
        assert_eq!(calls[1].arguments, Arguments::Json(json!({})));
        let results = &t.messages[2].tool_results;
        assert_eq!(results[0].content, ResultContent::Json(json!({"output": "x"})));
        assert_eq!((results[0].is_error, results[1].is_error), (false, true));
        assert_eq!(results[1].name.as_deref(), Some("run"));
    }

    /// snake_case field names are read too, and a user content mixing text and responses stays User.
    #[test]
    fn request_snake_case_and_mixed_user_content() {
        let parsed = request(json!({
            "system_instruction": {"parts": [{"text": "sys"}]},
            "tools": [{"function_declarations": [{"name": "t"}]}],
            "contents": [{"role": "user", "parts": [
                {"function_response": {"name": "t", "response": {}}},
                {"text": "also this"}
            ]}]
        }));
        assert_eq!(parsed.transcript.system, "sys");
        assert_eq!(parsed.transcript.tools, ["t"]);
        assert_eq!(parsed.transcript.messages[0].role, Role::User);
        assert_eq!(parsed.transcript.messages[0].tool_results.len(), 1);
    }

    /// Non-Gemini bodies are errors.
    #[test]
    fn request_errors() {
        assert!(matches!(parse_request(b"{"), Err(DialectError::Json(_))));
        assert!(matches!(
            parse_request(b"{\"messages\":[]}"),
            Err(DialectError::Shape(_))
        ));
    }

    /// Text, thoughts, finish reason (STOP even with calls), usage on every chunk.
    #[test]
    fn stream_text_thought_finish_usage() {
        let out = events(&[
            json!({"candidates": [{"content": {"parts": [{"text": "hmm", "thought": true}]}, "index": 0}],
                   "usageMetadata": {"promptTokenCount": 1}}),
            json!({"candidates": [{"content": {"parts": [{"text": "Hi", "thoughtSignature": "s"}, {"text": ""}]},
                   "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 2}}),
        ]);
        assert_eq!(
            out,
            [
                StreamEvent::ReasoningDelta {
                    choice: 0,
                    text: "hmm".into()
                },
                StreamEvent::Usage {
                    usage: json!({"promptTokenCount": 1})
                },
                StreamEvent::TextDelta {
                    choice: 0,
                    text: "Hi".into()
                },
                StreamEvent::Finish {
                    choice: 0,
                    reason: "STOP".into()
                },
                StreamEvent::Usage {
                    usage: json!({"promptTokenCount": 2})
                },
            ]
        );
    }

    /// Whole calls (Gemini API) complete at once, several in one chunk, each with its position.
    #[test]
    fn stream_whole_calls() {
        let out = events(&[parts(json!([
            {"functionCall": {"name": "a", "args": {"x": 1}, "id": "i1"}, "thoughtSignature": "s"},
            {"functionCall": {"name": "b"}}
        ]))]);
        assert_eq!(
            out[0],
            StreamEvent::ToolCallDelta {
                choice: 0,
                index: 0,
                arguments_delta: "{\"x\":1}".into()
            }
        );
        assert!(matches!(out[1], StreamEvent::ToolCallComplete { index: 0, .. }));
        assert_eq!(
            completed(&out),
            [
                (0, Some("i1".into()), "a".into(), json!({"x": 1})),
                (1, None, "b".into(), json!({}))
            ]
        );
    }

    /// Vertex streamed arguments: nested paths, arrays, continued strings, numbers; `{}` completes.
    #[test]
    fn stream_partial_args_assembled_by_path() {
        let fragment = |path: &str, value: Value, more: bool| {
            let mut entry = json!({"jsonPath": path});
            entry
                .as_object_mut()
                .unwrap()
                .extend(value.as_object().unwrap().clone());
            if more {
                entry["willContinue"] = json!(true);
            }
            parts(json!([{"functionCall": {"partialArgs": [entry], "willContinue": true}}]))
        };
        let out = events(&[
            parts(json!([{"functionCall": {"name": "cook", "willContinue": true}}])),
            fragment("$.r.items[1].name", json!({"stringValue": "Eg"}), true),
            fragment("$.r.items[1].name", json!({"stringValue": "g"}), true),
            fragment("$.r.items[1].name", json!({"stringValue": ""}), false),
            parts(json!([{"functionCall": {"willContinue": true}}])),
            fragment("$.r.items[0]", json!({"numberValue": 0.5}), false),
            fragment("$.r.ok", json!({"boolValue": true}), false),
            fragment("$.r['odd key']", json!({"nullValue": "NULL_VALUE"}), false),
            fragment("$.r.name", json!({"stringValue": "x"}), false),
            fragment("$.r.name", json!({"stringValue": "y"}), false),
            parts(json!([{"functionCall": {}}])),
            parts(json!([{"functionCall": {}}])),
        ]);
        assert_eq!(
            completed(&out),
            [(
                0,
                None,
                "cook".into(),
                json!({"r": {"items": [0.5, {"name": "Egg"}], "ok": true, "odd key": null, "name": "y"}})
            )]
        );
        let deltas = out
            .iter()
            .filter(|e| matches!(e, StreamEvent::ToolCallDelta { .. }))
            .count();
        assert_eq!(
            deltas, 11,
            "every fragment is a delta; the stray second `{{}}` is not"
        );
        assert!(
            matches!(out[1], StreamEvent::ToolCallDelta { ref arguments_delta, .. } if arguments_delta == "Eg")
        );
    }

    /// Same tool streamed three times: each call gets its own position and arguments.
    #[test]
    fn stream_same_tool_three_times() {
        let mut payloads = vec![parts(json!([{"functionCall": {"name": "read_theme"}}]))];
        for id in ["A", "B", "C"] {
            payloads.push(parts(
                json!([{"functionCall": {"name": "read_screen", "willContinue": true}}]),
            ));
            payloads.push(parts(json!([{"functionCall": {"partialArgs": [
                {"jsonPath": "$.id", "stringValue": id, "willContinue": true}], "willContinue": true}}])));
            payloads.push(parts(json!([{"functionCall": {"partialArgs": [
                {"jsonPath": "$.id", "stringValue": ""}], "willContinue": true}}])));
            payloads.push(parts(json!([{"functionCall": {}}])));
        }
        let calls: Vec<_> = completed(&events(&payloads))
            .into_iter()
            .map(|c| (c.0, c.2, c.3))
            .collect();
        assert_eq!(
            calls,
            [
                (0, "read_theme".into(), json!({})),
                (1, "read_screen".into(), json!({"id": "A"})),
                (2, "read_screen".into(), json!({"id": "B"})),
                (3, "read_screen".into(), json!({"id": "C"})),
            ]
        );
    }

    /// Without the final part, the call completes at finishReason, or at `end()` with no finish.
    #[test]
    fn stream_missing_terminal_part() {
        let start = parts(json!([{"functionCall": {"name": "w", "willContinue": true}}]));
        let arg = parts(json!([{"functionCall": {"partialArgs": [
            {"jsonPath": "$.items[0]", "stringValue": "a"}], "willContinue": true}}]));
        let out = events(&[start.clone(), arg.clone()]);
        assert_eq!(completed(&out), [(0, None, "w".into(), json!({"items": ["a"]}))]);
        let stop = json!({"candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": "STOP"}]});
        let out = events(&[start, arg, stop]);
        assert!(matches!(out[out.len() - 2], StreamEvent::ToolCallComplete { .. }));
        assert!(matches!(out[out.len() - 1], StreamEvent::Finish { .. }));
    }

    /// A new named call completes the open one first.
    #[test]
    fn stream_new_call_completes_open_one() {
        let out = events(&[
            parts(json!([{"functionCall": {"name": "a", "willContinue": true}}])),
            parts(json!([{"functionCall": {"name": "b", "args": {}}}])),
        ]);
        let names: Vec<_> = completed(&out).into_iter().map(|c| (c.0, c.2)).collect();
        assert_eq!(names, [(0, "a".into()), (1, "b".into())]);
    }

    /// Candidates are kept apart by index.
    #[test]
    fn stream_several_candidates() {
        let out = events(&[json!({"candidates": [
            {"index": 0, "content": {"parts": [{"text": "x"}]}},
            {"index": 1, "content": {"parts": [{"functionCall": {"name": "f", "args": {}}}]}, "finishReason": "STOP"}
        ]})]);
        assert_eq!(
            out[0],
            StreamEvent::TextDelta {
                choice: 0,
                text: "x".into()
            }
        );
        assert!(matches!(
            out[2],
            StreamEvent::ToolCallComplete {
                choice: 1,
                index: 0,
                ..
            }
        ));
        assert_eq!(
            out[3],
            StreamEvent::Finish {
                choice: 1,
                reason: "STOP".into()
            }
        );
    }

    /// Error objects, a whole array body, and unparsable payloads.
    #[test]
    fn stream_errors_and_array_body() {
        let out =
            events(&[json!({"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}})]);
        assert_eq!(
            out,
            [StreamEvent::Error {
                message: "quota".into()
            }]
        );
        let out = events(&[json!([
            {"candidates": [{"content": {"parts": [{"text": "a"}]}}]},
            {"candidates": [{"content": {"parts": [{"text": "b"}]}}]}
        ])]);
        assert_eq!(out.len(), 2);
        let mut parser = ResponseParser::default();
        let mut out = Vec::new();
        assert!(matches!(
            parser.payload("[1]", &mut out),
            Err(DialectError::Shape(_))
        ));
        assert!(matches!(
            parser.payload("nope", &mut out),
            Err(DialectError::Json(_))
        ));
    }

    /// Paths: the forms Vertex sends, and what is refused.
    #[test]
    fn json_paths() {
        use Segment::{Index, Key};
        assert_eq!(
            parse_path("$.a[2].b['c.d']"),
            Some(vec![
                Key("a".into()),
                Index(2),
                Key("b".into()),
                Key("c.d".into())
            ])
        );
        assert_eq!(parse_path("$"), Some(vec![]));
        for bad in ["a.b", "$..a", "$[x]", "$[1", "$a"] {
            assert_eq!(parse_path(bad), None, "{bad}");
        }
        let mut root = json!({});
        assert!(slot(&mut root, &[Index(MAX_PATH_INDEX + 1)]).is_none());
    }
}
