//! The `openai-responses` dialect (OpenAI Responses API, Codex's only wire
//! protocol): request body → [`Transcript`]; the response side is
//! [`super::stream`].
//!
//! History is a list of `input` items. Items the agent executes — the
//! client-side calls `function_call`, `custom_tool_call`, `local_shell_call`,
//! `shell_call`, `apply_patch_call` and `computer_call` — are tool calls; their
//! `*_output` items are tool results, matched by `call_id`. Server-side items
//! (`web_search_call`, `mcp_call`, `file_search_call`, …) ran on the
//! server before the model answered: they are not calls the agent executes,
//! and are never held; their repeats still count (issue #12 point 10),
//! so each becomes an assistant turn holding a server-side call
//! ([`ToolCall::server`]) and its result. `reasoning` and `compaction` items
//! are opaque and passed through.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::dialect::split::{HistoryItem, Resume, SplitRequest, assemble, resume_with, split_with};
use crate::dialect::{DialectError, ParsedRequest};
use crate::transcript::{Arguments, Message, ResultContent, Role, ToolCall, ToolResult, Transcript};

/// Item types of calls the client executes (they can loop; they are held).
const CLIENT_CALLS: [&str; 6] = [
    "function_call",
    "custom_tool_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
    "computer_call",
];

/// Whether an item type is a call the client executes.
pub fn is_client_call(kind: &str) -> bool {
    CLIENT_CALLS.contains(&kind)
}

/// The tool name of a call item: its `name`, else the built-in tool its
/// type stands for (`local_shell_call` → `local_shell`, …).
fn call_name(item: &Value, kind: &str) -> String {
    match item.get("name").and_then(Value::as_str) {
        Some(name) => name.to_owned(),
        None => kind.trim_end_matches("_call").to_owned(),
    }
}

/// The arguments of a call item: `arguments` (a JSON string), a custom
/// tool's free-form `input`, or the `action` / `operation` object of a
/// built-in tool.
fn call_arguments(item: &Value) -> Arguments {
    if let Some(arguments) = item.get("arguments") {
        return match arguments {
            Value::String(text) => Arguments::from_json_str(text),
            Value::Null => Arguments::Json(Value::Object(Map::new())),
            other => Arguments::Json(other.clone()),
        };
    }
    for key in ["input", "action", "operation"] {
        if let Some(value) = item.get(key) {
            return Arguments::Json(value.clone());
        }
    }
    Arguments::Json(Value::Object(Map::new()))
}

/// A call item as a [`ToolCall`] (`None` for items that are not client calls).
pub fn call_of(item: &Value) -> Option<ToolCall> {
    let kind = item.get("type").and_then(Value::as_str)?;
    if !is_client_call(kind) {
        return None;
    }
    let id = item
        .get("call_id")
        .or_else(|| item.get("id"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some(ToolCall::new(id, call_name(item, kind), call_arguments(item)))
}

/// What a request tells beyond its history.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ResponsesRequest {
    /// `previous_response_id`: the request carries only the items new since
    /// that response.
    pub previous_response_id: Option<String>,
    /// The server keeps state for it (`previous_response_id`, `conversation`,
    /// or `store: true`): a withheld call would leave the server's copy
    /// dangling, so loopguard never blocks it (it aborts instead).
    pub stateful: bool,
}

/// Parses a `POST …/responses` request body.
///
/// `instructions` and leading `system` / `developer` messages form
/// [`Transcript::system`]. Consecutive model items (assistant messages and
/// calls) form one assistant turn; consecutive call outputs one tool turn.
/// A `compaction_trigger` item makes it a summarizer request; `compaction`
/// items are counted in [`Transcript::compactions`].
///
/// # Errors
/// [`DialectError::Json`] when the body is not JSON; [`DialectError::Shape`]
/// when it is not an object or `input` is neither a string nor an array.
pub fn parse_request(body: &[u8]) -> Result<ParsedRequest, DialectError> {
    let root = crate::dialect::json_object(body)?;
    let mut parsed = head(&root);
    match root.get("input") {
        Some(Value::String(text)) => {
            parsed
                .transcript
                .messages_mut()
                .push(Message::text(Role::User, text.clone()));
            Ok(parsed)
        }
        Some(Value::Array(items)) => Ok(assemble(parsed, parse_items(&[], items))),
        None | Some(Value::Null) => Ok(parsed),
        Some(_) => Err(DialectError::Shape(
            "`input` is neither a string nor an array".to_owned(),
        )),
    }
}

/// Splits a request body into its envelope and its raw `input[]` items (see
/// [`crate::dialect::split`]); the items parse as in [`parse_request`].
///
/// # Errors
/// As [`crate::dialect::split::split_object`] (an `input` string does not split): the caller falls
/// back to [`parse_request`].
pub fn split_request(body: &[u8]) -> Result<SplitRequest<'_>, DialectError> {
    split_with(body, "input", head, parse_items)
}

