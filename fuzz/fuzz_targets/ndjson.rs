//! NDJSON line splitter and the Ollama line parser: no panic; every line is
//! its own bytes, in order, ending where its newline does; the same lines
//! in one push or in small chunks; each line parsed as an Ollama answer line
//! (chat and generate) never panics.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use loopguard::dialect::Dialect;
use loopguard::ndjson::{Line, LineSplitter};

fn split(data: &[u8], pieces: &[&[u8]]) -> Vec<Line> {
    let mut splitter = LineSplitter::new();
    let mut lines = Vec::new();
    for piece in pieces {
        splitter.push(piece, &mut lines);
    }
    lines.extend(splitter.finish());
    let mut at = 0;
    for line in &lines {
        assert!(line.end > at && line.end <= data.len() as u64, "{line:?}");
        let before = &data[..line.end as usize];
        let raw = before.strip_suffix(b"\n").unwrap_or(before);
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let own = String::from_utf8_lossy(raw);
        assert!(own.ends_with(&line.text), "a line is its own bytes: {line:?}");
        at = line.end;
    }
    lines
}

fuzz_target!(|input: &[u8]| {
    let [seed, data @ ..] = input else { return };
    let whole = split(data, &[data]);
    let chunked = split(data, &common::chunks(data, *seed));
    assert_eq!(whole, chunked, "chunking changed the split");
    for dialect in [Dialect::OllamaChat, Dialect::OllamaGenerate] {
        let mut parser = dialect.stream_parser();
        let mut out = Vec::new();
        for line in &whole {
            let _ = parser.payload(&line.text, &mut out);
        }
        parser.end(&mut out);
        let _ = dialect.parse_request(data);
    }
});
