//! Amazon Bedrock's `Converse` and `ConverseStream` end to end through the
//! built binary and the mock upstream: `…/model/{id}/converse-stream`
//! (AWS's binary event stream, one message per event, its type in the
//! `:event-type` header and its payload the event's JSON) and
//! `…/model/{id}/converse` (one JSON document). No Converse stream is
//! recorded here: the mock translates its scripted turns and the shared
//! `anthropic` fixtures into Converse events (`loopguard::tools::mock::converse`)
//! and frames them with loopguard's encoder; these tests decode with its
//! decoder, and `tests/python/test_bedrock_boto3.py` with botocore's.
//!
//! Byte-exact passthrough when quiet, the signed request forwarded
//! untouched (a warning is logged only), and the in-flight block and
//! abort cases in Bedrock's framing.

mod common;

use common::{Got, Proc, config_for, fixtures_of, loopguard, metric_value, metrics, mock, mock_requests};
use loopguard::dialect::bedrock::EVENT_STREAM;
use loopguard::dialect::bedrock_converse::payload_of;
use loopguard::eventstream::{Decoder, Message};
use serde_json::{Value, json};

const STREAM: &str = "/bedrock/model/us.amazon.nova-pro-v1:0/converse-stream";
const WHOLE: &str = "/bedrock/model/us.amazon.nova-pro-v1:0/converse";
const SIGV4: &str = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261207/us-east-1/bedrock/aws4_request, \
                     SignedHeaders=content-type;host;x-amz-date, Signature=0123456789abcdef";
const LS_LOOP: &str = r#"{"turns":[{"tool_calls":[{"name":"ls","arguments":{"path":"."}}]}]}"#;
const TEXT: &str = r#"{"turns":[{"text":"Here is what I found in the directory listing."}]}"#;
const TEXT_THEN_LS: &str =
    r#"{"turns":[{"text":"Let me look again.","tool_calls":[{"name":"ls","arguments":{"path":"."}}]}]}"#;

/// The mock and loopguard with a `bedrock` route at `/bedrock`
/// (strip_prefix), plus `extra` TOML.
fn start(extra: &str) -> (Proc, Proc) {
    let mock = mock();
    let config = format!(
        "{}\n[[routes]]\nprefix = \"/bedrock\"\nprovider = \"bedrock\"\nupstream = \"{}\"\nstrip_prefix = true\n\n{extra}",
        config_for(&mock.url(), ""),
        mock.url()
    );
    (mock, loopguard(&config))
}

/// A Converse body as boto3 sends it, whose history holds `cycles`
/// identical `ls` calls with identical results.
fn history(task: &str, cycles: usize) -> Value {
    let mut messages = vec![json!({"role": "user", "content": [{"text": task}]})];
    for i in 0..cycles {
        messages.push(json!({"role": "assistant", "content": [
            {"toolUse": {"toolUseId": format!("tooluse_{i}"), "name": "ls", "input": {"path": "."}}}]}));
        messages.push(json!({"role": "user", "content": [
            {"toolResult": {"toolUseId": format!("tooluse_{i}"), "content": [{"text": "Cargo.toml src tests"}], "status": "success"}}]}));
    }
    json!({"messages": messages, "system": [{"text": "You are a coding agent."}],
        "inferenceConfig": {"maxTokens": 1024},
        "toolConfig": {"tools": [{"toolSpec": {"name": "ls", "description": "list a directory",
            "inputSchema": {"json": {"type": "object"}}}}]}})
}

async fn send(base: &str, path: &str, body: &Value, headers: &[(&str, &str)]) -> Got<Vec<u8>> {
    let mut all = vec![
        ("authorization", SIGV4),
        ("x-amz-date", "20261207T120000Z"),
        ("content-type", "application/json"),
    ];
    all.extend_from_slice(headers);
    common::post_json(base, path, body, &all).await
}

/// Every message of an event-stream body, each CRC checked; panics on an
/// invalid or truncated stream.
fn messages(body: &[u8]) -> Vec<Message> {
    let mut decoder = Decoder::default();
    let mut out = Vec::new();
    decoder.push(body, &mut out).unwrap_or_else(|e| panic!("{e}"));
    decoder.finish().unwrap_or_else(|e| panic!("{e}"));
    out
}

