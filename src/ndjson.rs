//! Newline-delimited JSON framing (Ollama's streamed answers): buffer,
//! check, parse. Bytes are buffered until a `\n` ends a line; each
//! non-blank line is one payload, with the stream offset just past its
//! newline. A line split across chunks waits for its end; how long a line
//! may grow is the caller's cap ([`LineSplitter::buffered`]).

/// One complete line of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Stream offset just past the line's `\n` (or its last byte at the end).
    pub end: u64,
    /// The line without its `\r\n` / `\n`.
    pub text: String,
}

/// Splits a byte stream into lines, incrementally.
#[derive(Debug, Default)]
pub struct LineSplitter {
    buf: Vec<u8>,
    /// Stream offset of `buf[0]`.
    start: u64,
    /// Bytes of `buf` already searched for a newline.
    scanned: usize,
}

impl LineSplitter {
    /// A splitter at stream offset 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next chunk, appending every non-blank line it completes.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<Line>) {
        self.buf.extend_from_slice(chunk);
        let mut from = 0;
        while let Some(at) = self.buf[from.max(self.scanned)..]
            .iter()
            .position(|b| *b == b'\n')
        {
            let nl = from.max(self.scanned) + at;
            let line = trim_cr(&self.buf[from..nl]);
            if !line.iter().all(u8::is_ascii_whitespace) {
                out.push(Line {
                    end: self.start + nl as u64 + 1,
                    text: String::from_utf8_lossy(line).into_owned(),
                });
            }
            from = nl + 1;
            self.scanned = from;
        }
        if from > 0 {
            self.buf.drain(..from);
            self.start += from as u64;
        }
        self.scanned = self.buf.len();
    }

    /// Bytes of the unfinished line kept.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The body ended: the last line when it had no newline (`None` when
    /// nothing but whitespace was left).
    pub fn finish(&mut self) -> Option<Line> {
        let rest = std::mem::take(&mut self.buf);
        let end = self.start + rest.len() as u64;
        self.start = end;
        self.scanned = 0;
        let line = trim_cr(&rest);
        (!line.iter().all(u8::is_ascii_whitespace)).then(|| Line {
            end,
            text: String::from_utf8_lossy(line).into_owned(),
        })
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> (Vec<Line>, Option<Line>) {
        let mut s = LineSplitter::new();
        let mut out = Vec::new();
        for c in chunks {
            s.push(c, &mut out);
        }
        let last = s.finish();
        (out, last)
    }

    #[test]
    fn lines_come_out_with_their_end_offsets() {
        let (lines, last) = split(&[b"{\"a\":1}\n{\"b\":2}\r\n"]);
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].end, lines[0].text.as_str()), (8, "{\"a\":1}"));
        assert_eq!((lines[1].end, lines[1].text.as_str()), (17, "{\"b\":2}"));
        assert_eq!(last, None);
    }

    #[test]
    fn a_line_split_across_chunks_waits_for_its_newline() {
        let body = b"{\"message\":{\"content\":\"h\xc3\xa9\"}}\n{\"done\":true}\n";
        for cut in 0..body.len() {
            let (lines, last) = split(&[&body[..cut], &body[cut..]]);
            assert_eq!(lines.len(), 2, "cut at {cut}");
            assert_eq!(lines[0].text, "{\"message\":{\"content\":\"hé\"}}");
            assert_eq!(lines[1].end, body.len() as u64);
            assert_eq!(last, None);
        }
    }

    #[test]
    fn blank_lines_are_skipped_and_a_last_line_without_newline_is_kept() {
        let (lines, last) = split(&[b"\n  \n{}\n", b"{\"done\":true}"]);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].end, 7);
        assert_eq!(
            last,
            Some(Line {
                end: 20,
                text: "{\"done\":true}".to_owned()
            })
        );
    }

    #[test]
    fn buffered_counts_the_unfinished_line_only() {
        let mut s = LineSplitter::new();
        let mut out = Vec::new();
        s.push(b"{}\n{\"x\":", &mut out);
        assert_eq!(s.buffered(), 5);
    }
}
