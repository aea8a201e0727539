//! The tap: a side copy of a response body, framed and parsed into
//! [`StreamEvent`]s as the bytes pass, one [`Frame`] per SSE event or array
//! element, each with the stream offset where it ends. It never changes or
//! delays bytes itself; [`super::hold`] decides what to release.

use std::collections::VecDeque;

use crate::dialect::{Dialect, Mode, StreamEvent, StreamParser};
use crate::eventstream::{self, Message};
use crate::json_array::{ArrayElement, ArraySplitter};
use crate::ndjson::{Line, LineSplitter};
use crate::sse::{SseDecoder, SseEvent};

enum Framer {
    Sse(SseDecoder),
    Array(ArraySplitter),
    Lines(LineSplitter),
    /// AWS event stream (Bedrock): one frame per message.
    Events(eventstream::Decoder),
    Json {
        buf: Vec<u8>,
        cap: usize,
    },
}

/// One parsed unit of the body: an SSE event, an array element, or the whole
/// JSON document, with what it carried.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Stream offset just past the frame's last byte.
    pub end: u64,
    /// What it carried (empty for comments, unparsable payloads, …).
    pub events: Vec<StreamEvent>,
}

/// How a tapped body ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TapEnd {
    /// The dialect's end was seen (`[DONE]`, a finish reason, an error event,
    /// the array's `]`, a complete JSON document).
    Complete,
    /// The body ended before its dialect's end: the response was truncated.
    Truncated(String),
    /// The tap gave up earlier (parse failure or size cap).
    Unknown,
}

/// What the tap saw, for the request log line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// Events parsed.
    pub events: usize,
    /// Characters of answer text.
    pub text_chars: usize,
    /// Names of the completed tool calls, in order.
    pub tool_calls: Vec<String>,
    /// Finish reasons, in order.
    pub finish: Vec<String>,
    /// Input and output tokens the usage reported (last report of each
    /// wins); kept only for a traced request ([`Tap::keep_for_trace`]).
    pub tokens: (Option<u64>, Option<u64>),
    /// The completed tool calls with their ids and when they completed;
    /// kept only for a traced request.
    pub calls: Vec<crate::trace::Call>,
}

pub use crate::dialect::Meta;

/// Parses a side copy of one response.
pub struct Tap {
    framer: Framer,
    parser: StreamParser,
    failed: Option<String>,
    /// Most bytes of one unfinished array element kept.
    max_frame: usize,
    saw_end: bool,
    seen: Seen,
    sse_scratch: Vec<SseEvent>,
    array_scratch: Vec<ArrayElement>,
    line_scratch: Vec<Line>,
    message_scratch: Vec<Message>,
    /// Framed payloads not parsed yet: stream end offset and payload (`None`
    /// for a truncated SSE event, which yields an empty frame).
    pending: VecDeque<(u64, Option<String>)>,
    /// `[recording]`: a copy of the bytes, sent to the recorder when the tap drops.
    recording: Option<crate::recording::ResponseCopy>,
    /// The request is traced: [`Seen`] keeps the calls' ids and the usage.
    traced: bool,
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap")
            .field("seen", &self.seen)
            .field("failed", &self.failed)
            .finish()
    }
}

impl Tap {
    /// A tap for one response of `dialect` framed as `framing`; a `Json`
    /// body, and one element of a JSON array, are parsed only up to
    /// `max_json_bytes` (past it the tap gives up, `response_too_large` /
    /// `response_frame_too_large`; SSE events are cut by their decoder).
    pub fn new(dialect: Dialect, framing: Mode, max_json_bytes: usize) -> Self {
        let framer = match framing {
            Mode::Sse => Framer::Sse(SseDecoder::new()),
            Mode::JsonArray => Framer::Array(ArraySplitter::new()),
            Mode::Ndjson => Framer::Lines(LineSplitter::new()),
            Mode::EventStream => Framer::Events(eventstream::Decoder::new(max_json_bytes)),
            Mode::Whole => Framer::Json {
                buf: Vec::new(),
                cap: max_json_bytes,
            },
        };
        Self {
            framer,
            parser: dialect.stream_parser(),
            failed: None,
            max_frame: max_json_bytes,
            saw_end: false,
            seen: Seen::default(),
            sse_scratch: Vec::new(),
            array_scratch: Vec::new(),
            line_scratch: Vec::new(),
            message_scratch: Vec::new(),
            pending: VecDeque::new(),
            recording: None,
            traced: false,
        }
    }

    /// Keeps what the request's span needs in [`Seen`]: the tool calls'
    /// ids and the usage's token counts.
    pub fn keep_for_trace(&mut self) {
        self.traced = true;
    }

