//! loopguard's own time on the request path, end to end through the guard:
//! parse a ~1 MB chat history, resolve its session and lane, recognise
//! compaction and run every detector — for a session that already saw the
//! previous request, so the request adds one new tool result (the common
//! case: agents resend their whole history on every turn).
//!
//! `before_*` is the full parse of every request ([`Dialect::parse_request`]),
//! `after_*` the hash-chain parse the proxy uses ([`Guard::parse_request`]:
//! split + hash every item, parse only the new ones), in the same run.
//! `split_and_hash` is the part of the chain parse that still reads every
//! byte. `plain` histories carry `x` runs (no escapes); `code` histories
//! carry this crate's source text (newlines, quotes, backslashes), which is
//! slower to scan.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use http::HeaderMap;
use loopguard::config;
use loopguard::dialect::Dialect;
use loopguard::guard::{Guard, RequestView};
use loopguard::session::chain::{ChainStore, chain_hashes};
use serde_json::json;

/// The binary's allocator, so that allocation costs are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Source text to fill `code` tool results with.
const SOURCE: &str = include_str!("../src/dialect/openai_chat/parse.rs");

/// An OpenAI chat body with `cycles` distinct tool cycles of ~`result_len` bytes each.
fn history(cycles: usize, result_len: usize, code: bool) -> Vec<u8> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Refactor the parser module."}),
    ];
    for i in 0..cycles {
        let body = if code {
            let start = (i * 997) % (SOURCE.len() - result_len);
            let start = (start..).find(|&s| SOURCE.is_char_boundary(s)).unwrap_or(0);
            let end = (start + result_len..)
                .find(|&e| SOURCE.is_char_boundary(e))
                .unwrap_or(start);
            SOURCE[start..end].to_owned()
        } else {
            "x".repeat(result_len)
        };
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("c{i}"), "type": "function",
            "function": {"name": "read_file", "arguments": format!("{{\"path\":\"src/file_{i}.rs\"}}")}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": format!("// file {i}\n{body}")}));
    }
    json!({"model": "m", "stream": true, "messages": messages,
        "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]})
    .to_string()
    .into_bytes()
}

/// The same history as an OpenAI Responses body (Codex's shape): the items
/// of [`history`]'s messages, calls and outputs as `input` items.
fn responses_history(cycles: usize, result_len: usize, code: bool) -> Vec<u8> {
    let chat: serde_json::Value =
        serde_json::from_slice(&history(cycles, result_len, code)).unwrap_or_default();
    let mut input = Vec::new();
    for message in chat["messages"].as_array().into_iter().flatten() {
        match message["role"].as_str() {
            Some("assistant") => {
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    input.push(json!({"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"]}));
                }
            }
            Some("tool") => input.push(
                json!({"type": "function_call_output", "call_id": message["tool_call_id"],
                "output": message["content"]}),
            ),
            Some(role) => input.push(json!({"type": "message", "role": role, "content": message["content"]})),
            None => {}
        }
    }
    json!({"model": "m", "stream": true, "store": false, "input": input,
        "tools": [{"type": "function", "name": "read_file"}]})
    .to_string()
    .into_bytes()
}

/// The guard's view of `body`, a parsed chat completion sent to `route`'s
/// `/v1/chat/completions` with `headers`, as the proxy builds it.
fn chat_view<'a>(
    route: &'a config::Route,
    headers: &'a HeaderMap,
    tenant: &'a str,
    body: &'a Bytes,
    parsed: &'a loopguard::dialect::ParsedRequest,
    budget: Option<&'a loopguard::budget::Reservation>,
) -> RequestView<'a> {
    RequestView {
        route,
        dialect: Dialect::OpenaiChat,
        path: "/v1/chat/completions",
        query: None,
        headers,
        tenant,
        decoded: body,
        parsed,
        budget,
        resolved: None,
        trace: None,
    }
}

/// The default configuration and its `/v1` route (OpenAI), as the
/// proxy's benches judge requests under; `None` if the default stops
/// loading (the benches then measure nothing rather than panic).
fn default_v1() -> Option<(config::Config, config::Route)> {
    let config = config::load_str(config::DEFAULT_TOML, "<default>").ok()?.config;
    let route = config.routes.iter().find(|r| r.prefix == "/v1").cloned()?;
    Some((config, route))
}

