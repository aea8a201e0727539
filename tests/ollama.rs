//! Ollama's native API end to end through the built binary and the mock
//! upstream: byte-exact passthrough when quiet (streamed NDJSON and
//! `stream: false`, other `/api/...` paths), and the eight in-flight action
//! cases — warn, block and abort, at request time and at stream time, for a
//! stream and a single object — in Ollama's own shapes.

mod common;

use std::path::PathBuf;

use common::{Got, Proc, client, config_for, loopguard, mock_requests, mock_with_fixtures};
use serde_json::{Value, json};

const CHAT: &str = "/ollama/api/chat";
const LS_LOOP: &str = r#"{"turns":[{"tool_calls":[{"name":"ls","arguments":{"path":"."}}]}]}"#;
const TEXT: &str = r#"{"turns":[{"text":"Here is what I found in the directory listing."}]}"#;
const TEXT_THEN_LS: &str =
    r#"{"turns":[{"text":"Let me look again.","tool_calls":[{"name":"ls","arguments":{"path":"."}}]}]}"#;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The mock (serving `tests/fixtures`) and loopguard with an `ollama`
/// route at `/ollama` (strip_prefix), plus `extra` TOML.
fn start(extra: &str) -> (Proc, Proc) {
    let mock = mock_with_fixtures(&fixtures());
    let config = format!(
        "{}\n[[routes]]\nprefix = \"/ollama\"\nprovider = \"ollama\"\nupstream = \"{}\"\nstrip_prefix = true\n\n{extra}",
        config_for(&mock.url(), ""),
        mock.url()
    );
    (mock, loopguard(&config))
}

