//! Vertex AI end to end through the built binary and the mock upstream:
//! Gemini on Vertex (`…/publishers/google/models/{m}:streamGenerateContent`,
//! `:generateContent`) on a `gemini` route and Claude on Vertex
//! (`…/publishers/anthropic/models/{m}:streamRawPredict`, `:rawPredict`:
//! Anthropic's body with `anthropic_version`, no `model`) on an `anthropic`
//! route. Byte-exact passthrough of the recorded fixtures when quiet, the
//! caller's bearer credential forwarded untouched, and the eight in-flight
//! action cases — warn, block and abort, at request time and at stream
//! time, streamed and not — in each dialect's own shapes.

mod common;

use common::{Got, Proc, config_for, fixtures_of, loopguard, mock, mock_requests};
use serde_json::{Value, json};

/// The caller's Google credential: Vertex AI takes an OAuth bearer token.
const BEARER: &str = "Bearer ya29.fake-token-for-loopguard-tests";
const LS_LOOP: &str = r#"{"turns":[{"tool_calls":[{"name":"ls","arguments":{"path":"."}}]}]}"#;
const TEXT: &str = r#"{"turns":[{"text":"Here is what I found in the directory listing."}]}"#;
const TEXT_THEN_LS: &str =
    r#"{"turns":[{"text":"Let me look again.","tool_calls":[{"name":"ls","arguments":{"path":"."}}]}]}"#;
const RESULT: &str = "Cargo.toml src tests";

/// One of the two Vertex wires, with what its tests need to know of it.
struct Wire {
    /// The route's prefix and the Vertex path under it, up to the method.
    base: &'static str,
    /// The streaming method (with its query) and the non-streaming one.
    stream_method: &'static str,
    whole_method: &'static str,
    /// The shared fixtures directory of its dialect.
    fixtures: &'static str,
    /// A request body whose history holds `cycles` identical `ls` calls,
    /// each answered the same.
    history: fn(&str, usize) -> Value,
    /// Whether a body the upstream received carries loopguard's warning
    /// where the dialect puts it.
    warned: fn(&Value) -> bool,
}

const CLAUDE: Wire = Wire {
    base: "/vertex-claude/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929",
    stream_method: ":streamRawPredict",
    whole_method: ":rawPredict",
    fixtures: "anthropic",
    history: claude_history,
    warned: claude_warned,
};

const GEMINI: Wire = Wire {
    base: "/vertex/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash",
    stream_method: ":streamGenerateContent?alt=sse",
    whole_method: ":generateContent",
    fixtures: "gemini",
    history: gemini_history,
    warned: gemini_warned,
};

/// Claude on Vertex: `anthropic_version` in the body, the model in the
/// path, no `stream` flag (`:streamRawPredict` says it).
fn claude_history(task: &str, cycles: usize) -> Value {
    let mut messages = vec![json!({"role": "user", "content": task})];
    for i in 0..cycles {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": format!("toolu_{i}"), "name": "ls", "input": {"path": "."}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": RESULT}]}));
    }
    json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 1024, "messages": messages,
        "tools": [{"name": "ls", "input_schema": {"type": "object"}}]})
}

fn claude_warned(body: &Value) -> bool {
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    let blocks = last["content"].as_array().cloned().unwrap_or_default();
    blocks.first().is_some_and(|b| b["type"] == "tool_result")
        && blocks.last().is_some_and(|b| {
            b["type"] == "text" && b["text"].as_str().is_some_and(|t| t.starts_with("[loopguard]"))
        })
}

