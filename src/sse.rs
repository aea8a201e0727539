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
    /// The current event has a line other than a comment.
    has_field: bool,
    /// End of the last line read outside any event (a comment or blank line
    /// before the next event's first field), or of the last dispatched event.
    quiet_end: u64,
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
            has_field: false,
            quiet_end: 0,
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
        self.quiet_end = stream_end;
        event
    }

    /// Bytes received that do not yet belong to a dispatched event: the
    /// current event's lines so far, the unfinished line, and any data-less
    /// blocks before them.
    pub fn pending_len(&self) -> usize {
        let total = self.line_offset + self.line.len() as u64;
        usize::try_from(total - self.event_start).unwrap_or(usize::MAX)
    }

    /// Stream offset up to which every byte belongs to a dispatched event or
    /// is a comment or blank line outside any event (an upstream's `: ping`
    /// keep-alive): what can go to the client before the next event is whole.
    pub fn quiet_end(&self) -> u64 {
        self.quiet_end.max(self.event_start)
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
            Discard::Other => self.has_field = true,
        }
        if !self.has_field && self.event.is_none() && !self.has_data {
            self.quiet_end = self.line_offset + next as u64;
        }
        self.discard = Discard::No;
        self.line = line;
    }

    /// Parses one non-empty line into the current event.
    fn field_line(&mut self, line: &[u8]) {
        if line.first() == Some(&b':') {
            return;
        }
        self.has_field = true;
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
        self.has_field = false;
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
#[path = "sse_tests.rs"]
mod tests;
