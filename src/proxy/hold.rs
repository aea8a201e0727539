//! Holding: decides, event by event, which bytes of a response go to the
//! client now, which wait for a verdict, and what replaces them.
//!
//! Text passes at once (each SSE event or array element as soon as it is
//! whole). From the first event that carries a tool call, that event and
//! every later one are held, in order, until the response's batch of calls
//! is complete (a finish reason, `[DONE]`, an error, answer text after the
//! calls, or the end of the body); the batch is then judged and either
//! released unchanged or replaced from the first held event on. Held bytes
//! are capped: past the cap everything is released unjudged (fail open).
//!
//! This is a pure state machine: it owns no socket and no clock. The driver
//! ([`super::respond`]) feeds it the upstream's chunks and writes what it
//! returns; what replaces withheld bytes is rendered by the dialect ([`crate::dialect::ending`]).

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use super::tap::{Frame, Tap, TapEnd};
use crate::dialect::{Dialect, Kept, Mode, StreamEnding, StreamEvent, StreamParser};
use crate::plan::{Cut, Decision, StreamJudge};
use crate::transcript::ToolCall;

/// What one step of the holder produced.
#[derive(Debug, Default)]
pub struct Output {
    /// Bytes for the client, in order.
    pub release: Vec<Bytes>,
    /// Response headers may go out now (text started, a verdict was reached,
    /// or the body ended).
    pub headers_ready: bool,
    /// A block or abort was decided in this step.
    pub cut: Option<Decision>,
    /// The upstream request should be dropped (a generation was cut, or
    /// aborted): nothing more it sends will be used.
    pub stop_upstream: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Releasing text, holding from the first tool-call event.
    Streaming,
    /// Holding was given up (cap reached): everything passes unjudged.
    Passthrough,
    /// The answer was replaced: only trailing usage / `[DONE]` may pass.
    Blocked,
    /// Nothing more goes to the client.
    Ended,
}

/// The holding state machine for one response.
pub struct Holder {
    tap: Tap,
    dialect: Dialect,
    mode: Mode,
    include_usage: bool,
    max_held: usize,
    /// Largest SSE event or array element judged: a longer one (still
    /// unterminated past this) passes unjudged, unbuffered.
    max_frame: usize,
    state: State,
    /// Bytes received and not yet released, starting at stream offset `buf_start`.
    buf: BytesMut,
    buf_start: u64,
    received: u64,
    /// Start of the held region (the end of the last released frame).
    hold_from: Option<u64>,
    /// Where the first held frame stood in its stream (Responses
    /// `sequence_number` and `output_index`, Anthropic block `index`): the
    /// events replacing the held ones take its place.
    held_at: (Option<u64>, Option<u32>),
    batch: Vec<ToolCall>,
    held_usage: Option<Value>,
    held_done: bool,
    /// Frame end offsets already released up to.
    released_upto: u64,
    /// Held bytes went over the cap (reported once).
    capped: bool,
    /// Answer text already went to the client (an ending then starts on a new paragraph).
    text_released: bool,
    /// The response has more than one choice (`n > 1`).
    several_choices: bool,
    /// Steps over this many bytes run off the async worker
    /// ([`Holder::with_offload_above`]); `usize::MAX`: all inline.
    offload_above: usize,
}

/// A batch of more tool calls than this is judged off the async worker.
const HEAVY_BATCH_CALLS: usize = 1_000;

impl std::fmt::Debug for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holder")
            .field("state", &self.state)
            .field("hold_from", &self.hold_from)
            .field("buffered", &self.buf.len())
            .finish()
    }
}