fn gemini_history(task: &str, cycles: usize) -> Value {
    let mut contents = vec![json!({"role": "user", "parts": [{"text": task}]})];
    for _ in 0..cycles {
        contents.push(
            json!({"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {"path": "."}}}]}),
        );
        contents.push(json!({"role": "user", "parts": [
            {"functionResponse": {"name": "ls", "response": {"output": RESULT}}}]}));
    }
    json!({"contents": contents, "tools": [{"functionDeclarations": [
        {"name": "ls", "parameters": {"type": "object"}}]}]})
}

fn gemini_warned(body: &Value) -> bool {
    body["contents"]
        .as_array()
        .and_then(|c| c.last())
        .and_then(|c| c["parts"].as_array())
        .and_then(|p| p.last())
        .and_then(|p| p["functionResponse"]["response"]["loopguard_warning"].as_str())
        .is_some_and(|w| w.starts_with("[loopguard]"))
}

/// The mock (serving the shared fixtures) and loopguard with the two
/// Vertex routes of `config/vertex.toml` pointed at it, plus `extra` TOML.
fn start(extra: &str) -> (Proc, Proc) {
    let mock = mock();
    let config = format!(
        "{}\n[[routes]]\nprefix = \"/vertex\"\nprovider = \"gemini\"\nupstream = \"{url}\"\nstrip_prefix = true\n\n\
         [[routes]]\nprefix = \"/vertex-claude\"\nprovider = \"anthropic\"\nupstream = \"{url}\"\nstrip_prefix = true\n\n{extra}",
        config_for(&mock.url(), ""),
        url = mock.url()
    );
    (mock, loopguard(&config))
}

async fn send(base: &str, path: &str, body: &Value, headers: &[(&str, &str)]) -> Got<String> {
    let mut all = vec![("authorization", BEARER), ("content-type", "application/json")];
    all.extend_from_slice(headers);
    common::post_json(base, path, body, &all).await.into_text()
}

/// A mock answer with its per-answer counter masked (`msg_mock_7`,
/// `toolu_mock_7_0`: the mock numbers its answers, so the same script
/// answered twice differs only there).
fn unnumbered(body: &str) -> String {
    let re = regex::Regex::new(r"mock_[0-9]+").unwrap_or_else(|e| panic!("{e}"));
    re.replace_all(body, "mock_N").into_owned()
}

/// The JSON `data:` payloads of an SSE body.
fn payloads(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).unwrap_or_else(|e| panic!("{e}: {d:?}")))
        .collect()
}

/// What an answer of either dialect says, streamed (SSE payloads) or whole
/// (one JSON document): its text, whether it carries a tool call, its
/// finish reason, and the error message if it is (or ends with) an error.
#[derive(Debug, Default)]
struct Reading {
    text: String,
    calls: bool,
    finish: Option<String>,
    error: Option<String>,
}

fn read(wire: &Wire, streamed: bool, body: &str) -> Reading {
    let docs = if streamed {
        payloads(body)
    } else {
        vec![serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))]
    };
    let mut r = Reading::default();
    for doc in &docs {
        if let Some(message) = doc["error"]["message"].as_str() {
            r.error = Some(message.to_owned());
        }
        if wire.fixtures == "anthropic" {
            let blocks: Vec<&Value> = match doc["type"].as_str() {
                Some("content_block_start") => vec![&doc["content_block"]],
                Some("message") => doc["content"].as_array().into_iter().flatten().collect(),
                _ => Vec::new(),
            };
            r.calls |= blocks.iter().any(|b| b["type"] == "tool_use");
            r.text.extend(blocks.iter().filter_map(|b| b["text"].as_str()));
            r.text.extend(doc["delta"]["text"].as_str());
            if let Some(stop) = doc["stop_reason"]
                .as_str()
                .or(doc["delta"]["stop_reason"].as_str())
            {
                r.finish = Some(stop.to_owned());
            }
        } else {
            let parts = doc["candidates"][0]["content"]["parts"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            r.calls |= parts.iter().any(|p| p.get("functionCall").is_some());
            r.text.extend(parts.iter().filter_map(|p| p["text"].as_str()));
            if let Some(finish) = doc["candidates"][0]["finishReason"].as_str() {
                r.finish = Some(finish.to_owned());
            }
        }
    }
    if wire.fixtures == "anthropic" && streamed && r.error.is_none() {
        assert_eq!(
            docs.last().map(|d| d["type"].clone()),
            Some(json!("message_stop")),
            "an Anthropic stream ends with message_stop: {body}"
        );
    }
    r
}

/// The finish reason of a clean end in the wire's dialect.
fn stop(wire: &Wire) -> &'static str {
    if wire.fixtures == "anthropic" {
        "end_turn"
    } else {
        "STOP"
    }
}

