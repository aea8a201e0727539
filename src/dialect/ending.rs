//! Endings: what the holder keeps aside for the bytes loopguard writes where
//! it withholds part of a response — a block's explanation, an abort's
//! error, the note that ends a cut generation — so that each dialect
//! (`<dialect>/ending.rs`) can continue what the client already received
//! (ids, choice, output and block indices, sequence numbers, terminal pieces
//! such as usage and `[DONE]`).
//!
//! The holder (`proxy::hold`) decides *when* and *what* is replaced; the
//! dialect only renders, from its parser's state (that of the frame being
//! judged) and this [`Kept`].

use std::borrow::Cow;

use serde_json::Value;

use super::write::{Mode, StreamEnding};

/// Everything an ending depends on besides the dialect parser's state, kept
/// aside by the holder.
#[derive(Debug, Clone, Copy)]
pub struct Kept<'a> {
    /// Identity fields the tap read from the first payload (OpenAI chat,
    /// Gemini): chunk id, model, creation time.
    pub identity: &'a StreamEnding,
    /// How the body is framed for the client.
    pub mode: Mode,
    /// OpenAI chat `stream_options.include_usage`.
    pub include_usage: bool,
    /// While calls are held: where the first held frame stood
    /// (`sequence_number`, output / block index), see
    /// [`super::StreamParser::anchor`].
    pub held_at: Option<(Option<u64>, Option<u32>)>,
    /// The upstream's usage, held with the calls (OpenAI chat, Gemini).
    pub held_usage: Option<&'a Value>,
    /// The upstream's `[DONE]` was held with the calls (OpenAI chat).
    pub held_done: bool,
    /// Answer text already went to the client.
    pub text_released: bool,
    /// Nothing went to the client yet (a JSON array ending opens with `[`).
    pub first_element: bool,
    /// The upstream's whole answer, when the client asked for one document
    /// (a block keeps what the model wrote and replaces only its calls).
    pub whole_body: Option<&'a [u8]>,
    /// The answer's text is dropped too (a cut generation, whose text is
    /// the degenerate part): a whole answer keeps only its envelope (id,
    /// model, usage) and what is neither text nor a call.
    pub drop_text: bool,
}

impl Kept<'_> {
    /// The same for a cut generation: a degenerate answer's text is not
    /// kept, the note replaces it (a whole answer keeps its id, model and
    /// usage: the upstream generated, and billed, all of it).
    pub(crate) fn without_text(&self) -> Self {
        Kept {
            drop_text: true,
            ..*self
        }
    }

    /// `message` for dialects that append the ending to the text already
    /// sent (OpenAI chat, Gemini): on a new paragraph once text went out.
    pub(crate) fn continued<'m>(&self, message: &'m str) -> Cow<'m, str> {
        if self.text_released && self.mode != Mode::Whole {
            Cow::Owned(format!("\n\n{message}"))
        } else {
            Cow::Borrowed(message)
        }
    }

    /// Where the first held frame stood, `(None, None)` when nothing is held.
    pub(crate) fn held_anchor(&self) -> (Option<u64>, Option<u32>) {
        self.held_at.unwrap_or((None, None))
    }
}

/// The `model` field of a JSON object the upstream sent.
pub(crate) fn model_of(value: Option<&Value>) -> Option<String> {
    value
        .and_then(|v| v.get("model"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}
