//! The parse-memory budget (#13.3): a request body whose parse would not fit
//! `server.parse_budget_request_bytes` / `server.parse_budget_bytes` is
//! judged in its lean form (calls by their hashes) and, past that, passed
//! through unjudged and counted; the long real sessions (a 20 MB history of
//! 5,000 calls with images) are still fully judged under the defaults.

mod common;

use common::{config_for, loopguard, metric_value, metrics, mock, mock_requests, post, verdict_header};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A chat history of `calls` tool cycles with `result_len`-byte results;
/// the last `looping` cycles are the same call with the same result.
fn history(calls: usize, result_len: usize, looping: usize) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": "Read every file."})];
    for i in 0..calls {
        let repeated = i + looping >= calls;
        let path = if repeated {
            "src/lib.rs".to_owned()
        } else {
            format!("src/f{i}.rs")
        };
        messages.push(json!({"role": "assistant", "content": format!("Reading {i}."), "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "read_file", "arguments": json!({"path": path}).to_string()}}
        ]}));
        let content = if repeated {
            "fn main() {}\n".repeat(result_len / 13)
        } else {
            format!("{i} {}", "lorem ipsum ".repeat(result_len / 12))
        };
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": content}));
    }
    messages
}

fn body(messages: Vec<Value>) -> String {
    json!({"model": "m", "stream": false, "messages": messages}).to_string()
}

/// Asserts that `r` carries an `identical_call` verdict, that `lean`
/// requests went to the lean form and that none passed unjudged.
async fn assert_judged(lg: &common::Proc, r: &reqwest::Response, lean: f64) {
    let verdict = verdict_header(r).unwrap_or_default();
    assert!(
        verdict.contains("detector=identical_call"),
        "{verdict:?} {}",
        metrics(lg).await
    );
    let text = metrics(lg).await;
    assert_eq!(metric_value(&text, "loopguard_parse_lean_total"), lean, "{text}");
    assert_eq!(
        metric_value(
            &text,
            "loopguard_fail_open_total{reason=\"request_parse_budget\"}"
        ),
        0.0,
        "{text}"
    );
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Asserts that `r` reached the upstream as `sent`, byte-exact, with no
/// verdict, and was counted once as passed past its parse budget.
async fn assert_passed_unjudged(
    lg: &common::Proc,
    upstream: &common::Proc,
    r: reqwest::Response,
    sent: &[u8],
) {
    assert_eq!(r.status(), 200);
    assert_eq!(verdict_header(&r), None);
    let _ = r.bytes().await;
    let seen = mock_requests(upstream).await;
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["body_sha256"], sha256_hex(sent));
    let text = metrics(lg).await;
    assert_eq!(
        metric_value(
            &text,
            "loopguard_fail_open_total{reason=\"request_parse_budget\"}"
        ),
        1.0,
        "{text}"
    );
}

const SMALL_BUDGET: &str = "parse_budget_bytes = 4194304\nparse_budget_request_bytes = 1048576";

/// A body of 40,000 small parallel calls: neither its full nor its lean form
/// fits a 1 MiB request budget, so it reaches the upstream byte-exact,
/// unjudged, and is counted as `request_parse_budget`.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_past_the_budget_passes_through_byte_exact_and_is_counted() {
    let upstream = mock();
    let lg = loopguard(&config_for(&upstream.url(), SMALL_BUDGET));
    let calls: Vec<Value> = (0..40_000)
        .map(|i| json!({"id": format!("{i:x}"), "type": "function", "function": {"name": "f", "arguments": "{}"}}))
        .collect();
    let sent = body(vec![
        json!({"role": "user", "content": "go"}),
        json!({"role": "assistant", "content": null, "tool_calls": calls}),
    ]);
    let r = post(format!("{}/v1/chat/completions", lg.url()), &[], sent.clone()).await;
    assert_passed_unjudged(&lg, &upstream, r, sent.as_bytes()).await;
    assert!(
        lg.logs().contains("past its parse-memory budget"),
        "{}",
        lg.logs()
    );
}