/// An `/api/chat` body whose history holds `cycles` identical `ls` calls,
/// each answered the same; `stream: None` leaves Ollama's default (true).
fn history(task: &str, cycles: usize, stream: Option<bool>) -> Value {
    let mut messages = vec![json!({"role": "user", "content": task})];
    for _ in 0..cycles {
        messages.push(json!({"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "ls", "arguments": {"path": "."}}}]}));
        messages.push(json!({"role": "tool", "tool_name": "ls", "content": "Cargo.toml src tests"}));
    }
    let mut body = json!({"model": "llama3.2", "messages": messages, "tools": [
        {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]});
    if let Some(stream) = stream {
        body["stream"] = json!(stream);
    }
    body
}

async fn send(base: &str, path: &str, body: &Value, headers: &[(&str, &str)]) -> Got<String> {
    common::post_json(base, path, body, headers).await.into_text()
}

/// Every line of an NDJSON body, parsed; panics on a line that is not JSON.
fn lines(body: &str) -> Vec<Value> {
    assert!(body.ends_with('\n'), "NDJSON ends with a newline: {body:?}");
    body.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// The assistant text of an answer (all lines' `message.content` joined).
fn text_of(lines: &[Value]) -> String {
    lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect()
}

fn has_calls(lines: &[Value]) -> bool {
    lines.iter().any(|l| l["message"].get("tool_calls").is_some())
}

/// The last tool message the upstream received carried the warning.
fn warned(request: &Value) -> bool {
    let body: Value = serde_json::from_str(request["body"].as_str().unwrap_or_default()).unwrap_or_default();
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
        .and_then(|m| m["content"].as_str())
        .is_some_and(|c| c.starts_with("Cargo.toml src tests\n\n[loopguard]"))
}

/// Quiet traffic is byte-exact: a streamed NDJSON fixture (written in
/// random pieces, so lines split across chunks), a scripted stream, a
/// `stream: false` object, `/api/generate`, and a path loopguard does not
/// judge (`/api/tags`) all reach the client as the upstream sent them.
#[tokio::test(flavor = "multi_thread")]
async fn quiet_ollama_traffic_passes_byte_exact() {
    let (mock, lg) = start("");
    let fixture_cases = [
        ("/api/chat", "ollama/chat-text.ndjson"),
        ("/api/chat", "ollama/chat-tool-call.ndjson"),
        ("/api/generate", "ollama/generate-text.ndjson"),
    ];
    for (path, fixture) in fixture_cases {
        let body = json!({"model": "llama3.2", "messages": [{"role": "user", "content": "why is the sky blue?"}], "prompt": "why?"});
        let headers = [
            ("x-mock-fixture", fixture),
            ("x-mock-chunk", "random"),
            ("x-mock-seed", "3"),
        ];
        let got = send(&lg.url(), &format!("/ollama{path}"), &body, &headers).await;
        let want = std::fs::read_to_string(fixtures().join(fixture)).unwrap_or_default();
        assert_eq!(got.status, 200);
        assert_eq!(got.body, want, "{fixture}");
        assert!(got.verdict.is_none());
        assert_eq!(got.content_type, "application/x-ndjson");
    }
    let scripted = [
        (CHAT, history("summarise the readme", 1, None)),
        (CHAT, history("summarise the readme", 1, Some(false))),
        (
            "/ollama/api/generate",
            json!({"model": "llama3.2", "prompt": "why is the sky blue?"}),
        ),
        (
            "/ollama/api/generate",
            json!({"model": "llama3.2", "prompt": "why?", "stream": false}),
        ),
    ];
    for (path, body) in scripted {
        let headers = [("x-mock-script", TEXT_THEN_LS)];
        let direct = send(&mock.url(), path.trim_start_matches("/ollama"), &body, &headers).await;
        let proxied = send(&lg.url(), path, &body, &headers).await;
        assert_eq!(proxied.status, 200);
        assert_eq!(proxied.body, direct.body, "{path} {body}");
        assert_eq!(proxied.content_type, direct.content_type);
    }
    let tags = client()
        .get(format!("{}/ollama/api/tags", lg.url()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tags.status(), 200);
    let recorded = mock_requests(&mock).await;
    let last = recorded.last().cloned().unwrap_or_default();
    assert_eq!(last["path"], "/api/tags", "other paths pass under the route");
}

/// warn × request time × stream and object: with three identical cycles in
/// the history, the upstream gets the warning appended to the last
/// `role: tool` message, and the agent its answer unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_time_warning_is_appended_to_the_last_tool_message() {
    let (mock, lg) = start("");
    for stream in [None, Some(false)] {
        let body = history(&format!("tidy the imports {stream:?}"), 3, stream);
        let got = send(&lg.url(), CHAT, &body, &[("x-mock-script", TEXT)]).await;
        assert_eq!(got.status, 200);
        assert!(!got.body.contains("[loopguard]"), "the answer is the upstream's");
    }
    let recorded = mock_requests(&mock).await;
    assert_eq!(recorded.len(), 2);
    assert!(recorded.iter().all(warned), "{recorded:?}");
}

/// block × request time × stream and object: five identical cycles with
/// identical results are answered by loopguard without calling upstream,
/// as a complete NDJSON stream ending with `done: true`, `done_reason:
/// "stop"` — or one such object for `stream: false`.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_time_block_is_a_complete_ollama_answer() {
    let (mock, lg) = start("");
    let got = send(&lg.url(), CHAT, &history("fix the parser", 5, None), &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.content_type, "application/x-ndjson");
    assert!(got.verdict.as_deref().is_some_and(|v| v.starts_with("block")));
    let lines = lines(&got.body);
    let last = lines.last().cloned().unwrap_or_default();
    assert_eq!(
        (last["done"].clone(), last["done_reason"].clone()),
        (json!(true), json!("stop"))
    );
    assert!(lines[..lines.len() - 1].iter().all(|l| l["done"] == false));
    assert!(text_of(&lines).contains("[loopguard]"));
    assert_eq!(last["model"], "llama3.2");

    let got = send(&lg.url(), CHAT, &history("fix the lexer", 5, Some(false)), &[]).await;
    let object: Value = serde_json::from_str(&got.body).unwrap_or_default();
    assert_eq!(object["done"], true);
    assert_eq!(object["done_reason"], "stop");
    assert_eq!(object["message"]["role"], "assistant");
    assert!(
        object["message"]["content"]
            .as_str()
            .is_some_and(|c| c.contains("[loopguard]"))
    );
    assert!(
        mock_requests(&mock).await.is_empty(),
        "no upstream call for a block"
    );
}

/// abort × request time × stream and object: HTTP 400 with Ollama's
/// `{"error": "…"}`, naming the detector.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_time_abort_is_ollamas_error() {
    let (_mock, lg) = start("[loop_detection.actions]\ncritical = \"abort\"\n");
    for stream in [None, Some(false)] {
        let got = send(
            &lg.url(),
            CHAT,
            &history(&format!("fix it {stream:?}"), 5, stream),
            &[],
        )
        .await;
        assert_eq!(got.status, 400);
        let error: Value = serde_json::from_str(&got.body).unwrap_or_default();
        let message = error["error"].as_str().unwrap_or_default();
        assert!(message.starts_with("loop_detected"), "{}", got.body);
        assert!(message.contains("identical_call"), "{message}");
    }
}

/// warn × stream time × stream and object: the third identical call is
/// released unchanged (the same bytes the upstream sent); the warning rides
/// on the next request.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_time_warning_releases_the_call_unchanged() {
    let (mock, lg) = start("");
    for stream in [None, Some(false)] {
        let body = history(&format!("list it {stream:?}"), 2, stream);
        let headers = [("x-mock-script", LS_LOOP)];
        let direct = send(&mock.url(), "/api/chat", &body, &headers).await;
        let got = send(&lg.url(), CHAT, &body, &headers).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.body, direct.body, "released byte for byte");
    }
    let at_stream: Vec<Value> = lg
        .wait_log_events("verdict", 2)
        .into_iter()
        .filter(|v| v["at"] == "stream")
        .collect();
    assert_eq!(at_stream.len(), 2, "{at_stream:?}");
    assert!(
        at_stream
            .iter()
            .all(|v| v["level"] == "warning" && v["action"] == "warn"),
        "{at_stream:?}"
    );
}

/// block × stream time × stream and object: the fifth identical call is
/// withheld and replaced by the explanation; the stream still ends with
/// `done: true`, `done_reason: "stop"` and the upstream's counters, and the
/// text already sent stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_time_block_replaces_the_call_and_ends_the_stream() {
    let (_mock, lg) = start("");
    let headers = [("x-mock-script", TEXT_THEN_LS), ("x-mock-chunk", "random")];
    let got = send(&lg.url(), CHAT, &history("walk the tree", 4, None), &headers).await;
    assert_eq!(got.status, 200);
    let lines = lines(&got.body);
    assert!(!has_calls(&lines), "{}", got.body);
    let text = text_of(&lines);
    assert!(text.starts_with("Let me look again."), "{text}");
    assert!(text.contains("[loopguard]"), "{text}");
    let last = lines.last().cloned().unwrap_or_default();
    assert_eq!(last["done"], true);
    assert_eq!(last["done_reason"], "stop");
    assert_eq!(last["eval_count"], 12, "the upstream's counters are kept");
    assert_eq!(lines.iter().filter(|l| l["done"] == true).count(), 1);

    let got = send(
        &lg.url(),
        CHAT,
        &history("walk the forest", 4, Some(false)),
        &headers,
    )
    .await;
    let object: Value = serde_json::from_str(&got.body).unwrap_or_default();
    assert!(object["message"].get("tool_calls").is_none(), "{}", got.body);
    assert_eq!(object["done_reason"], "stop");
    let content = object["message"]["content"].as_str().unwrap_or_default();
    assert!(
        content.starts_with("Let me look again.\n\n[loopguard]"),
        "{content}"
    );
    assert!(got.verdict.as_deref().is_some_and(|v| v.starts_with("block")));
}

