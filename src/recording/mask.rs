//! Credential masking for what a recording keeps (see [`crate::redact`]).
//!
//! A request body is masked string by string ([`value`]); a string under a
//! key named like a secret (`"password": "…"`, `"api_key": "…"`) is masked
//! as its `key=value` text would be, so an object argument (Anthropic's and
//! Gemini's tool-call `input` / `args`) loses what the same argument sent as
//! a JSON string (OpenAI's `arguments`) loses.
//!
//! A streamed answer sends a tool call's arguments and a block's text in
//! pieces (deltas), and a secret can be cut between two pieces, where no
//! pattern sees it whole. [`response`] therefore joins the pieces of each
//! call and text stream first: when the joined text holds a secret, its
//! masked form goes in the stream's first piece and the later pieces are
//! emptied (the events themselves stay, in order). What a replay assembles
//! from the stream is then exactly the masked arguments the request lines
//! hold, so it gives the verdicts `serve` gave. The shapes recognised:
//! OpenAI chat `choices[].delta.content` and `.tool_calls[].function.arguments`,
//! Responses `response.*.delta` events, Anthropic `content_block_delta`
//! events, Gemini `candidates[].content.parts[].text`. The whole body is
//! masked as text afterwards, as before.

use std::collections::HashMap;

use serde_json::Value;

use crate::dialect::Mode;
use crate::redact::redact;

/// Every string of `value` masked (see the module docs for secret-named keys).
pub fn value(value: &mut Value) {
    match value {
        Value::String(text) => {
            let masked = redact(text);
            if masked != *text {
                *text = masked;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(self::value),
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                if let Value::String(text) = item {
                    let pair = format!("{key}={text}");
                    let masked = redact(&pair);
                    if masked != pair {
                        // The key and `=` survive every pattern that can
                        // match here; the rest is the masked value.
                        *text = masked
                            .strip_prefix(&format!("{key}="))
                            .map_or_else(|| redact(text), str::to_owned);
                    }
                } else {
                    self::value(item);
                }
            }
        }
        _ => {}
    }
}

/// A streamed or whole answer's body as a recording keeps it: delta pieces
/// joined before masking (see the module docs), then the whole text masked.
pub fn response(body: &[u8], mode: Mode) -> String {
    let text = String::from_utf8_lossy(body);
    let joined = match mode {
        Mode::Sse => sse(&text),
        Mode::JsonArray => array(&text),
        // Each line is a whole object: masked as one text.
        Mode::Ndjson | Mode::EventStream | Mode::Whole => None,
    };
    redact(joined.as_deref().unwrap_or(&text))
}

/// The SSE body with its `data:` lines' pieces masked, `None` when nothing
/// changed. Lines are kept as they are (line endings included) unless a
/// piece of theirs was masked.
fn sse(text: &str) -> Option<String> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    let mut events: Vec<(usize, Value)> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, line)| {
            let data = line.strip_prefix("data:")?.trim();
            data.starts_with('{')
                .then(|| serde_json::from_str(data).ok())
                .flatten()
                .map(|v| (i, v))
        })
        .collect();
    let changed = join_pieces(events.iter_mut().map(|(_, v)| v));
    if changed.is_empty() {
        return None;
    }
    let rewritten: Vec<(usize, String)> = changed
        .into_iter()
        .filter_map(|e| {
            let (i, event) = &events[e];
            let cr = if lines[*i].ends_with('\r') { "\r" } else { "" };
            serde_json::to_string(event)
                .ok()
                .map(|json| (*i, format!("data: {json}{cr}")))
        })
        .collect();
    for (i, line) in &rewritten {
        lines[*i] = line;
    }
    Some(lines.join("\n"))
}

/// The JSON array body (Gemini without `alt=sse`) with its elements' pieces
/// masked, `None` when nothing changed or it is not a JSON array.
fn array(text: &str) -> Option<String> {
    let mut items: Vec<Value> = serde_json::from_str(text).ok()?;
    if join_pieces(items.iter_mut()).is_empty() {
        return None;
    }
    serde_json::to_string(&items).ok()
}

