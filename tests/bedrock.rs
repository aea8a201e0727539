//! Claude on Amazon Bedrock end to end through the built binary and the
//! mock upstream: `InvokeModelWithResponseStream`
//! (`/model/{id}/invoke-with-response-stream`, AWS's binary event stream
//! whose `chunk`s carry Anthropic's stream events) and `InvokeModel`
//! (`/model/{id}/invoke`, one JSON document). No Bedrock stream is
//! recorded: the mock frames the shared `anthropic` fixtures and its
//! scripted Anthropic turns as Bedrock does, with loopguard's own encoder
//! (`loopguard::dialect::bedrock`), and these tests decode with its decoder.
//!
//! Byte-exact passthrough when quiet, the signed request (SigV4 headers
//! and body) forwarded untouched — also when a warning is due, which on
//! Bedrock is logged only —, and the in-flight block and abort cases in
//! Bedrock's framing.

mod common;

use common::{Got, Proc, config_for, fixtures_of, loopguard, metric_value, metrics, mock, mock_requests};
use loopguard::dialect::bedrock;
use loopguard::eventstream::{Decoder, Message};
use serde_json::{Value, json};

const STREAM: &str = "/bedrock/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke-with-response-stream";
const WHOLE: &str = "/bedrock/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke";
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

/// A Bedrock body: Anthropic's, with `anthropic_version`, no `model` and no
/// `stream`, whose history holds `cycles` identical `ls` calls.
fn history(task: &str, cycles: usize) -> Value {
    let mut messages = vec![json!({"role": "user", "content": task})];
    for i in 0..cycles {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": format!("toolu_{i}"), "name": "ls", "input": {"path": "."}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": "Cargo.toml src tests"}]}));
    }
    json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 1024, "messages": messages,
        "tools": [{"name": "ls", "input_schema": {"type": "object"}}]})
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

/// The Anthropic events the `chunk`s carry (and an exception, as an
/// Anthropic `error` event).
fn events(body: &[u8]) -> Vec<Value> {
    messages(body)
        .iter()
        .filter_map(bedrock::payload_of)
        .map(|p| serde_json::from_str(&p).unwrap_or_else(|e| panic!("{e}: {p}")))
        .collect()
}

fn text_of(events: &[Value]) -> String {
    events
        .iter()
        .filter_map(|e| e["delta"]["text"].as_str())
        .collect()
}

fn has_calls(events: &[Value]) -> bool {
    events.iter().any(|e| e["content_block"]["type"] == "tool_use")
}

fn stop_reason(events: &[Value]) -> Option<String> {
    events
        .iter()
        .rev()
        .find_map(|e| e["delta"]["stop_reason"].as_str())
        .map(str::to_owned)
}

/// A mock answer with its per-answer counter masked (the mock numbers its
/// answers: the same script answered twice differs only there).
fn unnumbered(events: &[Value]) -> String {
    let re = regex::Regex::new(r"mock_[0-9]+").unwrap_or_else(|e| panic!("{e}"));
    re.replace_all(&serde_json::to_string(events).unwrap_or_default(), "mock_N")
        .into_owned()
}

/// Quiet traffic is byte-exact: every shared `anthropic` fixture framed as
/// a Bedrock event stream (written in random pieces, and byte by byte)
/// reaches the client as the upstream sent it, carrying the fixture's
/// events; a whole `invoke` answer too. The signed request reaches the
/// upstream unchanged: SigV4 headers and body, byte for byte.
#[tokio::test(flavor = "multi_thread")]
async fn quiet_bedrock_traffic_passes_byte_exact() {
    let (mock, lg) = start("");
    for file in fixtures_of("anthropic") {
        let name = format!(
            "anthropic/{}",
            file.file_name().unwrap_or_default().to_string_lossy()
        );
        let fixture = std::fs::read(&file).unwrap_or_else(|e| panic!("{e}"));
        let want = bedrock::frames_from_sse(&fixture);
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
            assert_eq!(got.content_type, bedrock::EVENT_STREAM);
        }
    }
    let body = history("summarise the readme", 1);
    let direct = send(
        &mock.url(),
        WHOLE.trim_start_matches("/bedrock"),
        &body,
        &[("x-mock-script", TEXT)],
    )
    .await;
    let proxied = send(&lg.url(), WHOLE, &body, &[("x-mock-script", TEXT)]).await;
    assert_eq!(proxied.status, 200);
    let strip = |b: &[u8]| {
        let v: Value = serde_json::from_slice(b).unwrap_or_default();
        unnumbered(&[v])
    };
    assert_eq!(strip(&proxied.body), strip(&direct.body));
    let recorded = mock_requests(&mock).await;
    let last = recorded.last().cloned().unwrap_or_default();
    assert_eq!(
        last["path"],
        "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke"
    );
    assert_eq!(last["headers"]["authorization"], SIGV4);
    assert_eq!(last["headers"]["x-amz-date"], "20261207T120000Z");
    assert_eq!(last["body"], body.to_string());
}

/// warn × request time: a signed body is never rewritten, so on Bedrock the
/// warning is logged and counted only — the upstream gets the agent's
/// bytes exactly (the signature still matches) and the agent its answer.
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
}

