//! The `bedrock-converse` dialect: Amazon Bedrock's model-neutral
//! `Converse` (`POST …/model/{modelId}/converse`, one JSON document) and
//! `ConverseStream` (`POST …/model/{modelId}/converse-stream`, AWS's binary
//! event stream, [`crate::eventstream`]).
//!
//! Shapes as botocore's service model declares them
//! (`botocore/data/bedrock-runtime/2023-09-30/service-2.json`, shapes
//! `ConverseRequest`, `ConverseResponse`, `ConverseStreamOutput`):
//!
//! - request: `messages[]` of `{role, content: [ContentBlock]}`, a block
//!   being one of `text`, `toolUse {toolUseId, name, input}`,
//!   `toolResult {toolUseId, content: [{text} | {json} | …], status}`
//!   (`success` / `error`), `reasoningContent`, `image`, `document`, …;
//!   `system: [{text} | {cachePoint} | …]`;
//!   `toolConfig.tools[].toolSpec {name, description, inputSchema.json}`;
//!   `inferenceConfig {maxTokens, temperature, topP, stopSequences}`. The
//!   model is in the path, never in the body.
//! - `Converse` answer: `{output: {message}, stopReason, usage {inputTokens,
//!   outputTokens, totalTokens, …}, metrics {latencyMs}}`.
//! - `ConverseStream`: one event per message, its type in the
//!   `:event-type` header and its payload the event's JSON itself (not the
//!   base64 `chunk` bytes of `InvokeModelWithResponseStream`):
//!   `messageStart {role}`, `contentBlockStart {contentBlockIndex, start:
//!   {toolUse {toolUseId, name}}}` (tool blocks only: a text block starts
//!   with its first delta), `contentBlockDelta {contentBlockIndex, delta:
//!   {text} | {toolUse {input: "<JSON fragment>"}} | {reasoningContent}}`,
//!   `contentBlockStop {contentBlockIndex}`, `messageStop {stopReason}`,
//!   `metadata {usage, metrics}`; errors are `exception` messages
//!   (`:exception-type` such as `validationException`, payload
//!   `{"message"}`).
//!
//! The stream parser reads each message as `{"<event-type>": payload}`
//! ([`payload_of`]), the shape botocore hands its callers, so a stream and
//! a whole answer go through one [`ResponseParser`].
//!
//! Like `bedrock`, requests may be SigV4-signed over their body: loopguard
//! never changes one (a warning is logged only; see README, Bedrock). A
//! block is a complete event stream or a `Converse` answer
//! ([`mod@write`]), an abort Bedrock's error shape.

pub(crate) mod ending;
pub mod parse;
pub mod sample;
pub mod write;

pub use parse::*;

use serde_json::{Map, Value};

use crate::eventstream::Message;

/// The `:event-type` of loopguard's keep-alive message while it holds a
/// tool call: not an event of `ConverseStreamOutput`, so SDKs skip it
/// (botocore's event-stream parser yields nothing for an event type its
/// model does not name, and its iterator drops empty events).
pub const KEEPALIVE_EVENT: &str = "loopguardKeepalive";

/// The payload a `ConverseStream` message carries for [`ResponseParser`]:
/// `{"<event-type>": <payload JSON>}` for an event, or for an
/// `exception` / `error` message `{"<exception-type>": {"message": …}}`
/// (the `:exception-type`, else `:error-code`, else `exception`). `None`
/// for a payload that is not a JSON object, or a message of no known type.
pub fn payload_of(message: &Message) -> Option<String> {
    match message.header(":message-type") {
        Some("exception") | Some("error") => {
            let body: Value = serde_json::from_slice(&message.payload).unwrap_or(Value::Null);
            let kind = message
                .header(":exception-type")
                .or_else(|| message.header(":error-code"))
                .unwrap_or("exception");
            let text = body
                .get("message")
                .and_then(Value::as_str)
                .or_else(|| message.header(":error-message"))
                .unwrap_or_default();
            let mut error = Map::new();
            error.insert(kind.to_owned(), serde_json::json!({ "message": text }));
            Some(Value::Object(error).to_string())
        }
        _ => {
            let kind = message.header(":event-type")?;
            let body: Value = serde_json::from_slice(&message.payload).ok()?;
            if !body.is_object() {
                return None;
            }
            let mut event = Map::new();
            event.insert(kind.to_owned(), body);
            Some(Value::Object(event).to_string())
        }
    }
}

/// One `ConverseStream` event of type `kind` carrying `payload` (a JSON
/// object), framed as Bedrock frames it.
pub fn event(kind: &str, payload: &Value) -> Vec<u8> {
    crate::eventstream::encode(
        &[
            (":event-type", kind),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

/// `{"<event-type>": payload}` payloads (as [`payload_of`] reads them, and
/// as loopguard's writers render them) framed as `ConverseStream` events,
/// in order; an element that is not a one-key object is skipped.
pub fn frames_from_events(events: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for wrapped in events {
        let Some((kind, payload)) = wrapped.as_object().and_then(|o| o.iter().next()) else {
            continue;
        };
        if kind.ends_with("Exception") {
            let message = payload.get("message").and_then(Value::as_str).unwrap_or_default();
            out.extend(crate::dialect::bedrock::exception(kind, message));
        } else {
            out.extend(event(kind, payload));
        }
    }
    out
}

/// The keep-alive message ([`KEEPALIVE_EVENT`], payload `{}`).
pub fn keepalive() -> Vec<u8> {
    event(KEEPALIVE_EVENT, &Value::Object(Map::new()))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;
    use crate::eventstream::decode;
    use serde_json::json;

    /// An event reads back as `{"<event-type>": payload}`, its headers as
    /// Bedrock sends them; an exception as `{"<exception-type>": {message}}`.
    #[test]
    fn events_and_exceptions_read_as_wrapped_payloads() {
        let delta = json!({"contentBlockIndex": 0, "delta": {"text": "hi"}});
        let messages = decode(&event("contentBlockDelta", &delta));
        assert_eq!(messages[0].header(":event-type"), Some("contentBlockDelta"));
        assert_eq!(messages[0].header(":message-type"), Some("event"));
        let read: Value = serde_json::from_str(&payload_of(&messages[0]).unwrap()).unwrap();
        assert_eq!(read, json!({"contentBlockDelta": delta}));
        let messages = decode(&crate::dialect::bedrock::exception("throttlingException", "slow"));
        let read: Value = serde_json::from_str(&payload_of(&messages[0]).unwrap()).unwrap();
        assert_eq!(read, json!({"throttlingException": {"message": "slow"}}));
    }

    /// Wrapped payloads are framed one message each, exceptions as
    /// `exception` messages; the keep-alive is an event no SDK models.
    #[test]
    fn wrapped_payloads_are_framed_in_order() {
        let events = [
            json!({"messageStart": {"role": "assistant"}}),
            json!({"validationException": {"message": "no"}}),
        ];
        let messages = decode(&frames_from_events(&events));
        let read: Vec<Value> = messages
            .iter()
            .map(|m| serde_json::from_str(&payload_of(m).unwrap()).unwrap())
            .collect();
        assert_eq!(read, events);
        assert_eq!(messages[1].header(":exception-type"), Some("validationException"));
        let keep = decode(&keepalive());
        assert_eq!(keep[0].header(":event-type"), Some(KEEPALIVE_EVENT));
    }
}