/// Quiet traffic is byte-exact on both Vertex wires: every recorded fixture
/// of the dialect (written in random pieces and byte by byte), a scripted
/// stream and a non-streaming answer all reach the client as the upstream
/// sent them; the upstream gets the Vertex path under the route and the
/// caller's bearer credential unchanged, and the Claude body its
/// `anthropic_version` and no `model`, byte for byte.
#[tokio::test(flavor = "multi_thread")]
async fn quiet_vertex_traffic_passes_byte_exact() {
    let (mock, lg) = start("");
    for wire in [&CLAUDE, &GEMINI] {
        let stream_path = format!("{}{}", wire.base, wire.stream_method);
        for file in fixtures_of(wire.fixtures) {
            let name = format!(
                "{}/{}",
                wire.fixtures,
                file.file_name().unwrap_or_default().to_string_lossy()
            );
            let want = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}"));
            for (chunk, seed) in [("random", "1"), ("bytes", "0")] {
                let headers = [
                    ("x-mock-fixture", name.as_str()),
                    ("x-mock-chunk", chunk),
                    ("x-mock-seed", seed),
                ];
                let got = send(&lg.url(), &stream_path, &(wire.history)("hi", 0), &headers).await;
                assert_eq!(got.status, 200, "{name}");
                assert!(got.body == want, "{name} ({chunk}) is not byte-exact");
                assert!(got.verdict.is_none());
                assert_eq!(got.content_type, "text/event-stream");
            }
        }
        for method in [wire.stream_method, wire.whole_method] {
            let path = format!("{}{method}", wire.base);
            let body = (wire.history)(&format!("summarise the readme {method}"), 1);
            let headers = [("x-mock-script", TEXT_THEN_LS)];
            let upstream_path = path
                .split_once("/v1/")
                .map(|(_, p)| format!("/v1/{p}"))
                .unwrap_or_default();
            let direct = send(&mock.url(), &upstream_path, &body, &headers).await;
            let proxied = send(&lg.url(), &path, &body, &headers).await;
            assert_eq!(proxied.status, 200);
            assert_eq!(unnumbered(&proxied.body), unnumbered(&direct.body), "{path}");
            assert_eq!(proxied.content_type, direct.content_type);
            let recorded = mock_requests(&mock).await;
            let last = recorded.last().cloned().unwrap_or_default();
            assert_eq!(
                format!(
                    "{}{}",
                    last["path"].as_str().unwrap_or_default(),
                    last["query"]
                        .as_str()
                        .map(|q| format!("?{q}"))
                        .unwrap_or_default()
                ),
                upstream_path
            );
            assert_eq!(
                last["headers"]["authorization"], BEARER,
                "the credential passes untouched"
            );
            assert_eq!(last["body"], body.to_string(), "the body passes byte for byte");
        }
    }
    let raw: Value = serde_json::from_str(
        mock_requests(&mock)
            .await
            .iter()
            .rev()
            .find(|r| r["path"].as_str().is_some_and(|p| p.ends_with(":rawPredict")))
            .and_then(|r| r["body"].as_str())
            .unwrap_or_default(),
    )
    .unwrap_or_default();
    assert_eq!(raw["anthropic_version"], "vertex-2023-10-16");
    assert!(raw.get("model").is_none());
}

/// warn × request time × stream and whole: with three identical cycles in
/// the history, the upstream gets the warning where the dialect carries it
/// (Claude: a text block after the `tool_result`s; Gemini: a
/// `loopguard_warning` inside the last `functionResponse.response`), with
/// the bearer credential and, for Claude, `anthropic_version` and no
/// `model` kept; the agent gets the upstream's answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_time_warning_is_injected_into_the_vertex_body() {
    let (mock, lg) = start("");
    for wire in [&CLAUDE, &GEMINI] {
        for method in [wire.stream_method, wire.whole_method] {
            let body = (wire.history)(&format!("tidy the imports {method}"), 3);
            let got = send(
                &lg.url(),
                &format!("{}{method}", wire.base),
                &body,
                &[("x-mock-script", TEXT)],
            )
            .await;
            assert_eq!(got.status, 200, "{}", got.body);
            assert!(!got.body.contains("[loopguard]"), "the answer is the upstream's");
        }
    }
    let recorded = mock_requests(&mock).await;
    assert_eq!(recorded.len(), 4);
    for r in &recorded {
        let body: Value = serde_json::from_str(r["body"].as_str().unwrap_or_default()).unwrap_or_default();
        let wire = if body.get("anthropic_version").is_some() {
            &CLAUDE
        } else {
            &GEMINI
        };
        assert!((wire.warned)(&body), "{body}");
        assert_eq!(r["headers"]["authorization"], BEARER);
        if wire.fixtures == "anthropic" {
            assert!(
                body.get("model").is_none() && body.get("stream").is_none(),
                "{body}"
            );
        }
    }
}

