//! loopguard's own time on the request path, end to end through the guard:
//! parse a ~1 MB chat history, resolve its session and lane, recognise
//! compaction and run every detector — for a session that already saw the
//! previous request, so the request adds one new tool result (the common
//! case: agents resend their whole history on every turn).

use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http::HeaderMap;
use loopguard::config;
use loopguard::dialect::Dialect;
use loopguard::guard::{Guard, RequestView};
use serde_json::json;

/// An OpenAI chat body with `cycles` distinct tool cycles of ~`result_len` bytes each.
fn history(cycles: usize, result_len: usize) -> Vec<u8> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Refactor the parser module."}),
    ];
    for i in 0..cycles {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("c{i}"), "type": "function",
            "function": {"name": "read_file", "arguments": format!("{{\"path\":\"src/file_{i}.rs\"}}")}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": format!("// file {i}\n{}", "x".repeat(result_len))}));
    }
    json!({"model": "m", "stream": true, "messages": messages,
        "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]})
    .to_string()
    .into_bytes()
}

fn guard_path(c: &mut Criterion) {
    let Ok(loaded) = config::load_str(config::DEFAULT_TOML, "<default>") else {
        return;
    };
    let config = loaded.config;
    let route = config.routes.iter().find(|r| r.prefix == "/v1").cloned();
    let Some(route) = route else { return };
    let mut headers = HeaderMap::new();
    headers.insert("x-loopguard-session", http::HeaderValue::from_static("bench"));
    let mut group = c.benchmark_group("request_path_1mb");
    let previous = Bytes::from(history(199, 5_000));
    let current = Bytes::from(history(200, 5_000));
    group.throughput(Throughput::Bytes(current.len() as u64));

    group.bench_function("parse_only", |b| {
        b.iter(|| {
            Dialect::OpenaiChat
                .parse_request(black_box(&current))
                .map(|p| p.transcript.messages.len())
        })
    });

    // Parses `body` and runs it through the guard: loopguard's own work on a request.
    let judge = |guard: &Guard, body: &Bytes| {
        Dialect::OpenaiChat.parse_request(body).ok().map(|parsed| {
            let view = RequestView {
                route: &route,
                dialect: Dialect::OpenaiChat,
                path: "/v1/chat/completions",
                query: None,
                headers: &headers,
                decoded: body,
                parsed: &parsed,
            };
            guard.on_request(&config, &view).1
        })
    };

    group.bench_function("parse_and_guard_one_new_result", |b| {
        b.iter_batched(
            || {
                // A session that has seen the previous request.
                let guard = Guard::new(&config);
                let _ = judge(&guard, &previous);
                guard
            },
            |guard| black_box(judge(&guard, black_box(&current))),
            criterion::BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, guard_path);
criterion_main!(benches);