    /// Copies every byte that passes into `copy` (recorded when the tap drops).
    pub fn record_into(&mut self, copy: crate::recording::ResponseCopy) {
        self.recording = Some(copy);
    }

    /// The dialect parser, whose state is that after the last frame handed
    /// out (what loopguard's own events continue from).
    pub fn parser(&self) -> &StreamParser {
        &self.parser
    }

    /// Why the tap stopped parsing, if it did: a short fail-open label
    /// (`response_too_large`, `json_array_invalid`, `response_unparsable`).
    pub fn failure(&self) -> Option<&'static str> {
        self.failed.as_deref().map(|reason| {
            if reason.starts_with("response_too_large") {
                "response_too_large"
            } else if reason.starts_with("response_frame_too_large")
                || reason.starts_with("event stream: message of")
            {
                "response_frame_too_large"
            } else if reason.starts_with("json array") {
                "json_array_invalid"
            } else {
                "response_unparsable"
            }
        })
    }

    /// What the tap saw so far.
    pub fn seen(&self) -> &Seen {
        &self.seen
    }

    /// Feeds the next chunk of the body as received, appending every frame
    /// it completes to `out`. After a failure it yields nothing more.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<Frame>) {
        self.frame_chunk(chunk);
        while let Some(frame) = self.next_frame() {
            out.push(frame);
        }
    }

    /// Frames the next chunk of the body without parsing it: the frames it
    /// completes come out of [`Tap::next_frame`], one at a time, so the
    /// parser's state always matches the last frame handed out.
    pub fn frame_chunk(&mut self, chunk: &[u8]) {
        if let Some(copy) = self.recording.as_mut() {
            copy.feed(chunk);
        }
        if self.failed.is_some() {
            return;
        }
        let mut frame_too_large = false;
        match &mut self.framer {
            Framer::Sse(decoder) => {
                decoder.push(chunk, &mut self.sse_scratch);
                for event in self.sse_scratch.drain(..) {
                    let data = (!event.truncated).then_some(event.data);
                    self.pending.push_back((event.end, data));
                }
            }
            Framer::Array(splitter) => {
                if let Err(e) = splitter.push(chunk, &mut self.array_scratch) {
                    self.failed = Some(format!("json array: {e}"));
                }
                for element in self.array_scratch.drain(..) {
                    self.pending.push_back((element.end, Some(element.text)));
                }
                // One element past the cap is never kept whole, whatever
                // the holder does (it may pass bytes through already).
                if splitter.buffered() > self.max_frame {
                    frame_too_large = true;
                }
            }
            Framer::Lines(splitter) => {
                splitter.push(chunk, &mut self.line_scratch);
                for line in self.line_scratch.drain(..) {
                    self.pending.push_back((line.end, Some(line.text)));
                }
                // One line past the cap is never kept whole (as an array element).
                if splitter.buffered() > self.max_frame {
                    frame_too_large = true;
                }
            }
            Framer::Events(decoder) => {
                // A message past the cap is refused from its prelude (the
                // decoder never buffers it): the body passes unjudged.
                if let Err(e) = decoder.push(chunk, &mut self.message_scratch) {
                    self.failed = Some(e.to_string());
                }
                for message in self.message_scratch.drain(..) {
                    let payload = self.parser.event_payload(&message);
                    self.pending.push_back((message.end, payload));
                }
            }
            Framer::Json { buf, cap } => {
                if buf.len() + chunk.len() > *cap {
                    *buf = Vec::new();
                    self.failed = Some("response_too_large".to_owned());
                } else {
                    buf.extend_from_slice(chunk);
                }
            }
        }
        if frame_too_large {
            self.give_up("response_frame_too_large");
        }
    }

    /// For an event stream whose frames were all handed out: the stream
    /// offset up to which the bytes are comments or blank lines outside any
    /// event (or frames already handed out), which may pass before the next
    /// event is whole. `None` for other framings or after a failure.
    pub fn quiet_end(&self) -> Option<u64> {
        match &self.framer {
            Framer::Sse(decoder) if self.failed.is_none() && self.pending.is_empty() => {
                Some(decoder.quiet_end())
            }
            _ => None,
        }
    }

    /// Stops framing and parsing for good, freeing what the framer buffered
    /// (a partial event, array element or document): from here the body
    /// passes unjudged. `reason` is kept for [`Tap::failure`].
    pub fn give_up(&mut self, reason: &str) {
        self.failed = Some(reason.to_owned());
        self.framer = Framer::Json {
            buf: Vec::new(),
            cap: 0,
        };
        self.pending.clear();
    }

    /// The body is a whole document over its cap: it will not be judged.
    pub fn too_large(&self) -> bool {
        self.failed.as_deref() == Some("response_too_large")
    }

    /// Parses the next framed payload.
    pub fn next_frame(&mut self) -> Option<Frame> {
        let (end, data) = self.pending.pop_front()?;
        Some(match data {
            Some(data) => self.frame(end, &data),
            None => Frame {
                end,
                events: Vec::new(),
            },
        })
    }

    /// Identity fields of the first payload that had any (read by the
    /// dialect's parser, see [`crate::dialect::StreamParser::meta`]).
    pub fn meta(&self) -> Option<&Meta> {
        self.parser.meta()
    }

    fn frame(&mut self, end: u64, data: &str) -> Frame {
        let mut events = Vec::new();
        if data.trim() == "[DONE]" {
            events.push(StreamEvent::Done);
        } else if let Err(e) = self.parser.payload(data, &mut events) {
            tracing::debug!(error = %e, "stream payload not understood");
        }
        self.note(&events);
        Frame { end, events }
    }

    fn note(&mut self, events: &[StreamEvent]) {
        self.seen.events += events.len();
        for event in events {
            match event {
                StreamEvent::TextDelta { text, .. } => self.seen.text_chars += text.chars().count(),
                StreamEvent::ToolCallComplete { call, .. } => {
                    self.seen.tool_calls.push(call.name.clone());
                    if self.traced {
                        self.seen.calls.push(crate::trace::Call {
                            name: call.name.clone(),
                            id: call.id.clone(),
                            at: std::time::SystemTime::now(),
                        });
                    }
                }
                StreamEvent::Usage { usage } if self.traced => {
                    let (input, output) = crate::trace::genai::tokens(usage);
                    self.seen.tokens.0 = input.or(self.seen.tokens.0);
                    self.seen.tokens.1 = output.or(self.seen.tokens.1);
                }
                StreamEvent::Finish { reason, .. } => {
                    self.saw_end = true;
                    self.seen.finish.push(reason.clone());
                }
                StreamEvent::Done | StreamEvent::Error { .. } => self.saw_end = true,
                _ => {}
            }
        }
    }

    /// The body ended (cleanly, as far as the transport could tell) after
    /// `total` bytes: parses what is left, appends a last frame (ending at
    /// `total`) when that produced anything, and says whether the dialect's
    /// end was seen.
    pub fn finish(&mut self, total: u64, out: &mut Vec<Frame>) -> TapEnd {
        while let Some(frame) = self.next_frame() {
            out.push(frame);
        }
        if self.failed.is_some() {
            return TapEnd::Unknown;
        }
        let mut events = Vec::new();
        let problem = match &mut self.framer {
            Framer::Sse(decoder) => match decoder.finish() {
                Some(event) => {
                    let frame = self.frame(total, &event.data);
                    events = frame.events;
                    Some("the last event was not terminated by a blank line".to_owned())
                }
                None => None,
            },
            Framer::Array(splitter) => splitter.finish().err().map(|e| e.to_string()),
            Framer::Events(decoder) => decoder.finish().err().map(|e| e.to_string()),
            // A last line without its newline still counts (Ollama's own
            // client reads it); whether the answer was done says the rest.
            Framer::Lines(splitter) => {
                if let Some(line) = splitter.finish() {
                    events = self.frame(total, &line.text).events;
                }
                None
            }
            Framer::Json { buf, .. } => {
                // Borrowed when the body is valid UTF-8 (a copy only to
                // replace bad bytes); checked by `from_utf8` first, which
                // reads ASCII a word at a time where the lossy reading goes
                // a character at a time.
                let text = std::str::from_utf8(buf)
                    .map_or_else(|_| String::from_utf8_lossy(buf), std::borrow::Cow::Borrowed);
                if let Err(e) = self.parser.payload(&text, &mut events) {
                    self.failed = Some(format!("response body: {e}"));
                    return TapEnd::Unknown;
                }
                // A whole document parsed: the transport vouched for its length.
                self.saw_end = true;
                None
            }
        };
        let mut tail = Vec::new();
        self.parser.end(&mut tail);
        self.note(&tail);
        if matches!(self.framer, Framer::Json { .. }) {
            self.note(&events);
        }
        events.extend(tail);
        if !events.is_empty() || matches!(self.framer, Framer::Json { .. }) {
            out.push(Frame { end: total, events });
        }
        match problem {
            Some(reason) => TapEnd::Truncated(reason),
            None if self.saw_end => TapEnd::Complete,
            None => TapEnd::Truncated("the stream ended before its finish".to_owned()),
        }
    }
}