/// block × request time × stream and whole: five identical cycles with
/// identical results are answered by loopguard without calling upstream: a
/// complete stream in the dialect (Claude: `message_start` … `message_stop`,
/// `end_turn`, even though the body never said `"stream": true`; Gemini:
/// `STOP`), or one whole answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_time_block_is_a_complete_vertex_answer() {
    let (mock, lg) = start("");
    for wire in [&CLAUDE, &GEMINI] {
        for (method, streamed) in [(wire.stream_method, true), (wire.whole_method, false)] {
            let body = (wire.history)(&format!("fix the parser {method}"), 5);
            let got = send(&lg.url(), &format!("{}{method}", wire.base), &body, &[]).await;
            assert_eq!(got.status, 200, "{}", got.body);
            assert!(got.verdict.as_deref().is_some_and(|v| v.starts_with("block")));
            let want_type = if streamed {
                "text/event-stream"
            } else {
                "application/json"
            };
            assert!(got.content_type.starts_with(want_type), "{}", got.content_type);
            let r = read(wire, streamed, &got.body);
            assert!(r.text.starts_with("[loopguard] identical_call"), "{r:?}");
            assert!(!r.calls);
            assert_eq!(r.finish.as_deref(), Some(stop(wire)));
        }
    }
    assert!(
        mock_requests(&mock).await.is_empty(),
        "no upstream call for a block"
    );
}

/// abort × request time × stream and whole: HTTP 400 in the dialect's
/// error shape, naming the detector.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_time_abort_is_the_dialects_error() {
    let (_mock, lg) = start("[loop_detection.actions]\ncritical = \"abort\"\n");
    for wire in [&CLAUDE, &GEMINI] {
        for method in [wire.stream_method, wire.whole_method] {
            let body = (wire.history)(&format!("fix it {method}"), 5);
            let got = send(&lg.url(), &format!("{}{method}", wire.base), &body, &[]).await;
            assert_eq!(got.status, 400);
            let error: Value = serde_json::from_str(&got.body).unwrap_or_default();
            let message = error["error"]["message"].as_str().unwrap_or_default();
            assert!(message.starts_with("loop_detected"), "{}", got.body);
            assert!(message.contains("identical_call"), "{message}");
            if wire.fixtures == "anthropic" {
                assert_eq!(error["type"], "error");
                assert_eq!(error["error"]["type"], "invalid_request_error");
            } else {
                assert_eq!(error["error"]["status"], "FAILED_PRECONDITION");
            }
        }
    }
}

/// warn × stream time × stream and whole: the third identical call is
/// released as the upstream sent it, byte for byte; the verdict is logged.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_time_warning_releases_the_call_unchanged() {
    let (mock, lg) = start("");
    for wire in [&CLAUDE, &GEMINI] {
        for method in [wire.stream_method, wire.whole_method] {
            let path = format!("{}{method}", wire.base);
            let body = (wire.history)(&format!("list it {method}"), 2);
            let headers = [("x-mock-script", LS_LOOP)];
            let upstream_path = path
                .split_once("/v1/")
                .map(|(_, p)| format!("/v1/{p}"))
                .unwrap_or_default();
            let direct = send(&mock.url(), &upstream_path, &body, &headers).await;
            let got = send(&lg.url(), &path, &body, &headers).await;
            assert_eq!(got.status, 200);
            assert_eq!(
                unnumbered(&got.body),
                unnumbered(&direct.body),
                "released byte for byte"
            );
        }
    }
    let at_stream: Vec<Value> = lg
        .wait_log_events("verdict", 4)
        .into_iter()
        .filter(|v| v["at"] == "stream")
        .collect();
    assert_eq!(at_stream.len(), 4, "{at_stream:?}");
    assert!(
        at_stream
            .iter()
            .all(|v| v["level"] == "warning" && v["action"] == "warn")
    );
}

