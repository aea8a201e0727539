//! `gemini` endings: a block appends its explanation to the text already
//! sent (with the held usage), an abort is the dialect's in-stream error, in
//! SSE or JSON-array framing.

use super::write;
use crate::dialect::ending::Kept;
use crate::dialect::write::Mode;

/// What replaces the held region for a block.
pub(crate) fn block(k: &Kept<'_>, message: &str) -> Vec<u8> {
    let message = k.continued(message);
    let meta = k.identity;
    if k.mode == Mode::Whole {
        // The upstream's answer, its calls replaced by the explanation.
        let kept = k
            .whole_body
            .and_then(|body| write::block_whole(body, &message, k.drop_text));
        return kept.unwrap_or_else(|| {
            let model = meta.model.as_deref().unwrap_or_default();
            write::block_answer(Mode::Whole, model, &message).body
        });
    }
    write::block_stream_ending(meta, &message, k.held_usage, k.mode, k.first_element)
}

/// What replaces the held region for an abort.
pub(crate) fn error(k: &Kept<'_>, message: &str) -> Vec<u8> {
    if k.mode == Mode::Whole {
        write::abort_body(message)
    } else {
        write::stream_error_event(message, k.mode, k.first_element)
    }
}

/// What ends a generation cut short: the note replaces what was not released.
pub(crate) fn cut(k: &Kept<'_>, message: &str) -> Vec<u8> {
    block(&k.without_text(), message)
}
