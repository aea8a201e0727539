//! Incremental SSE decoder that keeps each event's position in the raw stream.
//!
//! The proxy feeds it every chunk read from the upstream as received and gets
//! back whole events, each with its byte range in the stream, so held events
//! can be released or replaced byte-exact. The decoder never keeps the raw
//! bytes of lines it has read: only the current unfinished line and the
//! fields of the current event are buffered.
//!
//! Framing follows the WHATWG event-stream rules: lines end with LF, CRLF or a
//! lone CR; a blank line dispatches the event; lines starting with `:` are
//! comments; `field: value` loses one space after the colon; `id` and `retry`
//! are read and ignored. A leading byte-order mark is not stripped (LLM APIs
//! never send one).

/// Default for [`SseDecoder::with_max_event_bytes`]: 16 MiB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched SSE event.
///
/// The ranges of successive events tile the stream: the first starts at 0 and
/// each starts where the previous ended. Blocks that carried no `data` line
/// (keep-alive comments, stray blank lines) are not dispatched on their own;
/// their bytes belong to the next event that is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// Offset of the event's first byte in the stream: the end of the
    /// previous event, so comment lines and data-less blocks before it are
    /// included.
    pub start: u64,
    /// Offset just past the blank line that ended the event (or the end of
    /// the stream for an event returned by [`SseDecoder::finish`]).
    pub end: u64,
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined by `\n` (invalid UTF-8 replaced by U+FFFD).
    pub data: String,
    /// The event was longer than the decoder's `max_event_bytes`: `data` holds
    /// only its first bytes (up to the cap) and must not be parsed. `start`
    /// and `end` are still exact, so its bytes can be passed through.
    pub truncated: bool,
}

/// What the decoder does with the bytes of a line longer than the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Discard {
    /// Not discarding: the line is buffered whole.
    No,
    /// A `data` line: its value bytes go to the event's data up to the cap.
    Data,
    /// Any other line: its bytes are dropped.
    Other,
}

/// Incremental decoder. Buffer, check, parse: bytes are buffered until a
/// whole line is there; lines are parsed into the current event, which is
/// dispatched at its blank line (LF, CRLF or CR framing).
///
/// Work per pushed byte is constant: the unfinished line is scanned once
/// (resumed where the previous push stopped) and the buffer is compacted once
/// per push. A CR that ends a chunk is held until the next byte shows whether
/// an LF follows, so with lone-CR framing an event is dispatched one chunk
/// late (or by [`SseDecoder::finish`]).
#[derive(Debug)]
pub struct SseDecoder {
    /// The current unfinished line (and possibly a trailing CR awaiting its LF).
    line: Vec<u8>,
    /// How far `line` has been scanned for a terminator.
    scanned: usize,
    /// Stream offset of `line[0]`.
    line_offset: u64,
    /// End of the last dispatched event: the start of the next one.
    event_start: u64,
    /// `event:` field of the current event.
    event: Option<String>,
    /// Data lines of the current event joined by `\n`, at most `max_event_bytes`.
    data: Vec<u8>,
    /// At least one `data` line was seen in the current event.
    has_data: bool,
    /// Data bytes of the current event were dropped at the cap.
    truncated: bool,
    /// The current line went over the cap.
    discard: Discard,
    /// Cap on the data kept per event and on the unfinished line buffered.
    max_event_bytes: usize,
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl SseDecoder {
    /// A decoder at stream offset 0 with [`DEFAULT_MAX_EVENT_BYTES`].
    pub fn new() -> Self {
        Self::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A decoder at stream offset 0 that keeps at most `max` bytes of data
    /// per event and buffers at most about `max` bytes of an unfinished line
    /// (`max` is raised to 64 if lower). An event whose data is longer is
    /// still dispatched at its blank line, with exact offsets, its data cut
    /// after `max` bytes and `truncated` set. The cut does not depend on how
    /// the stream was chunked.
    pub fn with_max_event_bytes(max: usize) -> Self {
        Self {
            line: Vec::new(),
            scanned: 0,
            line_offset: 0,
            event_start: 0,
            event: None,
            data: Vec::new(),
            has_data: false,
            truncated: false,
            discard: Discard::No,
            max_event_bytes: max.max(64),
        }
    }

    /// Feeds a chunk (split anywhere, even inside a UTF-8 sequence), appending
    /// every event it completes to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) {
        self.line.extend_from_slice(chunk);
        let mut pos = 0; // start of the current line within `self.line`
        let mut i = self.scanned; // where the terminator search resumes
        loop {
            let Some(rel) = self.line[i..].iter().position(|&b| b == b'\n' || b == b'\r') else {
                i = self.line.len();
                break;
            };
            let at = i + rel;
            let next = if self.line[at] == b'\r' {
                match self.line.get(at + 1) {
                    Some(b'\n') => at + 2,
                    Some(_) => at + 1,
                    // A CR at the end of what we have: its LF may be in the next chunk.
                    None => {
                        i = at;
                        break;
                    }
                }
            } else {
                at + 1
            };
            self.end_line(pos, at, next, out);
            pos = next;
            i = next;
        }
        self.line.drain(..pos);
        self.line_offset += pos as u64;
        self.scanned = i - pos;
        if self.discard == Discard::No && self.content_len() > self.max_event_bytes {
            self.start_discarding();
        }
        if self.discard != Discard::No {
            self.drop_line_content();
        }
    }

    /// The stream ended: returns a last event that had data but no blank line
    /// after it (its `end` is the end of the stream). Bytes of a trailing
    /// block without data belong to no event. The decoder is left empty at
    /// the same offset, as if a blank line had been read.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let stream_end = self.line_offset + self.line.len() as u64;
        let content_end = self.content_len();
        if self.discard == Discard::No {
            if content_end > 0 {
                let line = std::mem::take(&mut self.line);
                self.field_line(&line[..content_end]);
            }
        } else {
            self.drop_line_content();
        }
        self.line.clear();
        self.scanned = 0;
        self.discard = Discard::No;
        self.line_offset = stream_end;
        let event = self.has_data.then(|| self.take_event(stream_end));
        self.reset_event();
        self.event_start = stream_end;
        event
    }