fn parse_paths(c: &mut Criterion) {
    type Body = fn(usize, usize, bool) -> Vec<u8>;
    for (name, code, dialect, body) in [
        ("plain", false, Dialect::OpenaiChat, history as Body),
        ("code", true, Dialect::OpenaiChat, history as Body),
        (
            "responses_code",
            true,
            Dialect::OpenaiResponses,
            responses_history as Body,
        ),
    ] {
        let previous = body(199, 5_000, code);
        let current = body(200, 5_000, code);
        let mut group = c.benchmark_group(format!("parse_1mb_{name}"));
        group.throughput(Throughput::Bytes(current.len() as u64));
        group.bench_function("split_and_hash", |b| {
            b.iter(|| {
                let split = dialect.split_request(black_box(&current));
                split
                    .and_then(Result::ok)
                    .map(|s| chain_hashes(1, 2, &s.items).len())
            })
        });
        group.bench_function("before_full_parse", |b| {
            b.iter(|| {
                dialect
                    .parse_request(black_box(&current))
                    .map(|p| p.transcript.messages.len())
            })
        });
        group.bench_function("after_chain_parse_one_new_result", |b| {
            b.iter_batched_ref(
                || {
                    let store = ChainStore::new(std::time::Duration::from_secs(60));
                    let _ = store.parse(dialect, b"scope", &previous);
                    store
                },
                |store: &mut ChainStore| {
                    store
                        .parse(dialect, b"scope", black_box(&current))
                        .map(|p| p.transcript.messages.len())
                },
                BatchSize::LargeInput,
            )
        });
        group.finish();
    }
}

fn guard_path(c: &mut Criterion) {
    let Some((config, route)) = default_v1() else {
        return;
    };
    let mut headers = HeaderMap::new();
    headers.insert("x-loopguard-session", http::HeaderValue::from_static("bench"));
    let mut group = c.benchmark_group("request_path_1mb");
    let previous = Bytes::from(history(199, 5_000, false));
    let current = Bytes::from(history(200, 5_000, false));
    group.throughput(Throughput::Bytes(current.len() as u64));

    // Parses `body` (fully, or through the guard's hash chains) and runs it
    // through the guard: loopguard's own work on a request.
    let judge = |guard: &Guard, body: &Bytes, chain: bool, headers: &HeaderMap| {
        let parsed = if chain {
            guard.parse_request(Dialect::OpenaiChat, &route.prefix, headers, None, body)
        } else {
            Dialect::OpenaiChat.parse_request(body)
        };
        parsed.ok().map(|parsed| {
            let tenant = loopguard::session::key::tenant(headers, None);
            let view = chat_view(&route, headers, &tenant, body, &parsed, None);
            guard.on_request(&config, &view).1
        })
    };

    // The last: no header names the session, so the key comes from the body
    // fields read during the parse, or the fingerprint.
    let no_header = HeaderMap::new();
    for (name, chain, headers) in [
        ("before_full_parse_and_guard", false, &headers),
        ("after_chain_parse_and_guard", true, &headers),
        ("after_chain_parse_and_guard_no_session_header", true, &no_header),
    ] {
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                || {
                    // A session that has seen the previous request.
                    let guard = Guard::new(&config);
                    let _ = judge(&guard, &previous, chain, headers);
                    guard
                },
                |guard: &mut Guard| black_box(judge(guard, black_box(&current), chain, headers)),
                BatchSize::LargeInput,
            )
        });
    }
    // What reading the session body fields cost when it took a second scan
    // of the body (removed: they are read during the parse).
    group.bench_function("body_ids_rescan", |b| {
        b.iter(|| black_box(serde_json::from_slice::<loopguard::dialect::BodyIds>(black_box(&current)).ok()))
    });
    group.finish();
}

criterion_group!(benches, parse_paths, guard_path, small_request, calls_scale);
criterion_main!(benches);