impl Holder {
    /// A holder for one response. `mode` is how the body is framed for the
    /// client (for the endings loopguard writes); `include_usage` is OpenAI's
    /// `stream_options.include_usage`.
    pub fn new(tap: Tap, dialect: Dialect, mode: Mode, include_usage: bool, max_held: usize) -> Self {
        Self {
            tap,
            dialect,
            mode,
            include_usage,
            max_held,
            max_frame: usize::MAX,
            state: State::Streaming,
            buf: BytesMut::new(),
            buf_start: 0,
            received: 0,
            hold_from: None,
            held_at: (None, None),
            batch: Vec::new(),
            held_usage: None,
            held_done: false,
            released_upto: 0,
            capped: false,
            text_released: false,
            several_choices: false,
            offload_above: usize::MAX,
        }
    }

    /// Runs the heavy steps off the async worker
    /// ([`super::offload::blocking_now`]): a chunk or a whole answer over
    /// `bytes`, and the judgement of a batch of more than a thousand calls
    /// (an answer of 60,000 parallel calls would otherwise stall every
    /// connection of its worker while it is judged).
    #[must_use]
    pub fn with_offload_above(mut self, bytes: usize) -> Self {
        self.offload_above = bytes;
        self
    }

    /// The tap (for the request log and fail-open reasons).
    pub fn tap(&self) -> &Tap {
        &self.tap
    }

    /// Caps one SSE event or array element at `max` bytes (see
    /// [`Holder::push`]); without it a frame may grow without bound.
    #[must_use]
    pub fn with_max_frame(mut self, max: usize) -> Self {
        self.max_frame = max;
        self
    }

    /// Everything passes unjudged from here (a cap was reached).
    pub fn passing_through(&self) -> bool {
        self.state == State::Passthrough
    }

    /// Tool-call events are being held.
    pub fn holding(&self) -> bool {
        self.hold_from.is_some() && self.state == State::Streaming
    }

    /// Held bytes went over `max_held_bytes` and were released unjudged.
    pub fn capped(&self) -> bool {
        self.capped
    }

    /// Bytes a client ignores, to keep an idle connection alive while
    /// holding after the headers went out: an SSE comment line, or
    /// whitespace between JSON array elements. `None` for a whole JSON body.
    pub fn keepalive(&self) -> Option<Bytes> {
        match self.mode {
            Mode::Sse => Some(Bytes::from_static(
                b": loopguard: holding a tool call for review\n\n",
            )),
            Mode::JsonArray => Some(Bytes::from_static(b" ")),
            // NDJSON clients parse every line they get, and a blank one is
            // no JSON: no keep-alive (see README, Ollama).
            Mode::Ndjson | Mode::Whole => None,
            // Bedrock: a message its clients skip (see `event_keepalive`).
            Mode::EventStream => Some(Bytes::from(self.tap.parser().event_keepalive())),
        }
    }

    /// Feeds one chunk from the upstream.
    pub fn push(&mut self, chunk: &[u8], judge: &mut dyn StreamJudge) -> Output {
        if chunk.len() > self.offload_above {
            return super::offload::blocking_now(|| self.push_inline(chunk, judge));
        }
        self.push_inline(chunk, judge)
    }

    fn push_inline(&mut self, chunk: &[u8], judge: &mut dyn StreamJudge) -> Output {
        let mut out = Output::default();
        if self.state == State::Ended {
            return out;
        }
        self.received += chunk.len() as u64;
        self.buf.extend_from_slice(chunk);
        self.tap.frame_chunk(chunk);
        if self.state == State::Passthrough {
            // Still parsed (unless the tap gave up): a truncated stream is
            // still noticed, and calls past the held cap are still judged.
            while let Some(frame) = self.tap.next_frame() {
                self.judge_late(&frame, judge);
            }
            let all = self.take_upto(self.received);
            out.release.extend(all);
            out.headers_ready = true;
            return out;
        }
        // One frame at a time: the parser's state is that of the frame judged.
        while let Some(frame) = self.tap.next_frame() {
            self.on_frame(&frame, judge, &mut out);
            if self.state == State::Ended {
                while self.tap.next_frame().is_some() {}
                break;
            }
        }
        self.check_cap(&mut out);
        self.check_frame_cap(&mut out);
        self.release_quiet(&mut out);
        out
    }

