//! The stored form of a Responses response record's calls (the `c` field of
//! `<prefix>r:<response id>`): bounded in size whatever the model emitted.
//!
//! A request chained with `previous_response_id` gets the calls it answers
//! from this record, and detection reads them as it reads calls parsed from
//! traffic. What it needs of a call is stored exactly: the id, the name,
//! the raw signature (the merge key of requests), the identity
//! (`detect::identity`, under the settings of the response that carried the
//! call) and the hashes of the argument lines a failing result may echo
//! (the first [`ECHO_MAX`]); they ride on the call as its
//! [`crate::transcript::Digest`]. The arguments themselves are kept only in a
//! bounded, redacted form, for what still reads them (the argument
//! previews of verdict messages, poll and exempt matchers on short values):
//! every string cut to [`STRING_KEEP`] characters (with a hash of the whole
//! when cut, so different long values stay different), and a call whose
//! bounded arguments still exceed [`ARGS_MAX`] bytes keeps a [`STRING_KEEP`]-
//! character cut of their JSON text as one string. At most [`MAX_CALLS`] calls
//! are kept per response (a response with more is pathological; the rest
//! are not chained, and their results read as results of unknown calls).
//! So no record exceeds [`MAX_RECORD_BYTES`].

use serde_json::{Map, Value};

use crate::detect::Settings;
use crate::transcript::{Arguments, Digest, Signature, ToolCall, canonical_json};

/// Most calls kept per response record.
pub const MAX_CALLS: usize = 64;
/// Characters kept of one string value of the arguments (and of a call's
/// id and name).
pub const STRING_KEEP: usize = 256;
/// Largest bounded arguments of one call, bytes of their JSON text.
pub const ARGS_MAX: usize = 2048;
/// Most echo-line hashes kept per call.
pub const ECHO_MAX: usize = 64;
/// Largest stored form of one call, bytes (every field at its cap, JSON
/// escapes of six bytes per character included).
pub const MAX_CALL_BYTES: usize = 8 * 1024;
/// Largest `c` field of a response record, bytes.
pub const MAX_RECORD_BYTES: usize = MAX_CALLS * (MAX_CALL_BYTES + 1) + 2;

/// A call as stored in a response record.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct WireCall {
    id: Option<String>,
    name: String,
    /// Bounded and redacted (see the module doc).
    arguments: Arguments,
    /// The raw signature of the full arguments.
    signature: Signature,
    /// The identity of the full arguments.
    identity: Signature,
    /// Echo-line hashes of the full arguments (the first [`ECHO_MAX`]).
    echo: Vec<u64>,
}

/// The stored form of `calls` (see the module doc), JSON.
pub fn encode(calls: &[ToolCall], settings: &Settings) -> Vec<u8> {
    let wire: Vec<WireCall> = calls
        .iter()
        .take(MAX_CALLS)
        .map(|call| wire(call, settings))
        .collect();
    serde_json::to_vec(&wire).unwrap_or_default()
}

/// `call` in its stored form, read back: its arguments bounded and
/// redacted, what detection derives from the full arguments in its
/// [`Digest`] (the lean form of a request past its parse-memory budget,
/// see [`crate::session::chain`]).
pub fn lean(call: &ToolCall, settings: &Settings) -> ToolCall {
    let mut lean = from_wire(wire(call, settings));
    lean.server = call.server;
    lean
}

fn wire(call: &ToolCall, settings: &Settings) -> WireCall {
    let mut echo: Vec<u64> = Vec::new();
    for h in crate::detect::outcome::echo_lines(Some(call)) {
        if echo.len() >= ECHO_MAX {
            break;
        }
        if !echo.contains(&h) {
            echo.push(h);
        }
    }
    WireCall {
        id: call.id.as_deref().map(cut),
        name: cut(&call.name),
        arguments: bounded(&call.arguments),
        signature: call.signature,
        identity: crate::detect::identity::of(call, settings),
        echo,
    }
}

fn from_wire(w: WireCall) -> ToolCall {
    let mut call = ToolCall::new(w.id, w.name, w.arguments);
    call.signature = w.signature;
    call.digest = Some(std::sync::Arc::new(Digest {
        identity: w.identity,
        echo: w.echo,
    }));
    call
}

/// The calls of a stored record, each with its [`Digest`]; an unreadable
/// record reads as no calls.
pub fn decode(bytes: &[u8]) -> Vec<ToolCall> {
    let wire: Vec<WireCall> = serde_json::from_slice(bytes).unwrap_or_default();
    wire.into_iter().map(from_wire).collect()
}

/// At most [`STRING_KEEP`] characters of `shown`; when `whole` is longer,
/// the kept part ends with `…#` and the hash of `whole`.
fn keep(shown: &str, whole: &str) -> String {
    let long = whole.chars().nth(STRING_KEEP).is_some() || shown.chars().nth(STRING_KEEP).is_some();
    if !long {
        return shown.to_owned();
    }
    let head = shown
        .char_indices()
        .nth(STRING_KEEP)
        .map_or(shown, |(i, _)| &shown[..i]);
    format!(
        "{head}…#{:016x}",
        crate::detect::outcome::hash64(whole.as_bytes())
    )
}

/// An id, name or key: cut, not redacted.
fn cut(text: &str) -> String {
    keep(text, text)
}

/// A string value redacted (also when its key names a secret) and cut.
fn string(key: Option<&str>, text: &str) -> String {
    let rough = crate::detect::truncate(text, STRING_KEEP * 2 + 256);
    let redacted = crate::redact::redact(&rough);
    if redacted == rough
        && let Some(key) = key
    {
        let pair = format!("\"{key}\": \"{rough}\"");
        if crate::redact::redact(&pair) != pair {
            return "[REDACTED]".to_owned();
        }
    }
    keep(&redacted, text)
}

fn value(key: Option<&str>, v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(string(key, s)),
        Value::Array(items) => Value::Array(items.iter().map(|i| value(key, i)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (cut(k), value(Some(k), v)))
                .collect::<Map<String, Value>>(),
        ),
        other => other.clone(),
    }
}

/// The bounded, redacted form of a call's arguments.
fn bounded(arguments: &Arguments) -> Arguments {
    match arguments {
        Arguments::Json(v) => {
            let kept = value(None, v);
            let text = canonical_json(&kept);
            if text.len() <= ARGS_MAX {
                Arguments::Json(kept)
            } else {
                Arguments::Json(Value::String(crate::redact::clip(&text, STRING_KEEP)))
            }
        }
        Arguments::Unparsable(raw) => Arguments::Unparsable(string(None, raw)),
    }
}

#[cfg(test)]
#[path = "call_record_tests.rs"]
mod tests;