/// A looping history (300 cycles with 8 KB results, the last ten the same
/// call and result) whose full parse does not fit a 1 MiB request budget
/// is judged in its lean form and still blocked by `identical_call`.
#[tokio::test(flavor = "multi_thread")]
async fn a_looping_body_past_the_full_budget_is_still_judged_by_its_call_hashes() {
    let upstream = mock();
    let lg = loopguard(&config_for(&upstream.url(), SMALL_BUDGET));
    let sent = body(history(300, 8_000, 10));
    assert!(sent.len() > 2 << 20, "{} bytes", sent.len());
    let r = post(format!("{}/v1/chat/completions", lg.url()), &[], sent).await;
    assert_judged(&lg, &r, 1.0).await;
}

/// The twin: the same history within the default budget is judged in full
/// (no lean form, nothing unjudged) and gets the same verdict.
#[tokio::test(flavor = "multi_thread")]
async fn the_same_looping_body_within_the_default_budget_is_judged_in_full() {
    let upstream = mock();
    let lg = loopguard(&config_for(&upstream.url(), ""));
    let r = post(
        format!("{}/v1/chat/completions", lg.url()),
        &[],
        body(history(300, 8_000, 10)),
    )
    .await;
    assert_judged(&lg, &r, 0.0).await;
}

/// The longest real sessions: a 20 MB history of 5,000 calls with ten 1 MB
/// screenshots, looping at its end, is fully judged under the default
/// budget and gets its verdict.
#[tokio::test(flavor = "multi_thread")]
async fn a_twenty_megabyte_history_of_five_thousand_calls_is_fully_judged_by_default() {
    let upstream = mock();
    let lg = loopguard(&config_for(&upstream.url(), ""));
    let image = format!("data:image/png;base64,{}", "iVBORw0KGgo".repeat(95_000));
    let mut messages = history(5_000, 2_000, 10);
    for at in (1..10).map(|k| k * 1_000) {
        messages.insert(
            at,
            json!({"role": "user", "content": [
                {"type": "text", "text": "screenshot"},
                {"type": "image_url", "image_url": {"url": image}}]}),
        );
    }
    let sent = body(messages);
    assert!(sent.len() > 19_000_000, "{} bytes", sent.len());
    let r = post(format!("{}/v1/chat/completions", lg.url()), &[], sent).await;
    assert_judged(&lg, &r, 0.0).await;
}

/// A request budget of 40 MiB (of 64 MiB in all).
const BUDGET_40_MIB: &str = "parse_budget_bytes = 67108864\nparse_budget_request_bytes = 41943040";

/// A history of one assistant message of 30,000 parallel calls and their
/// results (about 2.7 MB, a parse estimated past 40 MiB), then 20 tool
/// cycles whose last `looping` are the same call with the same result.
fn thirty_thousand_calls_then(looping: usize) -> Vec<Value> {
    let calls: Vec<Value> = (0..30_000)
        .map(|i| {
            json!({"id": format!("p{i}"), "type": "function",
                "function": {"name": "read_file", "arguments": json!({"path": format!("src/m{}/f{i}.rs", i % 9)}).to_string()}})
        })
        .collect();
    let mut messages = vec![
        json!({"role": "user", "content": "Read every file."}),
        json!({"role": "assistant", "content": "Reading all of them.", "tool_calls": calls}),
    ];
    messages.extend(
        (0..30_000).map(|i| json!({"role": "tool", "tool_call_id": format!("p{i}"), "content": "ok"})),
    );
    messages.extend(history(20, 500, looping).into_iter().skip(1));
    messages
}

/// One assistant message of 30,000 parallel calls (about 2.7 MB, a parse
/// estimated past the 40 MiB request budget) before a looping end: the
/// message is parsed a slice at a time into its lean form, so the request
/// is judged by its call hashes and blocked, not passed unjudged (before,
/// one item too large to parse whole sent the body through unjudged).
#[tokio::test(flavor = "multi_thread")]
async fn one_message_of_thirty_thousand_calls_is_judged_by_its_call_hashes() {
    let upstream = mock();
    let lg = loopguard(&config_for(&upstream.url(), BUDGET_40_MIB));
    let messages = thirty_thousand_calls_then(10);
    let sent = body(messages);
    assert!(sent.len() > 3_000_000, "{} bytes", sent.len());
    let r = post(format!("{}/v1/chat/completions", lg.url()), &[], sent).await;
    assert_judged(&lg, &r, 1.0).await;
}

