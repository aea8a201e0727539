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

use crate::dialect::split::{HistoryItem, Resume, SplitRequest, parse_whole, resume_with, split_with};
use crate::dialect::{DialectError, ParsedRequest, StreamEvent};
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
    parse_whole(body, "contents", head, parse_items)
}

/// Splits a request body into its envelope and its raw `contents[]` (see
/// [`crate::dialect::split`]); the items parse as in [`parse_request`].
///
/// # Errors
/// As [`crate::dialect::split::split_object`]: the caller falls back to [`parse_request`].
pub fn split_request(body: &[u8]) -> Result<SplitRequest<'_>, DialectError> {
    split_with(body, "contents", head, parse_items)
}

/// [`split_request`] taken up again after items an earlier body had (see
/// [`crate::dialect::split::resume_with`]).
///
/// # Errors
/// As [`crate::dialect::split::resume_with`]: the caller splits in full.
pub fn resume_request(body: &[u8], from: Resume) -> Result<SplitRequest<'_>, DialectError> {
    resume_with(body, "contents", head, parse_items, from)
}

/// Everything but the history: the system instruction and declared tools.
fn head(root: &Map<String, Value>) -> ParsedRequest {
    let system = match field(root, "systemInstruction", "system_instruction") {
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
    ParsedRequest {
        transcript: Transcript {
            system,
            tools,
            messages: Default::default(),
            compactions: 0,
            lineage: Default::default(),
        },
        stream: false,
        include_usage: false,
        model: None,
        summarizer: false,
        responses: None,
        ids: crate::dialect::BodyIds::of(root),
    }
}

/// Parses `contents`: each one is a message of its own, whatever came before.
fn parse_items(_before: &[HistoryItem], contents: &[Value]) -> Vec<HistoryItem> {
    let message = |content: &Value| {
        let role = match content.get("role").and_then(Value::as_str) {
            Some("model") => Role::Assistant,
            Some("function" | "tool") => Role::Tool,
            _ => Role::User,
        };
        let mut message = content_message(content, role);
        if role == Role::User && !message.tool_results.is_empty() && message.text.is_empty() {
            message.role = Role::Tool;
        }
        HistoryItem::Message(message)
    };
    contents.iter().map(message).collect()
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
        } else if let Some(code) =
            field_of(part, "executableCode", "executable_code").filter(|c| c.is_object())
        {
            // Server-side code execution (issue #12 point 10): a call whose
            // result is the turn's own `codeExecutionResult`.
            message.tool_calls.push(ToolCall::server_side(
                None,
                "code_execution",
                Arguments::Json(code.clone()),
            ));
        } else if let Some(result) = field_of(part, "codeExecutionResult", "code_execution_result") {
            let outcome = result.get("outcome").and_then(Value::as_str).unwrap_or_default();
            message.tool_results.push(ToolResult {
                call_id: None,
                name: Some("code_execution".to_owned()),
                is_error: !outcome.is_empty() && outcome != "OUTCOME_OK",
                content: ResultContent::Json(result.clone()),
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
    /// Identity fields of the first payload that had any.
    meta: Option<crate::dialect::Meta>,
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
            Value::Object(response) => {
                if self.meta.is_none() {
                    self.meta = crate::dialect::Meta::of(&response);
                }
                self.response(&response, out);
            }
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

    /// Identity fields (`modelVersion`) of the first payload that had any.
    pub fn meta(&self) -> Option<&crate::dialect::Meta> {
        self.meta.as_ref()
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
#[path = "parse_tests.rs"]
mod tests;
