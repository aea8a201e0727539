//! `bedrock-converse` endings: loopguard's text block at the index of the
//! first held `toolUse` block, `messageStop`, `metadata`, each a
//! `ConverseStream` event; an abort is Bedrock's error (as `bedrock`'s).

use super::{StreamState, write};
use crate::dialect::bedrock;
use crate::dialect::ending::Kept;
use crate::dialect::write::Mode;

/// What replaces the held region for a block.
pub(crate) fn block(state: &StreamState, k: &Kept<'_>, message: &str) -> Vec<u8> {
    if k.mode == Mode::Whole {
        let kept = k
            .whole_body
            .and_then(|_| write::block_whole(state, message, k.drop_text));
        return kept.unwrap_or_else(|| write::block_answer(Mode::Whole, "", message).body);
    }
    let (_, held_index) = k.held_anchor();
    write::block_stream_ending(state, held_index, message)
}

/// What replaces the held region for an abort.
pub(crate) fn error(k: &Kept<'_>, message: &str) -> Vec<u8> {
    if k.mode == Mode::Whole {
        bedrock::write::abort_body(message)
    } else {
        bedrock::write::stream_error_event(message)
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

/// Where the frame parsed last stands: its `contentBlockIndex`.
pub(crate) fn anchor(state: &StreamState) -> (Option<u64>, Option<u32>) {
    (None, state.anchor)
}