/// The twin that warns: after the same 30,000-call message, three identical
/// calls get a warning, and in the lean form too it reaches the model: the
/// upstream gets the body as sent with only the last tool message changed
/// (the warning appended to it), not a body parsed and written again.
#[tokio::test(flavor = "multi_thread")]
async fn a_warning_on_a_lean_request_reaches_the_upstream_in_the_body_as_sent() {
    let upstream = mock();
    let lg = loopguard(&config_for(&upstream.url(), BUDGET_40_MIB));
    let messages = thirty_thousand_calls_then(3);
    let last_tool = serde_json::to_string(messages.last().unwrap_or(&Value::Null)).unwrap_or_default();
    let sent = body(messages);
    let r = post(format!("{}/v1/chat/completions", lg.url()), &[], sent.clone()).await;
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    let seen = mock_requests(&upstream).await;
    let forwarded = seen[0]["body"].as_str().unwrap_or_default();
    let carrier = sent
        .rfind(&last_tool)
        .unwrap_or_else(|| panic!("no last tool message"));
    assert_eq!(
        &forwarded[..carrier],
        &sent[..carrier],
        "the body before the warned message changed"
    );
    assert!(
        forwarded[carrier..].contains("[loopguard]"),
        "{}",
        &forwarded[carrier..]
    );
    assert!(
        forwarded[carrier..].contains("identical"),
        "{}",
        &forwarded[carrier..]
    );
    let text = metrics(&lg).await;
    assert_eq!(metric_value(&text, "loopguard_parse_lean_total"), 1.0, "{text}");
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap_or_else(|e| panic!("{e}"));
    encoder.finish().unwrap_or_else(|e| panic!("{e}"))
}

/// Posts `sent` to the chat route as a gzip-encoded body.
async fn post_gzip(lg: &common::Proc, sent: Vec<u8>) -> reqwest::Response {
    post(
        format!("{}/v1/chat/completions", lg.url()),
        &[("content-encoding", "gzip")],
        sent,
    )
    .await
}

/// A gzip body is parsed from a decoded copy, and that copy counts toward
/// the parse budget: a looping history that compresses to a few KB but
/// decodes past the 1 MiB request budget reaches the upstream byte-exact,
/// unjudged, and is counted as `request_parse_budget` (before, any body
/// up to `max_request_bytes` decoded was held outside the budget).
#[tokio::test(flavor = "multi_thread")]
async fn a_gzip_body_decoding_past_the_budget_passes_through_unjudged_and_is_counted() {
    let upstream = mock();
    let lg = loopguard(&config_for(&upstream.url(), SMALL_BUDGET));
    let plain = body(history(300, 8_000, 10));
    let sent = gzip(plain.as_bytes());
    assert!(
        plain.len() > 2 << 20 && sent.len() < 1 << 20,
        "{} / {}",
        plain.len(),
        sent.len()
    );
    let r = post_gzip(&lg, sent.clone()).await;
    assert_passed_unjudged(&lg, &upstream, r, &sent).await;
}

/// The twin: the same gzip body under the default budget is decoded,
/// judged in full, and blocked like its plain form.
#[tokio::test(flavor = "multi_thread")]
async fn a_gzip_body_within_the_budget_is_judged_in_full() {
    let upstream = mock();
    let lg = loopguard(&config_for(&upstream.url(), ""));
    let sent = gzip(body(history(300, 8_000, 10)).as_bytes());
    let r = post_gzip(&lg, sent).await;
    assert_judged(&lg, &r, 0.0).await;
}

/// #13.1 for encoded bodies: a gzip body far under `offload_body_bytes` as
/// received (256 KiB) that decodes to megabytes is decoded, parsed and
/// judged off the async workers (counted in `loopguard_offloaded_total`),
/// as its decoded size would be, not on the worker serving other
/// connections.
#[tokio::test(flavor = "multi_thread")]
async fn a_small_gzip_body_that_decodes_large_is_judged_off_the_async_workers() {
    let upstream = mock();
    let lg = loopguard(&config_for(&upstream.url(), ""));
    let plain = body(history(300, 8_000, 10));
    let sent = gzip(plain.as_bytes());
    assert!(
        sent.len() < 256 << 10 && plain.len() > 2 << 20,
        "{} / {}",
        sent.len(),
        plain.len()
    );
    let r = post_gzip(&lg, sent).await;
    assert_judged(&lg, &r, 0.0).await;
    let text = metrics(&lg).await;
    assert!(
        metric_value(&text, "loopguard_offloaded_total") >= 2.0,
        "the decode, parse and judgement ran on the async worker: {text}"
    );
}
