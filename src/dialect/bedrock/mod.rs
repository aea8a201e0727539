//! The `bedrock` dialect: Claude on Amazon Bedrock, `InvokeModel`
//! (`POST …/model/{modelId}/invoke`, one JSON document) and
//! `InvokeModelWithResponseStream` (`POST …/model/{modelId}/invoke-with-response-stream`).
//!
//! The request body is Anthropic's Messages body with `anthropic_version`
//! and without `model` (it is in the path), read by the `anthropic` parser.
//! A streamed answer is AWS's binary event stream ([`crate::eventstream`]):
//! each `chunk` event's JSON payload `{"bytes": "<base64>"}` carries one
//! Anthropic stream event's `data` JSON, which the `anthropic` stream parser
//! reads ([`payload_of`]); an `exception` message (`:message-type
//! exception`, `:exception-type`) ends the stream with an error. Errors of
//! a whole answer are `{"message": "…"}` with an HTTP status.
//!
//! What loopguard writes ([`mod@write`]) is Anthropic's, framed the same
//! way: a block is a complete event stream (`message_start` …
//! `message_stop`, each a `chunk` event), an abort Bedrock's error shape.
//! Requests are SigV4-signed by the client over their body: loopguard
//! never changes one, so a warning is never injected (see README, Bedrock).
//! `Converse` / `ConverseStream` are the `bedrock-converse` dialect
//! ([`crate::dialect::bedrock_converse`]).

pub(crate) mod ending;
pub mod write;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::eventstream::Message;

/// The payload a Bedrock event-stream message carries for the `anthropic`
/// stream parser: a `chunk` event's decoded `bytes` (one Anthropic stream
/// event's JSON), or for an `exception` an Anthropic `error` event naming
/// its `:exception-type` and `message`. `None` for anything else (other
/// event types, a chunk whose payload is not the expected JSON).
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
            Some(json!({"type": "error", "error": {"type": kind, "message": text}}).to_string())
        }
        _ if message.header(":event-type") == Some("chunk") => {
            let body: Value = serde_json::from_slice(&message.payload).ok()?;
            let bytes = body.get("bytes")?.as_str()?;
            let decoded = base64::engine::general_purpose::STANDARD.decode(bytes).ok()?;
            String::from_utf8(decoded).ok()
        }
        _ => None,
    }
}

/// One `chunk` event carrying `data` (an Anthropic stream event's JSON), as
/// Bedrock frames it.
pub fn chunk(data: &str) -> Vec<u8> {
    let bytes = base64::engine::general_purpose::STANDARD.encode(data.as_bytes());
    let payload = json!({ "bytes": bytes }).to_string();
    crate::eventstream::encode(
        &[
            (":event-type", "chunk"),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.as_bytes(),
    )
}

/// An `exception` message of type `kind` (e.g. `validationException`)
/// with `{"message": …}`, as Bedrock ends a stream with an error.
pub fn exception(kind: &str, message: &str) -> Vec<u8> {
    let payload = json!({ "message": message }).to_string();
    crate::eventstream::encode(
        &[
            (":exception-type", kind),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        payload.as_bytes(),
    )
}

/// Anthropic SSE events (as the `anthropic` writers render them) reframed
/// as Bedrock `chunk` events, one per SSE event, in order.
pub fn frames_from_sse(sse: &[u8]) -> Vec<u8> {
    let mut decoder = crate::sse::SseDecoder::new();
    let mut events = Vec::new();
    decoder.push(sse, &mut events);
    events.extend(decoder.finish());
    events.iter().flat_map(|e| chunk(&e.data)).collect()
}

/// The `content-type` of a Bedrock event stream.
pub const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;
    use crate::eventstream::decode;

    /// A chunk round-trips to the Anthropic event it carries; an exception
    /// reads as an Anthropic `error` event.
    #[test]
    fn chunks_and_exceptions_read_as_anthropic_events() {
        let data = r#"{"type":"message_stop"}"#;
        let messages = decode(&chunk(data));
        assert_eq!(payload_of(&messages[0]).as_deref(), Some(data));
        let messages = decode(&exception("modelStreamErrorException", "boom"));
        let error: Value = serde_json::from_str(&payload_of(&messages[0]).unwrap()).unwrap();
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], "modelStreamErrorException");
        assert_eq!(error["error"]["message"], "boom");
    }

    /// SSE events are reframed one chunk each, data unchanged.
    #[test]
    fn sse_is_reframed_event_by_event() {
        let sse = b"event: ping\ndata: {\"type\":\"ping\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let messages = decode(&frames_from_sse(sse));
        let payloads: Vec<String> = messages.iter().filter_map(payload_of).collect();
        assert_eq!(payloads, [r#"{"type":"ping"}"#, r#"{"type":"message_stop"}"#]);
    }
}