    /// One frame too large to judge (an SSE event without its blank line, a
    /// huge array element, a whole answer over its cap): everything received
    /// passes now and the rest unjudged and unbuffered (fail open, counted).
    fn check_frame_cap(&mut self, out: &mut Output) {
        if self.state != State::Streaming || self.hold_from.is_some() {
            return;
        }
        let unreleased = self.received.saturating_sub(self.buf_start);
        let whole_too_large = self.mode == Mode::Whole && self.tap.too_large();
        if whole_too_large || (self.mode != Mode::Whole && unreleased > self.max_frame as u64) {
            // Counted (as the tap's failure) once, where the response's end is logged.
            if !whole_too_large {
                self.tap.give_up("response_frame_too_large");
            }
            self.state = State::Passthrough;
            out.release.extend(self.take_upto(self.received));
            out.headers_ready = true;
        }
    }

    /// Releases an upstream's comment lines (SSE keep-alives) as they
    /// arrive, unless a tool call is held (loopguard's own keep-alive covers
    /// that).
    fn release_quiet(&mut self, out: &mut Output) {
        if self.state != State::Streaming || self.hold_from.is_some() {
            return;
        }
        if let Some(quiet) = self.tap.quiet_end().filter(|q| *q > self.released_upto) {
            out.release.extend(self.take_upto(quiet));
            self.released_upto = quiet;
        }
    }

    /// The upstream body ended cleanly after everything was pushed.
    pub fn finish(&mut self, judge: &mut dyn StreamJudge) -> (Output, TapEnd) {
        if self.buf.len() > self.offload_above {
            return super::offload::blocking_now(|| self.finish_inline(judge));
        }
        self.finish_inline(judge)
    }

    fn finish_inline(&mut self, judge: &mut dyn StreamJudge) -> (Output, TapEnd) {
        let mut out = Output {
            headers_ready: true,
            ..Output::default()
        };
        if self.state == State::Ended {
            return (out, TapEnd::Complete);
        }
        if self.state == State::Passthrough {
            let rest = self.take_upto(self.received);
            out.release.extend(rest);
            let mut frames = Vec::new();
            let end = self.tap.finish(self.received, &mut frames);
            for frame in &frames {
                self.judge_late(frame, judge);
            }
            self.judge_late_batch(judge);
            return (out, end);
        }
        let mut frames = Vec::new();
        let end = self.tap.finish(self.received, &mut frames);
        for frame in &frames {
            self.on_frame(frame, judge, &mut out);
        }
        if self.hold_from.is_some() && self.state == State::Streaming {
            self.judge_batch(judge, &mut out, self.received);
        }
        match self.state {
            State::Streaming | State::Passthrough => {
                let rest = self.take_upto(self.received);
                out.release.extend(rest);
            }
            State::Blocked | State::Ended => {}
        }
        (out, end)
    }

    /// The upstream broke off: everything received and not yet released
    /// (held events, a partial event), so the client gets all the upstream
    /// sent before its response is aborted. Nothing after a block or abort.
    pub fn flush(&mut self) -> Option<Bytes> {
        match self.state {
            State::Streaming | State::Passthrough => self.take_upto(self.received),
            State::Blocked | State::Ended => None,
        }
    }