/// abort × stream time × stream and object: a call judged before any text
/// went out is answered with HTTP 400 `{"error": "…"}`; once text went out,
/// the stream ends with Ollama's in-stream error line.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_time_abort_is_an_error_status_or_an_error_line() {
    let (_mock, lg) = start("[loop_detection.actions]\ncritical = \"abort\"\n");
    for stream in [None, Some(false)] {
        let body = history(&format!("read it {stream:?}"), 4, stream);
        let got = send(&lg.url(), CHAT, &body, &[("x-mock-script", LS_LOOP)]).await;
        assert_eq!(got.status, 400, "{}", got.body);
        let error: Value = serde_json::from_str(&got.body).unwrap_or_default();
        assert!(
            error["error"]
                .as_str()
                .is_some_and(|m| m.starts_with("loop_detected")),
            "{}",
            got.body
        );
    }
    let body = history("read it once more", 4, None);
    let got = send(&lg.url(), CHAT, &body, &[("x-mock-script", TEXT_THEN_LS)]).await;
    assert_eq!(got.status, 200);
    let lines = lines(&got.body);
    assert!(!has_calls(&lines));
    let last = lines.last().cloned().unwrap_or_default();
    assert!(
        last["error"]
            .as_str()
            .is_some_and(|m| m.starts_with("loop_detected")),
        "{}",
        got.body
    );
}
