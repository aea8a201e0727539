//! A scripted turn's pieces as the wire carries them, per dialect: SSE
//! events (named or not), a Gemini JSON array's elements, or one whole body.

use serde_json::Value;

use super::{Mode, fixture, script};

/// The dialects whose streams are named SSE events.
#[derive(Debug, Clone, Copy)]
pub(super) enum Named {
    Responses,
    Anthropic,
}

/// A scripted turn in the OpenAI Responses or Anthropic Messages dialect.
pub(super) fn named_pieces(
    named: Named,
    turn: &script::Turn,
    model: &str,
    seq: u64,
    mode: Mode,
) -> Vec<Vec<u8>> {
    if mode != Mode::Sse {
        return vec![
            match named {
                Named::Responses => script::responses_whole(turn, model, seq),
                Named::Anthropic => script::anthropic_whole(turn, model, seq),
            }
            .into_bytes(),
        ];
    }
    let events = match named {
        Named::Responses => script::responses_stream(turn, model, seq),
        Named::Anthropic => script::anthropic_stream(turn, model, seq),
    };
    events
        .into_iter()
        .map(|(kind, data)| format!("event: {kind}\ndata: {data}\n\n").into_bytes())
        .collect()
}

/// A scripted turn in the OpenAI chat or Gemini dialect, framed as `mode`
/// asks (`no_terminator`: an OpenAI stream without its `[DONE]`).
pub(super) fn scripted_pieces(
    turn: &script::Turn,
    model: &str,
    seq: u64,
    mode: Mode,
    gemini: bool,
    body: &Value,
    no_terminator: bool,
) -> Vec<Vec<u8>> {
    match (gemini, mode) {
        (false, Mode::Sse) => {
            let include_usage = body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let mut out: Vec<Vec<u8>> = script::openai_stream(turn, model, seq, include_usage)
                .into_iter()
                .map(|p| format!("data: {p}\n\n").into_bytes())
                .collect();
            if !no_terminator {
                out.push(b"data: [DONE]\n\n".to_vec());
            }
            out
        }
        (false, _) => vec![script::openai_whole(turn, model, seq).into_bytes()],
        (true, Mode::Sse) => script::gemini_stream(turn, model)
            .into_iter()
            .map(|p| format!("data: {p}\r\n\r\n").into_bytes())
            .collect(),
        (true, Mode::Array) => fixture::json_array_pieces(&script::gemini_stream(turn, model)),
        (true, Mode::Whole | Mode::Lines) => vec![script::gemini_whole(turn, model).into_bytes()],
    }
}
