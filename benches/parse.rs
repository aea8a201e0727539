//! Parsing throughput: SSE decode + dialect parse on the largest recorded
//! stream of each dialect (fed in 4 KiB chunks, as a socket would), and
//! request parsing of a synthetic ~1 MB chat history.
//!
//! Fixtures are read in place from `$LOOPGUARD_FIXTURES` (default
//! `../shared/fixtures` beside the crate).

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loopguard::dialect::Dialect;
use loopguard::sse::SseDecoder;
use serde_json::json;

const CHUNK: usize = 4096;

fn fixture(relative: &str) -> Vec<u8> {
    let dir = std::env::var_os("LOOPGUARD_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"),
        PathBuf::from,
    );
    let path = dir.join(relative);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e} (set LOOPGUARD_FIXTURES to the shared fixtures directory)",
            path.display()
        )
    })
}

/// Decodes and parses a whole stream; returns the number of events, so nothing is optimised away.
fn decode_and_parse(dialect: Dialect, bytes: &[u8]) -> usize {
    let mut decoder = SseDecoder::new();
    let mut parser = dialect.stream_parser();
    let mut sse = Vec::new();
    let mut events = Vec::new();
    for chunk in bytes.chunks(CHUNK) {
        decoder.push(chunk, &mut sse);
        for event in sse.drain(..) {
            // Fixtures are well-formed; an error would only lower the measured work.
            let _ = parser.payload(&event.data, &mut events);
        }
    }
    if let Some(event) = decoder.finish() {
        let _ = parser.payload(&event.data, &mut events);
    }
    parser.end(&mut events);
    events.len()
}

fn streams(c: &mut Criterion) {
    let mut group = c.benchmark_group("sse_decode_and_parse");
    for (dialect, file) in [
        (Dialect::OpenaiChat, "openai-chat/gpt41nano-long-markdown.sse"),
        (Dialect::Gemini, "gemini/streamed-nested-args-long.sse"),
        (Dialect::OpenaiResponses, "openai-responses/compaction.sse"),
        (Dialect::Anthropic, "anthropic/compaction.sse"),
    ] {
        let bytes = fixture(file);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(file, |b| b.iter(|| decode_and_parse(dialect, black_box(&bytes))));
    }
    group.finish();

    let mut group = c.benchmark_group("sse_decode_only");
    let bytes = fixture("openai-chat/gpt41nano-long-markdown.sse");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("openai-chat/gpt41nano-long-markdown.sse", |b| {
        b.iter(|| {
            let mut decoder = SseDecoder::new();
            let mut sse = Vec::new();
            for chunk in black_box(&bytes).chunks(CHUNK) {
                decoder.push(chunk, &mut sse);
            }
            sse.len()
        })
    });
    group.finish();
}

/// An agent history of about `target` bytes: user prompt, then rounds of
/// assistant tool calls and tool results carrying file-sized text.
fn synthetic_history(target: usize) -> Vec<u8> {
    let file_text = "fn main() {\n    println!(\"hello\");\n}\n".repeat(60);
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Fix the failing test."}),
    ];
    let mut round = 0;
    while serde_json::to_vec(&messages).map_or(0, |v| v.len()) < target {
        let id = format!("call_{round}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": id, "type": "function",
            "function": {"name": "read_file", "arguments": json!({"path": format!("src/m{round}.rs")}).to_string()}
        }]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": file_text}));
        round += 1;
    }
    let tools: Vec<_> = ["read_file", "write_file", "run"]
        .iter()
        .map(|name| json!({"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}))
        .collect();
    json!({"model": "gpt-4o", "stream": true, "messages": messages, "tools": tools})
        .to_string()
        .into_bytes()
}

fn requests(c: &mut Criterion) {
    let body = synthetic_history(1_000_000);
    let mut group = c.benchmark_group("request_parse");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("openai-chat/synthetic-1MB-history", |b| {
        b.iter(|| {
            Dialect::OpenaiChat
                .parse_request(black_box(&body))
                .map(|r| r.transcript.messages.len())
        })
    });
    group.finish();
}

criterion_group!(benches, streams, requests);
criterion_main!(benches);