/// The events, each `{"<event-type>": payload}`.
fn events(body: &[u8]) -> Vec<Value> {
    messages(body)
        .iter()
        .filter_map(payload_of)
        .map(|p| serde_json::from_str(&p).unwrap_or_else(|e| panic!("{e}: {p}")))
        .collect()
}

fn kind(event: &Value) -> &str {
    event
        .as_object()
        .and_then(|o| o.keys().next())
        .map_or("", String::as_str)
}

fn text_of(events: &[Value]) -> String {
    events
        .iter()
        .filter_map(|e| e["contentBlockDelta"]["delta"]["text"].as_str())
        .collect()
}

fn has_calls(events: &[Value]) -> bool {
    events
        .iter()
        .any(|e| !e["contentBlockStart"]["start"]["toolUse"].is_null())
}

fn stop_reason(events: &[Value]) -> Option<String> {
    events
        .iter()
        .find_map(|e| e["messageStop"]["stopReason"].as_str())
        .map(str::to_owned)
}

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or_default()
}

/// A mock answer with its per-answer counter masked.
fn unnumbered(value: &Value) -> String {
    let re = regex::Regex::new(r"mock_[0-9]+").unwrap_or_else(|e| panic!("{e}"));
    re.replace_all(&value.to_string(), "mock_N").into_owned()
}

/// Quiet traffic is byte-exact: every shared `anthropic` fixture as a
/// ConverseStream (written in random pieces, and byte by byte) reaches the
/// client as the upstream sent it; a whole `Converse` answer too. The
/// signed request reaches the upstream unchanged, headers and body.
#[tokio::test(flavor = "multi_thread")]
async fn quiet_converse_traffic_passes_byte_exact() {
    let (mock, lg) = start("");
    for file in fixtures_of("anthropic") {
        let name = format!(
            "anthropic/{}",
            file.file_name().unwrap_or_default().to_string_lossy()
        );
        let fixture = std::fs::read(&file).unwrap_or_else(|e| panic!("{e}"));
        let want = loopguard::tools::mock::converse::recorded(&fixture).concat();
        assert!(!events(&want).is_empty(), "{name} translates");
        for (chunk, seed) in [("random", "1"), ("bytes", "0")] {
            let headers = [
                ("x-mock-fixture", name.as_str()),
                ("x-mock-chunk", chunk),
                ("x-mock-seed", seed),
            ];
            let got = send(&lg.url(), STREAM, &history("hi", 0), &headers).await;
            assert_eq!(got.status, 200, "{name}");
            assert!(got.body == want, "{name} ({chunk}) is not byte-exact");
            assert!(got.verdict.is_none());
            assert_eq!(got.content_type, EVENT_STREAM);
        }
    }
    for path in [STREAM, WHOLE] {
        let body = history(&format!("summarise the readme {path}"), 1);
        let headers = [("x-mock-script", TEXT), ("x-mock-chunk", "random")];
        let direct = send(&mock.url(), path.trim_start_matches("/bedrock"), &body, &headers).await;
        let proxied = send(&lg.url(), path, &body, &headers).await;
        assert_eq!(proxied.status, 200);
        assert!(proxied.body == direct.body, "{path}: byte for byte");
        let recorded = mock_requests(&mock).await;
        let last = recorded.last().cloned().unwrap_or_default();
        assert_eq!(last["path"], path.trim_start_matches("/bedrock"));
        assert_eq!(last["headers"]["authorization"], SIGV4);
        assert_eq!(last["headers"]["x-amz-date"], "20261207T120000Z");
        assert_eq!(last["body"], body.to_string());
    }
}

