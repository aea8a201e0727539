//! `openai-chat` endings: a block appends its explanation to the text
//! already sent (then the held usage chunk and `[DONE]`), an abort is the
//! dialect's in-stream error, a cut adds the terminal pieces the client
//! expects (usage when asked for, `[DONE]`).

use serde_json::Value;

use super::write;
use crate::dialect::ending::Kept;
use crate::dialect::write::{Mode, StreamEnding};

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
            write::block_answer(Mode::Whole, model, &message, false).body
        });
    }
    let mut out = write::block_stream_ending(meta, &message);
    if let Some(usage) = k.held_usage {
        out.extend(usage_chunk(meta, usage));
    }
    if k.held_done {
        out.extend_from_slice(b"data: [DONE]\n\n");
    }
    out
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
pub(crate) fn cut(k: &Kept<'_>, message: &str) -> Vec<u8> {
    let mut ending = block(&k.without_text(), message);
    if k.mode == Mode::Sse {
        if k.include_usage {
            ending.extend(zero_usage_chunk(k.identity));
        }
        ending.extend_from_slice(b"data: [DONE]\n\n");
    }
    ending
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