/// A model id's escaped `:` (`v1%3A0`, as the AWS SDKs write it) reaches
/// the upstream as sent: SigV4 signs the path's escapes. The same path on an
/// Anthropic route is forwarded decoded, as every other route's.
#[tokio::test(flavor = "multi_thread")]
async fn a_bedrock_path_reaches_the_upstream_with_its_escapes() {
    let (mock, lg) = start("");
    let escaped = "/bedrock/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream";
    let got = send(
        &lg.url(),
        escaped,
        &history("read the notes", 0),
        &[("x-mock-script", TEXT)],
    )
    .await;
    assert_eq!(got.status, 200);
    let recorded = mock_requests(&mock).await;
    let last = recorded.last().cloned().unwrap_or_default();
    assert_eq!(
        last["path"], "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream",
        "{last}"
    );
    // Judged all the same: the decoded path names the dialect.
    let text = metrics(&lg).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("loopguard_requests_total{") && l.contains("dialect=\"bedrock\"")),
        "not judged as bedrock: {text}"
    );
}

/// block × request time × stream and whole: five identical cycles are
/// answered without calling upstream: a complete, valid event stream
/// (`message_start` … `message_stop`, `end_turn`, every CRC right), or one
/// Anthropic `message`.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_time_block_is_a_complete_event_stream() {
    let (mock, lg) = start("");
    let got = send(&lg.url(), STREAM, &history("fix the parser", 5), &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.content_type, bedrock::EVENT_STREAM);
    assert!(got.verdict.as_deref().is_some_and(|v| v.starts_with("block")));
    let events = events(&got.body);
    assert_eq!(
        events.first().map(|e| e["type"].clone()),
        Some(json!("message_start"))
    );
    assert_eq!(
        events.last().map(|e| e["type"].clone()),
        Some(json!("message_stop"))
    );
    assert!(text_of(&events).starts_with("[loopguard] identical_call"));
    assert_eq!(stop_reason(&events).as_deref(), Some("end_turn"));
    assert_eq!(
        events[0]["message"]["model"], "anthropic.claude-sonnet-4-5-20250929-v1:0",
        "the model from the path"
    );

    let got = send(&lg.url(), WHOLE, &history("fix the lexer", 5), &[]).await;
    let message: Value = serde_json::from_slice(&got.body).unwrap_or_default();
    assert_eq!(message["type"], "message");
    assert_eq!(message["stop_reason"], "end_turn");
    assert!(
        message["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("[loopguard]"))
    );
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
        let error: Value = serde_json::from_slice(&got.body).unwrap_or_default();
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("loop_detected"), "{error}");
        assert!(message.contains("identical_call"), "{message}");
    }
}

/// warn × stream time × stream and whole: the third identical call is
/// released as the upstream sent it.
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
            assert_eq!(unnumbered(&events(&got.body)), unnumbered(&events(&direct.body)));
            assert!(has_calls(&events(&got.body)));
        } else {
            let v = |b: &[u8]| serde_json::from_slice::<Value>(b).unwrap_or_default();
            assert_eq!(unnumbered(&[v(&got.body)]), unnumbered(&[v(&direct.body)]));
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
/// withheld; the stream goes on with the explanation as a text block and
/// ends `end_turn`, `message_stop`, as valid frames; the text already sent
/// stays. A whole answer keeps its text with the call replaced.
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
    assert_eq!(
        events.last().map(|e| e["type"].clone()),
        Some(json!("message_stop"))
    );

    let got = send(&lg.url(), WHOLE, &history("walk the forest", 4), &headers).await;
    let message: Value = serde_json::from_slice(&got.body).unwrap_or_default();
    let blocks = message["content"].as_array().cloned().unwrap_or_default();
    assert!(blocks.iter().all(|b| b["type"] == "text"), "{message}");
    assert_eq!(blocks[0]["text"], "Let me look again.");
    assert_eq!(message["stop_reason"], "end_turn");
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
        let error: Value = serde_json::from_slice(&got.body).unwrap_or_default();
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("loop_detected"))
        );
    }
    let got = send(
        &lg.url(),
        STREAM,
        &history("read it once more", 4),
        &[("x-mock-script", TEXT_THEN_LS)],
    )
    .await;
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

/// Fail open: an event stream whose first message fails its CRC is not
/// judged and reaches the client byte for byte as the upstream sent it;
/// the fail-open is counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_event_stream_passes_unjudged_and_unchanged() {
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
    let mut decoder = Decoder::default();
    assert!(decoder.push(&got.body, &mut Vec::new()).is_err(), "still corrupt");
    let text = metrics(&lg).await;
    assert!(
        metric_value(&text, "loopguard_fail_open_total{reason=\"response_unparsable\"}") >= 1.0,
        "{text}"
    );
}

/// Bounded memory: a message longer than `max_response_bytes` is refused
/// from its prelude (never buffered) and the stream passes unjudged, byte
/// for byte, counted as `response_frame_too_large`.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_over_the_cap_passes_unjudged_and_unchanged() {
    let mock = mock();
    let config = format!(
        "{}\n[[routes]]\nprefix = \"/bedrock\"\nprovider = \"bedrock\"\nupstream = \"{}\"\nstrip_prefix = true\n",
        config_for(&mock.url(), "max_response_bytes = 256"),
        mock.url()
    );
    let lg = loopguard(&config);
    let body = history("walk the meadow", 0);
    let headers = [("x-mock-fixture", "anthropic/parallel-tool-use-same-tool.sse")];
    let direct = send(
        &mock.url(),
        STREAM.trim_start_matches("/bedrock"),
        &body,
        &headers,
    )
    .await;
    assert!(
        messages(&direct.body).iter().any(|m| m.payload.len() > 256),
        "the fixture has a message over the cap"
    );
    let got = send(&lg.url(), STREAM, &body, &headers).await;
    assert_eq!(got.status, 200);
    assert!(got.body == direct.body, "byte for byte");
    let text = metrics(&lg).await;
    assert!(
        metric_value(
            &text,
            "loopguard_fail_open_total{reason=\"response_frame_too_large\"}"
        ) >= 1.0,
        "{text}"
    );
}