/// warn × request time: a signed body is never rewritten: the warning is
/// logged and counted only, the upstream gets the agent's bytes exactly.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_time_warning_never_changes_the_signed_body() {
    let (mock, lg) = start("");
    for path in [STREAM, WHOLE] {
        let body = history(&format!("tidy the imports {path}"), 3);
        let got = send(&lg.url(), path, &body, &[("x-mock-script", TEXT)]).await;
        assert_eq!(got.status, 200);
        let recorded = mock_requests(&mock).await;
        let last = recorded.last().cloned().unwrap_or_default();
        assert_eq!(last["body"], body.to_string(), "byte for byte");
        assert_eq!(last["headers"]["authorization"], SIGV4);
    }
    let verdicts = lg.wait_log_events("verdict", 2);
    assert!(verdicts.iter().all(|v| v["level"] == "warning"), "{verdicts:?}");
    assert!(
        verdicts
            .iter()
            .all(|v| v["dialect"].is_null() || v["dialect"] == "bedrock-converse")
    );
}

/// block × request time × stream and whole: five identical cycles are
/// answered without calling upstream: a complete ConverseStream
/// (`messageStart` … `metadata`, `end_turn`, every CRC right), or a
/// `Converse` answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_time_block_is_a_complete_converse_stream() {
    let (mock, lg) = start("");
    let got = send(&lg.url(), STREAM, &history("fix the parser", 5), &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.content_type, EVENT_STREAM);
    assert!(got.verdict.as_deref().is_some_and(|v| v.starts_with("block")));
    let events = events(&got.body);
    assert_eq!(events.first().map(kind), Some("messageStart"));
    assert_eq!(events.last().map(kind), Some("metadata"));
    assert!(text_of(&events).starts_with("[loopguard] identical_call"));
    assert_eq!(stop_reason(&events).as_deref(), Some("end_turn"));

    let got = send(&lg.url(), WHOLE, &history("fix the lexer", 5), &[]).await;
    assert_eq!(got.content_type, "application/json");
    let answer = json_of(&got.body);
    assert_eq!(answer["stopReason"], "end_turn");
    let text = answer["output"]["message"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("[loopguard]"), "{answer}");
    assert!(
        mock_requests(&mock).await.is_empty(),
        "no upstream call for a block"
    );
}

/// abort × request time × stream and whole: HTTP 400 with Bedrock's
/// `{"message": "loop_detected: …"}`.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_time_abort_is_bedrocks_error() {
    let (_mock, lg) = start("[loop_detection.actions]\ncritical = \"abort\"\n");
    for path in [STREAM, WHOLE] {
        let got = send(&lg.url(), path, &history(&format!("fix it {path}"), 5), &[]).await;
        assert_eq!(got.status, 400);
        let message = json_of(&got.body)["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.starts_with("loop_detected"), "{message}");
        assert!(message.contains("identical_call"), "{message}");
    }
}

/// warn × stream time × stream and whole: the third identical call is
/// released as the upstream sent it, byte for byte.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_time_warning_releases_the_call_unchanged() {
    let (mock, lg) = start("");
    for path in [STREAM, WHOLE] {
        let body = history(&format!("list it {path}"), 2);
        let headers = [("x-mock-script", LS_LOOP), ("x-mock-chunk", "random")];
        let direct = send(&mock.url(), path.trim_start_matches("/bedrock"), &body, &headers).await;
        let got = send(&lg.url(), path, &body, &headers).await;
        assert_eq!(got.status, 200);
        if path == STREAM {
            let (got, direct) = (events(&got.body), events(&direct.body));
            assert_eq!(unnumbered(&json!(got)), unnumbered(&json!(direct)));
            assert!(has_calls(&got));
        } else {
            assert_eq!(
                unnumbered(&json_of(&got.body)),
                unnumbered(&json_of(&direct.body))
            );
        }
    }
    let at_stream: Vec<Value> = lg
        .wait_log_events("verdict", 2)
        .into_iter()
        .filter(|v| v["at"] == "stream")
        .collect();
    assert_eq!(at_stream.len(), 2, "{at_stream:?}");
}

