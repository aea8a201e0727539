//! Incremental splitter for a streamed JSON array (Gemini's
//! `:streamGenerateContent` without `alt=sse`): yields each top-level element
//! as soon as it is complete, respecting strings and escapes.
//!
//! Placeholder API (implementation pending).

/// One complete top-level element of the array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayElement {
    /// Offset of the element's first byte in the stream.
    pub start: u64,
    /// Offset just past its last byte.
    pub end: u64,
    /// The element's JSON text.
    pub text: String,
}

/// The stream is not a JSON array, or ended inside it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// A byte that cannot appear at that point of an array.
    #[error("unexpected byte {byte:?} at offset {offset}")]
    Unexpected {
        /// The byte.
        byte: u8,
        /// Its offset in the stream.
        offset: u64,
    },
    /// The stream ended before the closing `]`.
    #[error("stream ended inside the array")]
    Truncated,
}

/// Incremental splitter.
#[derive(Debug, Default)]
pub struct ArraySplitter {}

impl ArraySplitter {
    /// A splitter at stream offset 0.
    pub fn new() -> Self {
        Self {}
    }

    /// Feeds a chunk, appending every element it completes to `out`.
    ///
    /// # Errors
    /// [`SplitError::Unexpected`] when the bytes are not a JSON array; the
    /// splitter yields nothing after that.
    pub fn push(&mut self, _chunk: &[u8], _out: &mut Vec<ArrayElement>) -> Result<(), SplitError> {
        Ok(())
    }

    /// The stream ended.
    ///
    /// # Errors
    /// [`SplitError::Truncated`] when it ended before the closing `]`.
    pub fn finish(&mut self) -> Result<(), SplitError> {
        Ok(())
    }
}