    /// Bytes received that do not yet belong to a dispatched event: the
    /// current event's lines so far, the unfinished line, and any data-less
    /// blocks before them.
    pub fn pending_len(&self) -> usize {
        let total = self.line_offset + self.line.len() as u64;
        usize::try_from(total - self.event_start).unwrap_or(usize::MAX)
    }

    /// Length of the unfinished line without a trailing CR (which is a terminator).
    fn content_len(&self) -> usize {
        self.line.len() - usize::from(self.line.last() == Some(&b'\r'))
    }

    /// Handles the line `line[pos..at]`, whose terminator ends at `next`.
    fn end_line(&mut self, pos: usize, at: usize, next: usize, out: &mut Vec<SseEvent>) {
        let line = std::mem::take(&mut self.line);
        match self.discard {
            Discard::No if at == pos => {
                if self.has_data {
                    let end = self.line_offset + next as u64;
                    out.push(self.take_event(end));
                    self.event_start = end;
                }
                self.reset_event();
            }
            Discard::No => self.field_line(&line[pos..at]),
            Discard::Data => self.append_data(&line[pos..at]),
            Discard::Other => {}
        }
        self.discard = Discard::No;
        self.line = line;
    }

    /// Parses one non-empty line into the current event.
    fn field_line(&mut self, line: &[u8]) {
        if line.first() == Some(&b':') {
            return;
        }
        let (field, value) = split_field(line);
        match field {
            b"data" => {
                self.begin_data_line();
                self.append_data(value);
            }
            // A line over the cap is dropped whatever the chunking (a chunked
            // one is dropped as it arrives, see `start_discarding`).
            b"event" if line.len() <= self.max_event_bytes => {
                self.event = Some(String::from_utf8_lossy(value).into_owned());
            }
            _ => {}
        }
    }

    /// A new data line starts: joins it to the previous one with `\n`.
    fn begin_data_line(&mut self) {
        if self.has_data {
            self.append_data(b"\n");
        }
        self.has_data = true;
    }

