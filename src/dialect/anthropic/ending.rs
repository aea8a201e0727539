//! `anthropic` endings: loopguard's content block takes the place of the
//! first held one (its `index`), then `message_delta` and `message_stop`.

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
            let model = model_of(state.message.as_ref()).unwrap_or_default();
            write::block_answer(Mode::Whole, &model, message).body
        });
    }
    let (_, held_index) = k.held_anchor();
    write::block_stream_ending(state, held_index, message)
}

/// What replaces the held region for an abort.
pub(crate) fn error(k: &Kept<'_>, message: &str) -> Vec<u8> {
    if k.mode == Mode::Whole {
        write::abort_body(message)
    } else {
        write::stream_error_event(message)
    }
}

/// What ends a generation cut short.
pub(crate) fn cut(state: &StreamState, k: &Kept<'_>, message: &str) -> Vec<u8> {
    if k.mode == Mode::Whole {
        block(state, &k.without_text(), message)
    } else {
        write::cut_ending(state, message)
    }
}

/// Where the frame parsed last stands: the content block `index`.
pub(crate) fn anchor(state: &StreamState) -> (Option<u64>, Option<u32>) {
    (None, state.anchor)
}