/// Joins each stream's pieces across `events`, masking those whose joined
/// text holds a secret; the indices of the events changed.
fn join_pieces<'a>(events: impl Iterator<Item = &'a mut Value>) -> Vec<usize> {
    let mut events: Vec<&mut Value> = events.collect();
    // Stream → (event index, JSON pointer) of each piece, in order.
    let mut streams: HashMap<String, Vec<(usize, String)>> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for (e, event) in events.iter().enumerate() {
        for (stream, pointer) in pieces(event) {
            let entry = streams.entry(stream.clone()).or_default();
            if entry.is_empty() {
                order.push(stream);
            }
            entry.push((e, pointer));
        }
    }
    let mut changed = Vec::new();
    for stream in order {
        let Some(at) = streams.get(&stream) else {
            continue;
        };
        let joined: String = at
            .iter()
            .filter_map(|(e, p)| events[*e].pointer(p).and_then(Value::as_str))
            .collect();
        let masked = redact(&joined);
        if masked == joined {
            continue;
        }
        for (n, (e, p)) in at.iter().enumerate() {
            if let Some(slot) = events[*e].pointer_mut(p) {
                *slot = Value::String(if n == 0 { masked.clone() } else { String::new() });
                changed.push(*e);
            }
        }
    }
    changed.sort_unstable();
    changed.dedup();
    changed
}

/// The delta pieces one event carries: (stream name, JSON pointer).
fn pieces(event: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    chat_pieces(event, &mut out);
    gemini_pieces(event, &mut out);
    typed_pieces(event, &mut out);
    out
}

/// The pieces of an OpenAI chat chunk: each choice's text and call arguments.
fn chat_pieces(event: &Value, out: &mut Vec<(String, String)>) {
    if let Some(choices) = event.get("choices").and_then(Value::as_array) {
        for (c, choice) in choices.iter().enumerate() {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(c as u64);
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            if delta.get("content").is_some_and(Value::is_string) {
                out.push((
                    format!("chat/{index}/text"),
                    format!("/choices/{c}/delta/content"),
                ));
            }
            for (t, call) in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                if call.pointer("/function/arguments").is_some_and(Value::is_string) {
                    let call_index = call.get("index").and_then(Value::as_u64).unwrap_or(t as u64);
                    out.push((
                        format!("chat/{index}/call/{call_index}"),
                        format!("/choices/{c}/delta/tool_calls/{t}/function/arguments"),
                    ));
                }
            }
        }
    }
}

/// The pieces of a Gemini chunk: each candidate's text parts.
fn gemini_pieces(event: &Value, out: &mut Vec<(String, String)>) {
    if let Some(candidates) = event.get("candidates").and_then(Value::as_array) {
        for (c, candidate) in candidates.iter().enumerate() {
            let index = candidate.get("index").and_then(Value::as_u64).unwrap_or(c as u64);
            let parts = candidate.pointer("/content/parts").and_then(Value::as_array);
            for (p, part) in parts.into_iter().flatten().enumerate() {
                if part.get("text").is_some_and(Value::is_string) {
                    out.push((
                        format!("gemini/{index}/text"),
                        format!("/candidates/{c}/content/parts/{p}/text"),
                    ));
                }
            }
        }
    }
}

/// The pieces of an event named by its `type`: Anthropic's content block
/// deltas and OpenAI Responses' `…delta` events.
fn typed_pieces(event: &Value, out: &mut Vec<(String, String)>) {
    match event.get("type").and_then(Value::as_str) {
        // Anthropic.
        Some("content_block_delta") => {
            let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
            for field in ["text", "partial_json", "thinking"] {
                if event
                    .pointer(&format!("/delta/{field}"))
                    .is_some_and(Value::is_string)
                {
                    out.push((format!("anthropic/{index}/{field}"), format!("/delta/{field}")));
                }
            }
        }
        // OpenAI Responses: every `…delta` event's `delta` string, per item
        // and content part.
        Some(kind)
            if kind.starts_with("response.")
                && kind.ends_with(".delta")
                && event.get("delta").is_some_and(Value::is_string) =>
        {
            let item = event
                .get("item_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| event.get("output_index").map(Value::to_string))
                .unwrap_or_default();
            let part = event
                .get("content_index")
                .or_else(|| event.get("summary_index"))
                .map(Value::to_string)
                .unwrap_or_default();
            out.push((format!("responses/{kind}/{item}/{part}"), "/delta".to_owned()));
        }
        _ => {}
    }
}

#[cfg(test)]
#[path = "mask_tests.rs"]
mod tests;
