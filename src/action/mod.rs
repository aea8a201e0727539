//! Actions: what loopguard writes when a verdict calls for more than
//! observing, rendered in each dialect's own shapes.
//!
//! - `warn`: the warning is added to the forwarded request where every server
//!   of the dialect accepts it ([`inject_warning`]).
//! - `block`: a complete, well-formed assistant answer explaining what was
//!   stopped, in the mode the client asked for ([`block_answer`]); at stream
//!   time, the events that replace the withheld tool calls ([`StreamEnding`]).
//! - `abort`: HTTP 400 with the dialect's error shape ([`abort_body`]), or
//!   the dialect's in-stream error event once headers went out.

pub mod anthropic;
pub mod gemini;
pub mod openai_chat;
pub mod openai_responses;

use serde_json::Value;

use crate::dialect::Dialect;

pub use crate::detect::verdict::Action;

/// How the client asked to receive the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One JSON document.
    Whole,
    /// Server-sent events.
    Sse,
    /// One JSON array streamed element by element (Gemini without `alt=sse`).
    JsonArray,
}

/// A response loopguard writes in the upstream's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `Content-Type` of the body.
    pub content_type: &'static str,
    /// The body, whole.
    pub body: Vec<u8>,
}

/// Adds `warning` to a request body where every server of the dialect
/// accepts it: OpenAI chat — appended to the content of the last tool
/// message; Gemini — a `loopguard_warning` field inside the last
/// `functionResponse.response` object; OpenAI Responses — appended to the
/// last call output's `output`; Anthropic — a `text` block after the
/// `tool_result` blocks of the last user message. Returns `false` (body
/// untouched) when the request carries no tool result to attach it to.
pub fn inject_warning(dialect: Dialect, body: &mut Value, warning: &str) -> bool {
    match dialect {
        Dialect::OpenaiChat => openai_chat::inject_warning(body, warning),
        Dialect::Gemini => gemini::inject_warning(body, warning),
        Dialect::OpenaiResponses => openai_responses::inject_warning(body, warning),
        Dialect::Anthropic => anthropic::inject_warning(body, warning),
    }
}

/// A complete assistant answer carrying `message` as its text, finish reason
/// "stop", in `mode`. `model` is echoed where the dialect names it;
/// `include_usage` is OpenAI's `stream_options.include_usage`.
pub fn block_answer(dialect: Dialect, mode: Mode, model: &str, message: &str, include_usage: bool) -> Answer {
    match dialect {
        Dialect::OpenaiChat => openai_chat::block_answer(mode, model, message, include_usage),
        Dialect::Gemini => gemini::block_answer(mode, model, message),
        Dialect::OpenaiResponses => openai_responses::block_answer(mode, model, message),
        Dialect::Anthropic => anthropic::block_answer(mode, model, message),
    }
}

/// The HTTP 400 body for `abort`, in the dialect's error shape; `message`
/// should start with `loop_detected:` and name the detector.
pub fn abort_body(dialect: Dialect, message: &str) -> Vec<u8> {
    match dialect {
        Dialect::OpenaiChat => openai_chat::abort_body(message),
        Dialect::Gemini => gemini::abort_body(message),
        Dialect::OpenaiResponses => openai_responses::abort_body(message),
        Dialect::Anthropic => anthropic::abort_body(message),
    }
}

/// What is known of a response when loopguard must end it itself: the ids
/// its own events have to carry to keep the dialect's invariants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamEnding {
    /// OpenAI chunk `id` (the upstream's).
    pub id: Option<String>,
    /// Model name as the upstream wrote it.
    pub model: Option<String>,
    /// OpenAI `created`.
    pub created: Option<u64>,
    /// Choice / candidate index being ended.
    pub choice: u32,
}

/// Random hex for ids loopguard makes up (never chained to by a client).
pub fn random_id() -> String {
    let n: u64 = rand::random();
    format!("{n:016x}")
}
