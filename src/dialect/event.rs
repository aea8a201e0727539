//! Stream events: what a response carried, dialect-neutral.

use serde_json::Value;

use crate::transcript::ToolCall;

/// One thing a response carried, in the order it arrived.
///
/// `choice` is OpenAI's `choices[].index` or Gemini's `candidates[].index`
/// (0 when absent). `index` on tool-call events is the call's position within
/// its choice, in order of first appearance.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Answer text the model wrote.
    TextDelta {
        /// Choice / candidate index.
        choice: u32,
        /// The text of this delta.
        text: String,
    },
    /// Reasoning / thinking text (OpenAI-compatible `reasoning_content` or
    /// `reasoning`, Gemini parts with `thought: true`). Does not release held
    /// response headers.
    ReasoningDelta {
        /// Choice / candidate index.
        choice: u32,
        /// The text of this delta.
        text: String,
    },
    /// A payload carried part of a tool call (name, id or argument text).
    /// Every payload that carries any part of a call yields one of these, so
    /// the proxy knows which events to hold.
    ToolCallDelta {
        /// Choice / candidate index.
        choice: u32,
        /// Position of the call within its choice.
        index: u32,
        /// Argument text carried by this payload (OpenAI argument fragment;
        /// Gemini: the string value of a streamed partial argument, or the
        /// whole `args` object as JSON for a call sent whole).
        arguments_delta: String,
    },
    /// A tool call is complete: its arguments are assembled and parsed.
    ToolCallComplete {
        /// Choice / candidate index.
        choice: u32,
        /// Position of the call within its choice.
        index: u32,
        /// The assembled call.
        call: ToolCall,
    },
    /// A choice / candidate finished (`finish_reason`, `finishReason`).
    Finish {
        /// Choice / candidate index.
        choice: u32,
        /// The reason as the upstream wrote it (`stop`, `tool_calls`, `STOP`, …).
        reason: String,
    },
    /// Token usage as the upstream reported it (OpenAI `usage`, Gemini
    /// `usageMetadata`), unchanged.
    Usage {
        /// The usage object.
        usage: Value,
    },
    /// The upstream reported an error inside the stream.
    Error {
        /// The error's message, or its JSON when it has no message.
        message: String,
    },
    /// The stream's own end marker (OpenAI `data: [DONE]`, Anthropic
    /// `message_stop`).
    Done,
    /// The response's own id (OpenAI Responses `response.id`), which a later
    /// request may chain to with `previous_response_id`.
    ResponseId {
        /// The id as the upstream wrote it.
        id: String,
    },
}
