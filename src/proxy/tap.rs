//! The tap: a side copy of a response body, framed and parsed into
//! [`StreamEvent`]s as the bytes pass. It never changes or delays the bytes.

use crate::dialect::{Dialect, StreamEvent, StreamParser};
use crate::json_array::{ArrayElement, ArraySplitter};
use crate::sse::{SseDecoder, SseEvent};

/// How a response body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `text/event-stream`.
    Sse,
    /// One JSON array streamed incrementally (Gemini `:streamGenerateContent`
    /// without `alt=sse`).
    JsonArray,
    /// One JSON document (a non-streaming answer).
    Json,
}

enum Framer {
    Sse(SseDecoder),
    Array(ArraySplitter),
    Json { buf: Vec<u8>, cap: usize },
}

/// How a tapped body ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TapEnd {
    /// The body was whole: the dialect's end was seen (`[DONE]`, a finish
    /// reason, the array's `]`, a complete JSON document).
    Complete,
    /// The body ended before its dialect's end: the response was truncated.
    Truncated(String),
    /// The tap gave up earlier (parse failure or size cap): nothing can be
    /// said about completeness.
    Unknown,
}

/// Parses a side copy of one response.
pub struct Tap {
    framer: Framer,
    parser: StreamParser,
    events: Vec<StreamEvent>,
    failed: Option<String>,
    saw_finish: bool,
    saw_done: bool,
    saw_error: bool,
    sse_scratch: Vec<SseEvent>,
    array_scratch: Vec<ArrayElement>,
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap")
            .field("events", &self.events.len())
            .field("failed", &self.failed)
            .finish()
    }
}

impl Tap {
    /// A tap for one response of `dialect` framed as `framing`; a `Json`
    /// body is parsed only up to `max_json_bytes`.
    pub fn new(dialect: Dialect, framing: Framing, max_json_bytes: usize) -> Self {
        let framer = match framing {
            Framing::Sse => Framer::Sse(SseDecoder::new()),
            Framing::JsonArray => Framer::Array(ArraySplitter::new()),
            Framing::Json => Framer::Json {
                buf: Vec::new(),
                cap: max_json_bytes,
            },
        };
        Self {
            framer,
            parser: dialect.stream_parser(),
            events: Vec::new(),
            failed: None,
            saw_finish: false,
            saw_done: false,
            saw_error: false,
            sse_scratch: Vec::new(),
            array_scratch: Vec::new(),
        }
    }

    /// Why the tap stopped parsing, if it did (a fail-open reason).
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Every event parsed so far.
    pub fn events(&self) -> &[StreamEvent] {
        &self.events
    }

    /// Feeds the next chunk of the body as received.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        match &mut self.framer {
            Framer::Sse(decoder) => {
                decoder.push(chunk, &mut self.sse_scratch);
                let events = std::mem::take(&mut self.sse_scratch);
                for event in &events {
                    self.payload(&event.data);
                }
                self.sse_scratch = events;
                self.sse_scratch.clear();
            }
            Framer::Array(splitter) => {
                if let Err(e) = splitter.push(chunk, &mut self.array_scratch) {
                    self.failed = Some(format!("json array: {e}"));
                }
                let elements = std::mem::take(&mut self.array_scratch);
                for element in &elements {
                    self.payload(&element.text);
                }
                self.array_scratch = elements;
                self.array_scratch.clear();
            }
            Framer::Json { buf, cap } => {
                if buf.len() + chunk.len() > *cap {
                    buf.clear();
                    self.failed = Some("response_too_large".to_owned());
                } else {
                    buf.extend_from_slice(chunk);
                }
            }
        }
    }

    fn payload(&mut self, data: &str) {
        if data.trim() == "[DONE]" {
            self.saw_done = true;
            self.events.push(StreamEvent::Done);
            return;
        }
        let start = self.events.len();
        if let Err(e) = self.parser.payload(data, &mut self.events) {
            tracing::debug!(error = %e, "stream payload not understood");
        }
        self.note(start);
    }

    fn note(&mut self, start: usize) {
        for event in &self.events[start..] {
            match event {
                StreamEvent::Finish { .. } => self.saw_finish = true,
                StreamEvent::Done => self.saw_done = true,
                StreamEvent::Error { .. } => self.saw_error = true,
                _ => {}
            }
        }
    }

    /// The body ended (cleanly, as far as the transport could tell): parses
    /// what is left and says whether the dialect's end was seen.
    pub fn finish(&mut self) -> TapEnd {
        if self.failed.is_some() {
            return TapEnd::Unknown;
        }
        let start = self.events.len();
        let end = match &mut self.framer {
            Framer::Sse(decoder) => {
                let trailing = decoder.finish();
                if let Some(event) = trailing {
                    self.payload(&event.data);
                    Some("the last event was not terminated by a blank line".to_owned())
                } else if decoder.pending_len() > 0 {
                    Some("the stream ended inside an event".to_owned())
                } else {
                    None
                }
            }
            Framer::Array(splitter) => splitter.finish().err().map(|e| e.to_string()),
            Framer::Json { buf, .. } => {
                let text = String::from_utf8_lossy(buf).into_owned();
                if let Err(e) = self.parser.payload(&text, &mut self.events) {
                    self.failed = Some(format!("response body: {e}"));
                    return TapEnd::Unknown;
                }
                self.parser.end(&mut self.events);
                // A whole document parsed: the transport's framing already
                // vouched for its length.
                return TapEnd::Complete;
            }
        };
        self.parser.end(&mut self.events);
        self.note(start);
        match end {
            Some(reason) => TapEnd::Truncated(reason),
            // An error event ends a stream as surely as a finish: the client
            // has it and must see it, not a broken connection.
            None if self.saw_done || self.saw_finish || self.saw_error => TapEnd::Complete,
            None => TapEnd::Truncated("the stream ended before its finish".to_owned()),
        }
    }
}
