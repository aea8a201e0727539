//! What loopguard writes on Bedrock: Anthropic's answers, framed as
//! Bedrock frames them (see the module above).

use serde_json::json;

use super::{EVENT_STREAM, exception, frames_from_sse};
use crate::dialect::anthropic;
use crate::dialect::write::{Answer, Mode};

/// The `:exception-type` of loopguard's in-stream abort: the one Bedrock
/// uses for a request it refuses.
pub const ABORT_EXCEPTION: &str = "validationException";

/// A complete answer with `message` as the assistant's text: Anthropic's
/// `message` object for `invoke`, or its whole stream `message_start` …
/// `message_stop` as `chunk` events for `invoke-with-response-stream`.
pub fn block_answer(mode: Mode, model: &str, message: &str) -> Answer {
    if mode == Mode::Whole {
        return anthropic::write::block_answer(Mode::Whole, model, message);
    }
    let sse = anthropic::write::block_answer(Mode::Sse, model, message);
    Answer {
        content_type: EVENT_STREAM,
        body: frames_from_sse(&sse.body),
    }
}

/// The HTTP 400 body for `abort`: Bedrock's `{"message": "…"}`.
pub fn abort_body(message: &str) -> Vec<u8> {
    json!({ "message": message }).to_string().into_bytes()
}

/// The in-stream error for an abort after headers went out: an
/// `exception` message ([`ABORT_EXCEPTION`]).
pub fn stream_error_event(message: &str) -> Vec<u8> {
    exception(ABORT_EXCEPTION, message)
}