/// block × stream time × stream and whole: the fifth identical call is
/// withheld and replaced by the explanation; the answer ends cleanly in
/// the dialect, and the text the model wrote first stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_time_block_replaces_the_call_and_ends_the_answer() {
    let (_mock, lg) = start("");
    for wire in [&CLAUDE, &GEMINI] {
        for (method, streamed) in [(wire.stream_method, true), (wire.whole_method, false)] {
            let body = (wire.history)(&format!("walk the tree {method}"), 4);
            let headers = [("x-mock-script", TEXT_THEN_LS), ("x-mock-chunk", "random")];
            let got = send(&lg.url(), &format!("{}{method}", wire.base), &body, &headers).await;
            assert_eq!(got.status, 200, "{}", got.body);
            let r = read(wire, streamed, &got.body);
            assert!(!r.calls, "{}", got.body);
            assert!(r.text.starts_with("Let me look again."), "{r:?}");
            assert!(r.text.contains("[loopguard] identical_call"), "{r:?}");
            assert_eq!(r.finish.as_deref(), Some(stop(wire)), "{}", got.body);
        }
    }
}

/// abort × stream time × stream and whole: a call judged before any text
/// went out is answered with HTTP 400 in the dialect's error shape; once
/// text went out, the stream ends with the dialect's in-stream error.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_time_abort_is_an_error_status_or_an_error_event() {
    let (_mock, lg) = start("[loop_detection.actions]\ncritical = \"abort\"\n");
    for wire in [&CLAUDE, &GEMINI] {
        for method in [wire.stream_method, wire.whole_method] {
            let body = (wire.history)(&format!("read it {method}"), 4);
            let got = send(
                &lg.url(),
                &format!("{}{method}", wire.base),
                &body,
                &[("x-mock-script", LS_LOOP)],
            )
            .await;
            assert_eq!(got.status, 400, "{}", got.body);
            let error: Value = serde_json::from_str(&got.body).unwrap_or_default();
            assert!(
                error["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("loop_detected")),
                "{}",
                got.body
            );
        }
        let path = format!("{}{}", wire.base, wire.stream_method);
        let body = (wire.history)("read it once more", 4);
        let got = send(&lg.url(), &path, &body, &[("x-mock-script", TEXT_THEN_LS)]).await;
        assert_eq!(got.status, 200);
        let r = read(wire, true, &got.body);
        assert!(!r.calls, "{}", got.body);
        assert!(r.text.starts_with("Let me look again."));
        assert!(
            r.error.as_deref().is_some_and(|m| m.starts_with("loop_detected")),
            "{}",
            got.body
        );
    }
}

/// A Vertex path names its publisher: Claude's path sent to the Gemini
/// route (a base URL pointed at the wrong prefix) gets HTTP 400 naming the
/// Vertex Claude route — not the public Anthropic one — and Gemini's path
/// on the Claude route names the Vertex Gemini route; nothing is forwarded.
#[tokio::test(flavor = "multi_thread")]
async fn a_vertex_path_on_the_other_publishers_route_names_the_right_route() {
    let mock = mock();
    let config = format!(
        "{}\n[[routes]]\nprefix = \"/vertex\"\nprovider = \"gemini\"\nupstream = \"https://us-central1-aiplatform.googleapis.com\"\nstrip_prefix = true\n\n\
         [[routes]]\nprefix = \"/vertex-claude\"\nprovider = \"anthropic\"\nupstream = \"https://us-east5-aiplatform.googleapis.com\"\nstrip_prefix = true\n",
        config_for(&mock.url(), "")
    );
    let lg = loopguard(&config);
    let claude_on_gemini = CLAUDE.base.replacen("/vertex-claude/", "/vertex/", 1) + CLAUDE.stream_method;
    let gemini_on_claude = GEMINI.base.replacen("/vertex/", "/vertex-claude/", 1) + GEMINI.stream_method;
    for (path, body, names) in [
        (claude_on_gemini, claude_history("hi", 0), "prefix /vertex-claude"),
        (gemini_on_claude, gemini_history("hi", 0), "prefix /vertex)"),
    ] {
        let got = send(&lg.url(), &path, &body, &[]).await;
        assert_eq!(got.status, 400, "{path}: {}", got.body);
        assert!(got.body.contains(names), "{path}: {}", got.body);
    }
    assert!(mock_requests(&mock).await.is_empty());
}