/// [`split_request`] taken up again after items an earlier body had (see
/// [`crate::dialect::split::resume_with`]).
///
/// # Errors
/// As [`crate::dialect::split::resume_with`]: the caller splits in full.
pub fn resume_request(body: &[u8], from: Resume) -> Result<SplitRequest<'_>, DialectError> {
    resume_with(body, "input", head, parse_items, from)
}

/// Everything but the history: `instructions`, declared tools, flags.
fn head(root: &Map<String, Value>) -> ParsedRequest {
    let previous_response_id = root
        .get("previous_response_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let conversation = root.get("conversation").is_some_and(|c| !c.is_null());
    let store = root.get("store").and_then(Value::as_bool) == Some(true);
    ParsedRequest {
        transcript: Transcript {
            system: root
                .get("instructions")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            tools: declared_tools(root),
            ..Transcript::default()
        },
        stream: root.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_usage: false,
        model: root.get("model").and_then(Value::as_str).map(str::to_owned),
        summarizer: false,
        responses: Some(ResponsesRequest {
            stateful: previous_response_id.is_some() || conversation || store,
            previous_response_id,
        }),
        ids: crate::dialect::BodyIds::of(root),
    }
}

/// Parses `input` items, given the parses of the items before them
/// (`before`: whether a turn came already, and the calls that name the tool
/// of a later output). Model items and call outputs are [`HistoryItem::Part`]s,
/// so consecutive ones form one turn.
fn parse_items(before: &[HistoryItem], items: &[Value]) -> Vec<HistoryItem> {
    let mut any_turn = before.iter().any(|i| !i.messages().is_empty());
    let mut names: HashMap<String, String> = HashMap::new();
    for call in before
        .iter()
        .flat_map(HistoryItem::messages)
        .flat_map(|m| &m.tool_calls)
    {
        if let Some(id) = &call.id {
            names.insert(id.clone(), call.name.clone());
        }
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let parsed = item_input(item, any_turn, &mut names);
        any_turn |= !parsed.messages().is_empty();
        out.push(parsed);
    }
    out
}

/// One `input` item. Leading `system` / `developer` messages (before any
/// turn, `any_turn` false) are system text.
fn item_input(item: &Value, any_turn: bool, names: &mut HashMap<String, String>) -> HistoryItem {
    let role = item.get("role").and_then(Value::as_str);
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or(if role.is_some() { "message" } else { "" });
    if kind == "message" {
        let text = content_text(item.get("content"));
        return match role.unwrap_or("user") {
            "system" | "developer" if !any_turn => HistoryItem::System(text),
            "user" => HistoryItem::Message(Message::text(Role::User, text)),
            "assistant" => HistoryItem::Part(Message::text(Role::Assistant, text)),
            _ => HistoryItem::Message(Message::text(Role::System, text)),
        };
    }
    if let Some(call) = call_of(item) {
        if let Some(id) = &call.id {
            names.insert(id.clone(), call.name.clone());
        }
        let mut turn = Message::text(Role::Assistant, "");
        turn.tool_calls.push(call);
        return HistoryItem::Part(turn);
    }
    if let Some(call_kind) = kind.strip_suffix("_output") {
        if is_client_call(call_kind) {
            let call_id = item
                .get("call_id")
                .or_else(|| item.get("id"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let name = call_id.as_ref().and_then(|id| names.get(id).cloned());
            let content = match item.get("output") {
                Some(Value::String(text)) => ResultContent::Text(text.clone()),
                Some(Value::Array(_)) => ResultContent::Text(content_text(item.get("output"))),
                Some(other) => ResultContent::Json(other.clone()),
                None => ResultContent::Text(String::new()),
            };
            let mut turn = Message::text(Role::Tool, "");
            turn.tool_results.push(ToolResult {
                call_id,
                name,
                content,
                is_error: false,
            });
            return HistoryItem::Part(turn);
        }
    }
    if let Some(turn) = server_call(item, kind) {
        return HistoryItem::Part(turn);
    }
    match kind {
        "compaction" => HistoryItem::Compaction,
        "compaction_trigger" => HistoryItem::Summarize,
        // reasoning, item_reference, server-side tool items: opaque here.
        _ => HistoryItem::Messages(Vec::new()),
    }
}

/// Server-side item types: they ran on the server, their result is the item.
const SERVER_CALLS: [&str; 5] = [
    "web_search_call",
    "file_search_call",
    "mcp_call",
    "code_interpreter_call",
    "image_generation_call",
];

/// A server-side item (`web_search_call`, `mcp_call`, …) as an assistant
/// turn holding the call (marked [`ToolCall::server`]) and its result: the
/// item's `status` with its `output` / `error` / `results` / `outputs`
/// (issue #12 point 10: their repeats count too).
fn server_call(item: &Value, kind: &str) -> Option<Message> {
    if !SERVER_CALLS.contains(&kind) {
        return None;
    }
    let id = item.get("id").and_then(Value::as_str).map(str::to_owned);
    let name = item
        .get("name")
        .and_then(Value::as_str)
        .map_or_else(|| kind.trim_end_matches("_call").to_owned(), str::to_owned);
    let mut args = Map::new();
    for key in ["action", "queries", "arguments", "code", "prompt", "server_label"] {
        if let Some(v) = item.get(key) {
            let v = match v {
                Value::String(text) if key == "arguments" => {
                    serde_json::from_str(text).unwrap_or_else(|_| v.clone())
                }
                other => other.clone(),
            };
            args.insert(key.to_owned(), v);
        }
    }
    let mut result = Map::new();
    for key in ["status", "output", "error", "results", "outputs"] {
        if let Some(v) = item.get(key).filter(|v| !v.is_null()) {
            result.insert(key.to_owned(), v.clone());
        }
    }
    let failed = item.get("status").and_then(Value::as_str) == Some("failed")
        || item.get("error").is_some_and(|e| !e.is_null());
    let mut turn = Message::text(Role::Assistant, "");
    turn.tool_calls.push(ToolCall::server_side(
        id.clone(),
        name.clone(),
        Arguments::Json(Value::Object(args)),
    ));
    turn.tool_results.push(ToolResult {
        call_id: id,
        name: Some(name),
        content: ResultContent::Json(Value::Object(result)),
        is_error: failed,
    });
    Some(turn)
}

/// Tool names: `tools[].name`, else the tool's `type` (`local_shell`, `web_search`, …).
fn declared_tools(root: &Map<String, Value>) -> Vec<String> {
    root.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("name").or_else(|| t.get("type")).and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// Message `content` as text: a string, or the `text` of its text parts
/// (`input_text`, `output_text`, `text`) joined by newlines.
pub(super) fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|p| {
                matches!(
                    p.get("type").and_then(Value::as_str),
                    Some("input_text" | "output_text" | "text") | None
                )
            })
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
#[path = "parse_tests.rs"]
mod tests;
