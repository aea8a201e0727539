//! The parse cache's byte resume through the built binary (#14): a
//! conversation that grows by one tool cycle per request is split after the
//! previous body's bytes from its second request on, and gets the same
//! verdicts, at the same requests, as the same conversation whose requests
//! each start differently (a changing field before the history: never
//! resumed).

mod common;

use common::{config_for, loopguard, metric_value, metrics, mock, post, verdict_header};
use serde_json::{Value, json};

/// The history after `cycles` tool cycles: distinct reads, then the same
/// read with the same result from the 4th cycle on (a loop).
fn history(cycles: usize) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent. ".repeat(200)}),
        json!({"role": "user", "content": "Fix the failing test."}),
    ];
    for i in 0..cycles {
        let path = if i >= 3 {
            "src/lib.rs".to_owned()
        } else {
            format!("src/f{i}.rs")
        };
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "read_file", "arguments": json!({"path": path}).to_string()}}
        ]}));
        let content = if i >= 3 {
            "fn main() {}\n".repeat(40)
        } else {
            format!("// file {i}\n{}", "let x = 1;\n".repeat(40))
        };
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": content}));
    }
    messages
}

/// The verdict headers of the conversation's requests through `lg`, each
/// with its request number in a field `n` before the history (`first`) or
/// after it.
async fn verdicts(lg: &common::Proc, first: bool) -> Vec<Option<String>> {
    let mut seen = Vec::new();
    for cycles in 1..=9 {
        let body = if first {
            json!({"n": cycles, "model": "m", "stream": false, "messages": history(cycles)})
        } else {
            json!({"model": "m", "stream": false, "messages": history(cycles), "n": cycles})
        };
        let r = post(format!("{}/v1/chat/completions", lg.url()), &[], body.to_string()).await;
        assert_eq!(r.status(), 200, "request {cycles}");
        seen.push(verdict_header(&r));
        let _ = r.bytes().await;
    }
    seen
}

/// `loopguard_parse_resumed_total` of `lg`.
async fn resumed_total(lg: &common::Proc) -> f64 {
    metric_value(&metrics(lg).await, "loopguard_parse_resumed_total")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_growing_conversation_is_resumed_and_judged_as_one_scanned_whole() {
    let upstream = mock();
    let compact = loopguard(&config_for(&upstream.url(), ""));
    let changing = loopguard(&config_for(&upstream.url(), ""));
    let resumed = verdicts(&compact, false).await;
    let whole = verdicts(&changing, true).await;
    assert!(
        resumed.iter().any(Option::is_some),
        "the loop is judged: {resumed:?}"
    );
    assert_eq!(resumed, whole, "the same verdicts at the same requests");
    assert_eq!(resumed_total(&compact).await, 8.0);
    assert_eq!(resumed_total(&changing).await, 0.0);
}

/// `sessions.parse_cache_mib = 0` keeps no parsed history: the same growing
/// conversation is parsed whole every time (nothing resumed) and judged the
/// same. The setting is what a gateway raises when many long conversations
/// take turns (docs/benchmarks.md, Large histories).
#[tokio::test(flavor = "multi_thread")]
async fn a_parse_cache_of_zero_keeps_no_history_and_judges_the_same() {
    let upstream = mock();
    let kept = loopguard(&config_for(&upstream.url(), ""));
    let config = format!(
        "{}\n[sessions]\nparse_cache_mib = 0\n",
        config_for(&upstream.url(), "")
    );
    let none = loopguard(&config);
    let with_cache = verdicts(&kept, false).await;
    let without = verdicts(&none, false).await;
    assert_eq!(with_cache, without, "the same verdicts at the same requests");
    assert_eq!(resumed_total(&none).await, 0.0);
    assert_eq!(resumed_total(&kept).await, 8.0);
}
