//! Dialects: the wire protocols loopguard understands, each turning request
//! bodies into a [`Transcript`] and response payloads into [`StreamEvent`]s.
//!
//! A dialect never sees raw transport bytes: the framing layer
//! ([`crate::sse`] for SSE, [`crate::json_array`] for Gemini's streamed JSON
//! array, or the whole body for a non-streaming answer) hands it one JSON
//! payload at a time. What the client receives is always the upstream's own
//! bytes; parsing works on a side copy.

pub mod anthropic;
pub mod bedrock;
pub mod bedrock_converse;
pub mod ending;
pub mod event;
pub mod gemini;
mod guess;
mod list;
pub mod meta;
pub mod ollama;
pub mod openai_chat;
pub mod openai_responses;
mod slim;
pub mod splice;
pub mod split;
pub mod write;

pub use ending::Kept;
pub use event::StreamEvent;
pub use list::{Dialect, StreamParser};
pub use meta::Meta;
pub use split::{HistoryItem, SplitRequest};
pub use write::{Answer, Mode, Signed, StreamEnding};

use crate::transcript::Transcript;

/// A request body as the detectors see it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ParsedRequest {
    /// The history, dialect-neutral.
    pub transcript: Transcript,
    /// The client asked for a streamed answer (OpenAI `stream: true`). For
    /// Gemini the method in the path says it instead, so this is `false`.
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`: a usage chunk is expected
    /// before `[DONE]`.
    pub include_usage: bool,
    /// The model named in the body, if any (Gemini names it in the path).
    pub model: Option<String>,
    /// The body itself asks for a summary of the history (a Responses
    /// `compaction_trigger` item): no detector runs on it.
    pub summarizer: bool,
    /// What an `openai-responses` request tells beyond its history.
    pub responses: Option<openai_responses::ResponsesRequest>,
    /// Body fields that may name the session.
    pub ids: BodyIds,
}

/// Body fields that may identify a conversation (DESIGN §5), read while the
/// body is parsed so that session resolution never scans it again.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct BodyIds {
    /// `metadata` (`metadata.session_id`; Claude Code puts a JSON string
    /// with `session_id` in `metadata.user_id`).
    #[serde(default)]
    pub metadata: Option<serde_json::Value>,
    /// OpenAI `prompt_cache_key` (Codex sets it per conversation).
    #[serde(default)]
    pub prompt_cache_key: Option<String>,
}

impl BodyIds {
    /// The fields of a request body's top-level object.
    pub fn of(root: &serde_json::Map<String, serde_json::Value>) -> Self {
        Self {
            metadata: root.get("metadata").filter(|m| !m.is_null()).cloned(),
            prompt_cache_key: root
                .get("prompt_cache_key")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
        }
    }
}

/// Why a body could not be parsed in its dialect.
#[derive(Debug, thiserror::Error)]
pub enum DialectError {
    /// The body is not valid JSON.
    #[error("body is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The JSON does not have the dialect's shape.
    #[error("unexpected shape: {0}")]
    Shape(String),
}

/// A request body as a JSON object.
///
/// # Errors
/// [`DialectError::Json`] when it is not JSON, [`DialectError::Shape`] when
/// it is not an object.
pub(crate) fn json_object(body: &[u8]) -> Result<serde_json::Map<String, serde_json::Value>, DialectError> {
    match serde_json::from_slice(body)? {
        serde_json::Value::Object(root) => Ok(root),
        _ => Err(DialectError::Shape(
            "request body is not a JSON object".to_owned(),
        )),
    }
}

/// A response payload as a JSON object.
///
/// # Errors
/// [`DialectError::Json`] when it is not JSON, [`DialectError::Shape`] when
/// it is not an object.
pub(crate) fn payload_object(
    payload: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, DialectError> {
    match serde_json::from_str(payload)? {
        serde_json::Value::Object(event) => Ok(event),
        _ => Err(DialectError::Shape("payload is not a JSON object".to_owned())),
    }
}

/// The two events of a tool call that arrived whole (a non-streaming
/// answer): its arguments as one delta, then its completion.
pub(crate) fn push_whole_call(out: &mut Vec<StreamEvent>, index: u32, call: crate::transcript::ToolCall) {
    let arguments_delta = match &call.arguments {
        crate::transcript::Arguments::Json(v) => v.to_string(),
        crate::transcript::Arguments::Unparsable(s) => s.clone(),
    };
    out.push(StreamEvent::ToolCallDelta {
        choice: 0,
        index,
        arguments_delta,
    });
    out.push(StreamEvent::ToolCallComplete {
        choice: 0,
        index,
        call,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_pick_their_dialect() {
        assert_eq!(
            Dialect::from_path("/v1/chat/completions"),
            Some(Dialect::OpenaiChat)
        );
        assert_eq!(
            Dialect::from_path("/v1beta/models/gemini-2.5-pro:streamGenerateContent"),
            Some(Dialect::Gemini)
        );
        assert_eq!(
            Dialect::from_path("/v1/models/gemini-2.5-flash:generateContent"),
            Some(Dialect::Gemini)
        );
        assert_eq!(
            Dialect::from_path("/v1beta/models/gemini-2.5-pro:countTokens"),
            None
        );
        assert_eq!(Dialect::from_path("/v1/models"), None);
        assert_eq!(
            Dialect::from_path("/v1/responses"),
            Some(Dialect::OpenaiResponses)
        );
        assert_eq!(
            Dialect::from_path("/v1/responses/compact"),
            Some(Dialect::OpenaiResponses)
        );
        assert_eq!(Dialect::from_path("/v1/messages"), Some(Dialect::Anthropic));
        assert_eq!(Dialect::from_path("/v1/messages/count_tokens"), None);
        assert_eq!(Dialect::from_path("/v1/embeddings"), None);
        assert_eq!(
            Dialect::from_path(
                "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-x:streamRawPredict"
            ),
            Some(Dialect::Anthropic)
        );
        assert_eq!(
            Dialect::from_path(
                "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-x:rawPredict"
            ),
            Some(Dialect::Anthropic)
        );
        assert_eq!(
            Dialect::from_path("/v1/projects/p/locations/l/publishers/google/models/g:streamGenerateContent"),
            Some(Dialect::Gemini)
        );
        assert_eq!(
            Dialect::from_path("/v1/projects/p/locations/l/publishers/anthropic/models/claude-x:countTokens"),
            None
        );
        assert_eq!(
            Dialect::from_path(
                "/v1/projects/p/locations/l/publishers/anthropic/models/count-tokens:rawPredict"
            ),
            None,
            "Vertex's token counting for Claude is not a turn"
        );
        assert_eq!(
            Dialect::from_path(
                "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke-with-response-stream"
            ),
            Some(Dialect::Bedrock)
        );
        assert_eq!(
            Dialect::from_path("/bedrock/model/us.anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke"),
            Some(Dialect::Bedrock)
        );
        assert_eq!(
            Dialect::from_path("/bedrock/model/m/converse-stream"),
            Some(Dialect::BedrockConverse)
        );
        assert_eq!(
            Dialect::from_path("/model/us.amazon.nova-pro-v1:0/converse"),
            Some(Dialect::BedrockConverse)
        );
        assert_eq!(Dialect::from_path("/model//converse"), None);
        assert_eq!(Dialect::from_path("/v1/converse"), None);
        assert_eq!(Dialect::from_path("/model//invoke"), None);
        assert_eq!(Dialect::from_path("/v1/invoke"), None);
    }

    /// Claude on Vertex AI says "stream" in its method: `:streamRawPredict`
    /// answers SSE even for a body without `"stream": true`; `:rawPredict`
    /// follows the body, as `/v1/messages` does.
    #[test]
    fn vertex_claude_streams_by_method() {
        let stream = "/v1/projects/p/locations/l/publishers/anthropic/models/c:streamRawPredict";
        let raw = "/v1/projects/p/locations/l/publishers/anthropic/models/c:rawPredict";
        assert_eq!(Dialect::Anthropic.mode(stream, None, false), Mode::Sse);
        assert_eq!(Dialect::Anthropic.mode(stream, None, true), Mode::Sse);
        assert_eq!(Dialect::Anthropic.mode(raw, None, false), Mode::Whole);
        assert_eq!(Dialect::Anthropic.mode("/v1/messages", None, false), Mode::Whole);
    }
}

/// Helpers of the dialects' unit tests.
#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
pub(crate) mod testing {
    use serde_json::Value;

    use super::{Dialect, ParsedRequest, StreamEvent};

    /// Parses a request body that must parse.
    pub(crate) fn request(dialect: Dialect, body: &Value) -> ParsedRequest {
        dialect.parse_request(body.to_string().as_bytes()).unwrap()
    }

    /// Feeds payloads (JSON values, or a string sent as is, such as
    /// `[DONE]`) that must parse, then ends the response.
    pub(crate) fn events(dialect: Dialect, payloads: &[Value]) -> Vec<StreamEvent> {
        let mut parser = dialect.stream_parser();
        let mut out = Vec::new();
        for payload in payloads {
            let text = match payload {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            parser.payload(&text, &mut out).unwrap();
        }
        parser.end(&mut out);
        out
    }
}

/// No body or payload, however odd, makes a parser panic: JSON built from
/// the field names the dialects read, at random shapes and types.
#[cfg(test)]
mod robustness {
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    use super::*;

    const KEYS: [&str; 40] = [
        "type",
        "role",
        "content",
        "messages",
        "input",
        "contents",
        "parts",
        "tool_calls",
        "function",
        "name",
        "arguments",
        "id",
        "call_id",
        "tool_use_id",
        "output",
        "index",
        "output_index",
        "sequence_number",
        "item",
        "delta",
        "text",
        "partial_json",
        "content_block",
        "response",
        "choices",
        "candidates",
        "functionCall",
        "functionResponse",
        "args",
        "usage",
        "stop_reason",
        "finish_reason",
        "finishReason",
        "tools",
        "system",
        "instructions",
        "is_error",
        "message",
        "error",
        "previous_response_id",
    ];
    const KINDS: [&str; 16] = [
        "message",
        "function_call",
        "function_call_output",
        "tool_use",
        "tool_result",
        "text",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
        "input_json_delta",
        "custom_tool_call",
        "error",
    ];

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            prop_oneof![any::<i64>(), Just(i64::from(u32::MAX)), Just(-1), 0..4i64].prop_map(Value::from),
            (0..KINDS.len()).prop_map(|i| Value::from(KINDS[i])),
            "[a-z{}\":]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(((0..KEYS.len()), inner), 0..6).prop_map(|fields| {
                    let map: Map<String, Value> =
                        fields.into_iter().map(|(k, v)| (KEYS[k].to_owned(), v)).collect();
                    Value::Object(map)
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        #[test]
        fn parsers_never_panic(raw in prop::collection::vec((0..KINDS.len(), json()), 1..6)) {
            // Mostly objects typed like real payloads, so the deep paths run.
            let values: Vec<Value> = raw
                .into_iter()
                .map(|(kind, value)| match value {
                    Value::Object(mut map) => {
                        map.entry("type").or_insert_with(|| Value::from(KINDS[kind]));
                        Value::Object(map)
                    }
                    other => other,
                })
                .collect();
            for dialect in Dialect::ALL {
                for value in &values {
                    let _ = dialect.parse_request(value.to_string().as_bytes());
                }
                let mut parser = dialect.stream_parser();
                let mut out = Vec::new();
                for value in &values {
                    let _ = parser.payload(&value.to_string(), &mut out);
                }
                parser.end(&mut out);
            }
        }
    }
}