    fn on_frame(&mut self, frame: &Frame, judge: &mut dyn StreamJudge, out: &mut Output) {
        match self.state {
            State::Blocked => {
                // After a block only the upstream's trailing usage chunk and
                // `[DONE]` still belong to the answer (OpenAI); Gemini's
                // ending was complete.
                let keep = self.dialect.keeps_trailer_after_block()
                    && !frame.events.is_empty()
                    && frame
                        .events
                        .iter()
                        .all(|e| matches!(e, StreamEvent::Usage { .. } | StreamEvent::Done));
                let bytes = self.take_upto(frame.end);
                if keep {
                    out.release.extend(bytes);
                }
                return;
            }
            State::Ended | State::Passthrough => return,
            State::Streaming => {}
        }
        if frame.events.iter().any(|e| event_choice(e) > 0) {
            self.several_choices = true;
        }
        let carries_call = frame.events.iter().any(|e| {
            matches!(
                e,
                StreamEvent::ToolCallDelta { .. } | StreamEvent::ToolCallComplete { .. }
            )
        });
        let has_text = frame
            .events
            .iter()
            .any(|e| matches!(e, StreamEvent::TextDelta { .. }));
        let ends_batch = frame.events.iter().any(|e| {
            matches!(
                e,
                StreamEvent::Finish { .. } | StreamEvent::Done | StreamEvent::Error { .. }
            )
        });

        // Content detectors see every piece of text as it passes.
        for event in &frame.events {
            if let Decision::Block(cut) | Decision::Abort(cut) = judge.event(event) {
                self.cut_generation(cut, out);
                return;
            }
        }

        if self.hold_from.is_none() && carries_call {
            self.hold_from = Some(self.released_upto);
            self.held_at = self.tap.parser().anchor();
        }
        if self.hold_from.is_some() {
            for event in &frame.events {
                match event {
                    StreamEvent::ToolCallComplete { call, .. } => self.batch.push(call.clone()),
                    StreamEvent::Usage { usage } => self.held_usage = Some(usage.clone()),
                    StreamEvent::Done => self.held_done = true,
                    _ => {}
                }
            }
            let text_after_calls = has_text && !carries_call;
            if ends_batch || text_after_calls {
                self.judge_batch(judge, out, frame.end);
            }
        } else {
            let bytes = self.take_upto(frame.end);
            out.release.extend(bytes);
            self.released_upto = frame.end;
            if has_text {
                out.headers_ready = true;
                self.text_released = true;
            }
        }
    }

    /// Past the held cap the bytes already went out, but the calls are still
    /// judged from their assembled arguments when their batch ends: the
    /// verdict is recorded and acts on the next request.
    fn judge_late(&mut self, frame: &Frame, judge: &mut dyn StreamJudge) {
        if !self.capped {
            return;
        }
        for event in &frame.events {
            match event {
                StreamEvent::ToolCallComplete { call, .. } => self.batch.push(call.clone()),
                StreamEvent::Finish { .. } | StreamEvent::Done | StreamEvent::Error { .. } => {
                    self.judge_late_batch(judge);
                }
                _ => {}
            }
        }
    }

    fn judge_late_batch(&mut self, judge: &mut dyn StreamJudge) {
        if !self.batch.is_empty() {
            let _ = self.judge_calls(judge);
            self.batch.clear();
        }
    }

    /// The judge's decision on the batch, off the async worker when the
    /// batch is large (see [`Holder::with_offload_above`]).
    fn judge_calls(&self, judge: &mut dyn StreamJudge) -> Decision {
        if self.batch.len() > HEAVY_BATCH_CALLS && self.offload_above != usize::MAX {
            return super::offload::blocking_now(|| judge.calls(&self.batch));
        }
        judge.calls(&self.batch)
    }

    /// Judges the held batch and releases or replaces the held region, which
    /// ends at `upto`.
    fn judge_batch(&mut self, judge: &mut dyn StreamJudge, out: &mut Output, upto: u64) {
        out.headers_ready = true;
        let mut decision = if self.batch.is_empty() {
            Decision::Pass
        } else {
            self.judge_calls(judge)
        };
        if self.several_choices && matches!(decision, Decision::Block(_)) {
            // Endings replace one choice; with several choices interleaved the
            // others' held events would be lost. Pass them unjudged instead
            // (the warning still rides on the next request).
            tracing::warn!("block with several choices (n > 1): released unjudged");
            crate::telemetry::fail_open("block_with_several_choices");
            decision = Decision::Pass;
        }
        match decision {
            Decision::Pass => {
                let bytes = self.take_upto(upto);
                out.release.extend(bytes);
                self.released_upto = upto;
            }
            Decision::Block(cut) => {
                // The ending is made before the drop: it depends on what was released.
                let ending = self.render(|p, k| p.block_ending(k, &cut.message));
                self.drop_upto(upto);
                out.release.push(Bytes::from(ending));
                self.state = State::Blocked;
                out.cut = Some(Decision::Block(cut));
            }
            Decision::Abort(cut) => {
                let error = self.render(|p, k| p.error_ending(k, &cut.message));
                self.drop_upto(upto);
                out.release.push(Bytes::from(error));
                self.state = State::Ended;
                out.stop_upstream = true;
                out.cut = Some(Decision::Abort(cut));
            }
        }
        self.hold_from = None;
        self.batch.clear();
        self.held_usage = None;
        self.held_done = false;
    }

