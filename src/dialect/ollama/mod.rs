//! The Ollama native dialects, whole: `ollama-chat` (`POST …/api/chat`) and
//! `ollama-generate` (`POST …/api/generate`). Request parsing and stream
//! parsing ([`parse`]: newline-delimited JSON, one object per line, the last
//! with `done: true`; framed by [`crate::ndjson`]), what loopguard writes in
//! them ([`mod@write`]: warning injection, block answers, abort bodies,
//! stream endings) and the escalation hooks ([`model`]).
//!
//! Streaming is Ollama's default: a body without `stream` streams. Tool
//! calls arrive whole in a line's `message.tool_calls`, their `arguments`
//! an object. `/api/generate` has no tool calls: only the content detectors
//! see it. Errors are `{"error": "…"}`, with an HTTP status or as a line of
//! a stream already under way.

pub mod model;
pub mod parse;
pub mod sample;
pub mod write;

pub use parse::*;
pub use write::Endpoint;