/// block × stream time × stream and whole: the fifth identical call is
/// withheld; the stream goes on with the explanation as a text block at
/// the held block's index and ends `end_turn`, `metadata`, as valid
/// frames; the text already sent stays. A whole answer keeps its text with
/// the call replaced.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_time_block_replaces_the_call_in_the_event_stream() {
    let (_mock, lg) = start("");
    let headers = [("x-mock-script", TEXT_THEN_LS), ("x-mock-chunk", "random")];
    let got = send(&lg.url(), STREAM, &history("walk the tree", 4), &headers).await;
    assert_eq!(got.status, 200);
    let events = events(&got.body);
    assert!(!has_calls(&events), "{events:?}");
    let text = text_of(&events);
    assert!(text.starts_with("Let me look again."), "{text}");
    assert!(text.contains("[loopguard] identical_call"), "{text}");
    assert_eq!(stop_reason(&events).as_deref(), Some("end_turn"));
    assert_eq!(events.last().map(kind), Some("metadata"));
    let indices: Vec<u64> = events
        .iter()
        .filter_map(|e| e["contentBlockStop"]["contentBlockIndex"].as_u64())
        .collect();
    assert_eq!(indices, [0, 1], "the explanation takes the held block's index");

    let got = send(&lg.url(), WHOLE, &history("walk the forest", 4), &headers).await;
    let answer = json_of(&got.body);
    let blocks = answer["output"]["message"]["content"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(blocks.iter().all(|b| b.get("toolUse").is_none()), "{answer}");
    assert_eq!(blocks[0]["text"], "Let me look again.");
    assert_eq!(answer["stopReason"], "end_turn");
    assert_eq!(answer["usage"]["outputTokens"], 5, "the upstream's usage stays");
}

/// abort × stream time × stream and whole: a call judged before any text
/// went out gets HTTP 400 `{"message"}`; once text went out, the stream
/// ends with an `exception` message (`validationException`).
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_time_abort_is_an_error_status_or_an_exception_message() {
    let (_mock, lg) = start("[loop_detection.actions]\ncritical = \"abort\"\n");
    for path in [STREAM, WHOLE] {
        let body = history(&format!("read it {path}"), 4);
        let got = send(&lg.url(), path, &body, &[("x-mock-script", LS_LOOP)]).await;
        assert_eq!(got.status, 400, "{}", String::from_utf8_lossy(&got.body));
        let message = json_of(&got.body)["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.starts_with("loop_detected"), "{message}");
    }
    let body = history("read it once more", 4);
    let got = send(&lg.url(), STREAM, &body, &[("x-mock-script", TEXT_THEN_LS)]).await;
    assert_eq!(got.status, 200);
    let all = messages(&got.body);
    let last = all.last().cloned().unwrap_or_default();
    assert_eq!(last.header(":message-type"), Some("exception"));
    assert_eq!(last.header(":exception-type"), Some("validationException"));
    let payload: Value = serde_json::from_slice(&last.payload).unwrap_or_default();
    assert!(
        payload["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("loop_detected"))
    );
    assert!(!has_calls(&events(&got.body)));
}

/// Fail open: a ConverseStream whose first message fails its CRC is not
/// judged and reaches the client byte for byte; the fail-open is counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_converse_stream_passes_unjudged_and_unchanged() {
    let (mock, lg) = start("");
    let body = history("walk the garden", 0);
    let headers = [
        ("x-mock-fixture", "anthropic/parallel-tool-use-same-tool.sse"),
        ("x-mock-fault", "corrupt"),
        ("x-mock-chunk", "random"),
    ];
    let direct = send(
        &mock.url(),
        STREAM.trim_start_matches("/bedrock"),
        &body,
        &headers,
    )
    .await;
    let got = send(&lg.url(), STREAM, &body, &headers).await;
    assert_eq!(got.status, 200);
    assert!(got.body == direct.body, "byte for byte");
    assert!(got.verdict.is_none());
    assert!(
        Decoder::default().push(&got.body, &mut Vec::new()).is_err(),
        "still corrupt"
    );
    let text = metrics(&lg).await;
    assert!(
        metric_value(&text, "loopguard_fail_open_total{reason=\"response_unparsable\"}") >= 1.0,
        "{text}"
    );
}
