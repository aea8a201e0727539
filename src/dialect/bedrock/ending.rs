//! `bedrock` endings: the `anthropic` endings (loopguard's content block at
//! the index of the first held one, `message_delta`, `message_stop`),
//! each event framed as a Bedrock `chunk`; an abort is an `exception`.

use super::{frames_from_sse, write};
use crate::dialect::anthropic::{self, StreamState};
use crate::dialect::ending::Kept;
use crate::dialect::write::Mode;

/// What replaces the held region for a block.
pub(crate) fn block(state: &StreamState, k: &Kept<'_>, message: &str) -> Vec<u8> {
    let anthropic = anthropic::ending::block(state, k, message);
    if k.mode == Mode::Whole {
        anthropic
    } else {
        frames_from_sse(&anthropic)
    }
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
    let anthropic = anthropic::ending::cut(state, k, message);
    if k.mode == Mode::Whole {
        anthropic
    } else {
        frames_from_sse(&anthropic)
    }
}