/// loopguard's own work on the small request of `benches/e2e.sh`'s one-tool-cycle
/// load (issue #14): each request a new conversation of ~400 bytes (a
/// fingerprinted session, no session header) ending in one tool result,
/// through one long-lived guard: the parse with its budget (as the proxy
/// does), request-time detection, and the judgement of a short JSON answer.
/// Each iteration takes the next of 20,000 distinct bodies, so the session
/// store and the parse cache fill and evict as under that load.
fn small_request(c: &mut Criterion) {
    use loopguard::dialect::write::Mode;
    use loopguard::guard::{BodyOf, RequestDecision};
    use loopguard::proxy::hold::Holder;
    use loopguard::proxy::tap::Tap;
    use loopguard::session::chain::Parsed;

    let Some((config, route)) = default_v1() else {
        return;
    };
    let headers = HeaderMap::new();
    let bodies: Vec<Bytes> = (0..20_000)
        .map(|n| {
            let body = json!({"model": "m", "messages": [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": format!("Task {n}: tidy the parser module.")},
                {"role": "assistant", "content": null, "tool_calls": [{"id": format!("c{n}"), "type": "function",
                    "function": {"name": "read_file", "arguments": "{\"path\":\"src/f.rs\"}"}}]},
                {"role": "tool", "tool_call_id": format!("c{n}"), "content": "a.txt\nb.txt"}]});
            Bytes::from(body.to_string())
        })
        .collect();
    let answer = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Done: the module is tidy."}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 8, "total_tokens": 58}})
    .to_string()
    .into_bytes();
    let guard = Guard::new(&config);
    let of = BodyOf {
        dialect: Dialect::OpenaiChat,
        route: &route.prefix,
        headers: &headers,
        query: None,
        tenant: &loopguard::session::key::tenant(&headers, None),
    };
    let mut next = 0usize;
    let mut one_request = || {
        let body = &bodies[next % bodies.len()];
        next += 1;
        let budget = guard.reserve_parse(&config);
        let Ok(Parsed::Full(parsed)) = guard.parse_request_within(&config, &of, body, &budget) else {
            return 0;
        };
        let tenant = loopguard::session::key::tenant(&headers, None);
        let view = chat_view(&route, &headers, &tenant, body, &parsed, Some(&budget));
        let RequestDecision::Forward { mut judge, .. } = guard.on_request(&config, &view).0 else {
            return 0;
        };
        let tap = Tap::new(Dialect::OpenaiChat, Mode::Whole, usize::MAX);
        let mut holder = Holder::new(tap, Dialect::OpenaiChat, Mode::Whole, false, usize::MAX);
        let pushed = holder.push(black_box(&answer), judge.as_mut()).release.len();
        pushed + holder.finish(judge.as_mut()).0.release.len()
    };
    let mut group = c.benchmark_group("small_request");
    group.bench_function("parse_detect_answer/new session", |b| b.iter(&mut one_request));
    // The same request on cold caches, as a proxy's request at a low rate
    // meets them: after reading 16 MiB and after reading 96 MiB (not timed),
    // and after the thread slept 10 ms (the gap between two requests at
    // 100 req/s). On the development machine (1 MiB of L2 per core, 32 MiB
    // of L3 that takes what L2 evicts) 16 MiB empties the L2 and half the
    // L3, 96 MiB all of both. Criterion reports a mean here, each request
    // timed alone.
    // Filled, so that every page is its own (a zeroed allocation reads as
    // one shared page).
    let flush = vec![1u8; 96 << 20];
    // Each timed request costs an untimed flush or sleep of milliseconds:
    // criterion's plan counts them, so the measurement time bounds the run.
    group
        .sampling_mode(criterion::SamplingMode::Flat)
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(3));
    for megabytes in [16, 96] {
        let id = format!("parse_detect_answer/new session, after reading {megabytes} MiB");
        group.bench_function(id, |b| {
            b.iter_custom(|iterations| {
                timed_after(iterations, || evict(&flush[..megabytes << 20]), &mut one_request)
            });
        });
    }
    group.bench_function("parse_detect_answer/new session, after 10 ms idle", |b| {
        b.iter_custom(|iterations| {
            timed_after(
                iterations,
                || std::thread::sleep(std::time::Duration::from_millis(10)),
                &mut one_request,
            )
        });
    });
    group.finish();
}

/// Runs `before` (not timed) then `request` (timed), `iterations` times;
/// the time spent in `request`.
fn timed_after(
    iterations: u64,
    mut before: impl FnMut(),
    mut request: impl FnMut() -> usize,
) -> std::time::Duration {
    let mut spent = std::time::Duration::ZERO;
    for _ in 0..iterations {
        before();
        let t = std::time::Instant::now();
        black_box(request());
        spent += t.elapsed();
    }
    spent
}

/// Reads one byte in each cache line of `buffer`, pushing what the caches
/// held out. Reads, so that the timed request pays no write-back of the
/// lines it evicts.
fn evict(buffer: &[u8]) {
    let sum = buffer.iter().step_by(64).fold(0u8, |sum, &b| sum.wrapping_add(b));
    black_box(sum);
}

