//! Endings: the bytes loopguard writes where it withholds part of a
//! response — a block's explanation, an abort's error, the note that ends a
//! cut generation — in the response's dialect and framing, continuing what
//! the client already received (ids, choice, output and block indices,
//! sequence numbers, terminal pieces such as usage and `[DONE]`).
//!
//! [`super::hold`] decides *when* and *what* is replaced; this module only
//! renders, from what the tap parsed so far (the dialect parser's state is
//! that of the frame being judged) and what the holder kept aside.

use serde_json::Value;

use super::tap::Tap;
use crate::action::{self, Mode, StreamEnding};
use crate::dialect::{Dialect, StreamParser};

/// Everything an ending depends on, borrowed from the holder.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ending<'a> {
    /// The tap: identity fields and the dialect parser's state.
    pub(super) tap: &'a Tap,
    /// The response's dialect.
    pub(super) dialect: Dialect,
    /// How the body is framed for the client.
    pub(super) mode: Mode,
    /// OpenAI chat `stream_options.include_usage`.
    pub(super) include_usage: bool,
    /// While calls are held: where the first held frame stood
    /// (`sequence_number`, output / block index), see [`anchor`].
    pub(super) held_at: Option<(Option<u64>, Option<u32>)>,
    /// The upstream's usage, held with the calls (OpenAI chat, Gemini).
    pub(super) held_usage: Option<&'a Value>,
    /// The upstream's `[DONE]` was held with the calls (OpenAI chat).
    pub(super) held_done: bool,
    /// Answer text already went to the client.
    pub(super) text_released: bool,
    /// Nothing went to the client yet (a JSON array ending opens with `[`).
    pub(super) first_element: bool,
    /// The upstream's whole answer, when the client asked for one document
    /// (a block keeps what the model wrote and replaces only its calls).
    pub(super) whole_body: Option<&'a [u8]>,
}

/// Where the frame the tap handed out last stands in its stream: Responses
/// `sequence_number` and `output_index`, Anthropic block `index`.
pub(super) fn anchor(tap: &Tap) -> (Option<u64>, Option<u32>) {
    match tap.parser() {
        StreamParser::OpenaiResponses(p) => {
            let a = p.state().anchor;
            (a.sequence, a.output_index)
        }
        StreamParser::Anthropic(p) => (None, p.state().anchor),
        _ => (None, None),
    }
}

