//! `openai-responses` endings: loopguard's items take the place of the
//! first held one (its `sequence_number` and `output_index`), then the
//! terminal `response.completed` / `response.failed` the client expects.

use super::StreamState;
use super::write;
use crate::dialect::ending::{Kept, model_of};
use crate::dialect::write::Mode;

/// What replaces the held region for a block.
pub(crate) fn block(state: &StreamState, k: &Kept<'_>, message: &str) -> Vec<u8> {
    if k.mode == Mode::Whole {
        // The upstream's answer, its calls replaced by the explanation.
        let kept = k
            .whole_body
            .and_then(|_| write::block_whole(state, message, k.drop_text));
        return kept.unwrap_or_else(|| {
            let model = model_of(state.terminal.as_ref().or(state.response.as_ref())).unwrap_or_default();
            write::block_answer(Mode::Whole, &model, message).body
        });
    }
    let (held_sequence, held_index) = k.held_anchor();
    write::block_stream_ending(state, held_sequence, held_index, message)
}

/// What replaces the held region for an abort.
pub(crate) fn error(state: &StreamState, k: &Kept<'_>, message: &str) -> Vec<u8> {
    if k.mode == Mode::Whole {
        return write::abort_body(message);
    }
    let (sequence, index) = k.held_anchor();
    write::stream_error_event(state, sequence, index, message)
}

/// What ends a generation cut short.
pub(crate) fn cut(state: &StreamState, k: &Kept<'_>, message: &str) -> Vec<u8> {
    if k.mode == Mode::Whole {
        block(state, &k.without_text(), message)
    } else {
        write::cut_ending(state, message)
    }
}

/// Where the frame parsed last stands: `sequence_number`, `output_index`.
pub(crate) fn anchor(state: &StreamState) -> (Option<u64>, Option<u32>) {
    (state.anchor.sequence, state.anchor.output_index)
}