/// An OpenAI chat body with `n` tool calls, each answered: `parallel` puts
/// every call in one assistant turn (the results follow, in order),
/// otherwise each call is its own turn. Calls differ by their path.
fn calls_body(n: usize, parallel: bool) -> Bytes {
    let call = |i: usize| {
        json!({"id": format!("c{i}"), "type": "function",
            "function": {"name": "read_file", "arguments": format!("{{\"path\":\"src/file_{i}.rs\"}}")}})
    };
    let result = |i: usize| json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": format!("contents of file {i}")});
    let mut messages = vec![json!({"role": "user", "content": "Read every file."})];
    if parallel {
        messages.push(
            json!({"role": "assistant", "content": null, "tool_calls": (0..n).map(call).collect::<Vec<_>>()}),
        );
        messages.extend((0..n).map(result));
    } else {
        for i in 0..n {
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call(i)]}));
            messages.push(result(i));
        }
    }
    Bytes::from(
        json!({"model": "m", "stream": true, "messages": messages,
            "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]})
        .to_string(),
    )
}

/// A non-streaming OpenAI chat answer with `n` parallel tool calls (all the
/// same call when `same`, else differing by path).
fn calls_answer(n: usize, same: bool) -> Vec<u8> {
    let calls: Vec<_> = (0..n)
        .map(|i| {
            let path = if same { 0 } else { i };
            json!({"id": format!("r{i}"), "type": "function",
                "function": {"name": "read_file", "arguments": format!("{{\"path\":\"src/file_{path}.rs\"}}")}})
        })
        .collect();
    json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": calls}}]})
    .to_string()
    .into_bytes()
}

/// How loopguard's work grows with the number of tool calls in one request
/// (a fresh session: the whole history is new) or one answer (judged at
/// stream time against a session that saw a short history): 1k, 10k and
/// 100k calls. Linear growth is ×10 per step.
fn calls_scale(c: &mut Criterion) {
    use loopguard::dialect::write::Mode;
    use loopguard::guard::RequestDecision;
    use loopguard::proxy::hold::Holder;
    use loopguard::proxy::tap::Tap;

    let Some((config, route)) = default_v1() else {
        return;
    };
    let mut headers = HeaderMap::new();
    headers.insert("x-loopguard-session", http::HeaderValue::from_static("scale"));
    let judge = |guard: &Guard, body: &Bytes| {
        let parsed = guard.parse_request(Dialect::OpenaiChat, &route.prefix, &headers, None, body);
        parsed.ok().map(|parsed| {
            let tenant = loopguard::session::key::tenant(&headers, None);
            let view = chat_view(&route, &headers, &tenant, body, &parsed, None);
            guard.on_request(&config, &view).0
        })
    };
    let mut group = c.benchmark_group("calls_scale");
    group.sample_size(10);
    group.warm_up_time(std::time::Duration::from_millis(500));
    group.measurement_time(std::time::Duration::from_secs(3));
    for n in [1_000, 10_000, 100_000] {
        for (shape, parallel) in [("request_sequential", false), ("request_parallel", true)] {
            let body = calls_body(n, parallel);
            group.bench_function(format!("{shape}/{n}"), |b| {
                b.iter_batched_ref(
                    || Guard::new(&config),
                    |guard: &mut Guard| black_box(judge(guard, black_box(&body)).is_some()),
                    BatchSize::LargeInput,
                )
            });
        }
        for (shape, same) in [
            ("answer_parallel_distinct", false),
            ("answer_parallel_same", true),
        ] {
            let answer = calls_answer(n, same);
            let history = calls_body(20, false);
            group.bench_function(format!("{shape}/{n}"), |b| {
                b.iter_batched_ref(
                    || {
                        let guard = Guard::new(&config);
                        let decision = judge(&guard, &history);
                        (guard, decision)
                    },
                    |(_guard, decision)| {
                        let Some(RequestDecision::Forward { judge, .. }) = decision else {
                            return 0;
                        };
                        let tap = Tap::new(Dialect::OpenaiChat, Mode::Whole, usize::MAX);
                        let mut holder =
                            Holder::new(tap, Dialect::OpenaiChat, Mode::Whole, false, usize::MAX);
                        let pushed = holder.push(black_box(&answer), judge.as_mut()).release.len();
                        pushed + holder.finish(judge.as_mut()).0.release.len()
                    },
                    BatchSize::LargeInput,
                )
            });
        }
    }
    group.finish();
}