    /// Appends data bytes up to the cap, noting any that do not fit.
    fn append_data(&mut self, bytes: &[u8]) {
        let room = self.max_event_bytes.saturating_sub(self.data.len());
        if bytes.len() > room {
            self.truncated = true;
        }
        self.data.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The unfinished line went over the cap: parses its field now, keeps
    /// what fits of a data value, and drops the rest of the line as it comes.
    fn start_discarding(&mut self) {
        let content_len = self.content_len();
        let line = std::mem::take(&mut self.line);
        let content = &line[..content_len];
        // The cap is at least 64 bytes, so the field name of a data line is complete.
        self.discard = match split_field(content) {
            (b"data", value) if content.first() != Some(&b':') => {
                self.begin_data_line();
                self.append_data(value);
                Discard::Data
            }
            _ => Discard::Other,
        };
        self.line = line;
        // The parsed bytes leave the buffer (not the stream); a trailing CR stays.
        self.line.drain(..content_len);
        self.line_offset += content_len as u64;
        self.scanned = 0;
    }

    /// While discarding: takes the unfinished line's bytes (a data value's go
    /// to the data up to the cap) and keeps only a trailing CR.
    fn drop_line_content(&mut self) {
        let content = self.content_len();
        if self.discard == Discard::Data {
            let line = std::mem::take(&mut self.line);
            self.append_data(&line[..content]);
            self.line = line;
        }
        self.line.drain(..content);
        self.line_offset += content as u64;
        self.scanned = 0;
    }

    fn take_event(&mut self, end: u64) -> SseEvent {
        let data = match String::from_utf8(std::mem::take(&mut self.data)) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        SseEvent {
            start: self.event_start,
            end,
            event: self.event.take(),
            data,
            truncated: self.truncated,
        }
    }

    fn reset_event(&mut self) {
        self.event = None;
        self.data.clear();
        self.has_data = false;
        self.truncated = false;
    }
}

/// Splits a line into field name and value (one leading space removed).
fn split_field(line: &[u8]) -> (&[u8], &[u8]) {
    match line.iter().position(|&b| b == b':') {
        Some(colon) => {
            let value = &line[colon + 1..];
            (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
        }
        None => (line, &[][..]),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Decodes `input` pushed in the given chunk sizes (cycled), then finishes.
    fn decode_chunked(input: &[u8], sizes: &[usize], max: usize) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::with_max_event_bytes(max);
        let mut out = Vec::new();
        let mut rest = input;
        let mut k = 0;
        while !rest.is_empty() {
            let n = sizes
                .get(k % sizes.len().max(1))
                .copied()
                .unwrap_or(rest.len())
                .clamp(1, rest.len());
            decoder.push(&rest[..n], &mut out);
            rest = &rest[n..];
            k += 1;
        }
        out.extend(decoder.finish());
        out
    }

    fn decode(input: &str) -> Vec<SseEvent> {
        decode_chunked(input.as_bytes(), &[], DEFAULT_MAX_EVENT_BYTES)
    }

    fn datas(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    /// LF, CRLF and lone-CR framing all end lines and events.
    #[test]
    fn every_line_ending_frames_events() {
        for sep in ["\n", "\r\n", "\r"] {
            let input = format!("data: a{sep}{sep}data: b{sep}{sep}");
            let events = decode(&input);
            assert_eq!(datas(&events), ["a", "b"], "separator {sep:?}");
            assert_eq!(events[1].end, input.len() as u64);
        }
    }

    /// Mixed terminators in one stream, as a misbehaving server might send.
    #[test]
    fn mixed_line_endings_in_one_stream() {
        let events = decode("data: a\r\ndata: b\n\r\ndata: c\r\r");
        assert_eq!(datas(&events), ["a\nb", "c"]);
    }

    /// Data lines are joined by `\n`; the space after the colon is optional and only one is removed.
    #[test]
    fn data_lines_join_and_lose_one_space() {
        let events = decode("data:x\ndata:  y\ndata\n\n");
        assert_eq!(datas(&events), ["x\n y\n"]);
    }

    /// Comments are skipped and `event`, `id`, `retry` and unknown fields do not leak into data.
    #[test]
    fn comments_and_fields() {
        let events = decode(": keep-alive\nevent: delta\nid: 7\nretry: 10\nfoo: bar\ndata: {}\n\n");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event.as_deref(), Some("delta"));
        assert_eq!(events[0].data, "{}");
        assert_eq!(events[0].start, 0);
    }

    /// A block without data is not dispatched, and its bytes go to the next event's range.
    #[test]
    fn dataless_blocks_are_absorbed_by_the_next_event() {
        let input = ": ping\n\nevent: x\n\n\n\ndata: 1\n\n";
        let events = decode(input);
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].start, events[0].end), (0, input.len() as u64));
        assert_eq!(
            events[0].event, None,
            "the event field of a dropped block does not carry over"
        );
    }

    /// `data:` with an empty value is an event with empty data, unlike a block with no data line.
    #[test]
    fn empty_data_line_is_dispatched() {
        assert_eq!(datas(&decode("data:\n\n")), [""]);
    }

    /// A last event without its blank line comes out of `finish`, ending at the end of the stream.
    #[test]
    fn trailing_event_without_blank_line() {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        decoder.push(b"data: 1\n\ndata: 2", &mut out);
        assert_eq!(datas(&out), ["1"]);
        assert_eq!(decoder.pending_len(), 7);
        let last = decoder.finish();
        assert_eq!(
            last.as_ref().map(|e| (e.start, e.end, e.data.as_str())),
            Some((9, 16, "2"))
        );
        assert_eq!(decoder.finish(), None);
    }

    /// A trailing comment-only block yields nothing at the end.
    #[test]
    fn finish_without_data_yields_nothing() {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        decoder.push(b"data: 1\n\n: bye\n", &mut out);
        assert_eq!(decoder.finish(), None);
        assert_eq!(out.len(), 1);
    }

    /// A CRLF split between two chunks is one terminator, not a CR then an empty LF line.
    #[test]
    fn crlf_split_across_chunks() {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        decoder.push(b"data: a\r", &mut out);
        decoder.push(b"\n\r", &mut out);
        assert!(out.is_empty(), "the blank line's LF may still come");
        decoder.push(b"\ndata: b\r\n\r\n", &mut out);
        assert_eq!(datas(&out), ["a", "b"]);
        assert_eq!((out[0].end, out[1].start), (11, 11));
    }

    /// A multi-byte character split between chunks decodes whole; invalid UTF-8 becomes U+FFFD.
    #[test]
    fn utf8_split_and_invalid_bytes() {
        let input = "data: h\u{e9}llo \u{1f600}\n\n".as_bytes();
        let events = decode_chunked(input, &[1], DEFAULT_MAX_EVENT_BYTES);
        assert_eq!(datas(&events), ["h\u{e9}llo \u{1f600}"]);
        let events = decode_chunked(b"data: a\xffb\n\n", &[2], DEFAULT_MAX_EVENT_BYTES);
        assert_eq!(datas(&events), ["a\u{fffd}b"]);
    }

    /// An event over the cap is dispatched truncated with exact offsets, and the next one is intact.
    #[test]
    fn oversized_event_is_truncated_not_lost() {
        let big = "x".repeat(300);
        let input = format!(": c\ndata: {big}\ndata: tail\n\ndata: ok\n\n");
        for sizes in [vec![], vec![1], vec![7, 64]] {
            let events = decode_chunked(input.as_bytes(), &sizes, 100);
            assert_eq!(events.len(), 2, "chunks {sizes:?}");
            assert!(events[0].truncated);
            assert_eq!(events[0].data, "x".repeat(100));
            assert_eq!(events[0].end, (input.len() - 10) as u64);
            assert!(!events[1].truncated);
            assert_eq!(events[1].data, "ok");
        }
    }

    /// A huge comment line is dropped without growing the buffer.
    #[test]
    fn oversized_comment_is_dropped() {
        let mut decoder = SseDecoder::with_max_event_bytes(64);
        let mut out = Vec::new();
        for _ in 0..100 {
            decoder.push(&[b':'; 50], &mut out);
            assert!(decoder.line.len() <= 128);
        }
        decoder.push(b"\ndata: 1\n\n", &mut out);
        assert_eq!(datas(&out), ["1"]);
        assert!(!out[0].truncated);
        assert_eq!(out[0].end, 5010);
    }

    /// Pieces the property streams are made of: every framing, comments, fields, multi-byte text.
    fn piece() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("\n".to_owned()),
            Just("\r\n".to_owned()),
            Just("\r".to_owned()),
            Just(": c".to_owned()),
            Just("event: e".to_owned()),
            Just("data".to_owned()),
            Just("data:".to_owned()),
            Just("data: ".to_owned()),
            Just("id: 1".to_owned()),
            "[a-z{}\":,é€😀 ]{0,12}",
        ]
    }

    proptest! {
        /// However the stream is chunked, the same events come out, and their ranges tile the stream.
        #[test]
        fn chunking_never_changes_events(
            pieces in proptest::collection::vec(piece(), 0..40),
            sizes in proptest::collection::vec(1usize..20, 1..8),
            max in prop_oneof![Just(64usize), Just(DEFAULT_MAX_EVENT_BYTES)],
        ) {
            let input = pieces.concat();
            let bytes = input.as_bytes();
            let whole = decode_chunked(bytes, &[], max);
            prop_assert_eq!(&decode_chunked(bytes, &sizes, max), &whole);
            prop_assert_eq!(&decode_chunked(bytes, &[1], max), &whole);
            let mut at = 0;
            for event in &whole {
                prop_assert_eq!(event.start, at);
                prop_assert!(event.end > event.start);
                at = event.end;
            }
            prop_assert!(at <= bytes.len() as u64);
            // Whatever is past the last event holds no data line that could have been dispatched.
            let tail = &input[usize::try_from(at).unwrap_or(0)..];
            prop_assert!(decode(tail).is_empty());
        }

        /// `pending_len` plus the dispatched ranges always equals the bytes pushed.
        #[test]
        fn pending_len_accounts_for_every_byte(
            pieces in proptest::collection::vec(piece(), 0..30),
            sizes in proptest::collection::vec(1usize..10, 1..5),
        ) {
            let input = pieces.concat();
            let mut decoder = SseDecoder::new();
            let mut out = Vec::new();
            let mut pushed = 0u64;
            let mut rest = input.as_bytes();
            let mut k = 0;
            while !rest.is_empty() {
                let n = sizes[k % sizes.len()].min(rest.len());
                decoder.push(&rest[..n], &mut out);
                pushed += n as u64;
                rest = &rest[n..];
                k += 1;
                let dispatched = out.last().map_or(0, |e| e.end);
                prop_assert_eq!(dispatched + decoder.pending_len() as u64, pushed);
            }
        }
    }
}
