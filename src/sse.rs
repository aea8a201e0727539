//! Incremental SSE decoder that keeps each event's position in the raw stream.
//!
//! Placeholder API (implementation pending): the proxy feeds it every chunk
//! read from the upstream as received and gets back whole events, each with
//! its byte range in the stream, so held events can be released or replaced
//! byte-exact.

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// Offset of the event's first byte in the stream (first line of the block, comments included).
    pub start: u64,
    /// Offset just past the blank line that ended the event.
    pub end: u64,
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined by `\n`.
    pub data: String,
}

/// Incremental decoder. Buffer, check, parse: bytes are buffered until a
/// whole event (ended by a blank line: LF, CRLF or CR framing) is there.
#[derive(Debug, Default)]
pub struct SseDecoder {}

impl SseDecoder {
    /// A decoder at stream offset 0.
    pub fn new() -> Self {
        Self {}
    }

    /// Feeds a chunk (split anywhere, even inside a UTF-8 sequence), appending
    /// every event it completes to `out`.
    pub fn push(&mut self, _chunk: &[u8], _out: &mut Vec<SseEvent>) {}

    /// The stream ended: returns a last event that had data but no blank line after it.
    pub fn finish(&mut self) -> Option<SseEvent> {
        None
    }

    /// Bytes buffered that do not yet form a whole event.
    pub fn pending_len(&self) -> usize {
        0
    }
}