    /// Cuts the generation (content detectors): what is unreleased is
    /// dropped, the answer ends cleanly with the note, the upstream is dropped.
    fn cut_generation(&mut self, cut: Cut, out: &mut Output) {
        let ending = self.render(|p, k| p.cut_ending(k, &cut.message));
        let everything = self.received;
        self.drop_upto(everything);
        out.release.push(Bytes::from(ending));
        out.headers_ready = true;
        out.stop_upstream = true;
        out.cut = Some(Decision::Block(cut));
        self.state = State::Ended;
    }

    /// Renders an ending (see [`crate::dialect::ending`]) from what
    /// loopguard's own events must continue from, as of now.
    fn render(&self, with: impl FnOnce(&StreamParser, &Kept<'_>) -> Vec<u8>) -> Vec<u8> {
        let meta = self.tap.meta().cloned().unwrap_or_default();
        let identity = StreamEnding {
            id: meta.id,
            model: meta.model.or(meta.model_version),
            created: meta.created,
            choice: 0,
        };
        let kept = Kept {
            identity: &identity,
            mode: self.mode,
            include_usage: self.include_usage,
            held_at: self.hold_from.map(|_| self.held_at),
            held_usage: self.held_usage.as_ref(),
            held_done: self.held_done,
            text_released: self.text_released,
            first_element: self.released_upto == 0,
            whole_body: (self.mode == Mode::Whole).then_some(&self.buf[..]),
            drop_text: false,
        };
        with(self.tap.parser(), &kept)
    }

    fn check_cap(&mut self, out: &mut Output) {
        if let Some(from) = self.hold_from {
            let held = self.received.saturating_sub(from);
            if held > self.max_held as u64 && self.state == State::Streaming {
                crate::telemetry::fail_open("held_bytes_cap");
                self.capped = true;
                self.state = State::Passthrough;
                self.hold_from = None;
                let all = self.take_upto(self.received);
                out.release.extend(all);
                out.headers_ready = true;
            }
        }
    }

    /// Removes and returns the buffered bytes before stream offset `upto`.
    fn take_upto(&mut self, upto: u64) -> Option<Bytes> {
        let n = usize::try_from(upto.saturating_sub(self.buf_start))
            .unwrap_or(usize::MAX)
            .min(self.buf.len());
        if n == 0 {
            return None;
        }
        self.buf_start += n as u64;
        Some(self.buf.split_to(n).freeze())
    }

    fn drop_upto(&mut self, upto: u64) {
        let _ = self.take_upto(upto);
        self.released_upto = self.released_upto.max(upto);
    }
}

/// The choice an event belongs to (0 for events of the whole response).
fn event_choice(event: &StreamEvent) -> u32 {
    match event {
        StreamEvent::TextDelta { choice, .. }
        | StreamEvent::ReasoningDelta { choice, .. }
        | StreamEvent::ToolCallDelta { choice, .. }
        | StreamEvent::ToolCallComplete { choice, .. }
        | StreamEvent::Finish { choice, .. } => *choice,
        _ => 0,
    }
}

#[cfg(test)]
#[path = "hold_tests.rs"]
mod tests;
