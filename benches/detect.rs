//! Detection-engine benchmarks: verdict cost per tool cycle at history 30 and
//! 1,000, `content_chanting` throughput on 1 MB of text, and the bytes of
//! detector state per session (printed once, from `SessionState::heap_size`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use loopguard::detect::{Channel, ContentScanner, SessionState, Settings};
use loopguard::transcript::{Arguments, Message, ResultContent, Role, ToolCall, ToolResult, Transcript};
use serde_json::json;

fn transcript(cycles: usize) -> Transcript {
    let mut messages = vec![Message::text(Role::User, "Refactor the parser module.")];
    for i in 0..cycles {
        let id = format!("call_{i}");
        let args = Arguments::Json(json!({"path": format!("src/file{}.rs", i % 97), "offset": i}));
        messages.push(Message {
            role: Role::Assistant,
            text: String::new(),
            tool_calls: vec![ToolCall::new(Some(id.clone()), "read_file", args)],
            tool_results: Vec::new(),
            read: Default::default(),
        });
        messages.push(Message {
            role: Role::Tool,
            text: String::new(),
            tool_calls: Vec::new(),
            tool_results: vec![ToolResult {
                call_id: Some(id),
                name: Some("read_file".into()),
                content: ResultContent::Text(
                    format!("{i}: fn item_{i}() {{ /* body of a typical read */ }}\n").repeat(20),
                ),
                is_error: false,
            }],
            read: Default::default(),
        });
    }
    Transcript {
        system: "You are a coding agent.".into(),
        tools: vec!["read_file".into(), "edit_file".into()],
        messages: messages.into(),
        compactions: 0,
        lineage: Default::default(),
    }
}

fn settings(history: usize) -> Settings {
    Settings {
        history_size: history,
        ..Settings::default()
    }
}

fn verdicts(c: &mut Criterion) {
    for history in [30usize, 1000] {
        let s = settings(history);
        let t = transcript(history);
        let mut session = SessionState::new();
        session.on_request(&t, Duration::ZERO, &s);
        eprintln!(
            "memory: history {history}: {} cycles held, ~{} bytes of detector state",
            session.cycles(),
            session.heap_size()
        );
        let call = ToolCall::new(
            Some("p".into()),
            "read_file",
            Arguments::Json(json!({"path": "src/file1.rs", "offset": 1})),
        );
        c.bench_function(&format!("judge_pending/1 call/history {history}"), |b| {
            b.iter(|| {
                black_box(session.judge_pending(std::slice::from_ref(&call), Duration::from_secs(5), &s))
            })
        });
        c.bench_function(&format!("judge_request/history {history}"), |b| {
            b.iter(|| black_box(session.judge_request(&s)))
        });
        let next = transcript(history + 1);
        c.bench_function(&format!("on_request/+1 cycle/history {history}"), |b| {
            b.iter_batched(
                || session.clone(),
                |mut s2| black_box(s2.on_request(&next, Duration::from_secs(10), &s)),
                BatchSize::SmallInput,
            )
        });
    }
}

fn chanting(c: &mut Criterion) {
    let s = Settings::default();
    let mut text = String::with_capacity(1 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let words = [
        "the", "parser", "returns", "a", "token", "stream", "which", "we", "then", "fold", "into", "an",
        "ast", "node", "for", "each",
    ];
    while text.len() < (1 << 20) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.push_str(words[(x % words.len() as u64) as usize]);
        text.push(if x % 11 == 0 { '\n' } else { ' ' });
    }
    let mut group = c.benchmark_group("content_chanting");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.bench_function("1 MB prose in 64-byte deltas", |b| {
        b.iter(|| {
            let mut scanner = ContentScanner::new(&s);
            for chunk in text.as_bytes().chunks(64) {
                if let Ok(delta) = std::str::from_utf8(chunk) {
                    scanner.feed(Channel::Answer(0), delta);
                }
            }
            black_box(scanner.verdict().is_some())
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = verdicts, chanting
}
criterion_main!(benches);
