//! What loopguard writes when a verdict calls for more than observing, the
//! shapes every dialect shares; each dialect renders them in its own
//! `<dialect>/write.rs`, through [`super::Dialect`]:
//!
//! - `warn`: the warning is added to the forwarded request where every server
//!   of the dialect accepts it ([`super::Dialect::inject_warning`]).
//! - `block`: a complete, well-formed assistant answer explaining what was
//!   stopped, in the mode the client asked for
//!   ([`super::Dialect::block_answer`]); at stream time, the events that
//!   replace the withheld tool calls (see [`super::ending`]).
//! - `abort`: HTTP 400 with the dialect's error shape
//!   ([`super::Dialect::abort_body`]), or the dialect's in-stream error event
//!   once headers went out.

/// How a response body is framed: what the client asked for, and what the
/// upstream sends (one type for both; see [`super::Dialect::mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One JSON document.
    Whole,
    /// Server-sent events.
    Sse,
    /// One JSON array streamed element by element (Gemini without `alt=sse`).
    JsonArray,
}

/// A response loopguard writes in the upstream's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `Content-Type` of the body.
    pub content_type: &'static str,
    /// The body, whole.
    pub body: Vec<u8>,
}

/// What is known of a response when loopguard must end it itself: the ids
/// its own events have to carry to keep the dialect's invariants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamEnding {
    /// OpenAI chunk `id` (the upstream's).
    pub id: Option<String>,
    /// Model name as the upstream wrote it.
    pub model: Option<String>,
    /// OpenAI `created`.
    pub created: Option<u64>,
    /// Choice / candidate index being ended.
    pub choice: u32,
}

/// Random hex for ids loopguard makes up (never chained to by a client).
pub fn random_id() -> String {
    let n: u64 = rand::random();
    format!("{n:016x}")
}