impl Ending<'_> {
    /// Identity fields of OpenAI chat chunks and Gemini chunks.
    fn meta(&self) -> StreamEnding {
        let meta = self.tap.meta().cloned().unwrap_or_default();
        StreamEnding {
            id: meta.id,
            model: meta.model.or(meta.model_version),
            created: meta.created,
            choice: 0,
        }
    }

    /// The model the upstream named (Responses `response.model`, Anthropic `message.model`).
    fn model(&self) -> Option<String> {
        let value = match self.tap.parser() {
            StreamParser::OpenaiResponses(p) => p.state().terminal.as_ref().or(p.state().response.as_ref()),
            StreamParser::Anthropic(p) => p.state().message.as_ref(),
            _ => None,
        };
        value
            .and_then(|v| v.get("model"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    /// What replaces the held region for a block: the answer ends with
    /// `message` as text.
    pub(super) fn block(&self, message: &str) -> Vec<u8> {
        let meta = self.meta();
        let separated;
        // Chat and Gemini append the ending to the text already sent; the
        // other dialects put it in an item / block of its own.
        let same_text = matches!(self.dialect, Dialect::OpenaiChat | Dialect::Gemini);
        let message = if self.text_released && self.mode != Mode::Whole && same_text {
            separated = format!("\n\n{message}");
            separated.as_str()
        } else {
            message
        };
        let (held_sequence, held_index) = self.held_at.unwrap_or((None, None));
        match (self.dialect, self.mode) {
            (dialect @ (Dialect::OpenaiChat | Dialect::Gemini), Mode::Whole) => {
                // The upstream's answer, its calls replaced by the explanation.
                let kept = self.whole_body.and_then(|body| match dialect {
                    Dialect::OpenaiChat => action::openai_chat::block_whole(body, message),
                    _ => action::gemini::block_whole(body, message),
                });
                kept.unwrap_or_else(|| {
                    let model = meta.model.as_deref().unwrap_or_default();
                    action::block_answer(dialect, Mode::Whole, model, message, false).body
                })
            }
            (Dialect::OpenaiChat, _) => {
                let mut out = action::openai_chat::block_stream_ending(&meta, message);
                if let Some(usage) = self.held_usage {
                    out.extend(usage_chunk(&meta, usage));
                }
                if self.held_done {
                    out.extend_from_slice(b"data: [DONE]\n\n");
                }
                out
            }
            (Dialect::Gemini, mode) => {
                action::gemini::block_stream_ending(&meta, message, self.held_usage, mode, self.first_element)
            }
            (dialect @ (Dialect::OpenaiResponses | Dialect::Anthropic), Mode::Whole) => {
                // The upstream's answer, its calls replaced by the explanation.
                let kept = match self.tap.parser() {
                    _ if self.whole_body.is_none() => None,
                    StreamParser::OpenaiResponses(p) => {
                        action::openai_responses::block_whole(p.state(), message)
                    }
                    StreamParser::Anthropic(p) => action::anthropic::block_whole(p.state(), message),
                    _ => None,
                };
                kept.unwrap_or_else(|| {
                    let model = self.model().unwrap_or_default();
                    action::block_answer(dialect, Mode::Whole, &model, message, false).body
                })
            }
            (Dialect::OpenaiResponses | Dialect::Anthropic, _) => match self.tap.parser() {
                StreamParser::OpenaiResponses(p) => action::openai_responses::block_stream_ending(
                    p.state(),
                    held_sequence,
                    held_index,
                    message,
                ),
                StreamParser::Anthropic(p) => {
                    action::anthropic::block_stream_ending(p.state(), held_index, message)
                }
                _ => Vec::new(),
            },
        }
    }

    /// What replaces the held region for an abort: the dialect's error (the
    /// whole body when the client asked for one document).
    pub(super) fn error(&self, message: &str) -> Vec<u8> {
        match (self.dialect, self.mode) {
            (_, Mode::Whole) => action::abort_body(self.dialect, message),
            (Dialect::OpenaiChat, _) => action::openai_chat::stream_error_event(message),
            (Dialect::Gemini, mode) => action::gemini::stream_error_event(message, mode, self.first_element),
            (Dialect::OpenaiResponses | Dialect::Anthropic, _) => match self.tap.parser() {
                StreamParser::OpenaiResponses(p) => {
                    let (sequence, index) = self.held_at.unwrap_or((None, None));
                    action::openai_responses::stream_error_event(p.state(), sequence, index, message)
                }
                _ => action::anthropic::stream_error_event(message),
            },
        }
    }

    /// What ends a generation cut short (content detectors), in place of
    /// everything not yet released: the note, then every terminal piece the
    /// client expects.
    pub(super) fn cut(&self, message: &str) -> Vec<u8> {
        match self.tap.parser() {
            StreamParser::OpenaiResponses(p) if self.mode != Mode::Whole => {
                return action::openai_responses::cut_ending(p.state(), message);
            }
            StreamParser::Anthropic(p) if self.mode != Mode::Whole => {
                return action::anthropic::cut_ending(p.state(), message);
            }
            _ => {}
        }
        // A degenerate answer is not kept: the note replaces it whole.
        let fresh = Ending {
            whole_body: None,
            ..*self
        };
        let mut ending = fresh.block(message);
        if self.dialect == Dialect::OpenaiChat && self.mode == Mode::Sse {
            if self.include_usage {
                let meta = self.meta();
                ending.extend(zero_usage_chunk(&meta));
            }
            ending.extend_from_slice(b"data: [DONE]\n\n");
        }
        ending
    }
}

fn usage_chunk(meta: &StreamEnding, usage: &Value) -> Vec<u8> {
    let chunk = serde_json::json!({
        "id": meta.id, "object": "chat.completion.chunk", "created": meta.created,
        "model": meta.model, "choices": [], "usage": usage,
    });
    format!("data: {chunk}\n\n").into_bytes()
}

fn zero_usage_chunk(meta: &StreamEnding) -> Vec<u8> {
    usage_chunk(
        meta,
        &serde_json::json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}),
    )
}
