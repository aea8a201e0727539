//! Every recorded stream of every dialect (`openai-chat`, `gemini`,
//! `openai-responses`, `anthropic`), decoded and parsed whole,
//! in random chunks and one byte at a time: the events must be identical, and
//! the assembled summary (text, reasoning, tool calls, finish, usage) is
//! snapshotted. Gemini streams are also re-served as a streamed JSON array.
//!
//! The fixtures are read in place from `$LOOPGUARD_FIXTURES` (default
//! `../shared/fixtures` beside the crate).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use loopguard::dialect::{Dialect, StreamEvent};
use loopguard::json_array::ArraySplitter;
use loopguard::sse::{SseDecoder, SseEvent};
use loopguard::transcript::Arguments;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

fn fixtures_dir() -> PathBuf {
    let dir = std::env::var_os("LOOPGUARD_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"),
        PathBuf::from,
    );
    assert!(
        dir.is_dir(),
        "fixtures directory {} not found: set LOOPGUARD_FIXTURES to the shared fixtures directory",
        dir.display()
    );
    dir
}

/// The `*.sse` files of one dialect, sorted by name.
fn sse_files(dialect: Dialect) -> Vec<PathBuf> {
    let dir = fixtures_dir().join(dialect.name());
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|entry| {
            entry
                .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
                .path()
        })
        .filter(|path| path.extension().is_some_and(|ext| ext == "sse"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .sse fixtures in {}", dir.display());
    files
}

/// What one run produced: the SSE events, the stream events, and payloads that failed to parse.
#[derive(Debug, PartialEq)]
struct Run {
    sse: Vec<SseEvent>,
    events: Vec<StreamEvent>,
    parse_errors: Vec<String>,
}

/// Decodes and parses `bytes` fed in chunks of the given sizes.
fn run(dialect: Dialect, bytes: &[u8], sizes: impl Iterator<Item = usize>) -> Run {
    let mut decoder = SseDecoder::new();
    let mut sse = Vec::new();
    let mut rest = bytes;
    for size in sizes {
        if rest.is_empty() {
            break;
        }
        let n = size.clamp(1, rest.len());
        decoder.push(&rest[..n], &mut sse);
        rest = &rest[n..];
    }
    assert!(rest.is_empty(), "the chunk sizes ran out");
    sse.extend(decoder.finish());
    let (events, parse_errors) = parse_payloads(dialect, sse.iter().map(|e| e.data.as_str()));
    Run {
        sse,
        events,
        parse_errors,
    }
}

fn parse_payloads<'a>(
    dialect: Dialect,
    payloads: impl Iterator<Item = &'a str>,
) -> (Vec<StreamEvent>, Vec<String>) {
    let mut parser = dialect.stream_parser();
    let mut events = Vec::new();
    let mut errors = Vec::new();
    for payload in payloads {
        if let Err(e) = parser.payload(payload, &mut events) {
            errors.push(e.to_string());
        }
    }
    parser.end(&mut events);
    (events, errors)
}

fn random_sizes(seed: u64, max: usize) -> impl Iterator<Item = usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    std::iter::repeat_with(move || rng.random_range(1..=max))
}

/// One assembled tool call.
#[derive(serde::Serialize)]
struct CallSummary {
    index: u32,
    id: Option<String>,
    name: String,
    arguments: Value,
}

/// One choice / candidate, assembled.
#[derive(Default, serde::Serialize)]
struct ChoiceSummary {
    text: String,
    reasoning: String,
    tool_calls: Vec<CallSummary>,
    /// Argument deltas seen per call position (how many payloads carried each call).
    tool_call_deltas: BTreeMap<u32, usize>,
    finish: Vec<String>,
}

/// What a response said, assembled from its events.
#[derive(serde::Serialize)]
struct Summary {
    sse_events: usize,
    choices: BTreeMap<u32, ChoiceSummary>,
    last_usage: Option<Value>,
    usage_events: usize,
    done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_id: Option<String>,
    errors: Vec<String>,
    parse_errors: Vec<String>,
}

fn summarize(run: &Run) -> Summary {
    let mut summary = Summary {
        sse_events: run.sse.len(),
        choices: BTreeMap::new(),
        last_usage: None,
        usage_events: 0,
        done: false,
        response_id: None,
        errors: Vec::new(),
        parse_errors: run.parse_errors.clone(),
    };
    for event in &run.events {
        match event {
            StreamEvent::TextDelta { choice, text } => {
                summary.choices.entry(*choice).or_default().text.push_str(text);
            }
            StreamEvent::ReasoningDelta { choice, text } => {
                summary
                    .choices
                    .entry(*choice)
                    .or_default()
                    .reasoning
                    .push_str(text);
            }
            StreamEvent::ToolCallDelta { choice, index, .. } => {
                *summary
                    .choices
                    .entry(*choice)
                    .or_default()
                    .tool_call_deltas
                    .entry(*index)
                    .or_default() += 1;
            }
            StreamEvent::ToolCallComplete { choice, index, call } => {
                let arguments = match &call.arguments {
                    Arguments::Json(value) => value.clone(),
                    Arguments::Unparsable(text) => serde_json::json!({ "unparsable": text }),
                };
                summary
                    .choices
                    .entry(*choice)
                    .or_default()
                    .tool_calls
                    .push(CallSummary {
                        index: *index,
                        id: call.id.clone(),
                        name: call.name.clone(),
                        arguments,
                    });
            }
            StreamEvent::Finish { choice, reason } => {
                summary
                    .choices
                    .entry(*choice)
                    .or_default()
                    .finish
                    .push(reason.clone());
            }
            StreamEvent::Usage { usage } => {
                summary.last_usage = Some(usage.clone());
                summary.usage_events += 1;
            }
            StreamEvent::Error { message } => summary.errors.push(message.clone()),
            StreamEvent::Done => summary.done = true,
            StreamEvent::ResponseId { id } => summary.response_id = Some(id.clone()),
        }
    }
    summary
}

/// The SSE events tile the file: each starts where the previous ended, the last ends at the end.
fn assert_tiles(name: &str, sse: &[SseEvent], len: usize) {
    let mut at = 0;
    for event in sse {
        assert_eq!(event.start, at, "{name}: gap or overlap before an event");
        at = event.end;
    }
    assert_eq!(at, len as u64, "{name}: bytes after the last event");
}

fn check_dialect(dialect: Dialect) -> Vec<(String, Run)> {
    let mut runs = Vec::new();
    for (k, path) in sse_files(dialect).into_iter().enumerate() {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let whole = run(dialect, &bytes, std::iter::once(bytes.len()));
        assert_tiles(&name, &whole.sse, bytes.len());
        assert!(whole.parse_errors.is_empty(), "{name}: {:?}", whole.parse_errors);
        for seed in 0..4u64 {
            let chunked = run(dialect, &bytes, random_sizes(seed * 1000 + k as u64, 97));
            assert_eq!(
                chunked, whole,
                "{name}: random chunks (seed {seed}) changed the events"
            );
        }
        let bytewise = run(dialect, &bytes, std::iter::repeat(1));
        assert_eq!(bytewise, whole, "{name}: one byte per chunk changed the events");
        insta::assert_json_snapshot!(format!("{}__{name}", dialect.name()), summarize(&whole));
        runs.push((name, whole));
    }
    runs
}

/// openai-chat fixtures: chunking never changes the events; summaries match the snapshots.
#[test]
fn openai_chat_fixtures_parse_the_same_whatever_the_chunking() {
    check_dialect(Dialect::OpenaiChat);
}

/// gemini fixtures: the same, and re-served as a streamed JSON array they give the same events.
#[test]
fn gemini_fixtures_parse_the_same_whatever_the_chunking_or_framing() {
    for (k, (name, sse_run)) in check_dialect(Dialect::Gemini).into_iter().enumerate() {
        let payloads: Vec<&str> = sse_run.sse.iter().map(|e| e.data.as_str()).collect();
        let array = format!("[{}]", payloads.join(",\r\n"));
        for seed in 0..3u64 {
            let mut splitter = ArraySplitter::new();
            let mut elements = Vec::new();
            let mut rest = array.as_bytes();
            let mut sizes = random_sizes(seed * 7919 + k as u64, 61);
            while !rest.is_empty() {
                let n = sizes.next().unwrap_or(1).min(rest.len());
                splitter
                    .push(&rest[..n], &mut elements)
                    .unwrap_or_else(|e| panic!("{name}: splitting: {e}"));
                rest = &rest[n..];
            }
            splitter
                .finish()
                .unwrap_or_else(|e| panic!("{name}: finishing: {e}"));
            assert_eq!(elements.len(), payloads.len(), "{name}: element count");
            let (events, errors) = parse_payloads(Dialect::Gemini, elements.iter().map(|e| e.text.as_str()));
            assert!(errors.is_empty(), "{name}: {errors:?}");
            assert_eq!(
                events, sse_run.events,
                "{name}: JSON-array framing changed the events"
            );
        }
    }
}

/// Named-event dialects: each event's `event:` line names the payload's `type`.
fn assert_named(runs: &[(String, Run)]) {
    for (name, run) in runs {
        for event in &run.sse {
            let payload: Value = serde_json::from_str(&event.data).unwrap_or_default();
            assert_eq!(
                event.event.as_deref(),
                payload["type"].as_str(),
                "{name}: event name and payload type differ"
            );
        }
    }
}

/// openai-responses fixtures (single responses and the successive responses
/// of multi-step runs): chunking never changes the events; summaries match
/// the snapshots.
#[test]
fn openai_responses_fixtures_parse_the_same_whatever_the_chunking() {
    let runs = check_dialect(Dialect::OpenaiResponses);
    assert_named(&runs);
    let with_calls = runs
        .iter()
        .filter(|(_, run)| {
            run.events
                .iter()
                .any(|e| matches!(e, StreamEvent::ToolCallComplete { .. }))
        })
        .count();
    assert!(
        with_calls >= 5,
        "client calls found in only {with_calls} fixtures"
    );
}

/// anthropic fixtures: the same.
#[test]
fn anthropic_fixtures_parse_the_same_whatever_the_chunking() {
    let runs = check_dialect(Dialect::Anthropic);
    assert_named(&runs);
    for (name, run) in &runs {
        assert!(
            run.events.contains(&StreamEvent::Done),
            "{name}: message_stop is the end"
        );
    }
}
